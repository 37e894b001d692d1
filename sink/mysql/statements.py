"""Row changes → SQL statements with TiDB Binlog's loader semantics.

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

Only public, non-generated columns are written. A DML holds its values as SQL literals, rendered
from the decoded Arrow columns by Arrow's kernels (:func:`row_changes`; binding parameters per value
in Python cost more than applying the rows): numbers as their digits (BIT(64) values the
decoder wrapped into a signed long unwrapped, FLOAT widened to the double it is, so nothing rounds
twice), temporal values as their MySQL text (``YYYY-MM-DD HH:MM:SS.ffffff``; the session time
zone is UTC, so TIMESTAMPs are UTC), text quoted with backslash escapes (the sink's sessions run
without ``NO_BACKSLASH_ESCAPES``), binary strings as ``X'hex'``, NULL as ``NULL``. Two equal values of
one column always render the same, so keys compare as their literals.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sink import secondary
from transform import changes as ch

NULL = "NULL"
MAX_STATEMENT_BYTES = 4 << 20   # a merged REPLACE stops adding rows here (max_allowed_packet: 16 MiB on MariaDB)
_HEX_DIGITS = np.frombuffer(b"".join(b"%02X" % i for i in range(256)), np.uint8).reshape(256, 2)


def quote(name: str) -> str:
    """A MySQL identifier in backquotes."""
    return "`" + name.replace("`", "``") + "`"


def literal_sql_mode(cur: Any, sql_mode: str) -> None:
    """Take ``NO_BACKSLASH_ESCAPES`` out of the session's ``sql_mode`` (the literals here use
    backslash escapes)."""
    modes = sql_mode.split(",")
    if "NO_BACKSLASH_ESCAPES" in modes:
        cur.execute("SET SESSION sql_mode = %s", (",".join(m for m in modes if m != "NO_BACKSLASH_ESCAPES"),))


def literal(value: Any) -> str:
    """One Python value as an SQL literal, by the rules :func:`row_changes` follows (relay-log values,
    the progress table's; text as the relay log holds it, e.g. a DECIMAL as a quoted string)."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, (bytes, bytearray)):
        return f"X'{bytes(value).hex().upper()}'"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'").replace("\0", "\\0")
    return f"'{text}'"


@dataclass(frozen=True)
class TargetTable(secondary.Table):
    """One upstream table at one schema version, as the downstream has it (:class:`sink.secondary.Table`:
    ``db``.``name``, the written columns' names and the unique keys, the primary key first; ``infos``
    empty for a table read back from the relay log), with the SQL the statements need."""

    @cached_property
    def qualified(self) -> str:
        """`` `db`.`name` ``."""
        return f"{quote(self.db)}.{quote(self.name)}"

    @cached_property
    def has_primary(self) -> bool:
        """True when the table has a primary key (NOT NULL: every row is keyed by it)."""
        return any(name == "PRIMARY" for name, _ in self.keys)

    @cached_property
    def indexed(self) -> tuple[int, ...]:
        """Positions of the columns a DML holds one by one (``DML.values``): the unique keys' when the
        table has a primary key (a row is always matched by a key), else every column (a row whose
        unique keys all hold a NULL is matched by all its columns)."""
        if not self.has_primary:
            return tuple(range(len(self.columns)))
        return tuple(sorted({i for _, cols in self.keys for i in cols}))

    @cached_property
    def value_keys(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """``keys`` with positions into ``DML.values``."""
        pos = {c: j for j, c in enumerate(self.indexed)}
        return tuple((name, tuple(pos[i] for i in cols)) for name, cols in self.keys)

    @cached_property
    def column_list(self) -> str:
        """`` (`a`, `b`, …)`` of an INSERT."""
        return "(" + ", ".join(quote(c) for c in self.columns) + ")"


@dataclass
class DML:
    """One row change to apply: ``op`` is ``I``, ``U`` or ``D``; ``row`` the new row (the deleted row
    for ``D``) as ``(v1, v2, …)`` of SQL literals; ``values`` its ``table.indexed`` columns' literals,
    ``old`` those of the row before an update, ``sets`` an update's ``SET`` list; ``seq`` the DML's place
    among the unkeyed DMLs of its table in its transaction (1, 2, …; 0 for a keyed DML)."""

    table: TargetTable
    op: str
    row: str
    values: tuple[str, ...]
    old: tuple[str, ...] | None
    commit_ts: int
    sets: str = ""
    seq: int = 0

    @classmethod
    def of(cls, table: TargetTable, op: str, values: Sequence[Any], old: Sequence[Any] | None,
           commit_ts: int) -> DML:
        """A DML of Python values, every column's (rendered by :func:`literal`)."""
        new = [literal(v) for v in values]
        before = None if old is None else [literal(v) for v in old]
        sets = ", ".join(f"{quote(c)} = {v}" for c, v in zip(table.columns, new)) if op == "U" else ""
        return cls(table, op, _row(new), tuple(new[i] for i in table.indexed),
                   None if before is None else tuple(before[i] for i in table.indexed), commit_ts, sets)

    @property
    def unkeyed(self) -> bool:
        """True when the new row or the old row has no unique key with all values non-NULL: the
        statements match it by all its columns, and applying it twice is not the same as once."""
        if self.table.has_primary:
            return False
        rows = [self.values] if self.old is None else [self.values, self.old]
        return not all(any(all(row[i] != NULL for i in cols) for _, cols in self.table.value_keys) for row in rows)

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
            for name, cols in self.table.value_keys:
                vals = [row[i] for i in cols]
                if NULL in vals:
                    continue
                out.append(f"{name}({','.join(vals)}){self.table.qualified}")
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


def _where(table: TargetTable, values: Sequence[str]) -> str:
    """The condition matching a row by its first unique key without a NULL, else by every column
    (``values``: the row's ``table.indexed`` literals, which are then every column's)."""
    for _, cols in table.value_keys:
        if all(values[i] != NULL for i in cols):
            return " AND ".join(f"{quote(table.columns[table.indexed[i]])} = {values[i]}" for i in cols)
    assert len(values) == len(table.columns), "a row of a table with a primary key always has its key"
    return " AND ".join(f"{quote(c)} IS NULL" if v == NULL else f"{quote(c)} = {v}"
                        for c, v in zip(table.columns, values))


def _row(values: Sequence[str]) -> str:
    return "(" + ", ".join(values) + ")"


def statements(dml: DML, safe_mode: bool) -> list[str]:
    """The SQL that applies ``dml``."""
    t = dml.table
    if dml.op == "I":
        verb = "REPLACE" if safe_mode else "INSERT"
        return [f"{verb} INTO {t.qualified} {t.column_list} VALUES {dml.row}"]
    if dml.op == "D":
        return [f"DELETE FROM {t.qualified} WHERE {_where(t, dml.values)} LIMIT 1"]
    assert dml.old is not None, "an update carries its old row"
    where = _where(t, dml.old)
    if safe_mode:
        return [f"DELETE FROM {t.qualified} WHERE {where} LIMIT 1",
                f"REPLACE INTO {t.qualified} {t.column_list} VALUES {dml.row}"]
    return [f"UPDATE {t.qualified} SET {dml.sets} WHERE {where} LIMIT 1"]


def _same_kind(a: DML, b: DML) -> bool:
    return a.op == b.op and (a.table is b.table or (a.table.qualified == b.table.qualified
                                                    and a.table.columns == b.table.columns))


def _delete_key(dml: DML) -> int | None:
    """The position (in ``values``) of the single-column unique key a DELETE of ``dml`` matches on, or None."""
    for _, cols in dml.table.value_keys:
        if all(dml.values[i] != NULL for i in cols):
            return cols[0] if len(cols) == 1 else None
    return None


def batched(dmls: Sequence[DML], safe_mode: bool) -> Iterator[tuple[str, DML]]:
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
        t = first.table
        if len(run) == 1:
            for sql in statements(first, safe_mode):
                yield sql, first
        elif first.op == "I":
            verb = "REPLACE" if safe_mode else "INSERT"
            yield f"{verb} INTO {t.qualified} {t.column_list} VALUES {', '.join(d.row for d in run)}", run[-1]
        else:
            key = _delete_key(first)
            assert key is not None
            yield (f"DELETE FROM {t.qualified} WHERE {quote(t.columns[t.indexed[key]])} IN "
                   f"({', '.join(d.values[key] for d in run)})", run[-1])
        i = j


def _pk(table: TargetTable) -> tuple[int, ...] | None:
    """The primary key's positions in ``DML.values``."""
    return next((cols for name, cols in table.value_keys if name == "PRIMARY"), None)


def merged(dmls: Sequence[DML], rows_per_statement: int) -> tuple[list[tuple[str, DML]], list[DML]]:
    """TiDB Binlog's merge mode (``[syncer.to] merge``): the DMLs of tables with a primary key collapse
    to their net change per key — a key whose last change deletes it (or moves it away) is deleted,
    every other key gets its final row — applied as ``DELETE … WHERE pk IN (…)`` first, then
    multi-row ``REPLACE INTO`` (``rows_per_statement`` keys per statement, fewer once a statement holds
    ``MAX_STATEMENT_BYTES`` of values). Returns those statements
    and, in order, the DMLs of tables without a primary key (which must be applied one by one).

    REPLACE removes any row that holds a final row's primary or unique key values, so a unique value
    that moved between rows of the batch ends where the last change put it. Between flushes the
    downstream passes through states the upstream never had; it equals the upstream at each flush."""
    # per table: primary key literals -> the final row, or None when the key ends deleted
    finals: dict[str, tuple[TargetTable, dict[tuple[str, ...], str | None]]] = {}
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
        final[key] = None if d.op == "D" else d.row
    out: list[tuple[str, DML]] = []
    last = dmls[-1] if dmls else None
    for table, final in finals.values():
        pk = _pk(table)
        assert pk is not None and last is not None
        gone = [k for k, row in final.items() if row is None]
        kept = [row for row in final.values() if row is not None]
        n = max(1, rows_per_statement)
        names = [quote(table.columns[table.indexed[c]]) for c in pk]
        for i in range(0, len(gone), n):
            keys = gone[i:i + n]
            if len(pk) == 1:
                cond = f"{names[0]} IN ({', '.join(k[0] for k in keys)})"
            else:
                cond = " OR ".join("(" + " AND ".join(f"{c} = {v}" for c, v in zip(names, k)) + ")" for k in keys)
            out.append((f"DELETE FROM {table.qualified} WHERE {cond}", last))
        for rows in _chunks(kept, n):
            out.append((f"REPLACE INTO {table.qualified} {table.column_list} VALUES {', '.join(rows)}", last))
    return out, rest


def _chunks(rows: list[str], n: int) -> Iterator[list[str]]:
    """``rows`` (rendered) in runs of at most ``n`` rows and about ``MAX_STATEMENT_BYTES`` (at least one)."""
    run: list[str] = []
    size = 0
    for row in rows:
        size += len(row) + 2
        if run and (len(run) == n or size > MAX_STATEMENT_BYTES):
            yield run
            run, size = [], len(row) + 2
        run.append(row)
    if run:
        yield run


# ---------------------------------------------------------------------------------------------
# Arrow columns -> SQL literals

def _quoted(text: pa.Array) -> pa.Array:
    r"""Text values as quoted string literals, with backslash escapes (``\\``, ``\'``, ``\0``)."""
    for raw, escaped in (("\\", "\\\\"), ("'", "\\'"), ("\0", "\\0")):
        text = pc.replace_substring(text, raw, escaped)
    return pc.binary_join_element_wise("'", text, "'", "")


def _hex(data: pa.Array) -> pa.Array:
    """Binary values as ``X'…'`` literals (upper-case hex; nulls stay null)."""
    data = data.cast(pa.large_binary())
    _, offset_buffer, buffer = data.buffers()
    offsets = np.frombuffer(offset_buffer, np.int64)[data.offset:data.offset + len(data) + 1]
    raw = np.frombuffer(buffer, np.uint8)[offsets[0]:offsets[-1]] if buffer is not None else np.empty(0, np.uint8)
    digits = _HEX_DIGITS[raw].tobytes()
    text = pa.Array.from_buffers(pa.large_string(), len(data),
                                 [None, pa.py_buffer((offsets - offsets[0]) * 2), pa.py_buffer(digits)])
    text = pc.binary_join_element_wise(pa.scalar("X'", pa.large_string()), text,
                                       pa.scalar("'", pa.large_string()), pa.scalar("", pa.large_string()))
    return pc.if_else(data.is_null(), pa.scalar(None, pa.large_string()), text)


def _rendered(column: pa.Array | pa.ChunkedArray, bit: bool) -> pa.Array:
    """One decoded column's values as SQL literals (module docstring; a string array without nulls)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = arr.type
    if bit:
        text = arr.cast(pa.uint64(), safe=False).cast(pa.string())
    elif pa.types.is_timestamp(t) or pa.types.is_date(t):   # digits, dashes, colons: nothing to escape
        if pa.types.is_timestamp(t):
            arr = arr.cast(pa.timestamp("us"))
        text = pc.binary_join_element_wise("'", arr.cast(pa.string()), "'", "")
    elif pa.types.is_floating(t):
        text = arr.cast(pa.float64()).cast(pa.string())
    elif pa.types.is_integer(t) or pa.types.is_decimal(t):
        text = arr.cast(pa.string())
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        text = _quoted(arr.cast(pa.string()))
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        text = _hex(arr).cast(pa.string())
    else:
        return pa.array([literal(v) for v in arr.to_pylist()], pa.string())
    return text.fill_null(NULL)


def _joined(parts: Sequence[pa.Array], separator: str, head: str = "", tail: str = "") -> list[str]:
    """Row by row: ``head`` + the parts' values joined by ``separator`` + ``tail``."""
    joined = pc.binary_join_element_wise(*parts, separator) if len(parts) > 1 else parts[0]
    if head or tail:
        joined = pc.binary_join_element_wise(head, joined, tail, "")
    values: list[str] = joined.to_pylist()
    return values


def row_changes(table: TargetTable, rows: pa.Table) -> Iterator[DML]:
    """The DMLs of a decoded piece (``transform.changes`` columns) in its row order. The rows are
    rendered by Arrow; Python gets one string per row and one per ``table.indexed`` column."""
    bits = table.bit_columns
    new = [_rendered(rows.column(n), i in bits) for i, n in enumerate(table.columns)]
    rendered = _joined(new, ", ", "(", ")")
    values = list(zip(*(new[i].to_pylist() for i in table.indexed)))
    ops = rows.column(ch.OP).to_pylist()
    commits = rows.column(ch.COMMIT_TS).to_pylist()
    olds: dict[int, tuple[str, ...]] = {}
    sets: dict[int, str] = {}
    if ch.BEFORE in rows.column_names and "U" in ops:
        updates = pa.array([r for r, op in enumerate(ops) if op == "U"], pa.int64())
        chunks = rows.column(ch.BEFORE).chunks
        before = pa.concat_arrays(chunks).take(updates)
        old = zip(*(_rendered(before.field(table.columns[i]), i in bits).to_pylist() for i in table.indexed))
        assignments = [pc.binary_join_element_wise(f"{quote(c)} = ", v.take(updates), "")
                       for c, v in zip(table.columns, new)]
        olds = dict(zip(updates.to_pylist(), old))
        sets = dict(zip(updates.to_pylist(), _joined(assignments, ", ")))
    for r, (op, row, vals) in enumerate(zip(ops, rendered, values)):
        yield DML(table, op, row, vals, olds.get(r) if op == "U" else None, commits[r], sets.get(r, ""))


def insert_statements(table: TargetTable, rows: pa.Table, rows_per_statement: int) -> Iterator[str]:
    """``rows`` (a table's columns, decoded Arrow types) as multi-row ``INSERT`` statements of at most
    ``rows_per_statement`` rows and about ``MAX_STATEMENT_BYTES`` each (a restore's bulk load)."""
    bits = table.bit_columns
    rendered = _joined([_rendered(rows.column(n), i in bits) for i, n in enumerate(table.columns)], ", ", "(", ")")
    head = f"INSERT INTO {table.qualified} {table.column_list} VALUES "
    for run in _chunks(rendered, rows_per_statement):
        yield head + ", ".join(run)
