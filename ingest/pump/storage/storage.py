"""A pump's durable binlog store: value log + LevelDB index + sorter, behind one facade.

Promises:
- ``write`` returns only after the record is in the value log and fdatasync'd (group commit, one
  sync per batch when ``sync_log``); an acknowledged record survives ``kill -9``.
- Indexing runs behind the writer through a bounded queue; when it overflows, the indexer catches
  up by re-reading the value log (TiDB's slow chaser), so memory stays bounded.
- ``max_commit_ts`` only moves forward and is persisted before it is published.
- A restart rescans from the last indexed/handled pointer; torn tails are cut, corrupt records
  skipped and counted.
"""
from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

import numpy as np

from ingest import binlog as bl
from ingest.errors import DiskFull, IndexUnavailable, MalformedBinlog, StorageClosed, StorageLocked
from ingest.pump.metrics import PumpMetrics
from ingest.pump.storage.config import StorageConfig
from ingest.pump.storage.index import (
    GC_TS_KEY,
    HANDLE_POINTER_KEY,
    MAX_COMMIT_TS_KEY,
    PREWRITE,
    Entry,
    Index,
    value_chunks,
)
from ingest.pump.storage.recent import RecentEntries
from ingest.pump.storage.scan import ScanColumns, array_chunks, scan_columns
from ingest.pump.storage.sorter import Sorter
from ingest.pump.storage.vlog import DEFAULT_FILE_SIZE, ZERO, Pointer, ValueLog
from ingest.tso import compose_ts
from schemas.retry import retry

log = logging.getLogger(__name__)
T = TypeVar("T")

GC_MARGIN_TS = compose_ts(600 * 1000, 0)
DEFAULT_SCAN_BATCH = 4 << 20  # TiDB keeps 600 s below the gc ts for late commits
GROUP_CAP = 1 << 20
GROUP_SMALL = 128 << 10
INDEX_BATCH = 1024
INDEX_PAUSE = 0.01
DISK_CHECK_INTERVAL = 3.0


_STOP = object()


class _Batch:
    """Writes handed to the writer thread together, completed together once durable.

    Either the writes one event loop gathered (``owner`` is its ``LoopWriter``: one
    ``call_soon_threadsafe`` completes them all) or one synchronous write (``done`` is a held
    lock the writer releases: cheaper than a threading.Event).
    """

    __slots__ = ("payloads", "metas", "futures", "owner", "done", "size", "error", "pointer", "completed")

    def __init__(self, owner: LoopWriter | None = None) -> None:
        self.payloads: list[bytes] = []
        self.metas: list[tuple[int, int, int]] = []  # (tp, start_ts, commit_ts) per payload
        self.futures: list[asyncio.Future[None]] = []
        self.owner = owner
        self.size = 0
        self.error: BaseException | None = None
        self.pointer = ZERO  # of the first record (what a synchronous ``write`` returns)
        self.completed = False
        if owner is None:
            self.done: threading.Lock | None = threading.Lock()
            self.done.acquire()
        else:
            self.done = None

    def complete(self, error: BaseException | None) -> None:
        """Release the writers (from any thread; only the first call counts)."""
        if self.completed:
            return
        self.completed = True
        self.error = error
        if self.owner is None:
            assert self.done is not None
            self.done.release()
            return
        try:
            self.owner.loop.call_soon_threadsafe(self.owner.done, self)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


class LoopWriter:
    """Gathers the writes of one event loop into batches, one batch at the writer at a time.

    Runs on its loop only. Writes that arrive while a batch is being written and synced wait in
    ``pending`` and go to the writer together when it completes: per group commit the writer
    thread is woken once and the loop once, however many calls it holds. While writes are
    concurrent, batches also start at most once per ``group_commit_interval``.
    """

    __slots__ = ("storage", "loop", "pending", "in_flight", "interval", "last_start", "last_count",
                 "timer")

    def __init__(self, storage: Storage, loop: asyncio.AbstractEventLoop) -> None:
        self.storage = storage
        self.loop = loop
        self.pending: _Batch | None = None
        self.in_flight = False
        self.interval = storage.options.group_commit_interval
        self.last_start = 0.0  # monotonic time the last batch went to the writer
        self.last_count = 0    # writes it held
        self.timer = False     # a delayed submit is scheduled

    def write(self, payload: bytes, tp: int, start_ts: int, commit_ts: int) -> asyncio.Future[None]:
        future = self.loop.create_future()
        batch = self.pending
        if batch is None:
            batch = self.pending = _Batch(self)
            if not self.in_flight:  # hand it over once this loop iteration's calls have joined it
                self.loop.call_soon(self.submit)
        batch.payloads.append(payload)
        batch.metas.append((tp, start_ts, commit_ts))
        batch.futures.append(future)
        batch.size += len(payload)
        return future

    def submit(self) -> None:
        batch = self.pending
        if batch is None or self.in_flight or self.timer:
            return
        now = time.monotonic()
        if self.last_count > 1 and batch.size < GROUP_CAP:
            wait = self.last_start + self.interval - now
            if wait > 0:
                self.timer = True
                self.loop.call_later(wait, self._timed_submit)
                return
        self.pending = None
        self.in_flight = True
        self.last_start, self.last_count = now, len(batch.futures)
        if not self.storage._enqueue(batch):
            self.done(batch)

    def _timed_submit(self) -> None:
        self.timer = False
        self.submit()

    def done(self, batch: _Batch) -> None:
        """The writer finished ``batch`` (runs on the loop): resolve its futures, send the next."""
        self.in_flight = False
        error = batch.error
        for future in batch.futures:
            if future.done():  # the call was cancelled
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)
        if self.pending is not None:
            self.loop.call_soon(self.submit)


class _IndexQueue:
    """Batches of written entries on their way to the indexer, bounded by the number of entries."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._items: deque[list[Entry]] = deque()
        self._count = 0
        self._stopped = False
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)

    def put_nowait(self, entries: list[Entry]) -> bool:
        """Queue a batch; False (nothing queued) when it would exceed the bound."""
        with self._lock:
            if self._count + len(entries) > self.max_entries:
                return False
            self._items.append(entries)
            self._count += len(entries)
            if len(self._items) == 1:
                self._ready.notify()
            return True

    def put_stop(self) -> None:
        """Queue the stop marker (never refused; the writer queues nothing after it)."""
        with self._lock:
            self._stopped = True
            self._ready.notify()

    def take(self, timeout: float) -> tuple[list[list[Entry]], bool]:
        """Every queued batch and whether the stop marker follows them, waiting up to ``timeout`` for
        either."""
        with self._lock:
            if not self._items and not self._stopped:
                self._ready.wait(timeout)
            items = list(self._items)
            self._items.clear()
            self._count = 0
            return items, self._stopped

    def qsize(self) -> int:
        """Entries queued."""
        return self._count


class Storage:
    """Opens (and locks) ``data_dir``; runs the writer, indexer and sorter threads until ``close``."""

    def __init__(self, data_dir: Path, options: StorageConfig | None = None,
                 resolver: Callable[[Entry], bool] | None = None,
                 metrics: PumpMetrics | None = None, file_size: int = DEFAULT_FILE_SIZE) -> None:
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.options = options or StorageConfig()
        self.metrics = metrics or PumpMetrics()
        self._resolver = resolver or (lambda entry: False)
        self._lock_fd = _lock_dir(self.dir)
        self._closed = False
        try:
            self.index = Index(self.dir / "kv")
        except Exception:
            os.close(self._lock_fd)
            raise
        self.vlog = ValueLog(self.dir / "value", file_size, self.options.sync_log,
                             ts_of=bl.max_ts, on_corrupt=self._count_corrupt)
        if self.vlog.truncated_at is not None:
            dropped = self.index.drop_pointers_from(self.vlog.truncated_at)
            log.warning("dropped %d index entries that pointed into the cut tail at %s",
                        dropped, self.vlog.truncated_at)
        self.gc_ts = self.index.get_u64(GC_TS_KEY)
        self._max_commit_ts = self.index.get_u64(MAX_COMMIT_TS_KEY)
        self.recent = RecentEntries(self.options.scan_cache_entries)
        self.recent.load(self.index.newest_values())
        self._wm_cond = threading.Condition()
        self._emitted: Entry | None = None
        # Every record before the handle pointer (the last commit the sorter passed) is resolved;
        # the head pointer (last indexed record) is never before it. Without one, start from zero.
        start = self.index.get_pointer(HANDLE_POINTER_KEY) or ZERO
        # Recovery is the slow chaser started from the restart point.
        self._chase_lock = threading.Lock()
        self._chasing = True
        self._chase_from = start
        self._committed_end = self.vlog.end()
        self._write_stopped = False
        self.disk_available = self._check_disk()
        self._closing = False
        self._write_q: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._loop_writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWriter] = \
            weakref.WeakKeyDictionary()
        self._index_q = _IndexQueue(self.options.index_queue_size)
        self.sorter = Sorter(self._on_emit, self._resolver, last_emitted=self._max_commit_ts, on_late=self._on_late)
        self._late_logged = 0.0
        self._batch_duration = self.metrics.write_duration.labels("batch")
        self._batch_size = self.metrics.write_size.labels("batch")
        self._single_duration = self.metrics.write_duration.labels("single")   # a caller's write, as TiDB's
        self._single_size = self.metrics.write_size.labels("single")
        self._threads = [threading.Thread(target=self._write_loop, name="pump-vlog-writer", daemon=True),
                         threading.Thread(target=self._index_loop, name="pump-indexer", daemon=True),
                         threading.Thread(target=self._disk_loop, name="pump-disk", daemon=True)]
        for t in self._threads:
            t.start()
        log.info("storage %s opened: max_commit_ts=%d gc_ts=%d recovering from %s",
                 self.dir, self._max_commit_ts, self.gc_ts, start)

    # ---- write path -------------------------------------------------------------------------

    def _check_writable(self, tp: int, start_ts: int, commit_ts: int) -> None:
        if self._closing:
            raise StorageClosed("storage is closed")
        if self.disk_available <= self.options.stop_write_at_available_space \
                and not bl.is_fake(tp, start_ts, commit_ts):
            raise DiskFull(f"no available space: {self.disk_available} bytes free in {self.dir}, "
                           f"below stop-write-at-available-space "
                           f"{self.options.stop_write_at_available_space}")

    def _enqueue(self, batch: _Batch) -> bool:
        """Queue a batch for the writer; False (with ``StorageClosed`` set on it) once closing."""
        if self._closing:
            batch.error = StorageClosed("storage is closed")
            return False
        self._write_q.put(batch)
        return True

    def write(self, payload: bytes, tp: int, start_ts: int, commit_ts: int) -> Pointer:
        """Store one marshalled binlog durably and return its pointer.

        Raises ``DiskFull`` (except for fake binlogs) when free space is below the threshold, and
        ``StorageClosed`` after ``close``.
        """
        self._check_writable(tp, start_ts, commit_ts)
        batch = _Batch()
        batch.payloads.append(payload)
        batch.metas.append((tp, start_ts, commit_ts))
        batch.size = len(payload)
        if self._enqueue(batch):
            assert batch.done is not None
            batch.done.acquire()
        if batch.error is not None:
            raise batch.error
        return batch.pointer

    def write_async(self, payload: bytes, tp: int, start_ts: int, commit_ts: int,
                    writer: LoopWriter | None = None) -> asyncio.Future[None]:
        """``write`` for coroutines (await the returned future): the event loop is not blocked
        while the group commit runs, and the writes of one loop iteration travel together.

        ``writer`` (from ``loop_writer`` for the running loop) saves looking the loop up per call.
        """
        self._check_writable(tp, start_ts, commit_ts)
        if writer is None:
            writer = self.loop_writer(asyncio.get_running_loop())
        return writer.write(payload, tp, start_ts, commit_ts)

    def loop_writer(self, loop: asyncio.AbstractEventLoop) -> LoopWriter:
        """The batcher of ``loop``'s writes (one per loop); use it only on that loop."""
        writer = self._loop_writers.get(loop)
        if writer is None:
            writer = self._loop_writers[loop] = LoopWriter(self, loop)
        return writer

    def _write_loop(self) -> None:
        q = self._write_q
        while True:
            first = q.get()
            if first is _STOP:
                break
            assert isinstance(first, _Batch)
            batches = [first]
            size = first.size
            cap = size + GROUP_SMALL if size <= GROUP_SMALL else GROUP_CAP
            stop = False
            while size < cap:
                try:
                    nxt = q.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                assert isinstance(nxt, _Batch)
                batches.append(nxt)
                size += nxt.size
            try:
                self._write_batches(batches, size)
            except BaseException as exc:
                log.exception("value log writer failed")
                for b in batches:
                    b.complete(exc)
            if stop:
                break
        self._fail_queued()

    def _fail_queued(self) -> None:
        """Fail whatever was queued after the stop marker (writes racing ``close``)."""
        while True:
            try:
                item = self._write_q.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Batch):
                item.complete(StorageClosed("storage is closed"))

    def _write_batches(self, batches: list[_Batch], size: int) -> None:
        started = time.monotonic()
        if len(batches) == 1:
            payloads, metas = batches[0].payloads, batches[0].metas
        else:
            payloads, metas = [], []
            for b in batches:
                payloads += b.payloads
                metas += b.metas
        try:
            max_ts = max([c if c > s else s for _, s, c in metas])
            fid, offsets = self.vlog.append_payloads(payloads, max_ts)
        except OSError as exc:
            self.metrics.error_count.labels("write_binlog_batch").inc()
            log.error("value log write of %d records failed: %s", len(payloads), exc)
            for b in batches:
                b.complete(exc)
            return
        elapsed = time.monotonic() - started
        at = 0
        for b in batches:
            if b.owner is None:
                b.pointer = Pointer(fid, offsets[at])
            at += len(b.payloads)
            b.complete(None)
        self._batch_duration.observe(elapsed)
        self._batch_size.observe(size)
        for b in batches:
            self._single_duration.observe(elapsed)
            for p in b.payloads:
                self._single_size.observe(len(p))
        if elapsed > self.options.slow_write_threshold:
            log.warning("slow value log write: %d records, %d bytes in %.3fs", len(payloads), size, elapsed)
        self._forward([Entry(s if tp == PREWRITE else c, tp, s, c, Pointer(fid, off))
                       for (tp, s, c), off in zip(metas, offsets)])

    def _forward(self, entries: list[Entry]) -> None:
        """Hand written entries to the indexer, or switch to chasing them from disk when it lags."""
        with self._chase_lock:
            self._committed_end = self.vlog.end()
            if self._chasing:
                return
            if not self._index_q.put_nowait(entries):
                self._chasing = True
                self._chase_from = entries[0].pointer
                self.metrics.slow_chaser.labels("on").inc()
                log.warning("indexing lags %d entries behind; chasing from the value log at %s",
                            self._index_q.qsize(), entries[0].pointer)

    # ---- indexing ---------------------------------------------------------------------------

    def _index_loop(self) -> None:
        while True:
            started = time.monotonic()
            items, stop = self._index_q.take(timeout=0.05)
            entries: list[Entry] = []
            for batch in items:
                entries.extend(batch)
                if len(entries) >= INDEX_BATCH:
                    self._index(entries)
                    entries = []
            self._index(entries)
            if stop:
                self._chase()  # whatever the writer left for the chaser
                return
            if self._chasing:
                self._chase()
            elif items:
                # Index at most once per INDEX_PAUSE: one LevelDB write, one sorter round and one
                # watermark persist then cover several group commits (the watermark lags by ms).
                pause = INDEX_PAUSE - (time.monotonic() - started)
                if pause > 0:
                    time.sleep(pause)

    def _index_write(self, call: Callable[[], T], what: str, metric: str) -> T:
        """An index write, retried every second until it succeeds or the storage is closed (the index
        reopens itself after a failure once space is back: a full disk stalls indexing, no more).
        Each failure is counted under ``metric`` and logged."""
        def failed(exc: BaseException) -> bool:
            self.metrics.error_count.labels(metric).inc()
            log.error("%s failed, retrying in 1s: %s", what, exc)
            return not self._closed
        return retry(call, wait=1.0, retry_if=failed)

    def _index(self, entries: list[Entry]) -> None:
        if not entries:
            return
        packed = self._index_write(lambda: self.index.put_entries(entries, head=entries[-1].pointer),
                                   "index write", "batch_write_kv")
        self.recent.add(packed)  # before the sorter: the watermark never passes an entry not in it
        self.sorter.push(entries)

    def _chase(self) -> None:
        """Index everything between the chase pointer and the durable end, reading the value log."""
        while True:
            with self._chase_lock:
                if not self._chasing:
                    return
                start, end = self._chase_from, self._committed_end
            batch: list[Entry] = []
            for ptr, payload in self.vlog.scan(start, end):
                try:
                    b = bl.parse(payload)
                except MalformedBinlog as exc:
                    log.warning("value log record at %s does not parse, skipped: %s", ptr, exc)
                    self._count_corrupt(ptr.offset, len(payload))
                    continue
                if b.start_ts == 0 and b.commit_ts == 0:
                    continue
                batch.append(Entry(bl.key_ts(b.tp, b.start_ts, b.commit_ts), b.tp, b.start_ts,
                                   b.commit_ts, ptr))
                if len(batch) >= INDEX_BATCH:
                    self._index(batch)
                    batch = []
            self._index(batch)
            with self._chase_lock:
                if self._committed_end == end:
                    self._chasing = False
                    if start != end:
                        log.info("indexing caught up with the value log at %s", end)
                    return
                self._chase_from = end

    def _count_corrupt(self, offset: int, skipped: int) -> None:
        self.metrics.corrupt_records.inc()
        self.metrics.corrupt_bytes.inc(skipped)

    # ---- watermark --------------------------------------------------------------------------

    def _on_late(self, entry: Entry, watermark: int) -> None:
        """A commit at or below the published watermark: counted, and logged at most once a minute."""
        self.metrics.late_commits.inc()
        now = time.monotonic()
        if now - self._late_logged >= 60:
            self._late_logged = now
            log.error("a commit binlog at ts %d (start ts %d) arrived after the watermark passed it (%d): a drain "
                      "that read past the watermark misses it. TiDB and the pumps must take their timestamps from "
                      "one PD (TiDB's -path and the pumps' pd-urls); binlog_pump_late_commits_total counts them",
                      entry.commit_ts, entry.start_ts, watermark)

    def _on_emit(self, entry: Entry) -> None:
        self._emitted = entry
        self._publish()

    def _publish(self) -> None:
        """Persist the latest emitted commit ts (with its pointer), then publish it.

        The LevelDB write is not fsync'd (TiDB does the same, once a second): it survives a process
        crash; after a power loss the watermark may restart lower, but every record below it is in
        the fsync'd value log, so nothing published is lost, only re-published.
        """
        e = self._emitted
        if e is None or e.commit_ts <= self._max_commit_ts or self.index.closed:
            return
        self._index_write(lambda: self.index.put_watermark(e.commit_ts, e.pointer, sync=False),
                          "watermark write", "update_max_commit_ts")
        with self._wm_cond:
            self._max_commit_ts = e.commit_ts
            self._wm_cond.notify_all()
        self.metrics.max_commit_ts.set(e.commit_ts >> 18)

    @property
    def max_commit_ts(self) -> int:
        """The persisted watermark: no commit at or below it will be stored later."""
        return self._max_commit_ts

    def wait_watermark(self, above: int, timeout: float) -> int:
        """Block until the watermark exceeds ``above`` or ``timeout`` passes; return the watermark."""
        with self._wm_cond:
            self._wm_cond.wait_for(lambda: self._max_commit_ts > above or self._closed, timeout)
            return self._max_commit_ts

    def oldest_unresolved(self) -> int:
        """Start ts of the oldest prewrite still waiting for its commit (0 if none)."""
        return self.sorter.oldest_unresolved()

    def all_matched(self) -> bool:
        """True when every prewrite stored so far is resolved and the sorter is idle."""
        return self.sorter.all_matched() and self.sorter.pending() == 0

    # ---- reads ------------------------------------------------------------------------------

    def read(self, entry: Entry) -> bytes:
        """Return the stored payload of an index entry."""
        return self.vlog.read(entry.pointer)

    def get(self, ts: int) -> tuple[Entry, bytes] | None:
        """Return the record keyed by ``ts`` and its payload, or None."""
        entry = self.index.get(ts)
        if entry is None:
            return None
        return entry, self.read(entry)

    def scan(self, from_ts: int, to_ts: int) -> Iterator[tuple[Entry, bytes]]:
        """Yield every record whose key ts is in ``(from_ts, min(to_ts, watermark)]``, ascending.

        ``to_ts <= 0`` means up to the watermark. Corrupt records are skipped and counted. The
        entries carry no value pointer (``ZERO``).
        """
        yield from _records(self.scan_batches(from_ts, to_ts, DEFAULT_SCAN_BATCH))

    def scan_batches(self, from_ts: int, to_ts: int, limit: int) -> Iterator[ScanColumns]:
        """``scan`` as column batches (``ScanColumns``: key_ts, tp, start_ts, commit_ts, lengths,
        payloads), each holding at most ``limit`` payload bytes (at least one record)."""
        wm = self._max_commit_ts
        to = wm if to_ts <= 0 else min(to_ts, wm)
        return scan_columns(self._index_chunks(max(from_ts, 0), to), self.vlog, limit, self._skip_corrupt)

    def _index_chunks(self, from_ts: int, to_ts: int) -> Iterator[np.ndarray]:
        """The raw index values of ``(from_ts, to_ts]`` in chunks, from the recent-entries cache
        when it covers the range, else from LevelDB. Lazy: nothing runs until the first chunk is
        asked for (on the scan's producer thread, not the event loop)."""
        if to_ts <= from_ts:
            return
        recent = self.recent.select(from_ts, to_ts)
        if recent is not None:
            self.metrics.scans.labels("memory").inc()
            yield from array_chunks(recent)
        else:
            self.metrics.scans.labels("leveldb").inc()
            yield from self.index.raw_chunks(from_ts, to_ts)

    def lookup_prewrites(self, start_ts: Iterable[int]) -> Iterator[tuple[Entry, bytes]]:
        """Yield the stored prewrite of each given start ts that this pump holds (no pointers)."""
        yield from _records(self.lookup_batches(start_ts, DEFAULT_SCAN_BATCH))

    def lookup_batches(self, start_ts: Iterable[int], limit: int) -> Iterator[ScanColumns]:
        """``lookup_prewrites`` as column batches of at most ``limit`` payload bytes."""
        values = (v for v in map(self.index.raw_get, start_ts)
                  if v is not None and Entry.unpack_value(v)[2] == PREWRITE)
        return scan_columns(value_chunks(values), self.vlog, limit, self._skip_corrupt)

    def _skip_corrupt(self, message: str) -> None:
        self.metrics.error_count.labels("read_value").inc()
        log.error("skipped a damaged or purged record: %s", message)

    def pull_commits(self, last: int, stopped: Callable[[], bool]) -> Iterator[tuple[Entry, bytes]]:
        """Yield commit binlogs after commit ts ``last`` up to the watermark, forever until ``stopped``.

        Each commit payload is the stored commit with its prewrite's ``prewrite_value`` put in, in
        gogoproto bytes, as TiDB's pump sends it: a prewrite without one (a DDL's) leaves the commit
        without one too, not an empty one. The prewrite's ``ddl_query``, ``ddl_job_id`` and
        ``ddl_schema_state`` are copied as well: TiDB's commit binlog already carries the same values,
        a commit the pump wrote itself (a resolved lost commit) does not. Fake binlogs pass unchanged;
        a commit whose prewrite is not on this pump is skipped with a warning (TiDB's behaviour).
        """
        if last < self.gc_ts:
            log.error("pull from %d is below gc ts %d: binlogs may have been purged", last, self.gc_ts)
            last = self.gc_ts
        while not stopped() and not self._closed:
            wm = self._max_commit_ts
            for entry in self.index.range(last, wm):
                if stopped():
                    return
                if entry.tp == PREWRITE:
                    continue
                if entry.is_fake:
                    yield entry, self.vlog.read(entry.pointer)
                elif entry.tp == bl.COMMIT:
                    merged = self._merge_commit(entry)
                    if merged is not None:
                        yield entry, merged
                last = entry.key_ts
            last = max(last, wm)
            self.wait_watermark(last, timeout=1.0)

    def _merge_commit(self, entry: Entry) -> bytes | None:
        pre = self.index.get(entry.start_ts)
        if pre is None or pre.tp != PREWRITE:
            log.warning("Matching P-binlog not found for commit start_ts=%d commit_ts=%d",
                        entry.start_ts, entry.commit_ts)
            return None
        commit = bl.parse(self.vlog.read(entry.pointer))
        prewrite = bl.parse(self.vlog.read(pre.pointer))
        if prewrite.HasField("prewrite_value"):
            commit.prewrite_value = prewrite.prewrite_value
        else:
            commit.ClearField("prewrite_value")
        if prewrite.HasField("ddl_query"):
            commit.ddl_query = prewrite.ddl_query
        commit.ddl_job_id = prewrite.ddl_job_id
        commit.ddl_schema_state = prewrite.ddl_schema_state
        return bl.marshal_gogo(commit)

    # ---- GC and disk ------------------------------------------------------------------------

    def gc(self, gc_ts: int) -> bool:
        """Purge records older than ``gc_ts`` minus TiDB's 600 s margin; False if ``gc_ts`` is refused.

        ``gc_ts`` is refused when it does not move forward or reaches the watermark.
        """
        if gc_ts <= self.gc_ts or gc_ts >= self._max_commit_ts:
            log.info("gc ts %d ignored (current gc ts %d, max commit ts %d)", gc_ts, self.gc_ts,
                     self._max_commit_ts)
            return False
        self.index.put_u64(GC_TS_KEY, gc_ts, sync=True)
        self.gc_ts = gc_ts
        self.metrics.gc_ts.set(gc_ts >> 18)
        purge = gc_ts - GC_MARGIN_TS
        if purge <= 0:
            return True
        self.recent.raise_floor(purge)
        files = self.vlog.purge_before(purge)
        keys = self.index.delete_through(purge)
        self.metrics.deleted_kv.inc(keys)
        self.metrics.done_gc_ts.set(purge >> 18)
        log.info("gc to ts %d: deleted %d value log files and %d index keys", purge, len(files), keys)
        return True

    def _check_disk(self) -> int:
        """The bytes available in the data dir (kept in the metrics); a line in the log whenever writes
        stop or start again on ``stop-write-at-available-space``."""
        st = os.statvfs(self.dir)
        available = st.f_bavail * st.f_frsize
        self.metrics.storage_size.labels("capacity").set(st.f_blocks * st.f_frsize)
        self.metrics.storage_size.labels("available").set(available)
        threshold = self.options.stop_write_at_available_space
        stopped = available <= threshold
        if stopped != self._write_stopped:
            self._write_stopped = stopped
            if stopped:
                log.warning("%d bytes available in %s, not above stop-write-at-available-space %d: refusing "
                            "binlog writes until there is more", available, self.dir, threshold)
            else:
                log.info("%d bytes available in %s, above stop-write-at-available-space %d: accepting "
                         "binlog writes again", available, self.dir, threshold)
        return available

    def _disk_loop(self) -> None:
        while not self._closed:
            time.sleep(DISK_CHECK_INTERVAL)
            try:
                self.disk_available = self._check_disk()
            except OSError as exc:
                log.error("statvfs %s failed: %s", self.dir, exc)

    # ---- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Finish queued writes, index them, persist the watermark and release the directory."""
        if self._closed:
            return
        writer, indexer, _ = self._threads
        self._closing = True
        self._write_q.put(_STOP)
        writer.join()
        self._fail_queued()
        self._index_q.put_stop()
        indexer.join()
        deadline = time.monotonic() + 2.0  # let the sorter pass what it can; the rest is re-fed on restart
        while self.sorter.pending() and self.sorter.all_matched() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.sorter.close()
        self._closed = True
        try:
            self._publish()
        except IndexUnavailable as exc:   # not retried once closed; a restart recomputes it from the value log
            log.error("the last watermark was not persisted at close: %s", exc)
        with self._wm_cond:
            self._wm_cond.notify_all()
        self.vlog.close()
        self.index.close()
        os.close(self._lock_fd)
        log.info("storage %s closed at max_commit_ts=%d", self.dir, self._max_commit_ts)


def _records(batches: Iterable[ScanColumns]) -> Iterator[tuple[Entry, bytes]]:
    """Split column batches back into (entry without pointer, payload) pairs."""
    for b in batches:
        for k, tp, start, commit, payload in zip(b.key_ts.tolist(), b.tp.tolist(), b.start_ts.tolist(),
                                                 b.commit_ts.tolist(), b.payloads()):
            yield Entry(k, tp, start, commit, ZERO), payload


def _lock_dir(directory: Path) -> int:
    """Take the exclusive ``.lock`` of a data directory; raise ``StorageLocked`` if it is held."""
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StorageLocked(f"data directory {directory} is locked by another pump "
                            f"(lock file {directory / '.lock'})") from None
    return fd
