"""``Session.commit_async``: many commits of one session under way at once, against real pumps, with
either pump client. Each commit finishes when its prewrite binlog is answered and writes exactly the
binlogs a waiting COMMIT writes; its errors (write conflict, injected abort) come through the Future
and leave a Rollback, never a commit."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from ingest import binlog as bl
from schemas import binlog_pb2
from tests.upstream.binlogs import SchemaTracker, committed, decoded_changes, wait_watermarks
from tests.upstream.conftest import CLIENT_OPTIONS
from tests.upstream.test_binlog_integration import history
from upstream import sql as S
from upstream.cluster import Cluster
from upstream.errors import TxnAborted, WriteConflict
from upstream.exprs import Cmp, Col, Lit
from upstream.local import PumpProcess
from upstream.pump_client.process import _Answer

pytestmark = pytest.mark.integration


@pytest.fixture(params=["thread", "process"])
def cluster(request: pytest.FixtureRequest, registry_uri: str) -> Iterator[Cluster]:
    """Two emulated servers with in-process or child-process pump clients (overrides conftest's)."""
    c = Cluster(registry=registry_uri, servers=2, pump_client_options=CLIENT_OPTIONS,
                pump_client_process=request.param == "process")
    yield c
    c.close()


def test_pipelined_commits_write_what_waiting_commits_write(cluster: Cluster,
                                                            pumps: Callable[..., PumpProcess]) -> None:
    p1, p2 = pumps("pump-1"), pumps("pump-2")
    cluster.execute("create table t (id int primary key, v varchar(20))")
    session = cluster.server(0).session()
    futures: list[tuple[int, Future[int | None]]] = []
    finished_on: set[str] = set()
    for k in range(1, 41):
        session.run(S.Begin())
        session.run(S.Insert(None, "t", None, [[k, f"v{k}"]]))
        fut = session.commit_async()                      # the session is free at once
        assert not fut.cancel()                           # under way: it cannot be called off
        fut.add_done_callback(lambda _f: finished_on.add(threading.current_thread().name))
        futures.append((k, fut))
    assert session.txn is None
    commit_ts = {k: f.result(30) for k, f in futures}
    # the commits finished where the pump's answers arrived, not (all) in this thread
    assert finished_on - {threading.current_thread().name}
    assert len(set(commit_ts.values())) == 40 and all(isinstance(ts, int) for ts in commit_ts.values())
    # one more that updates rows the pipelined ones wrote, waiting as usual
    last = session.execute("update t set v = 'x' where id = 3")[0].commit_ts
    assert last > max(commit_ts.values())
    assert cluster.flush(30)
    wait_watermarks([p1, p2], cluster.cluster_id, last)

    txns = [t for t in committed([p1, p2], cluster.cluster_id) if not t.prewrite.ddl_job_id]
    assert [t.commit_ts for t in txns] == sorted([*commit_ts.values(), last])
    tracker = SchemaTracker(history(cluster))
    rows = {}
    for t in txns[:-1]:
        (tid, kind, ch), = decoded_changes(t, tracker)
        assert kind == "insert" and commit_ts[ch.after["id"]] == t.commit_ts
        rows[ch.after["id"]] = ch.after
    assert rows == {k: {"id": k, "v": f"v{k}"} for k in range(1, 41)}
    (_, kind, ch), = decoded_changes(txns[-1], tracker)
    assert (kind, ch.before, ch.after) == ("update", {"id": 3, "v": "v3"}, {"id": 3, "v": "x"})
    assert cluster.snapshot()["test.t"][2] == {"id": 3, "v": "x"}


def _recording(finish: Callable[[binlog_pb2.Binlog], Any], sent: list[tuple[int, int]]) -> Callable[..., Any]:
    def record(binlog: binlog_pb2.Binlog) -> Any:
        sent.append((binlog.tp, binlog.start_ts))
        return finish(binlog)
    return record


def test_errors_come_through_the_future_and_leave_no_commit(cluster: Cluster, pumps: Callable[..., PumpProcess],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    p1 = pumps("pump-1")
    cluster.execute("create table t (id int primary key, v int)")
    first, second = cluster.server(0).session(), cluster.server(1).session()
    sent: list[tuple[int, int]] = []               # (type, start ts) of every commit/rollback binlog
    for srv in cluster.servers:
        monkeypatch.setattr(srv.binlog, "finish", _recording(srv.binlog.finish, sent))
    # two transactions under way together that write the same key: the later one's KV prewrite
    # meets the first one's lock (or its newer commit) and fails
    first.run(S.Begin())
    first.run(S.Insert(None, "t", None, [[1, 10]]))
    second.run(S.Begin())
    second.run(S.Insert(None, "t", None, [[1, 20]]))
    won = first.commit_async()
    assert second.txn is not None
    rolled_back = [second.txn.start_ts]
    lost = second.commit_async()
    with pytest.raises(WriteConflict):
        lost.result(30)
    kept = won.result(30)
    # an injected abort after both prewrites
    cluster.server(0).faults.abort_after_prewrite()
    first.run(S.Begin())
    first.run(S.Update(None, "t", [("v", Lit(11))], Cmp("=", Col("id"), Lit(1))))
    rolled_back.append(first.txn.start_ts)
    with pytest.raises(TxnAborted):
        first.commit_async().result(30)
    assert list(cluster.kv.iter_locks()) == []
    # nothing written, nothing open: no commit ts
    first.run(S.Begin())
    first.run(S.Update(None, "t", [("v", Lit(10))], Cmp("=", Col("id"), Lit(1))))   # same value: no change
    assert first.commit_async().result(5) is None
    assert first.commit_async().result(5) is None

    last = first.execute("insert into t values (2, 2)")[0].commit_ts
    assert cluster.flush(30)
    wait_watermarks([p1], cluster.cluster_id, last)
    dml = [t for t in committed([p1], cluster.cluster_id) if not t.prewrite.ddl_job_id]
    assert [t.commit_ts for t in dml] == [kept, last]
    assert cluster.snapshot()["test.t"] == [{"id": 1, "v": 10}, {"id": 2, "v": 2}]
    # each failed commit sent a Rollback binlog for its stored prewrite, and nothing else
    assert sorted(ts for tp, ts in sent if tp == bl.ROLLBACK) == sorted(rolled_back)
    assert not {ts for tp, ts in sent if tp == bl.COMMIT} & set(rolled_back)


def test_a_slow_pump_delays_the_commit_not_the_session_and_flush_waits_for_it(
        cluster: Cluster, pumps: Callable[..., PumpProcess]) -> None:
    p1 = pumps("pump-1")
    cluster.execute("create table t (id int primary key)")
    srv = cluster.server(0)
    srv.faults.pump_delay = 0.5           # every binlog write waits first (in the committer's pool)
    session = srv.session()
    session.run(S.Begin())
    session.run(S.Insert(None, "t", None, [[1]]))
    fut = session.commit_async()
    assert not fut.done()
    assert cluster.flush(30)              # waits for commits under way, then for their commit binlogs
    assert fut.done()
    ts = fut.result()
    srv.faults.pump_delay = 0
    wait_watermarks([p1], cluster.cluster_id, ts)
    assert [t.commit_ts for t in committed([p1], cluster.cluster_id) if not t.prewrite.ddl_job_id] == [ts]


def test_answer_callbacks_run_once_whenever_they_are_added(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    early, late = _Answer(), _Answer()
    early.when_answered(lambda: calls.append("early"))
    early.when_answered(lambda: 1 / 0)              # a failing callback is logged, not raised
    early.when_answered(lambda: calls.append("early-2"))
    assert calls == []
    with caplog.at_level(logging.ERROR, logger="upstream.pump_client.process"):
        t = threading.Thread(target=early._settle, args=("pump-1", None))
        t.start()
        t.join()
    assert calls == ["early", "early-2"] and early.result() == "pump-1"
    assert "answer callback failed" in caplog.text
    late._settle(None, RuntimeError("refused"))
    late.when_answered(lambda: calls.append("late"))
    assert calls[-1] == "late"
    with pytest.raises(RuntimeError, match="refused"):
        late.result()
