"""TiDB Binlog's table filters: ``replicate-do-db``, ``replicate-do-table``, ``ignore-schemas``,
``ignore-table``, matched as TiDB Binlog's drainer matches them (``pkg/filter``): the schema and
table names are lower-cased; a pattern ``~re`` is the case-insensitive regex ``re`` found anywhere
in the name (``~log`` matches ``syslog``); any other pattern is itself a case-insensitive regex
that must match the whole name (``^pattern$``: ``a.b`` also matches ``axb``, ``t_1|t_2`` is
``^t_1`` or ``t_2$``). The do-rules' patterns are lower-cased first, as TiDB Binlog loads them
(``~\\D`` there is ``~\\d``). A table passes when no do-rule is set or a do-db or do-table rule matches
it, and then no ignore-schemas or ignore-table rule does."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from transform.errors import GoRegexError
from transform.goregex import GoPattern, compile_go

DEFAULT_IGNORE_SCHEMAS = ("INFORMATION_SCHEMA", "PERFORMANCE_SCHEMA", "mysql")


def _matcher(pattern: str) -> GoPattern:
    # TiDB's filter compiles "(?i)" + the pattern with Go's regexp
    text = pattern[1:] if pattern.startswith("~") else f"^{pattern}$"
    try:
        return compile_go("(?i)" + text)
    except GoRegexError as e:   # a ValueError: the configuration names the key
        raise ValueError(f"filter pattern {pattern!r} is not a valid regular expression: {e}") from None


def _any(patterns: Sequence[GoPattern], name: str) -> bool:
    return any(p.search(name) for p in patterns)


@dataclass(frozen=True)
class TableFilter:
    """Which upstream tables a drain replicates (TiDB Binlog's rules)."""

    do_dbs: tuple[str, ...] = ()
    do_tables: tuple[tuple[str, str], ...] = ()
    ignore_schemas: tuple[str, ...] = DEFAULT_IGNORE_SCHEMAS
    ignore_tables: tuple[tuple[str, str], ...] = ()
    only: tuple[tuple[str, str], ...] = field(default=())   # --tables db.t,… (exact, on top of the rules)
    # the patterns compiled once (set in __post_init__; not arguments, not part of equality or repr)
    _do_db: list[GoPattern] = field(init=False, repr=False, compare=False)
    _do_tbl: list[tuple[GoPattern, GoPattern]] = field(init=False, repr=False, compare=False)
    _ig_db: list[GoPattern] = field(init=False, repr=False, compare=False)
    _ig_tbl: list[tuple[GoPattern, GoPattern]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # TiDB Binlog lower-cases the do-rules' patterns when it loads them (so ``\\D`` becomes ``\\d``)
        object.__setattr__(self, "_do_db", [_matcher(p.lower()) for p in self.do_dbs])
        object.__setattr__(self, "_do_tbl", [(_matcher(d.lower()), _matcher(t.lower())) for d, t in self.do_tables])
        object.__setattr__(self, "_ig_db", [_matcher(p) for p in self.ignore_schemas])
        object.__setattr__(self, "_ig_tbl", [(_matcher(d), _matcher(t)) for d, t in self.ignore_tables])

    def allows(self, db: str, table: str) -> bool:
        """True when changes of ``db.table`` are replicated."""
        if self.only and (db.lower(), table.lower()) not in {(d.lower(), t.lower()) for d, t in self.only}:
            return False
        db, table = db.lower(), table.lower()
        do_db, do_tbl = self._do_db, self._do_tbl
        if do_db or do_tbl:
            if not (_any(do_db, db) or any(d.search(db) and t.search(table) for d, t in do_tbl)):
                return False
        if _any(self._ig_db, db):
            return False
        return not any(d.search(db) and t.search(table) for d, t in self._ig_tbl)

    def allows_schema(self, db: str) -> bool:
        """True when some table of ``db`` may be replicated (schema-level DDL such as CREATE DATABASE)."""
        if self.only and db.lower() not in {d.lower() for d, _ in self.only}:
            return False
        db = db.lower()
        if (self._do_db or self._do_tbl) and not (_any(self._do_db, db) or any(d.search(db) for d, _ in self._do_tbl)):
            return False
        return not _any(self._ig_db, db)
