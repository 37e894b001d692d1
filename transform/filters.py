"""TiDB Binlog's table filters: ``replicate-do-db``, ``replicate-do-table``, ``ignore-schemas``,
``ignore-table`` (patterns starting with ``~`` are case-insensitive regexes; other names match the
whole name case-insensitively)."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

DEFAULT_IGNORE_SCHEMAS = ("INFORMATION_SCHEMA", "PERFORMANCE_SCHEMA", "mysql")


def _matcher(pattern: str) -> re.Pattern[str]:
    if pattern.startswith("~"):
        return re.compile(pattern[1:], re.IGNORECASE)
    return re.compile(re.escape(pattern) + r"\Z", re.IGNORECASE)


def _any(patterns: Sequence[re.Pattern[str]], name: str) -> bool:
    return any(p.match(name) for p in patterns)


@dataclass(frozen=True)
class TableFilter:
    """Which upstream tables a drain replicates (TiDB Binlog's rules)."""

    do_dbs: tuple[str, ...] = ()
    do_tables: tuple[tuple[str, str], ...] = ()
    ignore_schemas: tuple[str, ...] = DEFAULT_IGNORE_SCHEMAS
    ignore_tables: tuple[tuple[str, str], ...] = ()
    only: tuple[tuple[str, str], ...] = field(default=())   # --tables db.t,… (exact, on top of the rules)
    # the patterns compiled once (set in __post_init__; not arguments, not part of equality or repr)
    _do_db: list[re.Pattern[str]] = field(init=False, repr=False, compare=False)
    _do_tbl: list[tuple[re.Pattern[str], re.Pattern[str]]] = field(init=False, repr=False, compare=False)
    _ig_db: list[re.Pattern[str]] = field(init=False, repr=False, compare=False)
    _ig_tbl: list[tuple[re.Pattern[str], re.Pattern[str]]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_do_db", [_matcher(p) for p in self.do_dbs])
        object.__setattr__(self, "_do_tbl", [(_matcher(d), _matcher(t)) for d, t in self.do_tables])
        object.__setattr__(self, "_ig_db", [_matcher(p) for p in self.ignore_schemas])
        object.__setattr__(self, "_ig_tbl", [(_matcher(d), _matcher(t)) for d, t in self.ignore_tables])

    def allows(self, db: str, table: str) -> bool:
        """True when changes of ``db.table`` are replicated."""
        if self.only and (db.lower(), table.lower()) not in {(d.lower(), t.lower()) for d, t in self.only}:
            return False
        do_db, do_tbl = self._do_db, self._do_tbl
        if do_db or do_tbl:
            if not (_any(do_db, db) or any(d.match(db) and t.match(table) for d, t in do_tbl)):
                return False
        if _any(self._ig_db, db):
            return False
        return not any(d.match(db) and t.match(table) for d, t in self._ig_tbl)

    def allows_schema(self, db: str) -> bool:
        """True when some table of ``db`` may be replicated (schema-level DDL such as CREATE DATABASE)."""
        if self.only and db.lower() not in {d.lower() for d, _ in self.only}:
            return False
        if (self._do_db or self._do_tbl) and not (_any(self._do_db, db) or any(d.match(db) for d, _ in self._do_tbl)):
            return False
        return not _any(self._ig_db, db)
