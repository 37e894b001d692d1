"""A fast path for the DML shapes loads send most: it parses them without sqlglot (about 30x faster)
and gives exactly the statement objects ``upstream.sql.parse`` would.

Covered: ``INSERT|REPLACE INTO [db.]t [(c, …)] VALUES (…), …``, ``UPDATE [db.]t SET c = v, …
[WHERE …]`` and ``DELETE FROM [db.]t [WHERE …]``, where values are literals (integers, decimals,
floats, quoted strings without backslashes, NULL, TRUE/FALSE, DEFAULT in VALUES) and a WHERE is
``col op literal`` / ``col [NOT] IN (literals…)`` / ``col IS [NOT] NULL`` / ``col BETWEEN lit AND
lit`` / ``col [NOT] LIKE 'pattern'`` joined by AND. ``parse`` answers None for anything else, and
the caller falls back to sqlglot, so the fast path never refuses a statement.
"""
from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from upstream.coltypes import DEFAULT
from upstream.exprs import And, Between, Cmp, Col, Expr, InList, IsNull, Like, Lit

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<str>'(?:[^'\\]|'')*')
    | (?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)
    | `(?P<qid>[^`]+)`
    | (?P<id>[A-Za-z_][A-Za-z0-9_$]*)
    | (?P<op><=|>=|!=|<>|[(),.=<>\-;])
    )""", re.X)
_INT = re.compile(r"^\d+$")
_CMP = {"=": "=", "!=": "!=", "<>": "!=", "<": "<", ">": ">", "<=": "<=", ">=": ">="}
_RESERVED = {"VALUES", "VALUE", "SET", "WHERE", "AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE",
             "DEFAULT", "INTO", "FROM", "LIKE", "BETWEEN", "SELECT", "ON", "LIMIT", "ORDER", "BY"}


class _Miss(Exception):
    """The statement is outside the fast path."""


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos >= n:
            return out
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise _Miss
        pos = m.end()
        kind = m.lastgroup
        if kind == "str":
            out.append(("lit", m.group("str")[1:-1].replace("''", "'")))
        elif kind == "num":
            t = m.group("num")
            out.append(("lit", int(t) if _INT.match(t) else float(t) if "e" in t.lower() else Decimal(t)))
        elif kind == "qid":
            out.append(("id", m.group("qid")))
        elif kind == "id":
            word = m.group("id")
            up = word.upper()
            out.append(("kw", up) if up in _RESERVED else ("id", word))
        else:
            out.append(("op", m.group("op")))


class _Parser:
    def __init__(self, tokens: list[tuple[str, Any]]) -> None:
        self.t = tokens
        self.i = 0

    def peek(self) -> tuple[str, Any] | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self, kind: str, value: Any = None) -> Any:
        tok = self.peek()
        if tok is None or tok[0] != kind or (value is not None and tok[1] != value):
            raise _Miss
        self.i += 1
        return tok[1]

    def maybe(self, kind: str, value: Any) -> bool:
        tok = self.peek()
        if tok is not None and tok[0] == kind and tok[1] == value:
            self.i += 1
            return True
        return False

    def end(self) -> None:
        self.maybe("op", ";")
        if self.i != len(self.t):
            raise _Miss

    def table(self) -> tuple[str | None, str]:
        first = self.take("id")
        if self.maybe("op", "."):
            return first, self.take("id")
        return None, first

    def literal(self, allow_default: bool = False) -> Any:
        tok = self.peek()
        if tok is None:
            raise _Miss
        self.i += 1
        kind, v = tok
        if kind == "lit":
            return v
        if kind == "op" and v == "-":
            nxt = self.take("lit")
            if isinstance(nxt, str):
                raise _Miss
            return -nxt
        if kind == "kw":
            if v == "NULL":
                return None
            if v == "TRUE":
                return 1
            if v == "FALSE":
                return 0
            if v == "DEFAULT" and allow_default:
                return DEFAULT
        raise _Miss

    def condition(self) -> Expr:
        col = Col(self.take("id"))
        tok = self.peek()
        if tok is None:
            raise _Miss
        if tok[0] == "op" and tok[1] in _CMP:
            self.i += 1
            return Cmp(_CMP[tok[1]], col, Lit(self.literal()))
        negate = self.maybe("kw", "NOT")
        if self.maybe("kw", "IN"):
            self.take("op", "(")
            items = [Lit(self.literal())]
            while self.maybe("op", ","):
                items.append(Lit(self.literal()))
            self.take("op", ")")
            return InList(col, tuple(items), negate)
        if self.maybe("kw", "LIKE"):
            pattern = self.literal()
            if not isinstance(pattern, str):
                raise _Miss
            return Like(col, Lit(pattern), negate)
        if self.maybe("kw", "BETWEEN"):
            low = self.literal()
            self.take("kw", "AND")
            return Between(col, Lit(low), Lit(self.literal()), negate)
        if negate:
            raise _Miss
        if self.maybe("kw", "IS"):
            negate = self.maybe("kw", "NOT")
            self.take("kw", "NULL")
            return IsNull(col, negate)
        raise _Miss

    def where(self) -> Expr | None:
        if not self.maybe("kw", "WHERE"):
            return None
        e = self.condition()
        while self.maybe("kw", "AND"):
            e = And((e, self.condition()))
        return e


def parse(text: str) -> Any:
    """The statement object for ``text`` when it is one of the covered shapes, else None."""
    head = text[:7].upper()
    if not (head.startswith("INSERT") or head.startswith("REPLACE") or head.startswith("UPDATE")
            or head.startswith("DELETE")):
        return None
    if "\\" in text or "--" in text or "/*" in text or "#" in text:
        return None
    from upstream import sql as S

    try:
        p = _Parser(_tokens(text))
        verb = p.take("id").upper()
        if verb in ("INSERT", "REPLACE"):
            p.take("kw", "INTO")
            db, table = p.table()
            columns = None
            if p.maybe("op", "("):
                columns = [p.take("id")]
                while p.maybe("op", ","):
                    columns.append(p.take("id"))
                p.take("op", ")")
            if not (p.maybe("kw", "VALUES") or p.maybe("kw", "VALUE")):
                return None
            rows = []
            while True:
                p.take("op", "(")
                row = [p.literal(True)]
                while p.maybe("op", ","):
                    row.append(p.literal(True))
                p.take("op", ")")
                rows.append(row)
                if not p.maybe("op", ","):
                    break
            p.end()
            return S.Insert(db, table, columns, rows, verb == "REPLACE", text=text)
        if verb == "UPDATE":
            db, table = p.table()
            p.take("kw", "SET")
            assigns: list[tuple[str, Expr]] = []
            while True:
                name = p.take("id")
                p.take("op", "=")
                assigns.append((name, Lit(p.literal())))
                if not p.maybe("op", ","):
                    break
            where = p.where()
            p.end()
            return S.Update(db, table, assigns, where, text=text)
        if verb == "DELETE":
            p.take("kw", "FROM")
            db, table = p.table()
            where = p.where()
            p.end()
            return S.Delete(db, table, where, text=text)
    except _Miss:
        return None
    return None
