"""binlake's Drainer beside an existing TiDB Binlog deployment: a real tidb-server writes to TiDB
Binlog's own Go pump (v8.3.0, built by hand: ``BINLAKE_GO_PUMP=/path/to/pump``; the Go module proxy
does not serve tidb-binlog, so CI skips this module), binlake drains it through PullBinlogs into
Iceberg (plain and gzip streams) and MariaDB, then a binlake pump joins (a rolling migration) and
the mixed cluster is drained on; ``binlake verify`` compares every result with TiDB."""
from __future__ import annotations

import os
import random
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.registry.base import OFFLINE
from ingest.scan_client import ScanClient
from tests.realtidb.conftest import RealCluster, start_pumps
from tests.realtidb.peers import GO_PUMP_ENV, GoPump, PDEtcd, TiDBServer, remove, scratch_dir
from tests.servers import MariaDBServer
from tests.waiting import wait_for
from transform.plan import PlanError, make_plan
from transform.pull import PULL_BINLOGS, PUMP_SCAN

pytestmark = pytest.mark.skipif(not os.environ.get(GO_PUMP_ENV),
                                reason=f"needs TiDB Binlog's Go pump binary in {GO_PUMP_ENV} (built by hand)")

DB = "gp"
BINLOGCTL_ENV = "BINLAKE_BINLOGCTL"   # TiDB Binlog's binlogctl, built by hand


@pytest.fixture(scope="module")
def go() -> Iterator[RealCluster]:
    """pdetcd, one Go pump and a real tidb-server writing to it."""
    root = scratch_dir("binlake-gp-")
    pumps: list[Any] = []
    try:
        with PDEtcd(root / "pd") as pd:
            pumps.append(GoPump(Path(os.environ[GO_PUMP_ENV]), root, pd, "go-pump-1").start())
            with TiDBServer(root / "tidb", pd.url) as tidb:
                yield RealCluster(root, pd, pumps, tidb)
    finally:
        for p in pumps:
            p.kill()
        remove(root)


def protocols(report: dict[str, Any]) -> dict[str, str]:
    return {p["node_id"]: p["protocol"] for p in report["pumps"]}


def write_history(real: RealCluster, round_: int, writers: int = 4, txns: int = 150) -> int:
    """DDL between rounds of concurrent writes; returns the transactions committed."""
    t = real.tidb
    if round_ == 0:
        t.execute(f"CREATE DATABASE {DB}",
                  f"CREATE TABLE {DB}.acct (id INT PRIMARY KEY, owner VARCHAR(32), bal DECIMAL(14,2), "
                  f"at DATETIME(6), doc JSON)",
                  f"CREATE TABLE {DB}.ev (k BIGINT PRIMARY KEY NONCLUSTERED, kind ENUM('a','b','c'), n INT)",
                  f"CREATE TABLE {DB}.nokey (a INT, b VARCHAR(10))")
    committed = 0
    lock = threading.Lock()

    def writer(w: int) -> None:
        nonlocal committed
        rng = random.Random(round_ * 100 + w)
        conn = t.connect(DB)
        try:
            with conn.cursor() as cur:
                for i in range(txns):
                    key = rng.randrange(400)
                    cur.execute("BEGIN")
                    cur.execute(f"INSERT INTO acct (id, owner, bal, at, doc) VALUES ({key}, 'w{w}', {i}.25, NOW(6), "
                                f"'{{\"w\": {w}, \"i\": {i}}}') ON DUPLICATE KEY UPDATE bal = bal + 1, owner = 'u{w}'")
                    cur.execute(f"INSERT INTO ev (k, kind, n) VALUES ({round_ * 10**6 + w * 10**4 + i}, "
                                f"'{'abc'[i % 3]}', {i})")
                    if i % 7 == 0:
                        cur.execute(f"DELETE FROM acct WHERE id = {rng.randrange(400)}")
                        cur.execute(f"INSERT INTO nokey VALUES ({i % 5}, 'r{round_}')")
                    cur.execute("COMMIT")
                    with lock:
                        committed += 1
        finally:
            conn.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    if round_ == 0:   # DDL while the writers run
        t.execute(f"ALTER TABLE {DB}.ev ADD COLUMN note VARCHAR(20) DEFAULT 'n'")
    else:
        t.execute(f"ALTER TABLE {DB}.ev DROP COLUMN note", f"TRUNCATE TABLE {DB}.nokey")
    for thread in threads:
        thread.join(300)
    t.execute(f"UPDATE {DB}.acct SET bal = 0 WHERE id < 20", f"DELETE FROM {DB}.nokey WHERE a = 1")
    return committed


def test_a_go_pump_drained_into_iceberg_and_mariadb_equals_tidb(go: RealCluster, mariadb_server: MariaDBServer
                                                                 ) -> None:
    committed = write_history(go, 0)
    options = go.options("go-ice", [DB])
    t0 = time.perf_counter()
    report = go.drain(options)
    seconds = time.perf_counter() - t0
    assert protocols(report) == {"go-pump-1": PULL_BINLOGS}
    go.verify(options, int(report["to_ts"]))
    rows = sum(sum(t["rows"].values()) for t in report["tables"])
    print(f"\nGo pump -> Iceberg: {committed} transactions, {rows} row changes in {seconds:.1f} s "
          f"(pull {report['stages']['pull']:.2f} s, total {report['stages']['total']:.1f} s)")

    gz = go.options("go-gzip", [DB])
    gz.compressor = "gzip"
    zipped = go.drain(gz)
    go.verify(gz, int(zipped["to_ts"]))

    mariadb_server.reset(DB)
    my = go.options("go-maria", [DB], sink="mysql")
    my.syncer.to.dsn = mariadb_server.dsn
    mysql = go.drain(my)
    assert protocols(mysql) == {"go-pump-1": PULL_BINLOGS}
    go.verify(my, against=mariadb_server.dsn)


def test_a_binlake_pump_joins_the_go_pump_and_the_mixed_cluster_drains_on(go: RealCluster) -> None:
    options = go.options("go-mixed", [DB])
    first = go.drain(options)
    binlake_pump = start_pumps(go.root, go.pd, go.tidb, count=1)[0]
    go.pumps.append(binlake_pump)   # stays for the next test; the fixture kills it
    time.sleep(3)   # TiDB's pump client finds the new pump in etcd
    committed = write_history(go, 1)
    report = go.drain(options)
    assert report["from_ts"] == first["to_ts"]
    assert protocols(report) == {"go-pump-1": PULL_BINLOGS, "pump-1": PUMP_SCAN}
    with ScanClient(binlake_pump.addr, go.pd.cluster_id) as client:
        stored = sum(len(b) for b in client.scan_batches(first["to_ts"], report["to_ts"]))
    assert stored > 0, "TiDB wrote nothing to the binlake pump"
    go.verify(options, int(report["to_ts"]))
    print(f"\nmixed Go + binlake pump: {committed} transactions, binlake pump holds {stored} records of the range; "
          f"pull {report['stages']['pull']:.2f} s, total {report['stages']['total']:.1f} s")


@pytest.mark.skipif(not os.environ.get(BINLOGCTL_ENV), reason=f"needs TiDB Binlog's binlogctl in {BINLOGCTL_ENV}")
def test_binlogctl_offlines_the_go_pump_after_binlake_drained_past_it(go: RealCluster) -> None:
    """The last step of a migration: the Go pump taken offline with TiDB Binlog's own tool waits for
    binlake's (paused) drainer registration, then leaves; later runs read the binlake pump alone."""
    assert [p.node_id for p in go.pumps] == ["go-pump-1", "pump-1"], "runs after the mixed-cluster test"
    options = go.options("go-mixed", [DB])
    r = subprocess.run([os.environ[BINLOGCTL_ENV], "-pd-urls", go.pd.url, "-cmd", "offline-pump",
                        "-node-id", "go-pump-1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    go_pump = go.pumps[0]
    # closing: it waits for the registered drainers (its registry entry stays online, its heartbeat stopped)
    wait_for(lambda: "Waiting for drainer to consume binlog" in go_pump.log_tail(200), 30,
             lambda: f"the Go pump waiting for binlake's drainer\n{go_pump.log_tail()}")
    go.tidb.execute(f"INSERT INTO {DB}.nokey VALUES (9, 'after')")
    time.sleep(3)
    assert go.pd.pump_state("go-pump-1") != OFFLINE, "the Go pump left before binlake drained past it"
    go.pumps.remove(go_pump)   # settle on the binlake pump; the plan still reads both
    report = go.drain(options)
    assert protocols(report) == {"go-pump-1": PULL_BINLOGS, "pump-1": PUMP_SCAN}
    wait_for(lambda: go.pd.pump_state("go-pump-1") == OFFLINE, 60, lambda: go_pump.log_tail())
    go.tidb.execute(f"UPDATE {DB}.nokey SET b = 'later' WHERE a = 9")
    last = go.drain(options)
    assert protocols(last) == {"pump-1": PUMP_SCAN}
    go.verify(options, int(last["to_ts"]))
    go.pumps.insert(0, go_pump)   # for the fixture's teardown


def test_a_go_pumps_gc_point_is_read_from_its_metrics_and_an_older_range_refused() -> None:
    root = scratch_dir("binlake-gpgc-")
    try:
        with PDEtcd(root / "pd") as pd:
            pump = GoPump(Path(os.environ[GO_PUMP_ENV]), root, pd, "go-gc", extra_args=["-gc", "1h"]).start()
            try:
                registry = f"etcd://{pd.addr}"
                assert make_plan(registry, pd.cluster_id, 0).pumps[0].gc_ts == 0   # no GC yet
                req = urllib.request.Request(f"http://{pump.addr}/debug/gc/trigger", method="POST")
                urllib.request.urlopen(req, timeout=10).close()
                gc = wait_for(lambda: make_plan(registry, pd.cluster_id, 1 << 62).pumps[0].gc_ts, 30,
                              lambda: f"the Go pump's GC point on /metrics\n{pump.log_tail()}")
                hour_ago_ms = (time.time() - 3600) * 1000
                assert abs((gc >> 18) - hour_ago_ms) < 120_000
                with pytest.raises(PlanError, match=f"from_ts 0 is below pump go-gc's GC point {gc}"):
                    make_plan(registry, pd.cluster_id, 0)
            finally:
                pump.kill()
    finally:
        remove(root)
