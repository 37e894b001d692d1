"""Row changes → SQL statements with TiDB Binlog's loader semantics (reference §4.7).

Each decoded row change becomes a :class:`DML`: its table, op, new values (old values of updates),
the commit_ts it belongs to, and its causality keys. :func:`statements` renders a DML (and
:func:`batched` a run of them, with consecutive INSERTs / DELETEs by key combined):

- insert: ``INSERT INTO `db`.`t` (cols) VALUES (…)``; update: ``UPDATE … SET … WHERE <key> LIMIT 1``;
  delete: ``DELETE FROM … WHERE <key> LIMIT 1``. ``<key>`` is the first unique index (the primary
  key first) whose old values are all non-NULL, else every column (``IS NULL`` for NULLs).
- safe mode: insert → ``REPLACE INTO``; update → delete of the old key + ``REPLACE INTO`` of the new
  row. Replaying a range in safe mode is idempotent for rows with a primary or non-NULL unique key.
  A row without one (an *unkeyed* DML, matched by all its columns) is not: the sink records how far
  each table's unkeyed DMLs got (``seq``, :func:`number_unkeyed`) in the transaction that applies
  them and skips those on a replay (``sink.mysql.progress``).

Only public, non-generated columns are written. Values are bound as parameters in the forms MySQL
takes (:func:`_pylist`): temporal values as text (the session time zone is UTC, so TIMESTAMPs are
UTC), BIT(64) values the decoder wrapped into a signed long are unwrapped.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from transform import changes as ch
from transform.codec import mysqltypes as mt
from transform.codec.model import ColumnInfo, TableInfo

_BIT_WRAP = 1 << 64
MAX_STATEMENT_BYTES = 4 << 20   # a merged REPLACE stops adding rows here (max_allowed_packet: 16 MiB on MariaDB)
_WIDE = frozenset({mt.Family.STRING, mt.Family.JSON, mt.Family.GEOMETRY})


def quote(name: str) -> str:
    """A MySQL identifier in backquotes."""
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class TargetTable:
    """One upstream table at one schema version, as the downstream has it: ``db``.``name``, the
    written columns' names and the unique keys (column positions), the primary key first; ``infos``
    the columns' upstream definitions (empty for a table read back from the relay log)."""

    db: str
    name: str
    columns: tuple[str, ...]
    keys: tuple[tuple[str, tuple[int, ...]], ...]
    bit_columns: frozenset[int] = field(default=frozenset())
    infos: tuple[ColumnInfo, ...] = ()

    @cached_property
    def qualified(self) -> str:
        """`` `db`.`name` ``."""
        return f"{quote(self.db)}.{quote(self.name)}"

    @cached_property
    def has_primary(self) -> bool:
        """True when the table has a primary key (NOT NULL: every row is keyed by it)."""
        return any(name == "PRIMARY" for name, _ in self.keys)

    @cached_property
    def wide_columns(self) -> tuple[int, ...]:
        """Positions of the columns whose values can be large (strings, blobs, JSON; every column of a
        table read back from the relay log, whose types are not known)."""
        if not self.infos:
            return tuple(range(len(self.columns)))
        return tuple(i for i, c in enumerate(self.infos) if c.family in _WIDE)

    def row_bytes(self, row: Sequence[Any]) -> int:
        """About how many bytes ``row`` takes in a statement (8 per narrow value)."""
        wide = sum(len(v) for i in self.wide_columns if isinstance(v := row[i], (str, bytes)))
        return wide + 8 * len(self.columns)

    @classmethod
    def of(cls, db: str, table: TableInfo) -> TargetTable:
        """The downstream view of ``table`` (public, non-generated columns; public unique indexes)."""
        cols = tuple(c for c in table.columns
                     if c.state == mt.STATE_PUBLIC and not c.generated_expr_string and not c.hidden)
        pos = {c.name.lower(): i for i, c in enumerate(cols)}
        keys: list[tuple[str, tuple[int, ...]]] = []
        handle = table.pk_handle_column
        if table.pk_is_handle and handle is not None and handle.name.lower() in pos:
            keys.append(("PRIMARY", (pos[handle.name.lower()],)))
        for idx in sorted(table.indices, key=lambda i: not i.primary):
            if not (idx.unique or idx.primary) or idx.state != mt.STATE_PUBLIC:
                continue
            names = [ic.name.lower() for ic in idx.columns]
            if all(n in pos for n in names):
                keys.append(("PRIMARY" if idx.primary else idx.name, tuple(pos[n] for n in names)))
        bits = frozenset(i for i, c in enumerate(cols) if c.family is mt.Family.BIT)
        return cls(db, table.name, tuple(c.name for c in cols), tuple(keys), bits, cols)


@dataclass
class DML:
    """One row change to apply: ``op`` is ``I``, ``U`` or ``D``; ``values`` the new row (the deleted
    row for ``D``), ``old`` the row before an update; ``seq`` the DML's place among the unkeyed DMLs of
    its table in its transaction (1, 2, …; 0 for a keyed DML)."""

    table: TargetTable
    op: str
    values: tuple[Any, ...]
    old: tuple[Any, ...] | None
    commit_ts: int
    seq: int = 0

    @property
    def unkeyed(self) -> bool:
        """True when the new row or the old row has no unique key with all values non-NULL: the
        statements match it by all its columns, and applying it twice is not the same as once."""
        if self.table.has_primary:
            return False
        rows = [self.values] if self.old is None else [self.values, self.old]
        return not all(any(all(row[i] is not None for i in cols) for _, cols in self.table.keys) for row in rows)

    def causality_keys(self) -> list[str]:
        """The keys two DMLs conflict on: every unique key with all values non-NULL, of the new and the
        old row (TiDB's ``getKeys``). An unkeyed DML also gets the table itself as a key (TiDB Binlog
        uses a crc32 of the row): its UPDATE/DELETE scan the downstream table, and parallel scans of one
        table wait on each other's row locks and deadlock; and its table's unkeyed DMLs must apply in
        order on one worker for their recorded progress to mean anything."""
        out: list[str] = []
        unkeyed = False
        rows = [self.values] if self.old is None else [self.values, self.old]
        for row in rows:
            found = len(out)
            for name, cols in self.table.keys:
                vals = [row[i] for i in cols]
                if any(v is None for v in vals):
                    continue
                out.append(f"{name}({','.join(repr(v) for v in vals)}){self.table.qualified}")
            unkeyed = unkeyed or len(out) == found
        if unkeyed:
            out.append(f"table{self.table.qualified}")
        return out


def number_unkeyed(dmls: Iterable[DML]) -> list[DML]:
    """``dmls`` (one transaction's, in order) with each unkeyed DML's ``seq`` set: its place among the
    transaction's unkeyed DMLs of the same table. A replay of the transaction numbers them the same."""
    out = list(dmls)
    counts: dict[str, int] = {}
    for d in out:
        if d.unkeyed:
            d.seq = counts[d.table.qualified] = counts.get(d.table.qualified, 0) + 1
    return out


def _where(table: TargetTable, row: Sequence[Any]) -> tuple[str, list[Any]]:
    for _, cols in table.keys:
        if all(row[i] is not None for i in cols):
            return " AND ".join(f"{quote(table.columns[i])} = %s" for i in cols), [row[i] for i in cols]
    parts, args = [], []
    for c, v in zip(table.columns, row):
        if v is None:
            parts.append(f"{quote(c)} IS NULL")
        else:
            parts.append(f"{quote(c)} = %s")
            args.append(v)
    return " AND ".join(parts), args


def statements(dml: DML, safe_mode: bool) -> list[tuple[str, list[Any]]]:
    """The SQL (with ``%s`` parameters) that applies ``dml``."""
    t = dml.table
    cols = ", ".join(quote(c) for c in t.columns)
    marks = ", ".join(["%s"] * len(t.columns))
    if dml.op == "I":
        verb = "REPLACE" if safe_mode else "INSERT"
        return [(f"{verb} INTO {t.qualified} ({cols}) VALUES ({marks})", list(dml.values))]
    if dml.op == "D":
        where, args = _where(t, dml.values)
        return [(f"DELETE FROM {t.qualified} WHERE {where} LIMIT 1", args)]
    assert dml.old is not None, "an update carries its old row"
    where, args = _where(t, dml.old)
    if safe_mode:
        return [(f"DELETE FROM {t.qualified} WHERE {where} LIMIT 1", args),
                (f"REPLACE INTO {t.qualified} ({cols}) VALUES ({marks})", list(dml.values))]
    sets = ", ".join(f"{quote(c)} = %s" for c in t.columns)
    return [(f"UPDATE {t.qualified} SET {sets} WHERE {where} LIMIT 1", [*dml.values, *args])]


def _same_kind(a: DML, b: DML) -> bool:
    return a.op == b.op and (a.table is b.table or (a.table.qualified == b.table.qualified
                                                    and a.table.columns == b.table.columns))


def _delete_key(dml: DML) -> int | None:
    """The position of the single-column unique key a DELETE of ``dml`` matches on, or None."""
    for _, cols in dml.table.keys:
        if all(dml.values[i] is not None for i in cols):
            return cols[0] if len(cols) == 1 else None
    return None


def batched(dmls: Sequence[DML], safe_mode: bool) -> Iterator[tuple[str, list[Any], DML]]:
    """The statements that apply ``dmls`` in order, each with the last DML it covers. A run of
    consecutive INSERTs into one table becomes one multi-row INSERT (REPLACE in safe mode), a run of
    consecutive DELETEs by the same single-column unique key one ``DELETE … WHERE key IN (…)``: the
    same rows change, in the same order relative to every other statement, in fewer round trips."""
    i = 0
    while i < len(dmls):
        first = dmls[i]
        j = i + 1
        if first.op == "I":
            while j < len(dmls) and _same_kind(first, dmls[j]):
                j += 1
        elif first.op == "D" and (key := _delete_key(first)) is not None:
            while j < len(dmls) and _same_kind(first, dmls[j]) and _delete_key(dmls[j]) == key:
                j += 1
        run = dmls[i:j]
        if len(run) == 1:
            for sql, args in statements(first, safe_mode):
                yield sql, args, first
        elif first.op == "I":
            t = first.table
            verb = "REPLACE" if safe_mode else "INSERT"
            row = "(" + ", ".join(["%s"] * len(t.columns)) + ")"
            cols = ", ".join(quote(c) for c in t.columns)
            yield (f"{verb} INTO {t.qualified} ({cols}) VALUES {', '.join([row] * len(run))}",
                   [v for d in run for v in d.values], run[-1])
        else:
            t, key = first.table, _delete_key(first)
            assert key is not None
            yield (f"DELETE FROM {t.qualified} WHERE {quote(t.columns[key])} IN ({', '.join(['%s'] * len(run))})",
                   [d.values[key] for d in run], run[-1])
        i = j


def _pk(table: TargetTable) -> tuple[int, ...] | None:
    return next((cols for name, cols in table.keys if name == "PRIMARY"), None)


def merged(dmls: Sequence[DML], rows_per_statement: int) -> tuple[list[tuple[str, list[Any], DML]], list[DML]]:
    """TiDB Binlog's merge mode (``[syncer.to] merge``): the DMLs of tables with a primary key collapse
    to their net change per key — a key whose last change deletes it (or moves it away) is deleted,
    every other key gets its final row — applied as ``DELETE … WHERE pk IN (…)`` first, then
    multi-row ``REPLACE INTO`` (``rows_per_statement`` keys per statement, fewer once a statement holds
    ``MAX_STATEMENT_BYTES`` of values). Returns those statements
    and, in order, the DMLs of tables without a primary key (which must be applied one by one).

    REPLACE removes any row that holds a final row's primary or unique key values, so a unique value
    that moved between rows of the batch ends where the last change put it. Between flushes the
    downstream passes through states the upstream never had; it equals the upstream at each flush."""
    # per table: primary key values -> the final row, or None when the key ends deleted
    finals: dict[str, tuple[TargetTable, dict[tuple[Any, ...], tuple[Any, ...] | None]]] = {}
    rest: list[DML] = []
    for d in dmls:
        pk = _pk(d.table)
        if pk is None:
            rest.append(d)
            continue
        table, final = finals.setdefault(d.table.qualified, (d.table, {}))
        if d.table.columns != table.columns:      # a new table version inside one flush: keep it apart
            rest.append(d)
            continue
        if d.op == "U" and d.old is not None:
            old_key = tuple(d.old[i] for i in pk)
            if old_key != tuple(d.values[i] for i in pk):
                final[old_key] = None
        key = tuple(d.values[i] for i in pk)
        final.pop(key, None)                      # re-inserted keys go to the end, in change order
        final[key] = None if d.op == "D" else d.values
    out: list[tuple[str, list[Any], DML]] = []
    last = dmls[-1] if dmls else None
    for table, final in finals.values():
        pk = _pk(table)
        assert pk is not None and last is not None
        gone = [k for k, row in final.items() if row is None]
        kept = [row for row in final.values() if row is not None]
        n = max(1, rows_per_statement)
        for i in range(0, len(gone), n):
            keys = gone[i:i + n]
            if len(pk) == 1:
                cond = f"{quote(table.columns[pk[0]])} IN ({', '.join(['%s'] * len(keys))})"
                args = [k[0] for k in keys]
            else:
                one = "(" + " AND ".join(f"{quote(table.columns[c])} = %s" for c in pk) + ")"
                cond = " OR ".join([one] * len(keys))
                args = [v for k in keys for v in k]
            out.append((f"DELETE FROM {table.qualified} WHERE {cond}", args, last))
        cols = ", ".join(quote(c) for c in table.columns)
        row_marks = "(" + ", ".join(["%s"] * len(table.columns)) + ")"
        for rows in _chunks(table, kept, n):
            out.append((f"REPLACE INTO {table.qualified} ({cols}) VALUES {', '.join([row_marks] * len(rows))}",
                        [v for r in rows for v in r], last))
    return out, rest


def _chunks(table: TargetTable, rows: list[tuple[Any, ...]], n: int) -> Iterator[list[tuple[Any, ...]]]:
    """``rows`` in runs of at most ``n`` rows and about ``MAX_STATEMENT_BYTES`` (at least one row)."""
    run: list[tuple[Any, ...]] = []
    size = 0
    for row in rows:
        size += table.row_bytes(row)
        if run and (len(run) == n or size > MAX_STATEMENT_BYTES):
            yield run
            run, size = [], table.row_bytes(row)
        run.append(row)
    if run:
        yield run


def _pylist(column: pa.Array | pa.ChunkedArray, bit: bool) -> list[Any]:
    """One column's values in the forms the statements bind: DATETIME/TIMESTAMP/DATE as their MySQL
    text (``YYYY-MM-DD HH:MM:SS[.ffffff]``, TIMESTAMP in UTC; rendered by Arrow, as
    ``transform.codec.values.json_value`` renders them), BIT(64) values the decoder wrapped into a
    signed long unwrapped, the rest as Python values."""
    if pa.types.is_timestamp(column.type):
        text = column.cast(pa.timestamp("us")).cast(pa.string())
        column = pc.replace_substring_regex(text, r"\.000000$", "")
    elif pa.types.is_date32(column.type):
        column = column.cast(pa.string())
    values: list[Any] = column.to_pylist()
    if bit:
        values = [v + _BIT_WRAP if isinstance(v, int) and v < 0 else v for v in values]
    return values


def row_changes(table: TargetTable, rows: pa.Table) -> Iterator[DML]:
    """The DMLs of a decoded piece (``transform.changes`` columns) in its row order."""
    names = list(table.columns)
    bits = table.bit_columns
    cols = [_pylist(rows.column(n), i in bits) for i, n in enumerate(names)]
    ops = rows.column(ch.OP).to_pylist()
    commits = rows.column(ch.COMMIT_TS).to_pylist()
    before = rows.column(ch.BEFORE) if ch.BEFORE in rows.column_names else None
    olds: list[tuple[Any, ...]] | None = None
    if before is not None and "U" in ops:
        flat = pa.concat_arrays(before.chunks) if before.num_chunks else pa.array([], before.type)
        olds = list(zip(*(_pylist(flat.field(n), i in bits) for i, n in enumerate(names))))
    for r, (op, values) in enumerate(zip(ops, zip(*cols))):
        yield DML(table, op, values, olds[r] if op == "U" and olds is not None else None, commits[r])
