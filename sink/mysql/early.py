"""DDL the MySQL sink applies before its own DDL binlog.

TiDB may publish a DDL job's schema before it commits the transaction that finishes the job and
writes its DDL binlog: a multi-schema ALTER reaches its last schema version in one transaction and
finishes in a later one that writes none; DROP and TRUNCATE PARTITION take the rows away at their
first step. Transactions written under the new schema can commit in between. The lake follows them
by column id; a downstream that takes statements must have the DDL before the first of them
(``RunBatch.ddl_needed``), and the transactions written under the older schema
that commit after that point are applied in the new table's shape (:class:`Reshape`: columns by TiDB
column id, renamed ones under their new names, dropped ones left out, added ones left to the
downstream's default, which is the DDL's).
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from sink.mysql.statements import TargetTable
from transform import changes as ch
from transform.codec.model import ColumnInfo, TableInfo


@dataclass(frozen=True)
class Reshape:
    """Rows of ``old``'s shape written to the downstream table a DDL applied early made ``new``: a
    column by its id, or by its name where a MODIFY rewrote it under a new id (the downstream
    converts the value as its own ALTER would have)."""

    target: TargetTable
    names: tuple[tuple[str, str], ...]   # (column name in the rows, name downstream), the columns both have

    @classmethod
    def of(cls, db: str, old: TableInfo, new: TableInfo) -> Reshape:
        """How ``old``'s rows go to ``new`` (``db``.``new.name``)."""
        before = TargetTable.of(db, old)
        kept = [(i, c, n) for i, c in enumerate(before.infos) if (n := _successor(c, new)) is not None]
        position = {i: j for j, (i, _, _) in enumerate(kept)}
        keys = tuple((name, tuple(position[i] for i in cols)) for name, cols in before.keys
                     if all(i in position for i in cols))
        bits = frozenset(position[i] for i in before.bit_columns if i in position)
        target = TargetTable(db, new.name, tuple(n.name for _, _, n in kept), keys, bits,
                             tuple(c for _, c, _ in kept))
        return cls(target, tuple((c.name, n.name) for _, c, n in kept))

    def rows(self, rows: pa.Table) -> pa.Table:
        """``rows`` (a segment's columns) with the kept columns renamed, the others left out (in the
        before-image of updates too)."""
        renamed = dict(self.names)
        out = rows.select([c for c in rows.column_names if c in renamed or c.startswith("_tidb_")])
        out = out.rename_columns([renamed.get(c, c) for c in out.column_names])
        if ch.BEFORE not in out.column_names:
            return out
        before = pa.concat_arrays(out.column(ch.BEFORE).chunks) if out.num_rows else None
        if before is None:
            return out
        assert isinstance(before, pa.StructArray)
        fields = [f for f in before.type if f.name in renamed]
        struct = pa.StructArray.from_arrays([before.field(f.name) for f in fields],
                                            fields=[f.with_name(renamed[f.name]) for f in fields],
                                            mask=before.is_null())
        return out.set_column(out.column_names.index(ch.BEFORE), ch.BEFORE, struct)


def _successor(col: ColumnInfo, new: TableInfo) -> ColumnInfo | None:
    """``col`` in ``new``: by id, else the column of its name."""
    same = new.column_by_id(col.id)
    if same is not None:
        return same
    return next((c for c in new.columns if c.name.lower() == col.name.lower()), None)
