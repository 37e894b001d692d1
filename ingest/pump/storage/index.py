"""LevelDB (plyvel) index of the value log, keyed like TiDB Binlog's ``pump/storage``.

``ts:<8-byte big-endian ts>`` → ``pointer (12 bytes) | tp u8 | start_ts i64 | commit_ts i64``.
TiDB stores only the 12-byte pointer; binlake appends the record's type and timestamps so scans and
PullBinlogs can skip prewrites and fill their answers' metadata without reading the value log (a
deliberate, documented extension). Prewrites are keyed by start_ts, commits and rollbacks by commit_ts.
Meta keys (``!binlog!gcts``, ``!binlog!maxCommitTS``, ``!binlog!handlePointer``,
``!binlog!headPointer``) are TiDB's.

A failed write (ENOSPC, an I/O error) makes the next write reopen the database first: LevelDB keeps a
failed background write (a memtable flush, a compaction, a log sync) as an error that every later
write returns until the database is reopened, and a log append cut short leaves a torn record that
later records must not follow. Reopening replays the log up to that tail. It waits until the
filesystem has ``REOPEN_MIN_FREE`` bytes free (replaying writes a table), so a full disk does not
close the index under its readers; readers caught by a reopen resume on the new handle.
"""
from __future__ import annotations

import logging
import shutil
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import NamedTuple, TypeVar

import numpy as np
import plyvel

from ingest.errors import IndexUnavailable
from ingest.pump.storage.vlog import Pointer

log = logging.getLogger(__name__)
T = TypeVar("T")

TS_PREFIX = b"ts:"
GC_TS_KEY = b"!binlog!gcts"
MAX_COMMIT_TS_KEY = b"!binlog!maxCommitTS"
HANDLE_POINTER_KEY = b"!binlog!handlePointer"
HEAD_POINTER_KEY = b"!binlog!headPointer"

_VALUE = struct.Struct("<IQBqq")
VALUE_DTYPE = np.dtype([("fid", "<u4"), ("off", "<u8"), ("tp", "u1"), ("start", "<i8"), ("commit", "<i8")])  # _VALUE
_U64 = struct.Struct("<Q")
CHUNK = 4096                   # index entries decoded together
REOPEN_MIN_FREE = 16 << 20     # free bytes a reopen after a failed write waits for
REOPEN_READ_WAIT = 30.0        # seconds a reader waits for a reopen to finish

# binlog.BinlogType values
PREWRITE, COMMIT, ROLLBACK = 0, 1, 2


def value_key_ts(values: np.ndarray) -> np.ndarray:
    """The key ts of raw index values (``VALUE_DTYPE``): start_ts for prewrites, commit_ts otherwise."""
    return np.where(values["tp"] == PREWRITE, values["start"], values["commit"]).astype(np.int64)


def ts_key(ts: int) -> bytes:
    """Return the index key of ``ts``: ``ts:`` + 8-byte big-endian."""
    return TS_PREFIX + ts.to_bytes(8, "big")


def value_chunks(values: Iterable[bytes]) -> Iterator[np.ndarray]:
    """Raw index values (bytes each, e.g. from LevelDB) as ``VALUE_DTYPE`` arrays of up to CHUNK entries."""
    it = iter(values)
    while chunk := list(islice(it, CHUNK)):
        yield np.frombuffer(b"".join(chunk), dtype=VALUE_DTYPE)


class Entry(NamedTuple):
    """What the index knows about one record (a named tuple: one is built per record written and
    per record scanned, ~7x cheaper than a frozen dataclass)."""

    key_ts: int
    tp: int
    start_ts: int
    commit_ts: int
    pointer: Pointer

    def pack(self) -> bytes:
        """Return the index value bytes."""
        return _VALUE.pack(self.pointer.fid, self.pointer.offset, self.tp, self.start_ts, self.commit_ts)

    @staticmethod
    def unpack_value(value: bytes) -> tuple[int, int, int, int, int]:
        """(fid, offset, tp, start_ts, commit_ts) of an index value, without building objects."""
        return _VALUE.unpack(value)

    @classmethod
    def unpack(cls, key: bytes, value: bytes) -> Entry:
        """Parse an index key and value."""
        fid, offset, tp, start, commit = _VALUE.unpack(value)
        return cls(int.from_bytes(key[len(TS_PREFIX):], "big"), tp, start, commit, Pointer(fid, offset))

    @property
    def is_fake(self) -> bool:
        """A fake binlog: Rollback-typed with start_ts == commit_ts (TiDB's convention)."""
        return self.tp == ROLLBACK and self.start_ts == self.commit_ts and self.start_ts != 0

    @property
    def is_commit_like(self) -> bool:
        """A commit or a fake binlog: something that carries a commit_ts."""
        return self.tp == COMMIT or self.is_fake


class Index:
    """The LevelDB database of one pump's index and persisted meta values; safe to share between
    threads (writes are serialized; reads run beside them and survive a reopen)."""

    def __init__(self, path: Path, reopen_min_free: int = REOPEN_MIN_FREE) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.reopen_min_free = reopen_min_free
        self.reopened = 0                              # reopens after a failed write
        self._write_lock = threading.Lock()
        self._handle = threading.Condition()           # signalled when a reopen ends
        self._failed: BaseException | None = None      # the last write's failure, until a reopen
        self._closed = False
        self._db = self._open()

    def _open(self) -> plyvel.DB:
        # Uncompressed blocks: snappy only halves the index, and decompressing blocks took half the
        # time of iterating it in range scans (0.5 → 0.23 µs per entry). Blocks already written
        # compressed stay readable.
        return plyvel.DB(str(self.path), create_if_missing=True, compression=None)

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._closed

    # ---- writes: serialized, a reopen before the first write after a failed one -------------

    def _write(self, action: Callable[[plyvel.DB], T]) -> T:
        with self._write_lock:
            if self._failed is not None:
                self._reopen()
            try:
                return action(self._db)
            except plyvel.Error as exc:
                self._failed = exc
                raise IndexUnavailable(f"a write to the index {self.path} failed: {exc}") from exc

    def _reopen(self) -> None:
        """Close and open the database (the caller holds the write lock); raise ``IndexUnavailable``
        while the filesystem has less than ``reopen_min_free`` bytes free, or the open fails."""
        free = shutil.disk_usage(self.path).free
        if free < self.reopen_min_free:
            raise IndexUnavailable(f"the index {self.path} waits for {self.reopen_min_free} bytes free to "
                                   f"reopen after a failed write ({free} free): {self._failed}")
        with self._handle:
            self._db.close()
            try:
                self._db = self._open()
            except plyvel.Error as exc:
                raise IndexUnavailable(f"the index {self.path} did not reopen after a failed write "
                                       f"({self._failed}): {exc}") from exc
            finally:
                self._handle.notify_all()
        log.warning("index %s reopened after a failed write: %s", self.path, self._failed)
        self._failed = None
        self.reopened += 1

    # ---- reads: retried on the new handle when a reopen closed theirs -------------------------

    def _wait_reopen(self, db: plyvel.DB, exc: RuntimeError) -> None:
        """After ``exc`` from the closed handle ``db``: wait until a reopen replaced it; re-raise
        ``exc`` when ``close`` closed it, ``IndexUnavailable`` after ``REOPEN_READ_WAIT`` seconds."""
        if self._closed or not db.closed:
            raise exc
        deadline = time.monotonic() + REOPEN_READ_WAIT
        with self._handle:
            while self._db is db or self._db.closed:
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    raise IndexUnavailable(f"the index {self.path} is closed for a reopen after a failed "
                                           f"write that has not ended: {self._failed}") from exc
                self._handle.wait(left)

    def _read(self, action: Callable[[plyvel.DB], T]) -> T:
        while True:
            db = self._db
            try:
                return action(db)
            except RuntimeError as exc:                # plyvel: "Database is closed"
                self._wait_reopen(db, exc)

    def put_entries(self, entries: Iterable[Entry], head: Pointer | None, sync: bool = False) -> list[bytes]:
        """Write index entries and the new head pointer in one atomic batch; return their values."""
        entries = list(entries)

        def put(db: plyvel.DB) -> list[bytes]:
            packed = []
            with db.write_batch(transaction=True, sync=sync) as wb:
                for e in entries:
                    value = e.pack()
                    wb.put(ts_key(e.key_ts), value)
                    packed.append(value)
                if head is not None:
                    wb.put(HEAD_POINTER_KEY, head.pack())
            return packed
        return self._write(put)

    def newest_values(self) -> Iterator[bytes]:
        """The raw index values, largest key ts first (read at startup: not resumed after a reopen)."""
        with self._db.iterator(prefix=TS_PREFIX, reverse=True, include_key=False) as it:
            yield from it

    def get(self, ts: int) -> Entry | None:
        """Return the entry keyed by ``ts``, or None."""
        key = ts_key(ts)
        value = self._read(lambda db: db.get(key))
        return Entry.unpack(key, value) if value is not None else None

    def raw_get(self, ts: int) -> bytes | None:
        """The raw index value keyed by ``ts``, or None."""
        key = ts_key(ts)
        value: bytes | None = self._read(lambda db: db.get(key))  # plyvel is untyped
        return value

    def range(self, from_ts: int, to_ts: int) -> Iterator[Entry]:
        """Yield entries with ``from_ts < key ts <= to_ts`` in ascending ts."""
        last = from_ts
        while last < to_ts:
            db = self._db
            try:
                with db.iterator(start=ts_key(last + 1), stop=ts_key(to_ts + 1)) as it:
                    for key, value in it:
                        entry = Entry.unpack(key, value)
                        last = entry.key_ts
                        yield entry
                return
            except RuntimeError as exc:
                self._wait_reopen(db, exc)

    def raw_chunks(self, from_ts: int, to_ts: int) -> Iterator[np.ndarray]:
        """The raw index values with ``from_ts < key ts <= to_ts`` as ``value_chunks``, ascending by
        key ts (a prewrite's start_ts, else its commit_ts). A bulk read: the blocks it passes do not
        displace the block cache (~12 % faster per entry)."""
        last = from_ts
        while last < to_ts:
            db = self._db
            try:
                values = db.iterator(start=ts_key(last + 1), stop=ts_key(to_ts + 1), include_key=False,
                                     fill_cache=False)
                for chunk in value_chunks(values):
                    last = int(value_key_ts(chunk[-1:])[0])
                    yield chunk
                return
            except RuntimeError as exc:
                self._wait_reopen(db, exc)

    def delete_through(self, ts: int, batch: int = 1024) -> int:
        """Delete every ``ts:`` key at or below ``ts``; return how many were deleted."""
        def delete(db: plyvel.DB) -> int:
            with db.iterator(start=ts_key(0), stop=ts_key(ts + 1), include_value=False) as it:
                keys = [k for _, k in zip(range(batch), it)]
            with db.write_batch() as wb:
                for k in keys:
                    wb.delete(k)
            return len(keys)
        deleted = 0
        while n := self._write(delete):
            deleted += n
        return deleted

    def drop_pointers_from(self, cut: Pointer) -> int:
        """Delete index entries (and head/handle pointers) at or after ``cut``: data that was lost.

        Only needed after a torn tail was cut from the value log; scans the whole index.
        """
        def drop(db: plyvel.DB) -> int:
            stale = []
            with db.iterator(prefix=TS_PREFIX) as it:
                for key, value in it:
                    if Entry.unpack(key, value).pointer >= cut:
                        stale.append(key)
            with db.write_batch(transaction=True, sync=True) as wb:
                for key in stale:
                    wb.delete(key)
                for meta in (HEAD_POINTER_KEY, HANDLE_POINTER_KEY):
                    value = db.get(meta)
                    if value and Pointer.unpack(value) >= cut:
                        wb.delete(meta)
            return len(stale)
        return self._write(drop)

    def get_u64(self, key: bytes) -> int:
        """Return a persisted little-endian u64 meta value, 0 when absent."""
        value = self._read(lambda db: db.get(key))
        return _U64.unpack(value)[0] if value else 0

    def put_u64(self, key: bytes, value: int, sync: bool = False) -> None:
        """Persist a little-endian u64 meta value."""
        self._write(lambda db: db.put(key, _U64.pack(value), sync=sync))

    def get_pointer(self, key: bytes) -> Pointer | None:
        """Return a persisted pointer meta value, or None."""
        value = self._read(lambda db: db.get(key))
        return Pointer.unpack(value) if value else None

    def put_watermark(self, max_commit_ts: int, handle: Pointer | None, sync: bool) -> None:
        """Persist ``maxCommitTS`` and the handle pointer together."""
        def put(db: plyvel.DB) -> None:
            with db.write_batch(transaction=True, sync=sync) as wb:
                wb.put(MAX_COMMIT_TS_KEY, _U64.pack(max_commit_ts))
                if handle is not None:
                    wb.put(HANDLE_POINTER_KEY, handle.pack())
        self._write(put)

    def close(self) -> None:
        """Close the database."""
        with self._write_lock, self._handle:
            self._closed = True
            self._db.close()
            self._handle.notify_all()
