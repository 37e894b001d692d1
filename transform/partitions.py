"""Which partition of a partitioned table a row is in, as TiDB places it.

TiDB's binlogs name a partitioned table's rows by the *logical* table id (``TableMutation.table_id``),
never by partition: a consumer that must know which rows a partition holds (a partition dropped,
truncated or exchanged) computes it from the table's ``partition`` metadata, as TiDB does when it
writes a row (``table/tables/partition.go`` ``locatePartition``):

- RANGE: the first partition whose bound is above the expression's value (a NULL value: the first);
  RANGE COLUMNS: the first whose bound tuple is above the row's (``MAXVALUE`` above everything);
- LIST / LIST COLUMNS: the partition listing the value (NULL matches ``NULL``), else the DEFAULT one;
- HASH: ``|value| mod num`` (NULL: 0); KEY: CRC-32 of the columns' hash keys ``mod num``.

The expression is TiDB's restored text (``YEAR(`d`)``, ``(`a` DIV 2)``): this module parses it
and evaluates it with MySQL's semantics over the values the lake holds (the functions TiDB allows in
a partition expression: ``TO_DAYS``, ``YEAR``, ``UNIX_TIMESTAMP``, …, and ``+ - * DIV MOD``). A row
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
from transform.codec.values import naive_utc
from transform.errors import TransformError

RANGE, HASH, LIST, KEY = 1, 2, 3, 4
TYPE_NAMES = {RANGE: "RANGE", HASH: "HASH", LIST: "LIST", KEY: "KEY"}
MAXVALUE = object()   # a RANGE bound above every value
DEFAULT = "DEFAULT"   # LIST: the partition of every value no other lists
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class PartitionError(TransformError):
    """A row's partition cannot be known as TiDB knows it: an expression or value binlake does not
    evaluate as TiDB does, or no partition takes the value (terminal: the same rows meet it again)."""

    transient = False


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

_QUOTED = re.compile(r"^'((?:[^'\\]|\\.|'')*)'$", re.S)
_BINARY_HEX = re.compile(r"^_binary\s+0x([0-9a-fA-F]*)$|^[xX]'([0-9a-fA-F]*)'$")


def _unquote(text: str) -> str | None:
    m = _QUOTED.match(text.strip())
    if m is None:
        return None
    return re.sub(r"\\(.)|''", lambda x: x.group(1) if x.group(1) is not None else "'", m.group(1))


def _constant(text: str, col: ColumnInfo, where: str) -> Any:
    """A COLUMNS partition value (TiDB's constant text: ``10``, ``'2020-01-01'``, ``_binary 0x61``) as
    a value of ``col``'s type."""
    text = text.strip()
    hexed = _BINARY_HEX.match(text)
    if hexed:
        raw = bytes.fromhex(hexed.group(1) if hexed.group(1) is not None else hexed.group(2))
        return raw if col.binary else raw.decode("utf-8", "replace")
    quoted = _unquote(text)
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
            return _duration_us(value)
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


def _duration_us(text: str) -> int:
    """TIME text (``[-]HH:MM:SS[.frac]``) as microseconds."""
    sign = -1 if text.startswith("-") else 1
    parts = text.lstrip("-").split(":")
    if len(parts) != 3:
        raise ValueError(text)
    secs, _, frac = parts[2].partition(".")
    return sign * ((int(parts[0]) * 3600 + int(parts[1]) * 60 + int(secs)) * 1_000_000 + int((frac + "000000")[:6]))


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
        return _duration_us(v) if isinstance(v, str) else v
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


# ---------------------------------------------------------------------------------------------
# the partition expression

class Expr:
    """A parsed partition expression: :meth:`value` of a row (column name lower-cased → value)."""

    def __init__(self, fn: Callable[[Mapping[str, Any]], Any], columns: list[ColumnInfo]) -> None:
        self.fn = fn
        self.columns = columns

    def value(self, row: Mapping[str, Any]) -> int | None:
        """The expression's integer value for ``row`` (None: NULL)."""
        v = self.fn(row)
        if v is None:
            return None
        if isinstance(v, (decimal.Decimal, float)):   # EvalInt rounds half away from zero
            return int(decimal.Decimal(v).quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP))
        return int(v)


_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)+`)|(\d+(?:\.\d+)?)|('(?:[^'\\]|\\.|'')*')|([A-Za-z_][A-Za-z_0-9]*)"
                    r"|(\S))")


def parse_expression(text: str, columns: Mapping[str, ColumnInfo], where: str) -> Expr:
    """TiDB's restored partition expression over ``columns`` (by lower-cased name)."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise PartitionError(f"{where}: cannot read the partition expression {text!r} at {pos}")
        pos = m.end()
        kinds = ("ident", "number", "string", "word", "op")
        kind = next(k for k, g in zip(kinds, m.groups()) if g is not None)
        tokens.append((kind, m.group(m.lastindex or 0)))
    used: dict[str, ColumnInfo] = {}
    parser = _Parser(tokens, columns, used, where, text)
    fn = parser.expression()
    if parser.i != len(tokens):
        raise PartitionError(f"{where}: unexpected {tokens[parser.i][1]!r} in the partition expression {text!r}")
    return Expr(fn, list(used.values()))


Fn = Callable[[Mapping[str, Any]], Any]


class _Parser:
    """Recursive descent over the restored expression's grammar: sums of products of unary terms;
    a term is a column, a number, a function call, ``EXTRACT(unit FROM e)`` or a parenthesised sum."""

    def __init__(self, tokens: list[tuple[str, str]], columns: Mapping[str, ColumnInfo], used: dict[str, ColumnInfo],
                 where: str, text: str) -> None:
        self.tokens, self.columns, self.used, self.where, self.text = tokens, columns, used, where, text
        self.i = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok[0] == "end" or (value is not None and tok[1].upper() != value):
            raise PartitionError(f"{self.where}: expected {value or 'more'} in the partition expression {self.text!r}")
        self.i += 1
        return tok

    def expression(self) -> Fn:
        left = self.product()
        while self.peek()[1] in ("+", "-"):
            op = self.take()[1]
            left = _binary(op, left, self.product())
        return left

    def product(self) -> Fn:
        left = self.unary()
        while self.peek()[1] in ("*", "%", "/") or self.peek()[1].upper() in ("DIV", "MOD"):
            op = self.take()[1].upper()
            if op == "/":
                raise PartitionError(f"{self.where}: '/' is not allowed in a partition expression ({self.text!r})")
            left = _binary(op, left, self.unary())
        return left

    def unary(self) -> Fn:
        if self.peek()[1] == "-":
            self.take()
            inner = self.unary()
            return lambda row: None if (v := inner(row)) is None else -v
        if self.peek()[1] == "+":
            self.take()
        return self.primary()

    def primary(self) -> Fn:
        kind, value = self.take()
        if kind == "number":
            number = decimal.Decimal(value) if "." in value else int(value)
            return lambda row: number
        if kind == "word" and value.startswith("_") and self.peek()[0] == "string":   # _UTF8MB4'…'
            kind, value = self.take()
        if kind == "string":
            text = _unquote(value)
            return lambda row: text
        if kind == "ident" or (kind == "word" and self.peek()[1] != "("):
            name = value[1:-1].replace("``", "`") if kind == "ident" else value
            col = self.columns.get(name.lower())
            if col is None:
                raise PartitionError(f"{self.where}: the partition expression names column {name}, "
                                     f"which the table lacks")
            self.used[name.lower()] = col
            key = name.lower()
            return lambda row: _column_value(col, row[key])
        if value == "(":
            inner = self.expression()
            self.take(")")
            return inner
        if kind == "word":
            return self.call(value.upper())
        raise PartitionError(f"{self.where}: unexpected {value!r} in the partition expression {self.text!r}")

    def call(self, name: str) -> Fn:
        self.take("(")
        if name == "EXTRACT":
            unit = self.take()[1].upper()
            self.take("FROM")
            arg = self.expression()
            self.take(")")
            extract = _EXTRACT.get(unit)
            if extract is None:
                raise PartitionError(f"{self.where}: EXTRACT({unit} FROM …) is not one binlake evaluates")
            return lambda row: None if (v := arg(row)) is None else extract(v)
        args = [self.expression()]
        while self.peek()[1] == ",":
            self.take()
            args.append(self.expression())
        self.take(")")
        fn = _FUNCTIONS.get(name)
        if fn is None:
            raise PartitionError(f"{self.where}: the partition function {name} is not one binlake evaluates")
        def call(row: Mapping[str, Any]) -> Any:
            values = [a(row) for a in args]
            return None if any(v is None for v in values) else fn(*values)
        return call


def _column_value(col: ColumnInfo, v: Any) -> Any:
    """A lake value as the expression sees it: TIMESTAMP in UTC, TIME as a timedelta."""
    if v is None:
        return None
    if col.family is mt.Family.DURATION and isinstance(v, str):
        return dt.timedelta(microseconds=_duration_us(v))
    if col.family is mt.Family.DECIMAL and col.unsigned is False and isinstance(v, decimal.Decimal):
        return v
    if isinstance(v, decimal.Decimal) and v == v.to_integral_value():
        return int(v)
    return v


def _binary(op: str, left: Fn, right: Fn) -> Fn:
    def apply(row: Mapping[str, Any]) -> Any:
        a, b = left(row), right(row)
        if a is None or b is None:
            return None
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if b == 0:
            return None   # MySQL: DIV and MOD by zero are NULL
        if op == "DIV":
            q = abs(a) // abs(b)
            return int(q if (a >= 0) == (b >= 0) else -q)
        r = abs(a) % abs(b)   # MOD: the sign of the dividend
        return r if a >= 0 else -r
    return apply


def _as_datetime(v: Any) -> dt.datetime:
    at = naive_utc(v)
    if at is None:
        raise PartitionError(f"a date function got {v!r}")
    return at


def _seconds_of(v: Any) -> float:
    """Seconds of a TIME (timedelta) or of a datetime's time of day."""
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    d = _as_datetime(v)
    return d.hour * 3600 + d.minute * 60 + d.second + d.microsecond / 1e6


def _time_part(v: Any, part: str) -> int:
    if isinstance(v, dt.timedelta):
        us = abs(v) // dt.timedelta(microseconds=1)
        values = {"hour": us // 3_600_000_000, "minute": us // 60_000_000 % 60, "second": us // 1_000_000 % 60,
                  "microsecond": us % 1_000_000}
        return int(values[part])
    return int(getattr(_as_datetime(v), part))


def _to_days(v: Any) -> int:
    d = _as_datetime(v)
    return d.toordinal() + 365


def _days_in_year(year: int) -> int:
    return 366 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 365


def _week(d: dt.date, behaviour: int) -> tuple[int, int]:
    """MySQL's ``calc_week`` (TiDB's ``calcWeek``): (year, week) of ``d`` under a week behaviour
    (1: Monday first, 2: the week's own year, 4: the first day of the year's first week counts)."""
    monday_first, week_year, first_weekday = bool(behaviour & 1), bool(behaviour & 2), bool(behaviour & 4)
    daynr = d.toordinal() + 365
    first = dt.date(d.year, 1, 1).toordinal() + 365
    weekday = (first + 5 + (0 if monday_first else 1)) % 7
    year = d.year
    if d.month == 1 and d.day <= 7 - weekday:
        if not week_year and ((first_weekday and weekday != 0) or (not first_weekday and weekday >= 4)):
            return year, 0
        week_year = True
        year -= 1
        days = _days_in_year(year)
        first -= days
        weekday = (weekday + 53 * 7 - days) % 7
    if (first_weekday and weekday != 0) or (not first_weekday and weekday >= 4):
        days = daynr - (first + (7 - weekday))
    else:
        days = daynr - (first - weekday)
    if week_year and days >= 52 * 7:
        weekday = (weekday + _days_in_year(year)) % 7
        if (not first_weekday and weekday < 4) or (first_weekday and weekday == 0):
            return year + 1, 1
    return year, days // 7 + 1


def _week_behaviour(mode: int) -> int:
    """MySQL's ``week_mode``: a WEEK()/YEARWEEK() mode as the behaviour bits of :func:`_week`."""
    behaviour = mode & 7
    return behaviour if behaviour & 1 else behaviour ^ 4


def _yearweek(v: Any, mode: int = 0) -> int:
    year, week = _week(_as_datetime(v).date(), _week_behaviour(mode) | 2)
    return year * 100 + week


def _unix_timestamp(v: Any) -> Any:
    if not isinstance(v, dt.datetime) or v.tzinfo is None:
        raise PartitionError("UNIX_TIMESTAMP in a partition expression takes a TIMESTAMP column")
    delta = v - _EPOCH
    us = delta // dt.timedelta(microseconds=1)
    return decimal.Decimal(us) / 1_000_000 if us % 1_000_000 else us // 1_000_000


def _floor_ceil(v: Any, up: bool) -> int:
    q = decimal.Decimal(v).to_integral_value(rounding=decimal.ROUND_CEILING if up else decimal.ROUND_FLOOR)
    return int(q)


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "TO_DAYS": _to_days,
    "TO_SECONDS": lambda v: _to_days(v) * 86400 + int(_seconds_of(_as_datetime(v))),
    "YEAR": lambda v: _as_datetime(v).year,
    "MONTH": lambda v: _as_datetime(v).month,
    "DAY": lambda v: _as_datetime(v).day,
    "DAYOFMONTH": lambda v: _as_datetime(v).day,
    "DAYOFYEAR": lambda v: _as_datetime(v).timetuple().tm_yday,
    "QUARTER": lambda v: (_as_datetime(v).month - 1) // 3 + 1,
    "WEEKDAY": lambda v: _as_datetime(v).weekday(),
    "DAYOFWEEK": lambda v: (_as_datetime(v).weekday() + 1) % 7 + 1,
    "YEARWEEK": _yearweek,
    "HOUR": lambda v: _time_part(v, "hour"),
    "MINUTE": lambda v: _time_part(v, "minute"),
    "SECOND": lambda v: _time_part(v, "second"),
    "MICROSECOND": lambda v: _time_part(v, "microsecond"),
    "TIME_TO_SEC": lambda v: int(_seconds_of(v)),
    "UNIX_TIMESTAMP": _unix_timestamp,
    "DATEDIFF": lambda a, b: _as_datetime(a).toordinal() - _as_datetime(b).toordinal(),
    "ABS": abs,
    "CEILING": lambda v: _floor_ceil(v, True),
    "FLOOR": lambda v: _floor_ceil(v, False),
    "MOD": lambda a, b: _binary("%", lambda _: a, lambda _: b)({}),
}

_EXTRACT: dict[str, Callable[[Any], int]] = {
    "YEAR": lambda v: _as_datetime(v).year,
    "QUARTER": lambda v: (_as_datetime(v).month - 1) // 3 + 1,
    "MONTH": lambda v: _as_datetime(v).month,
    "DAY": lambda v: _as_datetime(v).day,
    "HOUR": lambda v: _time_part(v, "hour"),
    "MINUTE": lambda v: _time_part(v, "minute"),
    "SECOND": lambda v: _time_part(v, "second"),
    "MICROSECOND": lambda v: _time_part(v, "microsecond"),
    "YEAR_MONTH": lambda v: _as_datetime(v).year * 100 + _as_datetime(v).month,
    "DAY_HOUR": lambda v: _as_datetime(v).day * 100 + _as_datetime(v).hour,
    "DAY_MINUTE": lambda v: (_as_datetime(v).day * 100 + _as_datetime(v).hour) * 100 + _as_datetime(v).minute,
    "DAY_SECOND": lambda v: int(_as_datetime(v).strftime("%d%H%M%S")),
    "DAY_MICROSECOND": lambda v: int(_as_datetime(v).strftime("%d%H%M%S%f")),
    "HOUR_MINUTE": lambda v: _time_part(v, "hour") * 100 + _time_part(v, "minute"),
    "HOUR_SECOND": lambda v: (_time_part(v, "hour") * 100 + _time_part(v, "minute")) * 100 + _time_part(v, "second"),
    "HOUR_MICROSECOND": lambda v: ((_time_part(v, "hour") * 100 + _time_part(v, "minute")) * 100
                                   + _time_part(v, "second")) * 1_000_000 + _time_part(v, "microsecond"),
    "MINUTE_SECOND": lambda v: _time_part(v, "minute") * 100 + _time_part(v, "second"),
    "MINUTE_MICROSECOND": lambda v: (_time_part(v, "minute") * 100 + _time_part(v, "second")) * 1_000_000
                                    + _time_part(v, "microsecond"),
    "SECOND_MICROSECOND": lambda v: _time_part(v, "second") * 1_000_000 + _time_part(v, "microsecond"),
}
