"""The Drainer over pumps that serve only TiDB's ``/binlog.Pump/PullBinlogs``, as TiDB Binlog's Go
pump does. binlake's own pump with ``pump-scan = false`` stands in for the Go pump here (the Go
pump cannot be built in CI; ``tests/realtidb/test_go_pump.py`` runs against a real one when one is
given). Drains into Iceberg and MariaDB with DDL in the range, a mixed cluster under a workload,
follow mode, a killed run re-run, and the errors of pumps that cannot be read."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.registry import load_registry
from ingest.registry.base import PUMP, NodeStatus
from tests.drain.conftest import Env, make_env, read_table
from tests.drain.test_drain_cli import ROOT, cli_args, crash_mid_commit, rerun_equals_an_uninterrupted_run
from tests.drain.test_follow import last_ts
from tests.drain.test_mysql_sink import checkpoint_row, mysql_options, verify_mysql
from tests.servers import MariaDBServer
from tests.waiting import wait_for
from transform.plan import PlanError, make_plan
from transform.pull import PULL_BINLOGS, PUMP_SCAN

pytestmark = pytest.mark.integration


@pytest.fixture
def pulled(tmp_path: Path, spark: Any) -> Iterator[Env]:
    """Both pumps serve only PullBinlogs."""
    with make_env(tmp_path, pull_only=("pump-1", "pump-2")) as e:
        yield e


@pytest.fixture
def mixed(tmp_path: Path, spark: Any) -> Iterator[Env]:
    """pump-1 serves PumpScan, pump-2 only PullBinlogs (a rolling migration)."""
    with make_env(tmp_path, pull_only=("pump-2",)) as e:
        yield e


@pytest.fixture
def maria(mariadb_server: MariaDBServer) -> MariaDBServer:
    mariadb_server.reset("test")
    return mariadb_server


def protocols(report: dict[str, Any]) -> dict[str, str]:
    return {p["node_id"]: p["protocol"] for p in report["pumps"]}


def history_with_ddl(env: Env) -> None:
    """DML on both servers around ADD/DROP COLUMN, a rename, a truncate and a drop."""
    env.sql("create table a (id int primary key, v varchar(20))")
    env.sql("create table b (id bigint primary key, n int)")
    env.sql("create table gone (id int primary key)")
    for i in range(6):
        env.sql(f"insert into a values ({i}, 'a{i}')", server=i % 2)
        env.sql(f"insert into b values ({i}, {i * 10}), ({i + 100}, {i})", server=(i + 1) % 2)
    env.sql("insert into gone values (1), (2)")
    env.sql("alter table a add column w int default 7")
    env.sql("update a set w = id * 2 where id < 3", server=1)
    env.sql("insert into a values (50, 'new', 5)")
    env.sql("alter table b drop column n")
    env.sql("delete from b where id >= 100", server=1)
    env.sql("rename table a to a2")
    env.sql("update a2 set v = 'renamed' where id = 4")
    env.sql("truncate table b")
    env.sql("insert into b values (7), (8)", server=1)
    env.sql("drop table gone")


def test_pull_only_pumps_drain_exactly_into_iceberg_and_mariadb_with_ddl(pulled: Env, maria: MariaDBServer) -> None:
    history_with_ddl(pulled)
    report = pulled.drain()
    assert protocols(report) == {"pump-1": PULL_BINLOGS, "pump-2": PULL_BINLOGS}
    assert "via PullBinlogs" in pulled.outputs[-1] and "via PumpScan" not in pulled.outputs[-1]
    assert report["counts"]["lookups"] == 0 and report["counts"]["transactions"] > 20
    pulled.verify(report["to_ts"])
    cat = pulled.catalog()
    log = read_table(cat, "test.a2__changelog")
    assert log.num_rows == 6 + 3 + 1 + 1 and "renamed" in log.column("v").to_pylist()   # a's rows, a2's update
    assert sorted(read_table(cat, "test.b").column("id").to_pylist()) == [7, 8]
    assert not cat.table_exists("test.gone")

    o = mysql_options(pulled, maria)
    mysql = pulled.drain(o)
    assert protocols(mysql) == {"pump-1": PULL_BINLOGS, "pump-2": PULL_BINLOGS}
    assert "test.a2" in verify_mysql(pulled, o)
    assert checkpoint_row(maria, pulled.cluster.cluster_id)["commitTS"] == mysql["to_ts"]


def test_a_mixed_cluster_drains_exactly_while_a_workload_with_ddl_runs(mixed: Env) -> None:
    report, stats = mixed.drain_during_workload(seed=30, max_txns=500)
    assert protocols(report) == {"pump-1": PUMP_SCAN, "pump-2": PULL_BINLOGS}
    mixed.verify(report["to_ts"])
    rest = mixed.drain()   # what committed after the first run's to_ts
    assert rest["from_ts"] == report["to_ts"]
    mixed.verify(rest["to_ts"])
    total = sum(r["counts"]["transactions"] for r in (report, rest))
    assert total >= stats.committed > 0


def test_a_run_killed_mid_commit_over_pull_only_pumps_is_finished_exactly_by_the_next(pulled: Env) -> None:
    assert "via PullBinlogs" in crash_mid_commit(pulled).stdout
    pulled.sql("insert into c values (3, 'c3')")
    rerun_equals_an_uninterrupted_run(pulled, ("a", "b", "c"))


def test_follow_mode_over_pull_only_pumps(pulled: Env, maria: MariaDBServer) -> None:
    from upstream.local import free_port

    pulled.sql("create table f (id int primary key, v int)")
    pulled.sql("insert into f values (1, 1), (2, 2)")
    first = pulled.settle()
    status = f"127.0.0.1:{free_port()}"
    conf = pulled.root / "drainer.toml"
    conf.write_text(f'initial-commit-ts = 0\n[syncer]\ndb-type = "mysql"\nworker-count = 2\n'
                    f'[syncer.to]\ndsn = "{maria.dsn}"\n')
    log_path = pulled.root / "follow.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "binlake.cli", "drain", "--follow", "--interval", "0.3",
                                 "--config", str(conf), *cli_args(pulled.options), "--spark-master", "local[2]",
                                 "--addr", f"127.0.0.1:{free_port()}", "--status-addr", status],
                                stdout=log, stderr=subprocess.STDOUT, cwd=pulled.root,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        def running(target: int) -> bool:
            if proc.poll() is not None:
                pytest.fail(log_path.read_text()[-3000:])
            return last_ts(status) >= target
        wait_for(lambda: running(first), 120, "the first range")
        pulled.sql("update f set v = 20 where id = 2", server=1)
        pulled.sql("alter table f add column w varchar(5) default 'd'")
        pulled.sql("insert into f values (3, 3, 'x')")
        latest = pulled.settle()
        wait_for(lambda: running(latest), 120, "the range with the DDL")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
    output = log_path.read_text()
    assert code == 0, output[-3000:]
    assert "via PullBinlogs" in output
    assert "test.f" in verify_mysql(pulled, mysql_options(pulled, maria))


def test_pumps_that_cannot_be_read_are_named_with_what_is_wrong(mixed: Env) -> None:
    mixed.sql("create table t (id int primary key)")
    wm = mixed.settle()
    cid = mixed.cluster.cluster_id
    plan = make_plan(mixed.options.registry, cid, 0)
    assert {p.node_id: p.protocol for p in plan.pumps} == {"pump-1": PUMP_SCAN, "pump-2": PULL_BINLOGS}
    assert plan.to_ts >= wm and all(p.watermark >= wm for p in plan.pumps)
    # another cluster's id: both protocols' pumps say so
    for node in ("pump-1", "pump-2"):
        with pytest.raises(PlanError, match=f"pump {node} .* belongs to another cluster: cluster ID are mismatch, "
                                            f"{cid + 1} vs {cid}"):
            make_plan(_only(mixed, node), cid + 1, 0)
    # a registered address that serves neither protocol (the emulator's PD)
    registry = load_registry(mixed.options.registry)
    try:
        registry.put_node(PUMP, NodeStatus("not-a-pump", mixed.cluster.tso_url.removeprefix("http://")))
    finally:
        registry.close()
    with pytest.raises(PlanError, match=r"pump not-a-pump .* serves neither binlake.v1.PumpScan \(UNIMPLEMENTED.*\) "
                                        r"nor TiDB's binlog.Pump/PullBinlogs \(UNIMPLEMENTED"):
        make_plan(mixed.options.registry, cid, 0)


def _only(env: Env, node_id: str) -> str:
    """A registry file holding only ``node_id``'s entry of ``env``'s registry."""
    uri = f"file://{env.root / f'only-{node_id}.json'}"
    src, dst = load_registry(env.options.registry), load_registry(uri)
    try:
        node = src.get_node(PUMP, node_id)
        assert node is not None
        dst.put_node(PUMP, node)
    finally:
        src.close()
        dst.close()
    return uri
