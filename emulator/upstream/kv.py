"""The emulated TiKV: an in-memory MVCC store with Percolator locks.

Each key keeps its lock (if prewritten) and its write records, oldest first: Put/Del with the
transaction's start/commit ts and value, and Rollback records (commit_ts == start_ts). Record keys
carry a row as ``{column id: value}`` plus the TableInfo it was written with; meta keys carry bytes.

Promises:
- ``prewrite`` is all-or-nothing: it raises ``WriteConflict`` (a newer committed write, or another
  transaction's lock) without locking anything.
- ``get``/``scan`` at ts see exactly the Put/Del records with commit_ts ≤ ts.
- ``mvcc_info`` answers in the JSON shape of TiKV's ``MvccInfo`` (pingcap/kvproto ``proto/kvrpcpb.proto``), as
  TiDB's ``/mvcc`` routes print it.
"""
from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from transform.codec.datums import encode_datum
from transform.codec.model import TableInfo
from transform.codec.values import make_flatten
from upstream.errors import WriteConflict

PUT, DEL, LOCK, ROLLBACK = 0, 1, 2, 3
SHORT_VALUE_MAX = 255
PROTECTED_ROLLBACK = b"p"

Row = dict[int, Any]


@dataclass
class Write:
    """One write-CF record."""

    commit_ts: int
    start_ts: int
    op: int
    row: Row | None = None
    table: TableInfo | None = None
    raw: bytes | None = None
    protected: bool = False


@dataclass
class Lock:
    """A prewrite lock."""

    start_ts: int
    primary: bytes
    op: int
    row: Row | None = None
    table: TableInfo | None = None
    raw: bytes | None = None


@dataclass
class Mutation:
    """What a transaction writes on one key."""

    key: bytes
    op: int                      # PUT or DEL
    row: Row | None = None
    table: TableInfo | None = None
    raw: bytes | None = None
    table_id: int = 0
    handle: Any = None


class _Key:
    __slots__ = ("writes", "lock", "table_id", "handle")

    def __init__(self, table_id: int, handle: Any) -> None:
        self.writes: list[Write] = []
        self.lock: Lock | None = None
        self.table_id = table_id
        self.handle = handle


def encode_value(row: Row, table: TableInfo) -> bytes:
    """A stored row value in the old row format (pairs of column id and flattened value)."""
    out = bytearray()
    pk = table.pk_handle_column
    for c in table.columns:
        if c.id in row and c is not pk:
            v = row[c.id]
            out += encode_datum(c.id)
            out += encode_datum(None if v is None else make_flatten(c)(v))
    return bytes(out or b"\x00")


class MVCCStore:
    """All keys of the cluster; one lock guards it (operations are short)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[bytes, _Key] = {}
        self._tables: dict[int, dict[bytes, _Key]] = {}

    def _entry(self, key: bytes, table_id: int, handle: Any) -> _Key:
        k = self._keys.get(key)
        if k is None:
            k = _Key(table_id, handle)
            self._keys[key] = k
            if table_id:
                self._tables.setdefault(table_id, {})[key] = k
        return k

    def register(self, key: bytes, table_id: int, handle: Any) -> None:
        """Remember which table and handle a record key belongs to (before its first prewrite)."""
        with self._lock:
            self._entry(key, table_id, handle)

    # ---- 2PC ---------------------------------------------------------------------------------

    def prewrite(self, start_ts: int, primary: bytes, mutations: list[Mutation]) -> None:
        """Lock every key of the transaction, or raise ``WriteConflict`` and lock none."""
        with self._lock:
            for m in mutations:
                k = self._keys.get(m.key)
                if k is None:
                    continue
                if k.lock is not None and k.lock.start_ts != start_ts:
                    raise WriteConflict(f"key {m.key.hex().upper()} is locked by txn {k.lock.start_ts}", start_ts)
                for w in reversed(k.writes):
                    if w.op == ROLLBACK:
                        if w.start_ts == start_ts:
                            raise WriteConflict(f"txn {start_ts} was already rolled back", start_ts)
                        if w.commit_ts < start_ts:
                            break
                        continue
                    if w.commit_ts > start_ts:
                        raise WriteConflict(
                            f"write conflict on key {m.key.hex().upper()}: txn {w.start_ts} committed at "
                            f"{w.commit_ts} after this txn started at {start_ts}", start_ts)
                    break
            for m in mutations:
                k = self._keys.get(m.key) or self._entry(m.key, m.table_id, m.handle)
                k.lock = Lock(start_ts, primary, m.op, m.row, m.table, m.raw)

    def commit(self, start_ts: int, commit_ts: int, keys: list[bytes]) -> None:
        """Turn the transaction's locks into write records at ``commit_ts``."""
        with self._lock:
            for key in keys:
                k = self._keys[key]
                lock = k.lock
                if lock is None or lock.start_ts != start_ts:
                    raise RuntimeError(f"commit of txn {start_ts}: key {key.hex()} not locked by it")
                k.writes.append(Write(commit_ts, start_ts, lock.op, lock.row, lock.table, lock.raw))
                k.lock = None

    def rollback(self, start_ts: int, keys: list[bytes], primary: bytes) -> None:
        """Drop the transaction's locks and leave Rollback records (protected on the primary key)."""
        with self._lock:
            for key in dict.fromkeys([primary, *keys]):
                k = self._keys.get(key) or self._entry(key, 0, None)
                if k.lock is not None and k.lock.start_ts == start_ts:
                    k.lock = None
                k.writes.append(Write(start_ts, start_ts, ROLLBACK, protected=key == primary))
                k.writes.sort(key=lambda w: w.commit_ts)

    # ---- reads -------------------------------------------------------------------------------

    @staticmethod
    def _visible(k: _Key, ts: int) -> Write | None:
        for w in reversed(k.writes):
            if w.commit_ts <= ts and w.op in (PUT, DEL):
                return w
        return None

    def get(self, key: bytes, ts: int) -> tuple[Row, TableInfo] | None:
        """The row stored under ``key`` as of ``ts`` (None if absent or deleted)."""
        with self._lock:
            k = self._keys.get(key)
            if k is None:
                return None
            w = self._visible(k, ts)
        if w is None or w.op == DEL or w.row is None or w.table is None:
            return None
        return w.row, w.table

    def scan_table(self, table_id: int, ts: int) -> list[tuple[bytes, Any, Row]]:
        """Every live row of a table as of ``ts``: (key, handle, row), in key order."""
        with self._lock:
            keys = list(self._tables.get(table_id, {}).items())
            out = []
            for key, k in keys:
                w = self._visible(k, ts)
                if w is not None and w.op == PUT and w.row is not None:
                    out.append((key, k.handle, w.row))
        out.sort(key=lambda t: t[0])
        return out

    def iter_locks(self) -> Iterator[tuple[bytes, Lock]]:
        """Keys currently locked (for diagnostics)."""
        with self._lock:
            items = [(key, k.lock) for key, k in self._keys.items() if k.lock is not None]
        yield from items

    def mvcc_info(self, key: bytes) -> dict[str, Any]:
        """TiKV's ``MvccInfo`` JSON for a key: ``lock`` and ``writes`` (newest first), zero fields omitted."""
        with self._lock:
            k = self._keys.get(key)
            if k is None:
                return {}
            lock = k.lock
            writes = list(k.writes)
        info: dict[str, Any] = {}
        if lock is not None:
            lj: dict[str, Any] = {}
            if lock.op:
                lj["type"] = lock.op
            lj["start_ts"] = lock.start_ts
            lj["primary"] = base64.b64encode(lock.primary).decode()
            sv = _short_value(lock.op, lock.row, lock.table, lock.raw)
            if sv:
                lj["short_value"] = base64.b64encode(sv).decode()
            info["lock"] = lj
        if writes:
            out = []
            for w in sorted(writes, key=lambda w: w.commit_ts, reverse=True):
                wj: dict[str, Any] = {}
                if w.op:
                    wj["type"] = w.op
                wj["start_ts"] = w.start_ts
                wj["commit_ts"] = w.commit_ts
                sv = PROTECTED_ROLLBACK if (w.op == ROLLBACK and w.protected) else \
                    _short_value(w.op, w.row, w.table, w.raw)
                if sv:
                    wj["short_value"] = base64.b64encode(sv).decode()
                out.append(wj)
            info["writes"] = out
        return info


def _short_value(op: int, row: Row | None, table: TableInfo | None, raw: bytes | None) -> bytes | None:
    if op != PUT:
        return None
    if raw is not None:
        value = raw
    elif row is not None and table is not None:
        value = encode_value(row, table)
    else:
        return None
    return value if len(value) <= SHORT_VALUE_MAX else None
