"""PumpsClient against real pump processes on loopback, checked by reading back through PumpScan."""
from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from ingest import binlog as bl
from ingest.registry import PAUSED, PUMP, NodeStatus, load_registry, node_key
from ingest.scan_client import ScanClient
from schemas import binlog_pb2
from tests.waiting import wait_for
from upstream.local import LocalTSO, PumpProcess
from upstream.pump_client import PumpsClient, hash_ts
from upstream.pump_client.errors import BinlogTooLarge, NoPumpFound, WriteBinlogFailed

pytestmark = pytest.mark.integration

Start = Callable[..., PumpProcess]
TS = Callable[[], int]


def prewrite(start_ts: int, value: bytes = b"rows") -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog(tp=bl.PREWRITE, start_ts=start_ts, prewrite_key=b"t\x80pk", prewrite_value=value)


def commit(start_ts: int, commit_ts: int) -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog(tp=bl.COMMIT, start_ts=start_ts, commit_ts=commit_ts, prewrite_key=b"t\x80pk")


def start_all(pumps: Start, *node_ids: str) -> list[PumpProcess]:
    """Start pumps in parallel and wait until all are online."""
    started = [pumps(n, wait=False) for n in node_ids]
    for p in started:
        p.wait_online()
    return started


def wait_until(cond: Callable[[], Any], what: str, timeout: float = 30.0) -> None:
    wait_for(cond, timeout, what)


def stored_prewrites(p: PumpProcess, cluster_id: int, starts: Iterable[int]) -> set[int]:
    with ScanClient(p.addr, cluster_id) as c:
        return {r.start_ts for r in c.lookup_prewrites(sorted(starts))}


def assert_stored_prewrites(p: PumpProcess, cluster_id: int, starts: Iterable[int], expected: set[int]) -> None:
    """The prewrites among ``starts`` that ``p`` holds are ``expected``. A pump indexes what it
    acknowledged a moment later, so this waits (10 s at most) for the set to match: it only grows."""
    starts = list(starts)
    found: set[int] = set()

    def matches() -> bool:
        nonlocal found
        found = stored_prewrites(p, cluster_id, starts)
        return found == expected

    wait_for(matches, 10.0, lambda: f"{p.node_id} to hold the prewrites {expected}; it holds {found}")


def stored_commits(p: PumpProcess, cluster_id: int, after: int, up_to: int) -> dict[int, int]:
    """start_ts -> commit_ts of the real commits with commit ts in (after, up_to], once the watermark passed up_to."""
    with ScanClient(p.addr, cluster_id) as c:
        wait_until(lambda: c.watermark().max_commit_ts >= up_to, f"watermark of {p.node_id} to pass {up_to}")
        return {r.start_ts: r.commit_ts for r in c.scan(after, up_to)
                if r.tp == bl.COMMIT and not bl.is_fake(r.tp, r.start_ts, r.commit_ts)}


TRANSPORT = {"name": "auto"}


@pytest.fixture(params=["h2", "grpc"], autouse=True)
def transport(request: pytest.FixtureRequest) -> Iterable[str]:
    """Every test runs over both WriteBinlog transports (the h2 wire client and grpcio)."""
    TRANSPORT["name"] = request.param
    yield request.param
    TRANSPORT["name"] = "auto"


def client(registry_uri: str, tso: LocalTSO, **kw: Any) -> PumpsClient:
    opts: dict[str, Any] = dict(write_timeout=3.0, watch_interval=0.1, retry_interval=0.05,
                                commit_retry_interval=0.1, check_interval=3600.0, transport=TRANSPORT["name"])
    opts.update(kw)
    return PumpsClient(registry_uri, tso.cluster_id, **opts)


def pause(p: PumpProcess) -> None:
    req = urllib.request.Request(f"{p.status_url}/state/{p.node_id}/pause", method="PUT")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def test_range_round_robin_and_commits_follow_prewrites(pumps: Start, tso: LocalTSO, ts: TS,
                                                        registry_uri: str) -> None:
    procs = start_all(pumps, "pump-1", "pump-2", "pump-3")
    with client(registry_uri, tso) as c:
        assert c.available_pumps() == ["pump-1", "pump-2", "pump-3"] and c.strategy == "range"
        first = ts()
        took: dict[int, str] = {}
        for _ in range(9):
            s = ts()
            took[s] = c.write_binlog(prewrite(s))
        assert list(took.values()) == ["pump-1", "pump-2", "pump-3"] * 3
        assert c.pending_prewrites() == 9
        commits: dict[int, int] = {}
        futures = []
        for i, s in enumerate(reversed(took)):            # not in prewrite order: routing is by start ts
            commits[s] = ts()                              # commit ts only after the prewrite was acknowledged
            if i % 2:
                assert c.write_binlog(commit(s, commits[s])) == took[s]
            else:
                futures.append((s, c.write_commit_async(commit(s, commits[s]))))
        assert all(f.result(timeout=30) == took[s] for s, f in futures)
        assert c.pending_prewrites() == 0 and c.commit_give_ups == 0
    last = max(commits.values())
    for p in procs:
        mine = {s for s, n in took.items() if n == p.node_id}
        assert_stored_prewrites(p, tso.cluster_id, took, mine)
        assert stored_commits(p, tso.cluster_id, first, last) == {s: commits[s] for s in mine}


def test_hash_is_deterministic_by_start_ts(pumps: Start, tso: LocalTSO, ts: TS, registry_uri: str) -> None:
    procs = start_all(pumps, "pump-1", "pump-2")
    ids = ["pump-1", "pump-2"]
    with client(registry_uri, tso, strategy="hash") as c:
        assert c.strategy == "hash"
        took = {}
        for _ in range(8):
            s = ts()
            took[s] = c.write_binlog(prewrite(s))
            assert took[s] == ids[hash_ts(s) % 2]
        for s in took:
            assert c.write_binlog(commit(s, ts())) == took[s]
    for p in procs:
        assert_stored_prewrites(p, tso.cluster_id, took, {s for s, n in took.items() if n == p.node_id})


def test_registry_changes_are_followed(pumps: Start, tso: LocalTSO, ts: TS, registry_uri: str) -> None:
    p1 = pumps("pump-1")
    with client(registry_uri, tso, strategy="nonsense") as c:
        assert c.strategy == "range" and c.available_pumps() == ["pump-1"]
        p2 = pumps("pump-2")                               # a new pump registers: the poll adds it
        wait_until(lambda: c.available_pumps() == ["pump-1", "pump-2"], "pump-2 to become available")
        a, b = ts(), ts()
        assert [c.write_binlog(prewrite(a)), c.write_binlog(prewrite(b))] == ["pump-1", "pump-2"]
        assert c.write_binlog(commit(a, ts())) == "pump-1" and c.write_binlog(commit(b, ts())) == "pump-2"

        pause(p2)                                          # registry says paused: unavailable
        wait_until(lambda: c.available_pumps() == ["pump-1"] and c.unavailable_pumps() == ["pump-2"],
                   "paused pump-2 to leave the available list")
        later = [ts() for _ in range(4)]
        assert [c.write_binlog(prewrite(s)) for s in later] == ["pump-1"] * 4
        assert p2.wait_exit() == 0

        registry = load_registry(registry_uri)             # an operator removes the key: the pump is dropped
        registry.delete(node_key(PUMP, "pump-2"))
        wait_until(lambda: c.pump("pump-2") is None and c.unavailable_pumps() == [], "pump-2 to be dropped")
        registry.close()
    assert_stored_prewrites(p1, tso.cluster_id, [a, b, *later], {a, *later})


def test_killed_pump_fails_over_and_late_commit_arrives(pumps: Start, tso: LocalTSO, ts: TS,
                                                        registry_uri: str) -> None:
    p1, p2 = start_all(pumps, "pump-1", "pump-2")
    with client(registry_uri, tso) as c:
        first = ts()
        a, b = ts(), ts()
        assert [c.write_binlog(prewrite(a)), c.write_binlog(prewrite(b))] == ["pump-1", "pump-2"]
        p2.kill()                                          # kill -9: the registry still says online
        others = [ts() for _ in range(4)]
        assert [c.write_binlog(prewrite(s)) for s in others] == ["pump-1"] * 4
        assert c.pump("pump-2") is not None and c.pump("pump-2").err_num >= 1

        commits = {s: ts() for s in [a, *others]}
        for s, cts in commits.items():
            assert c.write_binlog(commit(s, cts)) == "pump-1"
        commits[b] = ts()
        late = c.write_commit_async(commit(b, commits[b]))  # its pump is down: keeps retrying pump-2
        errors_before = c.pump("pump-2").err_num
        wait_until(lambda: c.pump("pump-2").err_num >= errors_before + 2,
                   "the commit to retry against the dead pump")
        assert not late.done()
        p2.start()                                         # same data dir and address
        assert late.result(timeout=60) == "pump-2"
        assert c.commit_give_ups == 0 and c.pending_prewrites() == 0
    last = max(commits.values())
    # commits first: they wait for each watermark to pass the last commit, so the restarted pump-2
    # has re-indexed what it stored before the kill (lookups read the index)
    assert stored_commits(p1, tso.cluster_id, first, last) == {s: commits[s] for s in [a, *others]}
    assert stored_commits(p2, tso.cluster_id, first, last) == {b: commits[b]}
    assert_stored_prewrites(p1, tso.cluster_id, commits, {a, *others})
    assert_stored_prewrites(p2, tso.cluster_id, commits, {b})


def test_probe_brings_back_a_pump_retired_by_errors(pumps: Start, tso: LocalTSO, ts: TS,
                                                    registry_uri: str) -> None:
    p1, p2 = start_all(pumps, "pump-1", "pump-2")
    with client(registry_uri, tso, max_err_nums=1, check_interval=0.2) as c:
        p2.kill()
        written = []
        while "pump-2" not in c.unavailable_pumps():       # two consecutive errors retire it
            assert len(written) < 20, "pump-2 never became unavailable"
            s = ts()
            assert c.write_binlog(prewrite(s)) == "pump-1"
            written.append(s)
        assert c.available_pumps() == ["pump-1"]
        assert c.probe() == []                             # still dead: the probe fails
        p2.start()
        wait_until(lambda: c.available_pumps() == ["pump-1", "pump-2"], "the probe to bring pump-2 back")
        again = [ts(), ts()]
        assert sorted(c.write_binlog(prewrite(s)) or "" for s in again) == ["pump-1", "pump-2"]
        for s in [*written, *again]:
            c.write_binlog(commit(s, ts()))
        assert c.commit_give_ups == 0
    # lookups read the index, which a pump writes after it acknowledged the binlog (durable in its
    # value log): wait for it, as the other tests wait for the watermark
    wait_until(lambda: len(stored_prewrites(p2, tso.cluster_id, again)) == 1, "pump-2 to index its prewrite")
    assert len(stored_prewrites(p2, tso.cluster_id, again)) == 1
    assert_stored_prewrites(p1, tso.cluster_id, written, set(written))


def test_backoff_path_uses_an_unavailable_online_pump(pumps: Start, tso: LocalTSO, ts: TS,
                                                      registry_uri: str) -> None:
    p1, p2 = start_all(pumps, "pump-1", "pump-2")
    with client(registry_uri, tso, max_err_nums=0, write_timeout=0.5) as c:
        p1.kill()
        s = ts()
        assert c.write_binlog(prewrite(s)) == "pump-2"     # pump-1 fails once and is retired
        assert c.available_pumps() == ["pump-2"] and c.unavailable_pumps() == ["pump-1"]
        p1.start()                         # back, but only the probe (hour-long here) or backoff sees it
        p2.kill()
        s2 = ts()
        assert c.write_binlog(prewrite(s2)) == "pump-1"    # available pump-2 fails; backoff tries pump-1
        assert "pump-1" in c.available_pumps()
        assert c.write_binlog(commit(s2, ts())) == "pump-1"
    assert_stored_prewrites(p1, tso.cluster_id, [s, s2], {s2})


def test_oversize_binlog_fails_at_once(pumps: Start, tso: LocalTSO, ts: TS, registry_uri: str) -> None:
    small = pumps("pump-1", config_text="max-message-size = 1048576\n", wait=False)
    big = pumps("pump-2")
    small.wait_online()
    with client(registry_uri, tso) as c:
        s = ts()
        with pytest.raises(BinlogTooLarge, match="binlog data is too large"):
            c.write_binlog(prewrite(s, b"x" * (2 << 20)))
        assert c.pump("pump-1").err_num == 1 and c.pump("pump-2").err_num == 0
        assert c.pending_prewrites() == 0
        s2 = ts()
        assert c.write_binlog(prewrite(s2)) == "pump-2"
    assert_stored_prewrites(big, tso.cluster_id, [s, s2], {s2})
    assert_stored_prewrites(small, tso.cluster_id, [s, s2], set())


def test_no_pump_registered(tmp_path: Path, tso: LocalTSO) -> None:
    uri = f"file://{tmp_path / 'empty.json'}"
    with pytest.raises(NoPumpFound, match="no pump found in pd") as err:
        PumpsClient(uri, tso.cluster_id)
    assert "empty.json" in str(err.value)


def test_no_available_pump(tmp_path: Path, tso: LocalTSO, ts: TS) -> None:
    uri = f"file://{tmp_path / 'registry.json'}"
    registry = load_registry(uri)
    registry.put_node(PUMP, NodeStatus("pump-9", "127.0.0.1:1", state=PAUSED))
    with client(uri, tso) as c:
        assert c.available_pumps() == [] and c.unavailable_pumps() == ["pump-9"]
        with pytest.raises(WriteBinlogFailed,
                           match="^write binlog failed, the last error no avaliable pump to write binlog$"):
            c.write_binlog(prewrite(ts()))
    registry.close()


def test_all_pumps_down_then_commit_gives_up(pumps: Start, tso: LocalTSO, ts: TS, registry_uri: str) -> None:
    procs = start_all(pumps, "pump-1", "pump-2")
    with client(registry_uri, tso, write_timeout=0.5, commit_timeout=0.5) as c:
        a = ts()
        assert c.write_binlog(prewrite(a)) == "pump-1"
        for p in procs:
            p.kill()
        with pytest.raises(WriteBinlogFailed, match="^write binlog failed, the last error pump pump-"):
            c.write_binlog(prewrite(ts()))
        assert c.pump("pump-1").err_num >= 1 and c.pump("pump-2").err_num >= 1
        assert c.write_binlog(commit(a, ts())) is None     # gives up without raising
        assert c.commit_give_ups == 1 and c.pending_prewrites() == 0
        assert c.write_commit_async(commit(ts(), ts())).result(timeout=10) is None  # no matching prewrite
        assert c.commit_give_ups == 2
