"""Storage: watermark rule, restart recovery, slow chaser, scans, pulls, GC, locking."""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from ingest import binlog as bl
from ingest.errors import DiskFull, IndexUnavailable, StorageLocked
from ingest.pump.storage import Entry, Storage, StorageConfig
from ingest.pump.storage import sorter as sorter_mod
from ingest.tso import compose_ts
from schemas import binlog_pb2
from tests.waiting import wait_for

OPTS = StorageConfig(stop_write_at_available_space=0)


def put(s: Storage, tp: int, start: int, commit: int = 0, value: bytes = b"", key: bytes = b"pk") -> None:
    b = binlog_pb2.Binlog(tp=tp, start_ts=start, commit_ts=commit)
    if tp == bl.PREWRITE:
        b.prewrite_key, b.prewrite_value = key, value
    s.write(bl.marshal_gogo(b), tp, start, commit)




@pytest.fixture
def store(tmp_path: Path):
    s = Storage(tmp_path / "pump", OPTS)
    yield s
    s.close()


def test_commit_waits_for_every_earlier_prewrite(store: Storage) -> None:
    put(store, bl.PREWRITE, 10, value=b"a")
    put(store, bl.PREWRITE, 20, value=b"b")
    put(store, bl.COMMIT, 20, 25)
    time.sleep(0.3)
    assert store.max_commit_ts == 0          # prewrite 10 is still open
    assert store.oldest_unresolved() == 10
    put(store, bl.COMMIT, 10, 30)
    wait_for(lambda: store.max_commit_ts == 30)
    assert store.oldest_unresolved() == 0


def test_rollback_resolves_without_advancing(store: Storage) -> None:
    put(store, bl.PREWRITE, 10)
    put(store, bl.PREWRITE, 20)
    put(store, bl.COMMIT, 20, 25)
    put(store, bl.ROLLBACK, 10, 0)
    wait_for(lambda: store.max_commit_ts == 25)


def test_fake_binlog_advances_watermark(store: Storage) -> None:
    store.write(bl.fake_binlog(77), bl.ROLLBACK, 77, 77)
    wait_for(lambda: store.max_commit_ts == 77)


def test_watermark_never_moves_back(store: Storage) -> None:
    put(store, bl.PREWRITE, 50)
    put(store, bl.COMMIT, 50, 60)
    wait_for(lambda: store.max_commit_ts == 60)
    store.write(bl.fake_binlog(55), bl.ROLLBACK, 55, 55)  # an older fake must not lower it
    time.sleep(0.2)
    assert store.max_commit_ts == 60


def test_scan_is_clamped_to_watermark_and_ordered(store: Storage) -> None:
    put(store, bl.PREWRITE, 10, value=b"v10")
    put(store, bl.COMMIT, 10, 12)
    put(store, bl.PREWRITE, 14, value=b"v14")
    wait_for(lambda: store.max_commit_ts == 12)
    assert [(e.key_ts, e.tp) for e, _ in store.scan(0, 0)] == [(10, 0), (12, 1)]
    put(store, bl.COMMIT, 14, 16)
    wait_for(lambda: store.max_commit_ts == 16)
    assert [(e.key_ts, e.tp) for e, _ in store.scan(10, 100)] == [(12, 1), (14, 0), (16, 1)]
    assert [(e.key_ts, e.tp) for e, _ in store.scan(12, 14)] == [(14, 0)]
    found = list(store.lookup_prewrites([10, 12, 14, 99]))
    assert [(e.start_ts, bl.parse(p).prewrite_value) for e, p in found] == [(10, b"v10"), (14, b"v14")]


def test_the_watermark_never_passes_a_commit_whose_prewrite_a_lookup_cannot_find(store: Storage) -> None:
    """The window between a prewrite's acknowledgement and its indexing (LookupPrewrites reads the
    index) is closed for every drain: a drain reads a pump only up to its watermark, and the watermark
    passes a commit only after the indexer wrote the pump's prewrite of it. Shown with an indexer made
    slow: while the lookup misses the acknowledged prewrite, the watermark stays below its commit.
    (A duplicate prewrite on another pump changes nothing: the commit goes to the pump whose prewrite
    TiDB saw succeed, and this holds there.)"""
    gate = threading.Event()
    real_put = store.index.put_entries

    def slow_put(entries: list[Entry], head: object = None) -> None:
        gate.wait(10)
        real_put(entries, head=head)

    store.index.put_entries = slow_put        # type: ignore[method-assign]
    put(store, bl.PREWRITE, 100, value=b"acknowledged")   # returns once durable in the value log
    put(store, bl.COMMIT, 100, 110)
    time.sleep(0.3)
    assert list(store.lookup_prewrites([100])) == []      # acknowledged, not yet indexed: not found ...
    assert store.max_commit_ts < 110                      # ... and no drain may read up to its commit
    gate.set()
    wait_for(lambda: store.max_commit_ts == 110)
    assert [bl.parse(p).prewrite_value for _, p in store.lookup_prewrites([100])] == [b"acknowledged"]


def test_pull_commits_copies_prewrite_fields(store: Storage) -> None:
    pre = binlog_pb2.Binlog(tp=bl.PREWRITE, start_ts=10, prewrite_key=b"k", prewrite_value=b"rows",
                            ddl_query=b"create table t (a int)", ddl_job_id=5, ddl_schema_state=5)
    store.write(bl.marshal_gogo(pre), bl.PREWRITE, 10, 0)
    put(store, bl.COMMIT, 10, 11)
    store.write(bl.fake_binlog(12), bl.ROLLBACK, 12, 12)
    wait_for(lambda: store.max_commit_ts == 12)
    stop = threading.Event()
    got = []
    for _, payload in store.pull_commits(0, stop.is_set):
        got.append(bl.parse(payload))
        if len(got) == 2:
            stop.set()
    assert (got[0].tp, got[0].start_ts, got[0].commit_ts) == (bl.COMMIT, 10, 11)
    assert (got[0].prewrite_value, got[0].ddl_query, got[0].ddl_job_id, got[0].ddl_schema_state) == \
        (b"rows", b"create table t (a int)", 5, 5)
    assert (got[1].tp, got[1].start_ts, got[1].commit_ts) == (bl.ROLLBACK, 12, 12)


def test_restart_recovers_index_and_watermark(tmp_path: Path) -> None:
    s = Storage(tmp_path, OPTS)
    for ts in range(10, 110, 10):
        put(s, bl.PREWRITE, ts)
        put(s, bl.COMMIT, ts, ts + 5)
    put(s, bl.PREWRITE, 200)  # unresolved at shutdown
    wait_for(lambda: s.max_commit_ts == 105)
    s.close()
    s = Storage(tmp_path, OPTS)
    assert s.max_commit_ts == 105
    wait_for(lambda: s.oldest_unresolved() == 200)
    put(s, bl.COMMIT, 200, 205)
    wait_for(lambda: s.max_commit_ts == 205)
    assert len(list(s.scan(0, 0))) == 22
    s.close()


def test_index_rebuilt_from_value_log_when_index_lost(tmp_path: Path) -> None:
    """A crash after the vlog fsync but before indexing: restart re-indexes from the value log."""
    s = Storage(tmp_path, OPTS)
    put(s, bl.PREWRITE, 10)
    put(s, bl.COMMIT, 10, 15)
    wait_for(lambda: s.max_commit_ts == 15)
    s.close()
    import shutil
    shutil.rmtree(tmp_path / "kv")
    s = Storage(tmp_path, OPTS)
    wait_for(lambda: s.max_commit_ts == 15)
    assert [(e.key_ts, e.tp) for e, _ in s.scan(0, 0)] == [(10, 0), (15, 1)]
    s.close()


def test_slow_indexer_switches_to_chasing_with_bounded_queue(tmp_path: Path) -> None:
    s = Storage(tmp_path, StorageConfig(stop_write_at_available_space=0, index_queue_size=4))
    release = threading.Event()
    original = s.index.put_entries

    def slow_put(entries, head, sync=False):
        release.wait()
        return original(entries, head, sync)

    s.index.put_entries = slow_put
    wait_for(lambda: not s._chasing)  # recovery done
    writers = [threading.Thread(target=put, args=(s, bl.PREWRITE, ts)) for ts in range(1, 200)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    assert s._index_q.qsize() <= 4
    assert s._chasing, "a full index queue must switch to reading the value log"
    put(s, bl.COMMIT, 199, 500)
    for ts in range(1, 199):
        put(s, bl.ROLLBACK, ts, 0)
    release.set()
    wait_for(lambda: s.max_commit_ts == 500)
    assert len([e for e, _ in s.scan(0, 0) if e.tp == bl.PREWRITE]) == 199
    s.close()


def test_second_open_fails_with_lock_error(tmp_path: Path) -> None:
    s = Storage(tmp_path, OPTS)
    with pytest.raises(StorageLocked, match="locked by another pump"):
        Storage(tmp_path, OPTS)
    s.close()


def test_disk_full_refuses_writes_but_not_fake_binlogs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ingest.pump.storage.storage")
    s = Storage(tmp_path, StorageConfig(stop_write_at_available_space=1 << 62))
    with pytest.raises(DiskFull, match="no available space"):
        put(s, bl.PREWRITE, 10)
    s.write(bl.fake_binlog(20), bl.ROLLBACK, 20, 20)
    wait_for(lambda: s.max_commit_ts == 20)
    # the operator reads when writes stop and start again, once each (not once per refused write)
    stopped = [r for r in caplog.records if "refusing binlog writes" in r.getMessage()]
    assert len(stopped) == 1 and stopped[0].levelno == logging.WARNING
    s.options = StorageConfig(stop_write_at_available_space=0)
    s.disk_available = s._check_disk()
    s._check_disk()
    assert sum("accepting binlog writes again" in r.getMessage() for r in caplog.records) == 1
    put(s, bl.PREWRITE, 30)
    s.close()


def test_a_failed_watermark_write_is_retried_and_indexing_goes_on(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The watermark's LevelDB write failed once (ENOSPC reached the index): the pump once stopped
    indexing for good; it retries the write, as it does the index's, and the watermark moves on."""
    s = Storage(tmp_path, OPTS)
    failures = [IndexUnavailable("a write to the index failed: IO error: 000005.ldb: No space left on device")]
    real = s.index.put_watermark

    def put_watermark(max_commit_ts: int, handle: object, sync: bool) -> None:
        if failures:
            raise failures.pop()
        real(max_commit_ts, handle, sync)   # type: ignore[arg-type]
    monkeypatch.setattr(s.index, "put_watermark", put_watermark)
    put(s, bl.PREWRITE, 10)
    put(s, bl.COMMIT, 10, 15)
    wait_for(lambda: s.max_commit_ts == 15)
    put(s, bl.PREWRITE, 20)
    put(s, bl.COMMIT, 20, 25)
    wait_for(lambda: s.max_commit_ts == 25)
    assert not failures and s.metrics.error_count.labels("update_max_commit_ts")._value.get() == 1
    s.close()
    s = Storage(tmp_path, OPTS)
    assert s.max_commit_ts == 25
    s.close()


def test_gc_purges_below_margin(tmp_path: Path) -> None:
    s = Storage(tmp_path, StorageConfig(stop_write_at_available_space=0), file_size=200)
    old = compose_ts(1_000_000, 0)
    for i in range(10):
        put(s, bl.PREWRITE, old + 2 * i, value=b"x" * 50)
        put(s, bl.COMMIT, old + 2 * i, old + 2 * i + 1)
    recent = compose_ts(1_000_000 + 3_600_000, 0)
    s.write(bl.fake_binlog(recent), bl.ROLLBACK, recent, recent)
    wait_for(lambda: s.max_commit_ts == recent)
    files_before = len(s.vlog.files)
    assert not s.gc(recent + 1)                       # at or above the watermark: refused
    assert s.gc(compose_ts(1_000_000 + 600_000 + 100, 0))   # old records are > 600 s below
    assert s.gc_ts == compose_ts(1_000_000 + 600_000 + 100, 0)
    assert [e.key_ts for e, _ in s.scan(0, 0)] == [recent]
    assert len(s.vlog.files) < files_before
    assert not s.gc(compose_ts(1_000_000, 0))          # never backwards
    s.close()
    s = Storage(tmp_path, OPTS)
    assert s.gc_ts == compose_ts(1_000_000 + 600_000 + 100, 0)
    s.close()


def test_resolver_decides_stuck_prewrite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sorter_mod, "RESOLVE_AFTER", 0.05)
    asked: list[int] = []

    def resolver(entry: Entry) -> bool:
        asked.append(entry.start_ts)
        return True  # e.g. the upstream says it rolled back

    s = Storage(tmp_path, OPTS, resolver=resolver)
    put(s, bl.PREWRITE, 10)
    put(s, bl.PREWRITE, 20)
    put(s, bl.COMMIT, 20, 25)
    wait_for(lambda: s.max_commit_ts == 25)
    assert asked == [10]
    s.close()
