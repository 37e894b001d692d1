"""Which partition of a partitioned table a row is in, as TiDB places it.

TiDB's binlogs name a partitioned table's rows by the *logical* table id (``TableMutation.table_id``),
never by partition: a consumer that must know which rows a partition holds (a partition dropped,
truncated or exchanged) computes it from the table's ``partition`` metadata, as TiDB does when it
writes a row (``table/tables/partition.go`` ``locatePartition``):

- RANGE: the first partition whose bound is above the expression's value (a NULL value: the first);
  RANGE COLUMNS: the first whose bound tuple is above the row's (``MAXVALUE`` above everything);
- LIST / LIST COLUMNS: the partition listing the value (NULL matches ``NULL``), else the DEFAULT one;
- HASH: ``|value| mod num`` (NULL: 0); KEY: CRC-32 of the columns' hash keys ``mod num``.

The expression (TiDB's restored text, ``YEAR(`d`)``) is evaluated by ``transform.partition_expr``. A row
it cannot place (a value binlake does not hold as TiDB does: a zero date the lake keeps as NULL, a
string under a collation other than a binary one or ASCII text under a ``_ci`` one, a KEY column of a
type whose hash key binlake does not form) raises :class:`PartitionError` naming the table, the
partitioning and the value: never a guess.
"""
from __future__ import annotations

import datetime as dt
import decimal
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from transform.codec import mysqltypes as mt
from transform.codec.model import ColumnInfo, TableInfo
from transform.errors import PartitionError as PartitionError
from transform.partition_expr import Expr, duration_us, parse_expression, unquote

RANGE, HASH, LIST, KEY = 1, 2, 3, 4
TYPE_NAMES = {RANGE: "RANGE", HASH: "HASH", LIST: "LIST", KEY: "KEY"}
MAXVALUE = object()   # a RANGE bound above every value
DEFAULT = "DEFAULT"   # LIST: the partition of every value no other lists


@dataclass(frozen=True)
class PartitionDef:
    """One partition: its physical id, name and bound (``less_than``, RANGE) or values (``in_values``,
    LIST), as TiDB stores them (SQL constant text)."""

    id: int
    name: str
    less_than: tuple[str, ...] = ()
    in_values: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class Partitioning:
    """A table's partitioning (TiDB ``PartitionInfo``): type, expression or columns, partitions in
    order, and the HASH/KEY modulus ``num``."""

    type: int
    expr: str
    columns: tuple[str, ...]
    definitions: tuple[PartitionDef, ...]
    num: int

    @classmethod
    def of(cls, table: TableInfo) -> Partitioning | None:
        """The table's partitioning; None when it is not partitioned (no ``partition`` or not enabled)."""
        raw = table.extra.get("partition")
        if not isinstance(raw, dict) or not raw.get("enable"):
            return None
        defs = tuple(PartitionDef(int(d["id"]), _cistr(d.get("name")),
                                  tuple(str(v) for v in d.get("less_than") or ()),
                                  tuple(tuple(str(v) for v in t) for t in d.get("in_values") or ()))
                     for d in raw.get("definitions") or ())
        cols = tuple(_cistr(c) for c in raw.get("columns") or ())
        return cls(int(raw.get("type") or 0), str(raw.get("expr") or ""), cols, defs,
                   int(raw.get("num") or len(defs)))

    @property
    def ids(self) -> tuple[int, ...]:
        """The partitions' physical ids, in order."""
        return tuple(d.id for d in self.definitions)

    def describe(self) -> str:
        """``RANGE (`id`)``, ``LIST COLUMNS (a, b)`` …, for messages."""
        kind = TYPE_NAMES.get(self.type, f"type {self.type}")
        if self.columns and self.type in (RANGE, LIST):
            return f"{kind} COLUMNS ({', '.join(self.columns)})"
        return f"{kind} ({self.expr or ', '.join(self.columns)})"


def _cistr(obj: Any) -> str:
    return str(obj.get("O", "")) if isinstance(obj, dict) else str(obj or "")


# ---------------------------------------------------------------------------------------------
# locating rows

def locate(table: TableInfo, rows: pa.Table) -> pa.Array:
    """The physical partition id of each row of ``rows`` (columns named as ``table``'s, values as the
    lake holds them) under ``table``'s partitioning, as an int64 array. :class:`PartitionError` for a
    row binlake cannot place (see the module doc); ``table`` must be partitioned."""
    part = Partitioning.of(table)
    if part is None:
        raise PartitionError(f"table {table.name} is not partitioned")
    return pa.array(Locator(table, part).ids(rows), pa.int64())


class Locator:
    """Places rows of one table under one partitioning (built once, used for many rows)."""

    def __init__(self, table: TableInfo, part: Partitioning) -> None:
        self.table = table
        self.part = part
        by_name = {c.name.lower(): c for c in table.columns}
        where = f"table {table.name} partitioned by {part.describe()}"
        self.where = where
        if part.type not in TYPE_NAMES:
            raise PartitionError(f"{where}: partition type {part.type} is not one TiDB places rows by")
        if part.columns:
            missing = [c for c in part.columns if c.lower() not in by_name]
            if missing:
                raise PartitionError(f"{where}: the partitioning names columns the table lacks: {missing}")
            self.cols = [by_name[c.lower()] for c in part.columns]
            self.expr: Expr | None = None
        else:
            self.cols = []
            self.expr = parse_expression(part.expr, by_name, where)
        self.place = self._placer()

    def ids(self, rows: pa.Table) -> list[int]:
        """The physical partition id of each row."""
        names = {c.lower(): c for c in rows.column_names}
        needed = self.cols if self.expr is None else self.expr.columns
        values: dict[str, list[Any]] = {}
        for col in needed:
            name = names.get(col.name.lower())
            if name is None:
                raise PartitionError(f"{self.where}: the rows lack column {col.name}")
            values[col.name.lower()] = rows.column(name).to_pylist()
        ids = self.part.ids
        out = []
        for i in range(rows.num_rows):
            row = {k: v[i] for k, v in values.items()}
            out.append(ids[self.place(row)])
        return out

    # -- per type ------------------------------------------------------------------------------

    def _listed(self, values: Sequence[str], cols: Sequence[ColumnInfo]) -> tuple[Any, ...]:
        """A LIST partition's value tuple as the key a row's values are looked up by."""
        if self.expr is not None:
            return (None if values[0].upper() == "NULL" else _int_text(values[0], self.where),)
        return tuple(None if v.upper() == "NULL" else _comparable(c, _constant(v, c, self.where), self.where)
                     for v, c in zip(values, cols))

    def _placer(self) -> Callable[[Mapping[str, Any]], int]:
        part, expr = self.part, self.expr
        if part.type == RANGE and expr is not None:
            bounds = [_int_bound(d.less_than, self.where) for d in part.definitions]
            return lambda row: _range_index(bounds, expr.value(row), self.where)
        if part.type == RANGE:
            cols = self.cols
            tuples = [tuple(MAXVALUE if v.upper() == "MAXVALUE" else _constant(v, c, self.where)
                            for v, c in zip(d.less_than, cols)) for d in part.definitions]
            return lambda row: _range_columns_index(tuples, [_comparable(c, row[c.name.lower()], self.where)
                                                             for c in cols], cols, self.where)
        if part.type == LIST:
            cols = self.cols if expr is None else []
            listed: dict[tuple[Any, ...], int] = {}
            default = None
            for i, d in enumerate(part.definitions):
                for values in d.in_values:
                    if len(values) == 1 and values[0].upper() == DEFAULT:
                        default = i
                        continue
                    listed.setdefault(self._listed(values, cols), i)

            def place(row: Mapping[str, Any]) -> int:
                key = ((expr.value(row),) if expr is not None
                       else tuple(_comparable(c, row[c.name.lower()], self.where) for c in cols))
                found = listed.get(key, default)
                if found is None:
                    raise PartitionError(f"{self.where}: no partition lists the value {key}")
                return found
            return place
        if part.type == HASH and expr is not None:
            num = part.num

            def hashed(row: Mapping[str, Any]) -> int:
                v = expr.value(row)
                return 0 if v is None else abs(_int64(v)) % num
            return hashed
        if part.type == KEY:
            cols, num = self.cols, part.num
            return lambda row: zlib.crc32(b"".join(_hash_key(c, row[c.name.lower()], self.where)
                                                   for c in cols)) % num
        raise PartitionError(f"{self.where}: binlake does not place rows of this partitioning")


def _int64(v: int) -> int:
    """An integer as TiDB's int64 holds it (an unsigned value's bits read as signed)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def _int_text(text: str, where: str) -> int:
    try:
        return int(text.strip().strip("'"))
    except ValueError:
        raise PartitionError(f"{where}: the partition value {text!r} is not an integer") from None


def _int_bound(less_than: Sequence[str], where: str) -> int | None:
    """A RANGE partition's bound (None: MAXVALUE)."""
    if len(less_than) != 1:
        raise PartitionError(f"{where}: a RANGE partition's bound should be one value, got {list(less_than)}")
    return None if less_than[0].strip().upper() == "MAXVALUE" else _int_text(less_than[0], where)


def _range_index(bounds: Sequence[int | None], v: int | None, where: str) -> int:
    if v is None:
        return 0
    for i, b in enumerate(bounds):
        if b is None or v < b:
            return i
    raise PartitionError(f"{where}: no partition takes the value {v}")


def _range_columns_index(tuples: Sequence[tuple[Any, ...]], row: Sequence[Any], cols: Sequence[ColumnInfo],
                         where: str) -> int:
    """The first partition whose bound tuple is above ``row`` (a NULL compares lowest; MAXVALUE at a
    position makes the rest of the comparison true)."""
    for i, bound in enumerate(tuples):
        if _tuple_below(row, [b if b is MAXVALUE else _comparable(c, b, where) for b, c in zip(bound, cols)]):
            return i
    raise PartitionError(f"{where}: no partition takes the values {list(row)}")


def _tuple_below(row: Sequence[Any], bound: Sequence[Any]) -> bool:
    for v, b in zip(row, bound):
        if b is MAXVALUE or v is None:
            return True
        if v < b:
            return True
        if v > b:
            return False
    return False


# ---------------------------------------------------------------------------------------------
# values: what the lake holds, made comparable as TiDB compares them

_BINARY_HEX = re.compile(r"^_binary\s+0x([0-9a-fA-F]*)$|^[xX]'([0-9a-fA-F]*)'$")


def _constant(text: str, col: ColumnInfo, where: str) -> Any:
    """A COLUMNS partition value (TiDB's constant text: ``10``, ``'2020-01-01'``, ``_binary 0x61``) as
    a value of ``col``'s type."""
    text = text.strip()
    hexed = _BINARY_HEX.match(text)
    if hexed:
        raw = bytes.fromhex(hexed.group(1) if hexed.group(1) is not None else hexed.group(2))
        return raw if col.binary else raw.decode("utf-8", "replace")
    quoted = unquote(text)
    value = quoted if quoted is not None else text
    family = col.family
    try:
        if family in (mt.Family.INT, mt.Family.YEAR):
            return int(decimal.Decimal(value))
        if family is mt.Family.DATE:
            return dt.date.fromisoformat(value[:10])
        if family in (mt.Family.DATETIME, mt.Family.TIMESTAMP):
            return _datetime(value)
        if family is mt.Family.DURATION:
            return duration_us(value)
        if family is mt.Family.STRING:
            return value.encode() if col.binary else value
    except ValueError:
        pass
    raise PartitionError(f"{where}: the partition value {text!r} is not a {col.mysql_type.name} value")


def _datetime(text: str) -> dt.datetime:
    text = text.strip()
    if len(text) == 10:
        return dt.datetime.fromisoformat(text)
    return dt.datetime.fromisoformat(text.replace(" ", "T", 1))


def _comparable(col: ColumnInfo, v: Any, where: str) -> Any:
    """``v`` (a lake value or a parsed constant of ``col``) in a form that compares as TiDB compares
    values of ``col``: strings by a binary collation (trailing spaces ignored under PAD SPACE ones) or,
    under a ``_ci`` one, ASCII text case-folded; datetimes naive (TIMESTAMP in UTC)."""
    if v is None:
        return None
    family = col.family
    if family in (mt.Family.INT, mt.Family.YEAR):
        return int(v)
    if family is mt.Family.DURATION:
        return duration_us(v) if isinstance(v, str) else v
    if family is mt.Family.TIMESTAMP and isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.UTC).replace(tzinfo=None)
    if family is mt.Family.STRING:
        return _collation_key(col, v, where)
    return v


def _collation_key(col: ColumnInfo, v: str | bytes, where: str) -> bytes:
    """The bytes TiDB compares a string of ``col`` by (its collation key, for the collations binlake
    knows: binary, ``*_bin``, and the ``_ci`` ones for ASCII text)."""
    collate = (col.type.collate or "").lower()
    raw = v if isinstance(v, bytes) else v.encode()
    if col.binary or collate in ("binary", "utf8mb4_0900_bin"):
        return bytes(raw)
    if collate.endswith("_bin") or not collate:
        return raw.rstrip(b" ")
    if collate.endswith(("_general_ci", "_unicode_ci", "_0900_ai_ci")) and raw.isascii():
        return raw.rstrip(b" ").upper()
    raise PartitionError(f"{where}: column {col.name} holds {v!r} under collation {collate}, whose order binlake "
                         f"does not compute (binary and *_bin collations, and ASCII text under _ci ones, it does)")


def _hash_key(col: ColumnInfo, v: Any, where: str) -> bytes:
    """What TiDB feeds KEY partitioning's CRC-32 for one column's value (``Datum.ToHashKey``): one zero
    byte for NULL, a string's collation key, the text of a number, date or datetime."""
    if v is None:
        return b"\x00"
    family = col.family
    if family is mt.Family.STRING:
        if col.binary and col.tp == mt.TYPE_STRING and isinstance(v, bytes):
            v = v.ljust(max(col.type.flen, 0), b"\x00")
        return _collation_key(col, v, where)
    if family in (mt.Family.INT, mt.Family.YEAR):
        return str(int(v)).encode()
    if family is mt.Family.DATE:
        return str(v.isoformat()).encode()
    if family is mt.Family.DATETIME:
        return _datetime_text(v, col.fsp).encode()
    if family is mt.Family.DECIMAL:
        return f"{decimal.Decimal(v):.{max(col.type.decimal, 0)}f}".encode()
    if family is mt.Family.DURATION:
        return str(v).encode()
    raise PartitionError(f"{where}: KEY partitioning on column {col.name} of type {col.mysql_type.name}: binlake "
                         f"does not form TiDB's hash key of such values")


def _datetime_text(v: dt.datetime, fsp: int) -> str:
    text = v.strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{v.microsecond:06d}"[:20 + fsp] if fsp > 0 else text
