"""LevelDB (plyvel) index of the value log, keyed like TiDB Binlog's ``pump/storage``.

``ts:<8-byte big-endian ts>`` → ``pointer (12 bytes) | tp u8 | start_ts i64 | commit_ts i64``.
TiDB stores only the 12-byte pointer; binlake appends the record's type and timestamps so scans and
PullBinlogs can skip prewrites and fill their answers' metadata without reading the value log (a
deliberate, documented extension). Prewrites are keyed by start_ts, commits and rollbacks by commit_ts.
Meta keys (``!binlog!gcts``, ``!binlog!maxCommitTS``, ``!binlog!handlePointer``,
``!binlog!headPointer``) are TiDB's.
"""
from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import plyvel

from ingest.pump.storage.vlog import Pointer

TS_PREFIX = b"ts:"
GC_TS_KEY = b"!binlog!gcts"
MAX_COMMIT_TS_KEY = b"!binlog!maxCommitTS"
HANDLE_POINTER_KEY = b"!binlog!handlePointer"
HEAD_POINTER_KEY = b"!binlog!headPointer"

_VALUE = struct.Struct("<IQBqq")
VALUE_DTYPE = np.dtype([("fid", "<u4"), ("off", "<u8"), ("tp", "u1"), ("start", "<i8"), ("commit", "<i8")])  # _VALUE
_U64 = struct.Struct("<Q")

# binlog.BinlogType values
PREWRITE, COMMIT, ROLLBACK = 0, 1, 2


def value_key_ts(values: np.ndarray) -> np.ndarray:
    """The key ts of raw index values (``VALUE_DTYPE``): start_ts for prewrites, commit_ts otherwise."""
    return np.where(values["tp"] == PREWRITE, values["start"], values["commit"]).astype(np.int64)


def ts_key(ts: int) -> bytes:
    """Return the index key of ``ts``: ``ts:`` + 8-byte big-endian."""
    return TS_PREFIX + ts.to_bytes(8, "big")


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
    """The LevelDB database of one pump's index and persisted meta values."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        # Uncompressed blocks: snappy only halves the index, and decompressing blocks took half the
        # time of iterating it in range scans (0.5 → 0.23 µs per entry). Blocks already written
        # compressed stay readable.
        self.db = plyvel.DB(str(path), create_if_missing=True, compression=None)

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return bool(self.db.closed)

    def put_entries(self, entries: Iterable[Entry], head: Pointer | None, sync: bool = False) -> list[bytes]:
        """Write index entries and the new head pointer in one atomic batch; return their values."""
        packed = []
        with self.db.write_batch(transaction=True, sync=sync) as wb:
            for e in entries:
                value = e.pack()
                wb.put(ts_key(e.key_ts), value)
                packed.append(value)
            if head is not None:
                wb.put(HEAD_POINTER_KEY, head.pack())
        return packed

    def newest_values(self) -> Iterator[bytes]:
        """The raw index values, largest key ts first."""
        with self.db.iterator(prefix=TS_PREFIX, reverse=True, include_key=False) as it:
            yield from it

    def get(self, ts: int) -> Entry | None:
        """Return the entry keyed by ``ts``, or None."""
        key = ts_key(ts)
        value = self.db.get(key)
        return Entry.unpack(key, value) if value is not None else None

    def raw_get(self, ts: int) -> bytes | None:
        """The raw index value keyed by ``ts``, or None."""
        value: bytes | None = self.db.get(ts_key(ts))  # plyvel is untyped
        return value

    def range(self, from_ts: int, to_ts: int) -> Iterator[Entry]:
        """Yield entries with ``from_ts < key ts <= to_ts`` in ascending ts."""
        if to_ts <= from_ts:
            return
        with self.db.iterator(start=ts_key(from_ts + 1), stop=ts_key(to_ts + 1)) as it:
            for key, value in it:
                yield Entry.unpack(key, value)

    def raw_values(self, from_ts: int, to_ts: int) -> Iterator[bytes]:
        """The raw index values with ``from_ts < key ts <= to_ts``, ascending by key ts (the key ts
        is the value's start_ts for prewrites, its commit_ts otherwise). A bulk read: the blocks it
        passes do not displace the block cache (~12 % faster per entry). The LevelDB iterator is
        returned as it is (no generator frame resumed per entry); it closes once dropped."""
        if to_ts <= from_ts:
            return iter(())
        values: Iterator[bytes] = self.db.iterator(start=ts_key(from_ts + 1), stop=ts_key(to_ts + 1),
                                                   include_key=False, fill_cache=False)  # plyvel is untyped
        return values

    def delete_through(self, ts: int, batch: int = 1024) -> int:
        """Delete every ``ts:`` key at or below ``ts``; return how many were deleted."""
        deleted = 0
        while True:
            with self.db.iterator(start=ts_key(0), stop=ts_key(ts + 1), include_value=False) as it:
                keys = [k for _, k in zip(range(batch), it)]
            if not keys:
                return deleted
            with self.db.write_batch() as wb:
                for k in keys:
                    wb.delete(k)
            deleted += len(keys)

    def drop_pointers_from(self, cut: Pointer) -> int:
        """Delete index entries (and head/handle pointers) at or after ``cut``: data that was lost.

        Only needed after a torn tail was cut from the value log; scans the whole index.
        """
        stale = []
        with self.db.iterator(prefix=TS_PREFIX) as it:
            for key, value in it:
                if Entry.unpack(key, value).pointer >= cut:
                    stale.append(key)
        with self.db.write_batch(transaction=True, sync=True) as wb:
            for key in stale:
                wb.delete(key)
            for meta in (HEAD_POINTER_KEY, HANDLE_POINTER_KEY):
                ptr = self.get_pointer(meta)
                if ptr is not None and ptr >= cut:
                    wb.delete(meta)
        return len(stale)

    def get_u64(self, key: bytes) -> int:
        """Return a persisted little-endian u64 meta value, 0 when absent."""
        value = self.db.get(key)
        return _U64.unpack(value)[0] if value else 0

    def put_u64(self, key: bytes, value: int, sync: bool = False) -> None:
        """Persist a little-endian u64 meta value."""
        self.db.put(key, _U64.pack(value), sync=sync)

    def get_pointer(self, key: bytes) -> Pointer | None:
        """Return a persisted pointer meta value, or None."""
        value = self.db.get(key)
        return Pointer.unpack(value) if value else None

    def put_watermark(self, max_commit_ts: int, handle: Pointer | None, sync: bool) -> None:
        """Persist ``maxCommitTS`` and the handle pointer together."""
        with self.db.write_batch(transaction=True, sync=sync) as wb:
            wb.put(MAX_COMMIT_TS_KEY, _U64.pack(max_commit_ts))
            if handle is not None:
                wb.put(HANDLE_POINTER_KEY, handle.pack())

    def close(self) -> None:
        """Close the database."""
        self.db.close()
