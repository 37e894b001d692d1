"""A transaction's buffer: reads at its start ts merged with its own writes, the KV mutations (final
state per key) and the row changes in statement order, which become the prewrite binlog.

Promises: ``rows_binlog()`` encodes every change with ``upstream.rowcodec.encode_row`` under the
TableInfo of the transaction's schema version, grouped into one TableMutation per table (in order of
first change) whose ``sequence`` lists the changes in statement order; the primary key is the record
key of the first changed row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import binlog_pb2
from transform.codec import rows as trows
from transform.codec.model import ColumnInfo, TableInfo
from transform.codec.values import missing_value
from upstream.catalog import InfoSchema
from upstream.kv import DEL, PUT, Mutation, MVCCStore, Row
from upstream.rowcodec import encode_row

_MISSING: dict[int, tuple[ColumnInfo, Any]] = {}


def _missing(col: ColumnInfo) -> Any:
    hit = _MISSING.get(id(col))
    if hit is None or hit[0] is not col:
        hit = (col, missing_value(col))
        _MISSING[id(col)] = hit
    return hit[1]


def materialize(table: TableInfo, row: Row) -> Row:
    """The row restricted to ``table``'s columns; columns it lacks get their origin default (or NULL/zero)."""
    out = {}
    for c in table.columns:
        v = row.get(c.id, _ABSENT)
        out[c.id] = _missing(c) if v is _ABSENT else v
    return out


class _Absent:
    pass


_ABSENT = _Absent()


@dataclass
class RowOp:
    """One row change of the transaction."""

    table: TableInfo
    kind: str          # insert / update / delete
    handle: Any
    before: Row | None
    after: Row | None


_SEQ = {trows.INSERT: binlog_pb2.Insert, trows.UPDATE: binlog_pb2.Update, trows.DELETE: binlog_pb2.DeleteRow}


class Transaction:
    """One optimistic transaction: start ts, schema snapshot, buffered writes."""

    def __init__(self, start_ts: int, schema: InfoSchema, kv: MVCCStore) -> None:
        self.start_ts = start_ts
        self.schema = schema
        self.kv = kv
        self.writes: dict[bytes, Mutation] = {}
        self.ops: list[RowOp] = []
        self.primary: bytes | None = None
        self.tables_written: set[int] = set()

    # ---- reads -------------------------------------------------------------------------------

    def read(self, table: TableInfo, key: bytes) -> Row | None:
        """The row under ``key`` as this transaction sees it (None if absent)."""
        m = self.writes.get(key)
        if m is not None:
            return None if m.op == DEL else m.row
        got = self.kv.get(key, self.start_ts)
        return None if got is None else materialize(table, got[0])

    def scan(self, table: TableInfo) -> list[tuple[bytes, Any, Row]]:
        """Every row of ``table`` this transaction sees: (key, handle, row) in key order."""
        seen: dict[bytes, tuple[Any, Row]] = {}
        for key, handle, row in self.kv.scan_table(table.id, self.start_ts):
            seen[key] = (handle, materialize(table, row))
        for key, m in self.writes.items():
            if m.table_id != table.id:
                continue
            if m.op == DEL or m.row is None:
                seen.pop(key, None)
            else:
                seen[key] = (m.handle, m.row)
        return [(k, h, r) for k, (h, r) in sorted(seen.items())]

    # ---- writes ------------------------------------------------------------------------------

    def _mutate(self, table: TableInfo, key: bytes, handle: Any, op: int, row: Row | None) -> None:
        if self.primary is None:
            self.primary = key
        self.writes[key] = Mutation(key, op, row, table, None, table.id, handle)
        self.tables_written.add(table.id)

    def insert(self, table: TableInfo, key: bytes, handle: Any, row: Row) -> None:
        """Add a new row."""
        self._mutate(table, key, handle, PUT, row)
        self.ops.append(RowOp(table, trows.INSERT, handle, None, row))

    def update(self, table: TableInfo, key: bytes, handle: Any, before: Row, after: Row) -> None:
        """Change a row in place (same handle)."""
        self._mutate(table, key, handle, PUT, after)
        self.ops.append(RowOp(table, trows.UPDATE, handle, before, after))

    def delete(self, table: TableInfo, key: bytes, handle: Any, before: Row) -> None:
        """Remove a row."""
        self._mutate(table, key, handle, DEL, None)
        self.ops.append(RowOp(table, trows.DELETE, handle, before, None))

    # ---- binlog ------------------------------------------------------------------------------

    def prewrite_value(self) -> binlog_pb2.PrewriteValue:
        """The PrewriteValue TiDB would build for this transaction."""
        pv = binlog_pb2.PrewriteValue()
        pv.schema_version = self.schema.version
        muts: dict[int, binlog_pb2.TableMutation] = {}
        for op in self.ops:
            tm = muts.get(op.table.id)
            if tm is None:
                tm = pv.mutations.add()
                tm.table_id = op.table.id
                muts[op.table.id] = tm
            h = op.handle if op.table.has_extra_handle else None
            data = encode_row(op.table, op.kind, op.before, op.after, h, by_id=True)
            if op.kind == trows.INSERT:
                tm.inserted_rows.append(data)
            elif op.kind == trows.UPDATE:
                tm.updated_rows.append(data)
            else:
                tm.deleted_rows.append(data)
            tm.sequence.append(_SEQ[op.kind])
        return pv
