"""A tiny expression language for WHERE clauses and SET assignments (both from SQL and from workloads).

Evaluation uses SQL three-valued logic: comparisons with NULL are unknown (``None``), a row matches
only when the predicate is true. Literals are converted to the compared column's type first, so
``d = '2020-01-01'`` compares dates, not strings.
"""
from __future__ import annotations

import datetime as dt
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from transform.codec.model import ColumnInfo, TableInfo
from upstream.coltypes import coerce
from upstream.errors import SQLError, UpstreamError

Getter = Callable[[dict[int, Any]], Any]


class Expr:
    """Base class of expressions."""


@dataclass(frozen=True)
class Col(Expr):
    """A column reference."""

    name: str


@dataclass(frozen=True)
class Lit(Expr):
    """A literal value (int, float, Decimal, str, bytes, bool, None, date/datetime)."""

    value: Any


@dataclass(frozen=True)
class Now(Expr):
    """``NOW()`` / ``CURRENT_TIMESTAMP`` (UTC, the session time zone)."""

    fsp: int = 0


@dataclass(frozen=True)
class Cmp(Expr):
    """``a <op> b`` with op one of = != < > <= >=."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class InList(Expr):
    """``a [NOT] IN (v, …)``."""

    left: Expr
    items: tuple[Expr, ...]
    negate: bool = False


@dataclass(frozen=True)
class IsNull(Expr):
    """``a IS [NOT] NULL``."""

    arg: Expr
    negate: bool = False


@dataclass(frozen=True)
class And(Expr):
    """Conjunction."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Or(Expr):
    """Disjunction."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Not(Expr):
    """Negation."""

    arg: Expr


@dataclass(frozen=True)
class Between(Expr):
    """``a [NOT] BETWEEN low AND high`` (both ends included)."""

    arg: Expr
    low: Expr
    high: Expr
    negate: bool = False


@dataclass(frozen=True)
class Like(Expr):
    """``a [NOT] LIKE pattern`` (``%`` any run, ``_`` one character, ``\\`` escapes)."""

    arg: Expr
    pattern: Expr
    negate: bool = False


def like_regex(pattern: str, ci: bool) -> re.Pattern[str]:
    """The regular expression of a LIKE pattern (whole-string match)."""
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.S | (re.I if ci else 0))


@dataclass(frozen=True)
class Arith(Expr):
    """``a + b``, ``a - b``, ``a * b``."""

    op: str
    left: Expr
    right: Expr


_CMP = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, ">": operator.gt, "<=": operator.le,
        ">=": operator.ge}
_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def now_utc(fsp: int = 6) -> dt.datetime:
    """The current time in UTC (naive), truncated to ``fsp`` digits."""
    t = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    unit = 10 ** (6 - fsp)
    return t.replace(microsecond=t.microsecond // unit * unit)


class Compiler:
    """Compiles expressions against one table into functions of a row ``{column id: value}``."""

    def __init__(self, table: TableInfo) -> None:
        self.table = table
        self._cols = {c.name.lower(): c for c in table.columns}

    def column(self, name: str) -> ColumnInfo:
        """The column named ``name`` or ``SQLError`` Unknown column."""
        c = self._cols.get(name.lower())
        if c is None:
            raise SQLError(f"[planner:1054]Unknown column '{name}' in '{self.table.name}'")
        return c

    def value(self, e: Expr, like: ColumnInfo | None = None) -> Getter:
        """A getter of the expression's value (a literal is converted to ``like``'s type when given)."""
        if isinstance(e, Col):
            cid = self.column(e.name).id
            return lambda row: row.get(cid)
        if isinstance(e, Lit):
            v = e.value
            if like is not None and v is not None:
                try:
                    v = coerce(like, v)
                except UpstreamError:
                    v = e.value
            return lambda row: v
        if isinstance(e, Now):
            return lambda row: now_utc(e.fsp)
        if isinstance(e, Arith):
            a, b = self.value(e.left), self.value(e.right)
            f = _ARITH[e.op]

            def arith(row: dict[int, Any]) -> Any:
                x, y = a(row), b(row)
                if x is None or y is None:
                    return None
                if isinstance(x, Decimal) and isinstance(y, float) or isinstance(y, Decimal) and isinstance(x, float):
                    x, y = float(x), float(y)
                return f(x, y)
            return arith
        return self.predicate(e)

    def _operand_col(self, e: Expr) -> ColumnInfo | None:
        return self.column(e.name) if isinstance(e, Col) else None

    def predicate(self, e: Expr) -> Getter:
        """A getter returning True, False or None (unknown)."""
        if isinstance(e, Cmp):
            like = self._operand_col(e.left) or self._operand_col(e.right)
            a, b = self.value(e.left, like), self.value(e.right, like)
            f = _CMP[e.op]
            ci = like is not None and like.type.collate.lower().endswith("_ci")

            def cmp(row: dict[int, Any]) -> Any:
                x, y = a(row), b(row)
                if x is None or y is None:
                    return None
                if ci and isinstance(x, str) and isinstance(y, str):
                    x, y = x.casefold(), y.casefold()
                try:
                    return f(x, y)
                except TypeError:
                    return f(str(x), str(y))
            return cmp
        if isinstance(e, InList):
            like = self._operand_col(e.left)
            a = self.value(e.left, like)
            items = [self.value(i, like) for i in e.items]
            negate = e.negate

            def isin(row: dict[int, Any]) -> Any:
                x = a(row)
                if x is None:
                    return None
                vals = [g(row) for g in items]
                hit = x in [v for v in vals if v is not None]
                if not hit and any(v is None for v in vals):
                    return None
                return not hit if negate else hit
            return isin
        if isinstance(e, Between):
            arg = e.arg
            both = And((Cmp(">=", arg, e.low), Cmp("<=", arg, e.high)))
            return self.predicate(Not(both) if e.negate else both)
        if isinstance(e, Like):
            like = self._operand_col(e.arg)
            a = self.value(e.arg)
            pat = self.value(e.pattern)
            ci = like is not None and like.type.collate.lower().endswith("_ci")
            negate = e.negate
            cache: dict[str, re.Pattern[str]] = {}

            def matches(row: dict[int, Any]) -> Any:
                x, p = a(row), pat(row)
                if x is None or p is None:
                    return None
                if isinstance(x, (bytes, bytearray)):
                    x = bytes(x).decode("utf-8", "surrogateescape")
                p = str(p)
                rx = cache.get(p)
                if rx is None:
                    rx = cache[p] = like_regex(p, ci)
                hit = rx.fullmatch(str(x)) is not None
                return not hit if negate else hit
            return matches
        if isinstance(e, IsNull):
            a = self.value(e.arg)
            return (lambda row: a(row) is not None) if e.negate else (lambda row: a(row) is None)
        if isinstance(e, And):
            parts = [self.predicate(i) for i in e.items]

            def conj(row: dict[int, Any]) -> Any:
                unknown = False
                for p in parts:
                    r = p(row)
                    if r is None:
                        unknown = True
                    elif not r:
                        return False
                return None if unknown else True
            return conj
        if isinstance(e, Or):
            parts = [self.predicate(i) for i in e.items]

            def disj(row: dict[int, Any]) -> Any:
                unknown = False
                for p in parts:
                    r = p(row)
                    if r is None:
                        unknown = True
                    elif r:
                        return True
                return None if unknown else False
            return disj
        if isinstance(e, Not):
            p = self.predicate(e.arg)

            def neg(row: dict[int, Any]) -> Any:
                r = p(row)
                return None if r is None else not r
            return neg
        if isinstance(e, (Col, Lit, Arith, Now)):
            g = self.value(e)
            return lambda row: None if g(row) is None else bool(g(row))
        raise SQLError(f"cannot evaluate {type(e).__name__}")


def point_values(where: Expr | None, column: str) -> list[Any] | None:
    """If ``where`` pins ``column`` to literal values (``col = v``, ``col IN (…)``, possibly AND-ed
    with other conditions), return those values; else None (a scan is needed)."""
    if where is None:
        return None
    low = column.lower()
    if isinstance(where, Cmp) and where.op == "=":
        if isinstance(where.left, Col) and where.left.name.lower() == low and isinstance(where.right, Lit):
            return [where.right.value]
        if isinstance(where.right, Col) and where.right.name.lower() == low and isinstance(where.left, Lit):
            return [where.left.value]
    if isinstance(where, InList) and not where.negate and isinstance(where.left, Col) \
            and where.left.name.lower() == low:
        values = [i.value for i in where.items if isinstance(i, Lit)]
        if len(values) == len(where.items):
            return values
    if isinstance(where, And):
        for item in where.items:
            found = point_values(item, column)
            if found is not None:
                return found
    return None
