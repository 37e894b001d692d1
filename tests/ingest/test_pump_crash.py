"""kill -9 under load, torn tails, and TLS: acknowledged binlogs survive, exactly once."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from ingest import binlog as bl
from ingest.scan_client import ScanClient
from ingest.tso import TSOClient
from tests.ingest.helpers import commit, prewrite, writer
from tests.waiting import wait_for
from upstream.local import PumpProcess, http

pytestmark = pytest.mark.integration

CLIENTS = 32


def _load(p: PumpProcess, tso_url: str, cluster_id: int, stop: threading.Event,
          acked: dict[str, set[int]], lock: threading.Lock) -> None:
    """One TiDB-like client: prewrite, then commit with a later ts; remember what was acknowledged."""
    w = writer(p, cluster_id)
    ts = TSOClient(tso_url)
    try:
        while not stop.is_set():
            s = ts.get_ts()
            w.write(prewrite(s, b"r" * 512, key=b"t\x80%d" % s), timeout=5)
            with lock:
                acked["prewrite"].add(s)
            c = ts.get_ts()
            w.write(commit(s, c, key=b"t\x80%d" % s), timeout=5)
            with lock:
                acked["commit"].add(c)
    except grpc.RpcError:
        pass  # the pump died under us: the in-flight write is unacknowledged
    finally:
        w.close()
        ts.close()


def _watch(p: PumpProcess, cluster_id: int, stop: threading.Event, seen: list[int]) -> None:
    with ScanClient(p.addr, cluster_id, timeout=2) as c:
        while not stop.is_set():
            try:
                seen.append(c.watermark().max_commit_ts)
            except grpc.RpcError:
                pass
            time.sleep(0.01)


def test_kill_9_under_32_client_load_loses_nothing(pumps: Callable[..., PumpProcess], tso: Any,
                                                   mvcc_server: tuple[str, Any]) -> None:
    url, mvcc = mvcc_server
    mvcc.rollback_unknown = True  # prewrites whose client died before its commit: rolled back upstream
    p = pumps(extra=["--upstream-status-url", url])
    acked: dict[str, set[int]] = {"prewrite": set(), "commit": set()}
    lock = threading.Lock()
    stop, watch_stop = threading.Event(), threading.Event()
    seen: list[int] = []
    watcher = threading.Thread(target=_watch, args=(p, tso.cluster_id, watch_stop, seen))
    watcher.start()
    clients = [threading.Thread(target=_load, args=(p, tso.url, tso.cluster_id, stop, acked, lock))
               for _ in range(CLIENTS)]
    for t in clients:
        t.start()
    deadline = time.monotonic() + 30
    while len(acked["commit"]) < 500 and time.monotonic() < deadline:
        time.sleep(0.05)
    p.kill()
    stop.set()
    for t in clients:
        t.join()
    watch_stop.set()
    watcher.join()
    before_crash = max(seen)
    assert len(acked["commit"]) >= 500, "the load did not get going"

    p.start()
    with ScanClient(p.addr, tso.cluster_id) as c:
        first_after = c.watermark().max_commit_ts
        assert first_after >= before_crash, "the watermark went backwards over the restart"
        # every acknowledged ts must end up at or below the watermark (fake binlogs carry it on)
        highest = max(acked["commit"] | acked["prewrite"])
        wait_for(lambda: c.watermark().max_commit_ts >= highest, 30, p.log_tail)
        records = list(c.scan(0))
    keys = [(r.key_ts, r.tp) for r in records]
    assert len(keys) == len(set(keys)), "a record appears twice"
    stored_prewrites = {r.start_ts for r in records if r.tp == bl.PREWRITE}
    stored_commits = {r.commit_ts for r in records if r.tp == bl.COMMIT}
    assert acked["prewrite"] <= stored_prewrites, "an acknowledged prewrite is missing"
    assert acked["commit"] <= stored_commits, "an acknowledged commit is missing"
    for r in records:  # every stored record is intact
        b = bl.parse(r.payload)
        assert (b.tp, b.start_ts, b.commit_ts) == (r.tp, r.start_ts, r.commit_ts)


def test_torn_tail_dropped_on_restart(pumps: Callable[..., PumpProcess], tso: Any,
                                      ts: Callable[[], int]) -> None:
    p = pumps(extra=["--gen-binlog-interval", "3600"])
    w = writer(p, tso.cluster_id)
    starts = []
    for _ in range(5):
        s = ts()
        w.write(prewrite(s, b"v" * 100))
        w.write(commit(s, ts()))
        starts.append(s)
    last = ts()
    w.write(prewrite(last, b"last" * 50))
    w.close()
    assert p.terminate() == 0
    vlog = sorted((p.data_dir / "value").glob("*.vlog"))[-1]
    size = vlog.stat().st_size
    with open(vlog, "r+b") as f:
        f.truncate(size - 37)  # the last record (the final prewrite) loses its tail
    p.start()
    with ScanClient(p.addr, tso.cluster_id) as c:
        found = {r.start_ts for r in c.lookup_prewrites([*starts, last])}
    assert found == set(starts)
    status, metrics = http("GET", f"{p.status_url}/metrics")
    assert b"binlog_pump_storage_corrupt_records_total 1.0" in metrics
    assert "dropping" in p.log_tail(100) and "torn tail" in p.log_tail(100)
