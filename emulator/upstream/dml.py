"""INSERT / REPLACE / UPDATE / DELETE over a transaction, with TiDB's row handles.

Promises: primary-key uniqueness is enforced (``[kv:1062]Duplicate entry``); REPLACE deletes the
conflicting row then inserts; an UPDATE that changes the row handle (int PK or clustered PK) is a
delete of the old row plus an insert of the new one, as TiDB writes it; rows whose values do not
change are not written. Secondary UNIQUE indexes are enforced too (rows with a NULL in the index
columns never conflict); REPLACE deletes every row it conflicts with, on the primary key or any
unique index, as MySQL does.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transform.codec import mysqltypes as mt
from transform.codec.model import ColumnInfo, TableInfo, memo
from upstream import keys
from upstream.catalog import Catalog
from upstream.coltypes import DEFAULT, coerce
from upstream.ddl import default_value
from upstream.errors import SQLError, UpstreamError
from upstream.exprs import Compiler, Expr, Now, now_utc, point_values
from upstream.kv import Row
from upstream.sql import Delete, Insert, Update
from upstream.txn import Transaction


class _Shape:
    """What row operations need to know about one TableInfo (computed once: TableInfo is frozen)."""

    def __init__(self, table: TableInfo) -> None:
        self.pk_col = table.pk_handle_column
        self.common = [c for c, _ in table.common_handle_columns]
        pidx = table.primary_index
        self.nonclustered_pk = [] if (table.pk_is_handle or table.is_common_handle or pidx is None) else \
            [next(c for c in table.columns if c.name.lower() == ic.name.lower()) for ic in pidx.columns]
        self.auto_col = next((c for c in table.columns if c.type.flag & mt.AUTO_INCREMENT_FLAG), None)
        by_name = {c.name.lower(): c for c in table.columns}
        self.uniques = [(ix.name, [by_name[ic.name.lower()] for ic in ix.columns]) for ix in table.indices
                        if ix.unique and not ix.primary and ix.state == mt.STATE_PUBLIC]
        self.not_null = [c for c in table.columns if not c.nullable]


def _shape(table: TableInfo) -> _Shape:
    return memo(table, "_binlake_dml_shape", _Shape)


class TableWriter:
    """Row operations on one table inside one transaction."""

    def __init__(self, txn: Transaction, table: TableInfo, catalog: Catalog) -> None:
        self.txn = txn
        self.table = table
        self.catalog = catalog
        shape = _shape(table)
        self.pk_col = shape.pk_col
        self.common = shape.common
        self.nonclustered_pk = shape.nonclustered_pk
        self.auto_col = shape.auto_col
        self.uniques = shape.uniques
        self.not_null = shape.not_null

    # ---- handles -----------------------------------------------------------------------------

    def handle_of(self, row: Row) -> Any:
        """The handle a row would have (None for ``_tidb_rowid`` tables: it is allocated)."""
        if self.pk_col is not None:
            return row[self.pk_col.id]
        if self.common:
            return tuple(row[c.id] for c in self.common)
        return None

    def key(self, handle: Any) -> bytes:
        """The record key of a handle."""
        return keys.record_key(self.table, handle)

    def _pk_text(self, row: Row, cols: list[ColumnInfo]) -> str:
        return "-".join(str(row[c.id]) for c in cols)

    def _find_conflict(self, row: Row) -> tuple[bytes, Any, Row] | None:
        """The existing row with the same primary key, if any."""
        h = self.handle_of(row)
        if h is not None:
            k = self.key(h)
            old = self.txn.read(self.table, k)
            return None if old is None else (k, h, old)
        if self.nonclustered_pk:
            ids = [c.id for c in self.nonclustered_pk]
            want = [row[i] for i in ids]
            for k, oh, old in self.txn.scan(self.table):
                if [old[i] for i in ids] == want:
                    return k, oh, old
        return None

    def _unique_conflicts(self, row: Row, skip_key: bytes | None = None) -> list[tuple[str, str, bytes, Any, Row]]:
        """Rows (other than ``skip_key``) that share a unique index value with ``row``:
        (index name, entry text, key, handle, row)."""
        if not self.uniques:
            return []
        wanted = []
        for name, cols in self.uniques:
            vals = [row[c.id] for c in cols]
            if any(v is None for v in vals):
                continue
            ci = [c.type.collate.lower().endswith("_ci") for c in cols]
            wanted.append((name, cols, [v.casefold() if f and isinstance(v, str) else v for v, f in zip(vals, ci)], ci))
        if not wanted:
            return []
        out = []
        for k, oh, old in self.txn.scan(self.table):
            if k == skip_key:
                continue
            for name, cols, want, ci in wanted:
                have = [old[c.id] for c in cols]
                have = [v.casefold() if f and isinstance(v, str) else v for v, f in zip(have, ci)]
                if have == want:
                    out.append((name, "-".join(str(row[c.id]) for c in cols), k, oh, old))
                    break
        return out

    def _duplicate(self, entry: str, index: str) -> SQLError:
        return SQLError(f"[kv:1062]Duplicate entry '{entry}' for key '{self.table.name}.{index}'")

    # ---- statements --------------------------------------------------------------------------

    def insert_row(self, row: Row, replace: bool) -> int:
        """Insert one full row; return affected rows (MySQL counting)."""
        if self.auto_col is not None:
            v = row.get(self.auto_col.id)
            if v is None or v == 0:
                row[self.auto_col.id] = self.catalog.alloc_auto_ids(self.table.id)
            else:
                self.catalog.rebase_auto_id(self.table.id, int(v))
        for c in self.not_null:
            if row[c.id] is None:
                raise SQLError(f"[table:1048]Column '{c.name}' cannot be null")
        conflict = self._find_conflict(row)
        affected = 1
        if conflict is not None:
            k, oh, old = conflict
            if not replace:
                cols = [self.pk_col] if self.pk_col is not None else (self.common or self.nonclustered_pk)
                raise self._duplicate(self._pk_text(row, cols), "PRIMARY")
            if old == row and not self._unique_conflicts(row, k):
                return 1
            self.txn.delete(self.table, k, oh, old)
            affected = 2
        for index, entry, k, oh, old in self._unique_conflicts(row):
            if not replace:
                raise self._duplicate(entry, index)
            self.txn.delete(self.table, k, oh, old)
            affected += 1
        h = self.handle_of(row)
        if h is None:
            h = self.catalog.alloc_auto_ids(self.table.id)
        elif self.pk_col is not None and self.auto_col is None:
            self.catalog.rebase_auto_id(self.table.id, int(h))
        self.txn.insert(self.table, self.key(h), h, row)
        return affected

    def candidates(self, where: Expr | None) -> list[tuple[bytes, Any, Row]]:
        """Rows the WHERE may match: point lookups when it pins the handle column, else a scan."""
        pin = self.pk_col if self.pk_col is not None else (self.common[0] if len(self.common) == 1 else None)
        vals = point_values(where, pin.name) if pin is not None else None
        if pin is None or vals is None:
            return self.txn.scan(self.table)
        out = {}
        for v in vals:
            try:
                cv = coerce(pin, v)
            except UpstreamError:
                continue
            h = cv if self.pk_col is not None else (cv,)
            k = self.key(h)
            row = self.txn.read(self.table, k)
            if row is not None:
                out[k] = (k, h, row)
        return [out[k] for k in sorted(out)]

    def update(self, assignments: list[tuple[str, Expr]], where: Expr | None) -> int:
        """UPDATE … SET … WHERE …; return changed rows."""
        comp = Compiler(self.table)
        pred = comp.predicate(where) if where is not None else None
        sets = []
        for name, e in assignments:
            col = comp.column(name)
            sets.append((col, comp.value(e, col)))
        assigned = {c.id for c, _ in sets}
        on_update = [c for c in self.table.columns if c.type.flag & mt.ON_UPDATE_NOW_FLAG and c.id not in assigned]
        changed = 0
        for k, h, row in self.candidates(where):
            if pred is not None and pred(row) is not True:
                continue
            new = dict(row)
            for col, get in sets:
                new[col.id] = coerce(col, get(new))
            if new == row:
                continue
            for c in on_update:
                new[c.id] = coerce(c, now_utc(max(c.type.decimal, 0)))
            for index, entry, _, _, _ in self._unique_conflicts(new, k):
                raise self._duplicate(entry, index)
            nh = self.handle_of(new)
            if nh is not None and nh != h:
                nk = self.key(nh)
                if self.txn.read(self.table, nk) is not None:
                    cols = [self.pk_col] if self.pk_col is not None else self.common
                    raise SQLError(f"[kv:1062]Duplicate entry '{self._pk_text(new, cols)}' for key "
                                   f"'{self.table.name}.PRIMARY'")
                self.txn.delete(self.table, k, h, row)
                self.txn.insert(self.table, nk, nh, new)
            else:
                self.txn.update(self.table, k, h, row, new)
            changed += 1
        return changed

    def delete(self, where: Expr | None) -> int:
        """DELETE … WHERE …; return deleted rows."""
        pred = Compiler(self.table).predicate(where) if where is not None else None
        n = 0
        for k, h, row in self.candidates(where):
            if pred is not None and pred(row) is not True:
                continue
            self.txn.delete(self.table, k, h, row)
            n += 1
        return n


def build_rows(table: TableInfo, stmt: Insert, now: Callable[[], Any]) -> list[Row]:
    """The full rows an INSERT's VALUES describe (defaults filled, values converted)."""
    cols = table.columns
    if stmt.columns is None:
        targets = list(cols)
    else:
        comp = Compiler(table)
        targets = [comp.column(n) for n in stmt.columns]
        if len({c.id for c in targets}) != len(targets):
            raise SQLError("Column specified twice")
    rest = [c for c in cols if c.id not in {t.id for t in targets}]
    out = []
    for values in stmt.rows:
        if len(values) != len(targets):
            raise SQLError("[planner:1136]Column count doesn't match value count at row 1")
        row: Row = {}
        for c, v in zip(targets, values):
            if v is DEFAULT:
                row[c.id] = default_value(c, now)
            elif isinstance(v, Now):
                row[c.id] = coerce(c, now())
            elif v is None and c.type.flag & mt.AUTO_INCREMENT_FLAG:
                row[c.id] = None
            else:
                row[c.id] = coerce(c, v)
        for c in rest:
            row[c.id] = None if c.type.flag & mt.AUTO_INCREMENT_FLAG else default_value(c, now)
        out.append(row)
    return out


def run_dml(txn: Transaction, stmt: Insert | Update | Delete, db: str | None, catalog: Catalog) -> int:
    """Execute one DML statement in ``txn``; return affected rows."""
    dbname = stmt.db or db
    if not dbname:
        raise SQLError("[planner:1046]No database selected")
    entry = txn.schema.table(dbname, stmt.table)
    w = TableWriter(txn, entry.info, catalog)
    if isinstance(stmt, Insert):
        return sum(w.insert_row(row, stmt.replace) for row in build_rows(entry.info, stmt, now_utc))
    if isinstance(stmt, Update):
        return w.update(stmt.assignments, stmt.where)
    return w.delete(stmt.where)
