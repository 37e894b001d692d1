"""SQL text → statements the emulator executes (sqlglot, MySQL dialect).

``split`` cuts a script into statements (quotes and comments aware); ``parse`` turns one statement
into a small statement object. Anything outside the supported subset raises ``UnsupportedSQL``
naming the construct. DDL statements keep their sqlglot tree for ``upstream.ddl``.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from upstream import fastsql
from upstream.coltypes import DEFAULT
from upstream.errors import UnsupportedSQL
from upstream.exprs import And, Arith, Between, Cmp, Col, Expr, InList, IsNull, Like, Lit, Not, Now, Or

logging.getLogger("sqlglot").setLevel(logging.ERROR)  # its "falling back to Command" warnings

# ---- statements -----------------------------------------------------------------------------

@dataclass
class Statement:
    """Base class; ``text`` is the statement as written."""

    text: str = field(default="", kw_only=True)


@dataclass
class Begin(Statement):
    """BEGIN / START TRANSACTION."""


@dataclass
class Commit(Statement):
    """COMMIT."""


@dataclass
class Rollback(Statement):
    """ROLLBACK."""


@dataclass
class Use(Statement):
    """USE db."""

    db: str


@dataclass
class SetVar(Statement):
    """SET [@@session.]name = value (only a few TiDB variables are understood)."""

    name: str
    value: Any


@dataclass
class Insert(Statement):
    """INSERT/REPLACE … VALUES (…), (…) — values are Python literals, ``DEFAULT`` or ``Now``."""

    db: str | None
    table: str
    columns: list[str] | None
    rows: list[list[Any]]
    replace: bool = False


@dataclass
class Update(Statement):
    """UPDATE t SET c = expr, … [WHERE …]."""

    db: str | None
    table: str
    assignments: list[tuple[str, Expr]]
    where: Expr | None = None


@dataclass
class Delete(Statement):
    """DELETE FROM t [WHERE …]."""

    db: str | None
    table: str
    where: Expr | None = None


@dataclass
class DDL(Statement):
    """A DDL statement: ``kind`` names the action; ``tree`` is sqlglot's parse (None for RENAME)."""

    kind: str
    tree: Any = None
    clustered: bool | None = None     # PRIMARY KEY … CLUSTERED / NONCLUSTERED, None when not said
    rename: list[tuple[tuple[str | None, str], tuple[str | None, str]]] | None = None


# ---- splitting ------------------------------------------------------------------------------

def split(script: str) -> list[str]:
    """The statements of a script, without their ``;`` (comments and quoted ``;`` respected)."""
    out: list[str] = []
    buf: list[str] = []
    i, n = 0, len(script)
    quote = ""
    while i < n:
        ch = script[i]
        if quote:
            buf.append(ch)
            if ch == "\\" and quote != "`" and i + 1 < n:
                buf.append(script[i + 1])
                i += 2
                continue
            if ch == quote:
                if i + 1 < n and script[i + 1] == quote:
                    buf.append(quote)
                    i += 2
                    continue
                quote = ""
            i += 1
            continue
        if ch in "'\"`":
            quote = ch
            buf.append(ch)
        elif ch == ";":
            out.append("".join(buf))
            buf = []
        elif ch == "-" and script.startswith("-- ", i) or ch == "#":
            j = script.find("\n", i)
            i = n if j < 0 else j
            continue
        elif ch == "/" and script.startswith("/*", i) and not script.startswith("/*!", i) \
                and not script.startswith("/*T!", i):
            j = script.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        else:
            buf.append(ch)
        i += 1
    out.append("".join(buf))
    return [s.strip() for s in out if s.strip()]


# ---- parsing --------------------------------------------------------------------------------

_CLUSTERED = re.compile(r"\b(NON)?CLUSTERED\b", re.I)
_RENAME = re.compile(r"^\s*RENAME\s+TABLE\s+(.+)$", re.I | re.S)
_NAME = r"(?:`([^`]+)`|([A-Za-z0-9_$]+))"
_QNAME = re.compile(rf"^\s*(?:{_NAME}\s*\.\s*)?{_NAME}\s*$")
_REPLACE = re.compile(r"^\s*REPLACE\b", re.I)
_BEGIN = re.compile(r"^\s*(BEGIN|START\s+TRANSACTION)(\s+(PESSIMISTIC|OPTIMISTIC))?\s*$", re.I)


def _qname(text: str, stmt: str) -> tuple[str | None, str]:
    m = _QNAME.match(text)
    if not m:
        raise UnsupportedSQL(f"table name {text.strip()!r}", stmt)
    db = m.group(1) or m.group(2)
    return db, (m.group(3) or m.group(4))


def _parse_rename(stmt: str, body: str) -> DDL:
    pairs = []
    for part in body.split(","):
        m = re.match(r"^\s*(.+?)\s+TO\s+(.+?)\s*$", part, re.I | re.S)
        if not m:
            raise UnsupportedSQL("RENAME TABLE syntax", stmt)
        pairs.append((_qname(m.group(1), stmt), _qname(m.group(2), stmt)))
    if len(pairs) != 1:
        raise UnsupportedSQL("RENAME TABLE of several tables in one statement (ActionRenameTables)", stmt)
    return DDL("rename_table", None, rename=pairs, text=stmt)


def parse(stmt: str) -> Statement:
    """Parse one statement; raise ``UnsupportedSQL`` for anything outside the supported subset."""
    text = stmt.strip()
    if _BEGIN.match(text):
        return Begin(text=text)
    fast = fastsql.parse(text)
    if fast is not None:
        return fast
    m = _RENAME.match(text)
    if m:
        return _parse_rename(text, m.group(1))
    replace = bool(_REPLACE.match(text))
    src = _REPLACE.sub("INSERT", text, count=1) if replace else text
    clustered: bool | None = None
    head = src.lstrip()[:6].upper()
    if head in ("CREATE", "ALTER "):
        found = _CLUSTERED.findall(src)
        if found:
            clustered = not found[-1]
            src = _CLUSTERED.sub("", src)
    try:
        trees = sqlglot.parse(src, read="mysql", error_level=sqlglot.ErrorLevel.RAISE)
    except ParseError as e:
        raise UnsupportedSQL(f"syntax the parser does not understand ({str(e).splitlines()[0][:160]})", text) from None
    if len(trees) != 1 or trees[0] is None:
        raise UnsupportedSQL("empty or multiple statements", text)
    tree = trees[0]
    if isinstance(tree, exp.Command):
        words = text.split()
        raise UnsupportedSQL(" ".join(words[:4]).upper() + " …", text)
    if isinstance(tree, exp.Transaction):
        return Begin(text=text)
    if isinstance(tree, exp.Commit):
        return Commit(text=text)
    if isinstance(tree, exp.Rollback):
        if tree.args.get("savepoint"):
            raise UnsupportedSQL("ROLLBACK TO SAVEPOINT", text)
        return Rollback(text=text)
    if isinstance(tree, exp.Use):
        return Use(tree.this.name, text=text)
    if isinstance(tree, exp.Set):
        return _parse_set(tree, text)
    if isinstance(tree, exp.Insert):
        return _parse_insert(tree, text, replace)
    if isinstance(tree, exp.Update):
        return _parse_update(tree, text)
    if isinstance(tree, exp.Delete):
        return _parse_delete(tree, text)
    if isinstance(tree, exp.Create):
        kind = str(tree.args.get("kind") or "").upper()
        if kind in ("DATABASE", "SCHEMA"):
            return DDL("create_database", tree, text=text)
        if kind == "TABLE":
            return DDL("create_table", tree, clustered=clustered, text=text)
        raise UnsupportedSQL(f"CREATE {kind}", text)
    if isinstance(tree, exp.Drop):
        kind = str(tree.args.get("kind") or "").upper()
        if kind in ("DATABASE", "SCHEMA"):
            return DDL("drop_database", tree, text=text)
        if kind == "TABLE":
            return DDL("drop_table", tree, text=text)
        raise UnsupportedSQL(f"DROP {kind}", text)
    if isinstance(tree, exp.TruncateTable):
        return DDL("truncate_table", tree, text=text)
    if isinstance(tree, exp.Alter):
        if str(tree.args.get("kind") or "").upper() != "TABLE":
            raise UnsupportedSQL(f"ALTER {tree.args.get('kind')}", text)
        return DDL("alter_table", tree, clustered=clustered, text=text)
    raise UnsupportedSQL(f"{type(tree).__name__.upper()} statement", text)


def _table_ref(node: Any, stmt: str) -> tuple[str | None, str]:
    if isinstance(node, exp.Schema):
        node = node.this
    if not isinstance(node, exp.Table) or not node.name:
        raise UnsupportedSQL(f"table reference {node.sql('mysql') if node is not None else None}", stmt)
    if node.args.get("joins") or node.args.get("alias"):
        raise UnsupportedSQL("table aliases or joins", stmt)
    return (node.db or None), node.name


def _parse_set(tree: exp.Set, stmt: str) -> SetVar:
    items = tree.expressions
    if len(items) != 1 or not isinstance(items[0].this, exp.EQ):
        raise UnsupportedSQL("SET with several assignments", stmt)
    eq = items[0].this
    target = eq.this
    name = target.this.name if isinstance(target, exp.SessionParameter) else target.name
    val = eq.expression
    value = val.name if isinstance(val, (exp.Var, exp.Column, exp.Identifier)) else literal(val, stmt)
    return SetVar(name.lower(), value, text=stmt)


def _parse_insert(tree: exp.Insert, stmt: str, replace: bool) -> Insert:
    for arg in ("ignore", "conflict", "returning", "partition", "overwrite"):
        if tree.args.get(arg):
            raise UnsupportedSQL(f"INSERT {arg.upper()}", stmt)
    if tree.args.get("duplicate") or "ON DUPLICATE" in stmt.upper():
        raise UnsupportedSQL("INSERT … ON DUPLICATE KEY UPDATE", stmt)
    target = tree.this
    columns = None
    if isinstance(target, exp.Schema):
        columns = [c.name for c in target.expressions]
    db, table = _table_ref(target, stmt)
    source = tree.expression
    if not isinstance(source, exp.Values):
        raise UnsupportedSQL(f"INSERT … {type(source).__name__.upper()} (only VALUES lists)", stmt)
    rows = []
    for tup in source.expressions:
        if not isinstance(tup, exp.Tuple):
            raise UnsupportedSQL("VALUES row that is not a parenthesised list", stmt)
        rows.append([value_literal(v, stmt) for v in tup.expressions])
    return Insert(db, table, columns, rows, replace, text=stmt)


def _parse_update(tree: exp.Update, stmt: str) -> Update:
    for arg in ("from", "from_", "joins", "order", "limit", "returning", "with"):
        if tree.args.get(arg):
            raise UnsupportedSQL(f"UPDATE with {arg.rstrip('_').upper()}", stmt)
    db, table = _table_ref(tree.this, stmt)
    assigns = []
    for a in tree.expressions:
        if not isinstance(a, exp.EQ) or not isinstance(a.this, exp.Column):
            raise UnsupportedSQL(f"assignment {a.sql('mysql')}", stmt)
        assigns.append((a.this.name, expr(a.expression, stmt)))
    where = tree.args.get("where")
    return Update(db, table, assigns, expr(where.this, stmt) if where is not None else None, text=stmt)


def _parse_delete(tree: exp.Delete, stmt: str) -> Delete:
    for arg in ("using", "order", "limit", "returning", "with", "tables"):
        if tree.args.get(arg):
            raise UnsupportedSQL(f"DELETE with {arg.upper()}", stmt)
    db, table = _table_ref(tree.this, stmt)
    where = tree.args.get("where")
    return Delete(db, table, expr(where.this, stmt) if where is not None else None, text=stmt)


_NUM = re.compile(r"^[+-]?\d+$")


def literal(node: Any, stmt: str) -> Any:
    """A constant expression as a Python value (raise ``UnsupportedSQL`` for anything else)."""
    if isinstance(node, exp.Paren):
        return literal(node.this, stmt)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return 1 if node.this else 0
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        t = node.this
        if _NUM.match(t):
            return int(t)
        if "e" in t.lower():
            return float(t)
        return Decimal(t)
    if isinstance(node, exp.Neg):
        v = literal(node.this, stmt)
        if isinstance(v, (int, float, Decimal)):
            return -v
        raise UnsupportedSQL(f"negation of {node.this.sql('mysql')}", stmt)
    if isinstance(node, exp.HexString):
        h = node.this
        return bytes.fromhex(h if len(h) % 2 == 0 else "0" + h)
    if isinstance(node, exp.BitString):
        return int(node.this or "0", 2)
    if isinstance(node, (exp.CurrentTimestamp, exp.CurrentDatetime)):
        return Now(6)
    if isinstance(node, exp.Anonymous) and node.name.lower() in ("now", "current_timestamp", "localtimestamp",
                                                                     "utc_timestamp", "sysdate"):
        return Now(6)
    if isinstance(node, exp.Cast):
        return literal(node.this, stmt)
    if isinstance(node, exp.Var) and node.name.upper() == "DEFAULT":
        return DEFAULT
    if isinstance(node, (exp.Column, exp.Identifier)) and str(node.name).upper() in ("TRUE", "FALSE"):
        return 1 if str(node.name).upper() == "TRUE" else 0
    raise UnsupportedSQL(f"expression {type(node).__name__.upper()} ({node.sql('mysql')[:60]})", stmt)


def value_literal(node: Any, stmt: str) -> Any:
    """A VALUES entry: a literal, ``DEFAULT`` or ``Now``."""
    if isinstance(node, exp.Var) and node.name.upper() == "DEFAULT":
        return DEFAULT
    return literal(node, stmt)


_CMP_NODES = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.GT: ">", exp.LTE: "<=", exp.GTE: ">="}
_ARITH_NODES = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*"}


def expr(node: Any, stmt: str) -> Expr:
    """A WHERE/SET expression in the supported subset."""
    if isinstance(node, exp.Paren):
        return expr(node.this, stmt)
    if isinstance(node, exp.Column):
        if node.table:
            raise UnsupportedSQL(f"qualified column {node.sql('mysql')}", stmt)
        return Col(node.name)
    t = type(node)
    if t in _CMP_NODES:
        return Cmp(_CMP_NODES[t], expr(node.this, stmt), expr(node.expression, stmt))
    if t in _ARITH_NODES:
        return Arith(_ARITH_NODES[t], expr(node.this, stmt), expr(node.expression, stmt))
    if isinstance(node, exp.And):
        return And((expr(node.this, stmt), expr(node.expression, stmt)))
    if isinstance(node, exp.Or):
        return Or((expr(node.this, stmt), expr(node.expression, stmt)))
    if isinstance(node, exp.Between):
        return Between(expr(node.this, stmt), expr(node.args["low"], stmt), expr(node.args["high"], stmt),
                       bool(node.args.get("negate")))
    if isinstance(node, exp.Like):
        if node.args.get("escape"):
            raise UnsupportedSQL("LIKE … ESCAPE", stmt)
        return Like(expr(node.this, stmt), expr(node.expression, stmt), bool(node.args.get("negate")))
    if isinstance(node, exp.Escape):
        raise UnsupportedSQL("LIKE … ESCAPE", stmt)
    if isinstance(node, exp.Not):
        inner = node.this
        if isinstance(inner, exp.Between):
            b = expr(inner, stmt)
            assert isinstance(b, Between)
            return Between(b.arg, b.low, b.high, not b.negate)
        if isinstance(inner, exp.Like):
            lk = expr(inner, stmt)
            assert isinstance(lk, Like)
            return Like(lk.arg, lk.pattern, not lk.negate)
        if isinstance(inner, exp.In):
            e = expr(inner, stmt)
            assert isinstance(e, InList)
            return InList(e.left, e.items, True)
        if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
            return IsNull(expr(inner.this, stmt), True)
        return Not(expr(inner, stmt))
    if isinstance(node, exp.In):
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise UnsupportedSQL("IN with a subquery", stmt)
        return InList(expr(node.this, stmt), tuple(expr(i, stmt) for i in node.expressions))
    if isinstance(node, exp.Is):
        if isinstance(node.expression, exp.Null):
            return IsNull(expr(node.this, stmt))
        raise UnsupportedSQL(f"IS {node.expression.sql('mysql')}", stmt)
    v = literal(node, stmt)
    if isinstance(v, Now):
        return v
    return Lit(v)


def expr_and(*items: Expr) -> Expr:
    """``a AND b AND …`` (for statement builders)."""
    return And(tuple(items))
