"""Reduce a table's ordered row changes to the net change per key (what the mirror merge applies).

Input: rows in ``(commit_ts, seq)`` order with ``_tidb_op``, the after-image columns (the
before-image for deletes) and the ``_tidb_before`` struct for updates. An update whose key
changed deletes the old key and writes the new one. For every key the last change wins: a delete
leaves the key absent, an insert or update leaves its after-image. The merge then deletes every
touched key from the table and appends the surviving images — one transaction per table.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transform import changes as ch


@dataclass(frozen=True)
class NetChange:
    """Keys to delete from the mirror (every key the batch touched) and the rows to append."""

    touched_keys: pa.Table
    upserts: pa.Table


def _keys(rows: pa.Table, key_columns: list[str], before: bool) -> pa.Table:
    if before:
        struct = rows.column(ch.BEFORE)
        return pa.table({k: pc.struct_field(struct, k) for k in key_columns})
    return rows.select(key_columns)


def net_change(rows: pa.Table, key_columns: list[str]) -> NetChange:
    """The net change of ``rows`` (ordered) per ``key_columns`` (see the module doc)."""
    n = rows.num_rows
    op = rows.column(ch.OP)
    pos = np.arange(n, dtype=np.int64) * 2 + 1
    upsert = pc.not_equal(op, "D")
    after = _keys(rows, key_columns, before=False).append_column("_pos", pa.array(pos)) \
        .append_column("_up", upsert).append_column("_row", pa.array(np.arange(n, dtype=np.int64)))
    parts = [after]
    is_upd = pc.equal(op, "U")
    before_fields = {f.name for f in rows.schema.field(ch.BEFORE).type} if ch.BEFORE in rows.column_names else set()
    # the hidden _tidb_rowid never changes on update (it is not in the before-image)
    if n and set(key_columns) <= before_fields and pc.any(is_upd).as_py():
        upd_rows = rows.filter(is_upd)
        old = _keys(upd_rows, key_columns, before=True)
        new = upd_rows.select(key_columns)
        changed = pc.invert(_rows_equal(old, new))
        if pc.any(changed).as_py():
            idx = pc.indices_nonzero(is_upd).filter(changed)
            old = old.filter(changed)
            parts.append(old.append_column("_pos", pc.multiply(idx.cast(pa.int64()), 2))
                         .append_column("_up", pa.array(np.zeros(len(idx), dtype=bool)))
                         .append_column("_row", idx.cast(pa.int64())))
    events = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
    last = events.group_by(key_columns, use_threads=False).aggregate([("_pos", "max")])
    last = last.rename_columns(key_columns + ["_pos"])
    winners = events.join(last, key_columns + ["_pos"], join_type="inner")
    touched = winners.select(key_columns)
    keep = winners.filter(winners.column("_up")).column("_row")
    upserts = rows.take(pc.take(keep, pc.sort_indices(keep))) if len(keep) else rows.slice(0, 0)
    return NetChange(touched, upserts)


def _rows_equal(a: pa.Table, b: pa.Table) -> pa.ChunkedArray:
    eq = None
    for name in a.column_names:
        col = pc.fill_null(pc.equal(a.column(name), b.column(name)), False)
        eq = col if eq is None else pc.and_(eq, col)
    return eq
