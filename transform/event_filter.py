"""TiDB Binlog's binlog event filter: which row changes and DDLs of a table a drain leaves out.

A ``[syncer.binlog-filter-rule.NAME]`` lists ``ignore-event`` (event types) and ``ignore-sql``
(regular expressions); it applies to the tables of every ``[[syncer.table-migrate-rule]]`` whose
``binlog-filter-rule`` list names it (``source.schema``, ``source.table``), as TiDB Binlog v8.3.0's
drainer builds it (``drainer/util.go``) and ``pkg/binlog-filter`` of tidb-tools v6.6.0 (the version
it pins) decides. Every rule ignores: nothing is selected with them.

- One rule per pattern pair: the named rules attached to the same ``source`` (schema, table) strings
  are one rule, their events and SQL patterns concatenated in the order the migrate rules and their
  lists give. ``source.schema`` must not be empty; without ``source.table`` the rule is the schema's
  (every table of it, and DDL on the schema itself).
- Patterns (tidb-tools' table-rule-selector): ``*`` matches any run of characters and may only be a
  pattern's last character, ``?`` one character, ``[a-z]`` / ``[!a-z]`` one character in / not in the
  set; anything else is itself. Go matches them on a name's UTF-8 bytes, stepping by character
  through the name and by byte through the pattern, so a pattern with a multi-byte character never
  matches it, and ``?`` or a set matches one byte of it (``??`` matches ``é``); :func:`_matches` does
  the same. A table pattern ``*`` also matches the empty table name of a schema-level DDL.
- Case: unless ``case-sensitive``, patterns and names are lower-cased (Go's ``strings.ToLower``).
  ``ignore-sql`` patterns are always case-insensitive: Go's regexp of ``(?i)`` and the patterns
  joined by ``|`` (:mod:`transform.goregex`), found anywhere in a DDL's query; they never apply to
  row changes.
- Events: ``insert``, ``update``, ``delete`` (row changes); ``create database`` (alias ``create
  schema``), ``drop database`` (``drop schema``), ``alter database`` (``alter schema``), ``create
  table``, ``drop table``, ``truncate table``, ``rename table``, ``create index``, ``drop index``,
  ``create view``, ``drop view``, ``alter table``, ``add table partition``, ``drop table partition``,
  ``truncate table partition`` (accepted; no DDL has them: partition DDL is ``alter table``); ``all``,
  ``all dml``, ``all ddl``; ``none``, ``none dml``, ``none ddl`` end the list's matching for the
  events they cover (so a list's order matters); ``""`` (accepted, matches nothing). Names are
  case-insensitive; any other is refused.
- A DDL's event type is its statement's (:func:`ddl_event`: what TiDB's parser makes of the query);
  a statement of no listed type (``CREATE SEQUENCE``, ``FLASHBACK TABLE``, …) is matched by the SQL
  patterns only.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from transform.errors import FilterRuleError, GoRegexError
from transform.goregex import GoPattern, compile_go

DML_EVENTS = ("insert", "update", "delete")
DDL_EVENTS = ("create database", "drop database", "alter database", "create table", "drop table",
              "truncate table", "rename table", "create index", "drop index", "create view", "drop view",
              "alter table", "add table partition", "drop table partition", "truncate table partition")
_PARTITION_EVENTS = ("add table partition", "drop table partition", "truncate table partition")   # no DDL's type
_ALIASES = {"create schema": "create database", "drop schema": "drop database", "alter schema": "alter database"}
_SPECIAL = ("all", "all dml", "all ddl", "none", "none dml", "none ddl", "")
EVENT_NAMES = frozenset(DML_EVENTS + DDL_EVENTS + _SPECIAL + tuple(_ALIASES))


def go_lower(text: str) -> str:
    """``text`` lower-cased character by character as Go's ``strings.ToLower`` does (Python's
    ``str.lower`` maps U+0130 to two characters and lowers a final sigma by context)."""
    return "".join("i" if c == "\u0130" else c.lower() for c in text)


def _event_name(name: str) -> str:
    event = go_lower(name)
    if event not in EVENT_NAMES:
        raise ValueError(f"event type {name!r} is not one of {', '.join(repr(e) for e in sorted(EVENT_NAMES))}")
    return _ALIASES.get(event, event)


def _matches_event(event: str, events: Sequence[str]) -> bool:
    """Whether ``events`` (a rule's list, in order) covers ``event``: the first entry that decides."""
    dml = event in DML_EVENTS
    for e in events:
        if e == "all" or (e == "all dml" and dml) or (e == "all ddl" and not dml):
            return True
        if e == "none" or (e == "none dml" and dml) or (e == "none ddl" and not dml):
            return False
        if e == event:
            return True
    return False


# -- table patterns: tidb-tools' trie selector, one pattern at a time ------------------------------

_STAR, _ONE = "*", "?"
_Set = tuple[bool, tuple[tuple[int, int], ...]]   # (negated, byte ranges)
_Token = int | str | _Set                           # a literal byte, _STAR, _ONE or a set


def _byte_set(body: bytes) -> _Set:
    """``[...]`` (brackets included) as the selector reads it: ``!`` first negates, ``a-z`` is a
    range, anything else one byte; ``[!]`` is the set of ``!``."""
    end = len(body) - 1
    negated = end > 1 and body[1] == ord("!")
    ranges: list[tuple[int, int]] = []
    j = 2 if negated else 1
    while j < end:
        if body[j + 1] == ord("-") and j + 2 < end:
            ranges.append((body[j], body[j + 2]))
            j += 3
        else:
            ranges.append((body[j], body[j]))
            j += 1
    if not ranges and negated:
        return False, ((ord("!"), ord("!")),)
    return negated, tuple(ranges)


def _tokens(pattern: str) -> tuple[_Token, ...]:
    """A schema or table pattern's tokens; ``ValueError`` when ``*`` is not its last character."""
    b = pattern.encode()
    out: list[_Token] = []
    i = 0
    while i < len(b):
        if out and out[-1] == _STAR:
            raise ValueError(f"pattern {pattern!r} is not valid: '*' may only be its last character")
        c = b[i]
        if c == ord("*"):
            out.append(_STAR)
        elif c == ord("?"):
            out.append(_ONE)
        elif c == ord("[") and b.find(b"]", i) >= 0:
            close = b.find(b"]", i)
            out.append(_byte_set(b[i:close + 1]))
            i = close
        else:
            out.append(c)
        i += 1
    return tuple(out)


def _same_set(a: _Set, b: _Set) -> bool:
    """The selector's equality of two sets (each range of one within a range of the other)."""
    def within(x: _Set, y: _Set) -> bool:
        return all(any(lo2 <= lo and hi <= hi2 for lo2, hi2 in y[1]) for lo, hi in x[1])
    return a[0] == b[0] and within(a, b) and within(b, a)


def _same_pattern(a: tuple[_Token, ...], b: tuple[_Token, ...]) -> bool:
    return len(a) == len(b) and all(
        _same_set(x, y) if isinstance(x, tuple) and isinstance(y, tuple) else x == y for x, y in zip(a, b))


def _in_set(s: _Set, c: int) -> bool:
    negated, ranges = s
    return (not negated) if any(lo <= c <= hi for lo, hi in ranges) else negated


def _starts(b: bytes) -> list[int]:
    """Where Go's ``for i := range s`` stops in ``b``: each character's first byte, and each byte
    that starts no valid UTF-8 sequence (a name cut inside a character)."""
    out, i = [], 0
    while i < len(b):
        out.append(i)
        lead = b[i]
        width = 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4 if 0xF0 <= lead <= 0xF4 else 1
        if width > 1:
            try:
                b[i:i + width].decode()
            except UnicodeDecodeError:
                width = 1
        i += width
    return out


def _matches(tokens: tuple[_Token, ...], s: bytes, k: int = 0) -> bool:
    """Whether the selector's walk of ``s`` from the node after ``k`` tokens reaches the pattern's
    end (tidb-tools' ``trieSelector.matchNode`` on a trie holding this one pattern)."""
    n = len(tokens)
    stepped = False
    for i in _starts(s):
        t = tokens[k] if k < n else None
        if t == _STAR:
            return True
        if t == _ONE or (isinstance(t, tuple) and _in_set(t, s[i])):
            return (i == len(s) - 1 and k == n - 1) or _matches(tokens, s[i + 1:], k + 1)
        if not isinstance(t, int) or t != s[i]:
            return False
        stepped, k = True, k + 1
    return (stepped and k == n) or (k < n and tokens[k] == _STAR)


# -- the rules ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FilterRule:
    """One rule of the filter: on the tables ``schema``/``table`` match (``table`` "": the schema's
    rule), ignore ``events`` and DDL whose query one of ``sql`` is found in. ``names``: the
    ``binlog-filter-rule`` names it joins."""

    schema: str
    table: str
    events: tuple[str, ...] = ()
    sql: tuple[str, ...] = ()
    names: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How messages name it: its binlog-filter-rule names and its tables."""
        names = ", ".join(self.names) or "(unnamed)"
        return f"binlog-filter-rule {names} on schema {self.schema!r}, table {self.table!r}"

    def ignores_ddl(self) -> bool:
        """True when some DDL can be ignored by it (a DDL's event type, or an SQL pattern)."""
        return bool(self.sql) or any(_matches_event(e, self.events) for e in DDL_EVENTS if e not in _PARTITION_EVENTS)


@dataclass(frozen=True)
class _Compiled:
    rule: FilterRule
    schema: tuple[_Token, ...]
    table: tuple[_Token, ...] | None          # None: the schema's rule
    sql: GoPattern | None


@dataclass(frozen=True)
class EventFilter:
    """TiDB Binlog's binlog event filter (picklable: it travels to the decode tasks)."""

    rules: tuple[FilterRule, ...] = ()
    case_sensitive: bool = False
    _compiled: tuple[_Compiled, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled: list[_Compiled] = []
        for rule in self.rules:
            try:
                compiled.append(self._compile(rule, compiled))
            except (ValueError, re.error) as e:
                raise FilterRuleError(f"{rule.label}: {e}") from None
        object.__setattr__(self, "_compiled", tuple(compiled))
        object.__setattr__(self, "rules", tuple(c.rule for c in compiled))   # events in canonical form

    def _compile(self, rule: FilterRule, before: Sequence[_Compiled]) -> _Compiled:
        lower = (lambda s: s) if self.case_sensitive else go_lower
        if not rule.schema:
            raise ValueError("the schema pattern (source.schema) must not be empty")
        events = tuple(_event_name(e) for e in rule.events)
        schema = _tokens(lower(rule.schema))
        table = _tokens(lower(rule.table)) if rule.table else None
        for other in before:
            if _same_pattern(other.schema, schema) and (
                    (other.table is None and table is None)
                    or (other.table is not None and table is not None and _same_pattern(other.table, table))):
                raise ValueError(f"its tables are those of {other.rule.label} (the rules of one pattern pair "
                                 f"are joined only where they are written alike)")
        sql = None
        if rule.sql:
            joined = "|".join(rule.sql)
            try:
                sql = compile_go("(?i)" + joined)
            except GoRegexError as e:
                raise ValueError(f"ignore-sql {list(rule.sql)!r} is not a valid regular expression: {e}") from None
        canonical = FilterRule(rule.schema, rule.table, events, rule.sql, rule.names)
        return _Compiled(canonical, schema, table, sql)

    @classmethod
    def from_config(cls, rules: Mapping[str, tuple[Sequence[str], Sequence[str]]],
                    attached: Sequence[tuple[str, str, Sequence[str]]], case_sensitive: bool = False) -> EventFilter:
        """The filter TiDB Binlog builds from ``binlog-filter-rule`` (name → (ignore-event, ignore-sql))
        and each ``table-migrate-rule``'s (source.schema, source.table, binlog-filter-rule names)."""
        joined: dict[tuple[str, str], FilterRule] = {}
        for schema, table, names in attached:
            for name in names:
                if name not in rules:
                    raise FilterRuleError(f"table-migrate-rule on schema {schema!r}, table {table!r} names "
                                          f"binlog-filter-rule {name!r}, which is not defined (defined: "
                                          f"{', '.join(sorted(rules)) or 'none'})")
                events, sql = rules[name]
                r = joined.get((schema, table)) or FilterRule(schema, table)
                joined[(schema, table)] = FilterRule(schema, table, r.events + tuple(events), r.sql + tuple(sql),
                                                     r.names + (name,))
        return cls(tuple(joined.values()), case_sensitive)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def rule_for(self, schema: str, table: str, event: str, query: str = "") -> FilterRule | None:
        """The rule that ignores ``event`` (a type of :data:`EVENT_NAMES`, or "" for a DDL of no
        listed type) on ``schema``.``table`` (``table`` "" for a DDL on the schema itself), with the
        DDL's ``query``; None when none does (the event goes on)."""
        if event not in DML_EVENTS and event not in DDL_EVENTS and event != "":
            raise FilterRuleError(f"event type {event!r} is neither a row change's nor a DDL's")
        if not self._compiled:
            return None
        if not self.case_sensitive:
            schema, table = go_lower(schema), go_lower(table)
        s, t = schema.encode(), table.encode()
        for c in self._compiled:
            if not _matches(c.schema, s) or (c.table is not None and not _matches(c.table, t)):
                continue
            if event and _matches_event(event, c.rule.events):
                return c.rule
            if query and c.sql is not None and c.sql.search(query):
                return c.rule
        return None

    def ignored_rows(self, schema: str, table: str) -> frozenset[str]:
        """The row-change types (of :data:`DML_EVENTS`) the filter ignores on ``schema``.``table``."""
        return frozenset(e for e in DML_EVENTS if self.rule_for(schema, table, e) is not None)

    def ddl_rules(self) -> list[FilterRule]:
        """The rules that can ignore a DDL."""
        return [r for r in self.rules if r.ignores_ddl()]


# -- a DDL statement's event type ------------------------------------------------------------------

_TOKEN = re.compile(r"\s+|/\*!\d*|/\*T!(?:\[[^\]]*\])?|/\*.*?(?:\*/|$)|\*/|(?:--(?=\s|$)|#)[^\n]*"
                    r"|'(?:[^'\\]|\\.|'')*'?|\"(?:[^\"\\]|\\.|\"\")*\"?|`(?:[^`]|``)*`?|[\w$]+|.", re.S)


def _words(query: str, limit: int = 24) -> list[str]:
    """The first tokens of ``query`` as TiDB's lexer reads them: keywords upper-cased, quoted text as
    one token, comments skipped, the text of executable comments (``/*!40101 … */``,
    ``/*T![feature] … */``) read as statement text."""
    out: list[str] = []
    executable = 0
    for m in _TOKEN.finditer(query):
        tok = m.group()
        if tok.isspace() or tok.startswith(("--", "#")):
            continue
        if tok.startswith(("/*!", "/*T!")):
            executable += 1
            continue
        if tok == "*/" and executable:
            executable -= 1
            continue
        if tok.startswith("/*"):
            continue
        out.append(tok.upper())
        if len(out) >= limit:
            break
    return out


def _after_view_options(w: list[str], i: int) -> int:
    """Skip ``CREATE``'s view options (``OR REPLACE``, ``ALGORITHM = …``, ``DEFINER = …``, ``SQL
    SECURITY …``) from ``w[i]``; where ``VIEW`` should be."""
    if w[i:i + 2] == ["OR", "REPLACE"]:
        i += 2
    if w[i:i + 2] == ["ALGORITHM", "="]:
        i += 3
    if w[i:i + 2] == ["DEFINER", "="]:
        i += 3
        if w[i - 1:i] == ["CURRENT_USER"] and w[i:i + 2] == ["(", ")"]:
            i += 2
        elif w[i:i + 1] == ["@"]:
            i += 2
    if w[i:i + 2] == ["SQL", "SECURITY"]:
        i += 3
    return i


def ddl_event(query: str) -> str:
    """The event type of a DDL statement, as tidb-tools' ``AstToDDLEvent`` gives it for the
    statement TiDB's parser reads: ``"create table"``, ``"alter table"``, … and "" for a statement
    of no listed type."""
    w = _words(query)
    if not w:
        return ""
    head, rest = w[0], w[1:]
    skip_temporary = 2 if rest[:2] == ["GLOBAL", "TEMPORARY"] else 1 if rest[:1] == ["TEMPORARY"] else 0
    if head == "CREATE":
        if rest[:1] in (["DATABASE"], ["SCHEMA"]):
            return "create database"
        if rest[skip_temporary:skip_temporary + 1] == ["TABLE"]:
            return "create table"
        if rest[:1] == ["INDEX"] or (rest[:1] in (["UNIQUE"], ["FULLTEXT"], ["SPATIAL"]) and rest[1:2] == ["INDEX"]):
            return "create index"
        at = _after_view_options(rest, 0)
        return "create view" if rest[at:at + 1] == ["VIEW"] else ""
    if head == "DROP":
        if rest[:1] in (["DATABASE"], ["SCHEMA"]):
            return "drop database"
        if rest[skip_temporary:skip_temporary + 1] in (["TABLE"], ["TABLES"]):
            return "drop table"
        return {"VIEW": "drop view", "INDEX": "drop index"}.get(rest[0] if rest else "", "")
    if head == "ALTER":
        if rest[:1] in (["DATABASE"], ["SCHEMA"]):
            return "alter database"
        at = 2 if rest[:2] == ["IGNORE", "TABLE"] else 1 if rest[:1] == ["TABLE"] else 0
        after_name = at + (3 if rest[at + 1:at + 2] == ["."] else 1)
        if not at or rest[after_name:after_name + 1] in (["ANALYZE"], ["COMPACT"]):   # not DDL statements
            return ""
        return "alter table"
    if head == "TRUNCATE":
        return "truncate table" if rest else ""
    if head == "RENAME":
        return "rename table" if rest[:1] == ["TABLE"] else ""
    return ""
