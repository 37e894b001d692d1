"""A partition expression of TiDB's (its restored text: ``YEAR(`d`)``, ``(`a` DIV 2)``) parsed and
evaluated with MySQL's semantics over the values the lake holds: the functions TiDB allows in a
partition expression (``TO_DAYS``, ``YEAR``, ``UNIX_TIMESTAMP``, ``EXTRACT``, …) and ``+ - * DIV MOD``
(``transform.partitions`` places rows by it). The grammar is small and TiDB writes it one way, so it
is parsed here rather than by a SQL library that would rewrite the functions into its own.
"""
from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable, Mapping
from typing import Any

from transform.codec import mysqltypes as mt
from transform.codec.model import ColumnInfo
from transform.codec.values import naive_utc
from transform.errors import PartitionError

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_QUOTED = re.compile(r"^'((?:[^'\\]|\\.|'')*)'$", re.S)


def unquote(text: str) -> str | None:
    """A SQL string literal's text ('' and backslash escapes undone); None when ``text`` is not one."""
    m = _QUOTED.match(text.strip())
    if m is None:
        return None
    return re.sub(r"\\(.)|''", lambda x: x.group(1) if x.group(1) is not None else "'", m.group(1))


def duration_us(text: str) -> int:
    """TIME text (``[-]HH:MM:SS[.frac]``) as microseconds."""
    sign = -1 if text.startswith("-") else 1
    parts = text.lstrip("-").split(":")
    if len(parts) != 3:
        raise ValueError(text)
    secs, _, frac = parts[2].partition(".")
    return sign * ((int(parts[0]) * 3600 + int(parts[1]) * 60 + int(secs)) * 1_000_000 + int((frac + "000000")[:6]))




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
            text = unquote(value)
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
        return dt.timedelta(microseconds=duration_us(v))
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
