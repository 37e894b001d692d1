"""The pump's LevelDB index after a failed write: ENOSPC on a real (tmpfs) filesystem, then space back."""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.errors import IndexUnavailable
from ingest.pump.storage.index import Entry, Index
from ingest.pump.storage.vlog import Pointer
from tests.ingest.helpers import tmpfs

BATCH = 2000


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 32 MiB tmpfs."""
    with tmpfs(tmp_path / "disk", "32m") as mnt:
        yield mnt


def _batch(n: int) -> list[Entry]:
    return [Entry(ts, 1, ts - 1, ts, Pointer(0, ts)) for ts in range(n * BATCH + 1, (n + 1) * BATCH + 1)]


def _fill(disk: Path, leave: int) -> Path:
    filler = disk / "filler"
    st = os.statvfs(disk)
    with open(filler, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, st.f_bavail * st.f_frsize - leave)
    return filler


def test_the_index_writes_again_once_space_is_back_after_enospc_and_keeps_what_it_acknowledged(disk: Path) -> None:
    index = Index(disk / "kv", reopen_min_free=4 << 20)
    acked, n = 0, 0
    # Close to a full memtable (LevelDB's 4 MiB write buffer holds a 2.3 MiB log of these batches),
    # then fill the disk: the log's appends still fit, the memtable's flush to a table does not (a
    # background error that LevelDB returns for every later write until the database is reopened).
    while sum(p.stat().st_size for p in (disk / "kv").glob("*.log")) < (2 << 20) + (32 << 10):
        index.put_entries(_batch(n), head=None)
        acked, n = n + 1, n + 1
    filler = _fill(disk, 384 << 10)
    failures: list[BaseException] = []
    while len(failures) < 3:
        try:
            index.put_entries(_batch(n), head=None)
            acked, n = n + 1, n + 1
        except IndexUnavailable as exc:
            failures.append(exc)
        assert n < 200, "the disk never filled: the test would prove nothing"
    assert "No space left on device" in str(failures[0])
    assert isinstance(failures[-1], IndexUnavailable) and "waits for" in str(failures[-1])
    assert [e.key_ts for e in index.range(0, acked * BATCH)] == list(range(1, acked * BATCH + 1))
    filler.unlink()
    index.put_entries(_batch(n), head=None)            # reopened first
    acked, n = n + 1, n + 1
    index.put_watermark(acked * BATCH, None, sync=True)
    assert index.reopened == 1
    index.close()
    index = Index(disk / "kv")                         # as a restarted pump reads it
    assert [e.key_ts for e in index.range(0, n * BATCH)] == list(range(1, acked * BATCH + 1))
    index.close()


def test_a_read_running_across_a_reopen_resumes_on_the_new_handle(disk: Path) -> None:
    index = Index(disk / "kv", reopen_min_free=0)
    for n in range(3):
        index.put_entries(_batch(n), head=None)
    chunks = index.raw_chunks(0, 3 * BATCH)
    entries = index.range(0, 3 * BATCH)
    first = next(chunks)
    firsts = [next(entries) for _ in range(10)]
    index._failed = OSError("a failed write")           # what a failed write leaves for the next one
    index.put_u64(b"!binlog!gcts", 1)                   # reopens: closes the handle both readers hold
    assert index.reopened == 1
    keys = [int(k) for c in [first, *chunks] for k in c["commit"]]
    assert keys == list(range(1, 3 * BATCH + 1))
    assert [e.key_ts for e in [*firsts, *entries]] == list(range(1, 3 * BATCH + 1))
    assert index.get_u64(b"!binlog!gcts") == 1
    index.close()
    with pytest.raises(RuntimeError, match="closed"):   # a close by its owner is not waited out
        index.get(1)


def test_reads_on_other_threads_go_on_through_reopens_whole_and_in_order(tmp_path: Path) -> None:
    """plyvel reads without the GIL and a close frees what they read: a reopen waits for the reads
    inside a call, and the scans in flight resume on the new handle, each whole and in order."""
    import threading

    index = Index(tmp_path / "kv", reopen_min_free=0)
    for n in range(5):
        index.put_entries(_batch(n), head=None)
    expected = list(range(1, 5 * BATCH + 1))
    stop = threading.Event()
    failures: list[BaseException] = []
    scans = [0]

    def read() -> None:
        try:
            while not stop.is_set():
                assert [e.key_ts for e in index.range(0, 5 * BATCH)] == expected
                assert [int(k) for c in index.raw_chunks(0, 5 * BATCH) for k in c["commit"]] == expected
                assert index.get(17) is not None and index.raw_get(5 * BATCH + 1) is None
                scans[0] += 1
        except BaseException as exc:   # noqa: BLE001 (handed to the test's thread)
            failures.append(exc)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + 120
    try:   # reopens go on until the readers have scanned a dozen times among them, however slow the machine
        while (index.reopened < 40 or scans[0] < 12) and not failures and time.monotonic() < deadline:
            index._failed = OSError("a failed write")   # what a failed write leaves for the next one
            index.put_u64(b"!binlog!gcts", 1)           # reopens under the readers
    finally:
        stop.set()
        for t in readers:
            t.join(60)
    assert not failures, failures[0]
    assert index.reopened >= 40 and scans[0] >= 12, (index.reopened, scans[0])
    index.close()
