"""Faults towards real pumps (pump killed and restarted, server crash before the commit binlog, rollbacks)
and the snapshot oracle checked against replayed binlogs."""
from __future__ import annotations

import base64
import json
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.upstream.binlogs import SchemaTracker, committed, wait_watermarks
from tests.upstream.replay import canonical, canonical_snapshot, replay
from transform.codec.model import Job
from upstream.cluster import Cluster
from upstream.errors import ServerCrashed, TxnAborted
from upstream.keys import int_record_key
from upstream.local import PumpProcess
from upstream.workload import Workload

pytestmark = pytest.mark.integration


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def history(cluster: Cluster) -> list[Job]:
    return [Job.from_json(j) for j in get_json(f"{cluster.status_url}/ddl/history")]


def test_pump_killed_and_restarted_and_crash_resolved(cluster: Cluster, pumps: Callable[..., PumpProcess]) -> None:
    p1, p2 = pumps("pump-1"), pumps("pump-2")
    cluster.execute("create table kv (id int primary key, v varchar(20))")
    done: list[tuple[int, int]] = []

    def txn(i: int) -> None:
        r = cluster.execute(f"insert into kv values ({i}, 'v{i}'); update kv set v = 'u{i}' where id = {i}",
                            server=i % 2)
        done.extend((x.start_ts, x.commit_ts) for x in r)

    for i in range(40):
        txn(i)
    p2.kill()                                   # kill -9 mid-workload
    for i in range(40, 80):
        txn(i)
    crashed = []
    for srv in (0, 1):                          # each server crashes once after its KV commit
        cluster.server(srv).faults.crash_before_commit_binlog()
        with pytest.raises(ServerCrashed) as info:
            cluster.execute(f"insert into kv values ({100 + srv}, 'crash')", server=srv)
        crashed.append((info.value.start_ts, info.value.commit_ts))
    p2.start()                                  # restart: same data dir and node id
    for i in range(80, 100):
        txn(i)
    assert cluster.flush(60)
    last = max(c for _, c in done + crashed)
    wait_watermarks([p1, p2], cluster.cluster_id, last, timeout=60)
    got = {(t.start_ts, t.commit_ts) for t in committed([p1, p2], cluster.cluster_id, last)
           if not t.prewrite.ddl_job_id}
    assert got == set(done) | set(crashed)
    assert {t.pump for t in committed([p1, p2], cluster.cluster_id, last)} == {"pump-1", "pump-2"}
    # a crashed transaction's primary key shows the commit in MVCC (how its pump resolved it)
    table_id = cluster.table("test", "kv").id
    mv = get_json(f"{cluster.status_url}/mvcc/hex/{int_record_key(table_id, 100).hex()}")
    assert mv["value"]["info"]["writes"][0]["commit_ts"] == crashed[0][1]
    assert "type" not in mv["value"]["info"]["writes"][0]


def test_mvcc_shapes_lock_commit_rollback(cluster: Cluster, pumps: Callable[..., PumpProcess]) -> None:
    pumps("pump-1")
    cluster.execute("create table m (id int primary key, v int)")
    r = cluster.execute("insert into m values (7, 1)")[0]
    key = int_record_key(cluster.table("test", "m").id, 7).hex()
    url = f"{cluster.status_url}/mvcc/hex/{key}"
    doc = get_json(url)
    assert doc["key"] == key.upper() and doc["region_id"] > 0
    assert doc["value"]["info"]["writes"] == [{"start_ts": r.start_ts, "commit_ts": r.commit_ts,
                                               "short_value": doc["value"]["info"]["writes"][0]["short_value"]}]
    # rollback after prewrite: a protected Rollback record (type 3) on the primary key
    cluster.server(0).faults.abort_after_prewrite()
    with pytest.raises(TxnAborted) as info:
        cluster.execute("update m set v = 2 where id = 7")
    rb = get_json(url)["value"]["info"]["writes"][0]
    assert rb == {"type": 3, "start_ts": info.value.start_ts, "commit_ts": info.value.start_ts, "short_value": "cA=="}
    # lock while prewritten: a slow pump keeps the transaction between prewrite and commit
    srv = cluster.server(1)
    srv.faults.pump_delay = 1.5
    out: list[Any] = []
    th = threading.Thread(target=lambda: out.append(srv.execute("update m set v = 3 where id = 7")[0]))
    th.start()
    lock = None
    for _ in range(100):
        lock = get_json(url)["value"]["info"].get("lock")
        if lock:
            break
        time.sleep(0.02)
    th.join()
    srv.faults.pump_delay = 0
    assert lock is not None and "type" not in lock
    assert lock["start_ts"] == out[0].start_ts and base64.b64decode(lock["primary"]).hex() == key
    final = get_json(url)["value"]["info"]
    assert "lock" not in final and final["writes"][0]["commit_ts"] == out[0].commit_ts
    assert get_json(f"{cluster.status_url}/mvcc/hex/{key[:-2]}63")["value"] == {"info": {}}


def test_snapshot_matches_replayed_binlogs(cluster: Cluster, pumps: Callable[..., PumpProcess]) -> None:
    p1, p2 = pumps("pump-1"), pumps("pump-2")
    wl = Workload(cluster, seed=7, churn=True, ddl_interval=0.15)
    wl.setup()
    cluster.execute("create table plain (a int, b varchar(5)); insert into plain values (1, 'x'), (1, 'x')")
    stats = wl.run(rate=0, duration=2.0, workers=3)
    assert stats.committed > 50 and stats.ddls >= 3 and not stats.errors
    cluster.execute("truncate table plain; insert into plain values (2, 'y'); rename table plain to plain2")
    assert cluster.flush(60)
    end = cluster.ts()
    wait_watermarks([p1, p2], cluster.cluster_id, end, timeout=60)
    txns = committed([p1, p2], cluster.cluster_id, end)
    tracker = SchemaTracker(history(cluster))
    checkpoints = [t.commit_ts for t in txns[:: max(1, len(txns) // 6)]] + [end]
    for ts in checkpoints:
        snap = get_json(f"{cluster.status_url}/binlake/snapshot?ts={ts}")
        state = replay(txns, tracker, ts)
        schema = cluster.catalog.at(ts)
        assert set(snap) == {f"{e.db.name}.{e.info.name}" for e in schema.tables.values()}
        for e in schema.tables.values():
            want = canonical(e.info, state.get(e.info.id, {}))
            assert canonical_snapshot(snap[f"{e.db.name}.{e.info.name}"]) == want, (ts, e.info.name)
    assert len(get_json(f"{cluster.status_url}/binlake/snapshot?ts={end}")["test.plain2"]) == 1
