"""DDL for the MySQL sink: which upstream DDL jobs are applied (the table filters, TiDB Binlog's
binlog event filter), and their text made acceptable to MySQL and MariaDB.

TiDB writes its own options in ``/*T![feature] … */`` comments, which MySQL and MariaDB ignore as
plain comments; what TiDB may write outside comments is removed here: ``AUTO_RANDOM(…)``,
``CLUSTERED``/``NONCLUSTERED`` after a primary key, the ``SHARD_ROW_ID_BITS``, ``PRE_SPLIT_REGIONS``,
``AUTO_ID_CACHE``, ``AUTO_RANDOM_BASE``, ``PLACEMENT POLICY`` and ``TTL``/``TTL_ENABLE``/
``TTL_JOB_INTERVAL`` table options. Comments, string literals and quoted identifiers are never
rewritten. CREATE TABLE and CREATE DATABASE that state no charset get the upstream's (TiDB defaults
to utf8mb4/utf8mb4_bin; MySQL and MariaDB would use their own server default), placed among the
table options: before a ``PARTITION BY`` clause and before trailing comments; ``CREATE TABLE … LIKE``
gets none (it copies its source). A downstream TiDB (``db-type = "tidb"``) gets the query unchanged.
Errors saying the object already exists or is already gone are ignored, as TiDB Binlog's loader
does, so a DDL replayed after a crash does not stop the run.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from transform import ddl as ddl_kinds
from transform.changes import DDLJob
from transform.codec.model import Job
from transform.event_filter import EventFilter, ddl_event
from transform.filters import TableFilter
from transform.history import CREATE_SCHEMA, CREATE_TABLE, CREATE_TABLES, DROP_SCHEMA

TIDB_SYS_SCHEMA = "sys"   # TiDB's own (v8: bootstrap views over its information_schema), not replayed into MySQL
# MySQL error codes meaning "already done": database exists / doesn't exist, table exists, unknown
# table, duplicate column or key name, can't drop a column or key that is not there
IGNORED_ERRORS = frozenset({1007, 1008, 1050, 1051, 1060, 1061, 1091})

# comments (block, "-- ", "#") and quoted text (strings, backquoted identifiers); masked before rewriting
_OPAQUE = re.compile(r"/\*.*?(?:\*/|$)|--(?:[ \t][^\n]*|$)|#[^\n]*"
                     r"|'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|`(?:[^`]|``)*`", re.S)
_COMMENT, _QUOTED = "\x01", "\x02"          # a masked piece is <mark><index><mark>
_PIECE = re.compile(r"([\x01\x02])(\d+)\1")
_LIT = r"\x02\d+\x02"                       # a masked string literal in a pattern
_SEP = r"(?:\s*,)?"                         # table options may be separated by commas

_TIDB_ONLY = [
    re.compile(r"\bAUTO_RANDOM\b\s*(\(\s*\d+\s*(,\s*\d+\s*)?\))?", re.I),
    re.compile(r"\b(NON)?CLUSTERED\b", re.I),
    re.compile(r",?\s*\b(SHARD_ROW_ID_BITS|PRE_SPLIT_REGIONS|AUTO_ID_CACHE|AUTO_RANDOM_BASE)\s*=?\s*\d+" + _SEP,
               re.I),
    re.compile(rf"\bPLACEMENT\s+POLICY\s*=?\s*({_LIT}|\w+)", re.I),
    re.compile(rf",?\s*\bTTL\s*=\s*({_LIT}|\w+)\s*\+\s*INTERVAL\s+({_LIT}|[\w.]+)\s+\w+" + _SEP, re.I),
    re.compile(rf",?\s*\b(TTL_ENABLE|TTL_JOB_INTERVAL)\s*=\s*{_LIT}" + _SEP, re.I),
]


def _mask(query: str) -> tuple[str, Callable[[str], str]]:
    """``query`` with every comment and quoted text replaced by a placeholder, and the function
    that puts them back: rewrites then never touch what is inside them."""
    pieces: list[str] = []

    def hide(m: re.Match[str]) -> str:
        pieces.append(m.group())
        mark = _COMMENT if m.group().startswith(("/*", "--", "#")) else _QUOTED
        return f"{mark}{len(pieces) - 1}{mark}"

    masked = _OPAQUE.sub(hide, query)
    return masked, lambda text: _PIECE.sub(lambda m: pieces[int(m.group(2))], text)


def for_mysql(query: str) -> str:
    """``query`` without the TiDB-only syntax MySQL and MariaDB reject (comments are left as they are)."""
    masked, restore = _mask(query)
    for pattern in _TIDB_ONLY:
        masked = pattern.sub("", masked)
    return restore(masked).strip().rstrip(";")


@dataclass(frozen=True)
class DDLStatement:
    """What to run for one job: ``use`` the database (None for schema-level DDL) and ``sql``;
    ``skip`` says why nothing runs ("" when it runs)."""

    use: str | None
    sql: str
    skip: str = ""
    create_db: str | None = None   # CREATE TABLE into a database the downstream may not have yet


_CHARSET = re.compile(r"\b(CHARSET|CHARACTER\s+SET|COLLATE)\b", re.I)
_CREATE_TABLE = re.compile(r"\s*CREATE\s+(TEMPORARY\s+)?TABLE\b", re.I)
_PARTITION_BY = re.compile(r"\bPARTITION\s+BY\b", re.I)
_LIKE = re.compile(r"\s*\(?\s*LIKE\b", re.I)
_CREATED = re.compile(r"\s*CREATE\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"
                      r"(?:(?:`(?:[^`]|``)*`|\w+)\s*\.\s*)?(`(?:[^`]|``)*`|\w+)", re.I)


def _created_table(statement: str) -> str | None:
    """The table name a CREATE TABLE statement creates (unquoted), None for another statement."""
    m = _CREATED.match(statement)
    if m is None:
        return None
    name = m.group(1)
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _options_span(masked: str) -> tuple[int, int] | None:
    """Where the table (or database) options of a masked CREATE statement are: after a table's
    column list, up to its partition clause; None for ``CREATE TABLE … LIKE``."""
    start = 0
    if _CREATE_TABLE.match(masked):
        open_at = masked.find("(")
        if open_at < 0 or _LIKE.match(masked, open_at) or re.search(r"\bLIKE\b", masked[:open_at], re.I):
            return None
        depth = 0
        for i in range(open_at, len(masked)):
            depth += {"(": 1, ")": -1}.get(masked[i], 0)
            if depth == 0:
                start = i + 1
                break
        else:
            return None
    partition = _PARTITION_BY.search(masked, start)
    return start, partition.start() if partition else len(masked)


def with_charset(query: str, charset: str, collate: str) -> str:
    """``query`` (CREATE TABLE/DATABASE) with the upstream's default charset and collation among its
    options when it states none: MySQL and MariaDB would otherwise pick their own server default
    (often latin1, or a case-insensitive collation that makes case-differing unique keys collide).
    The clause goes after the last option, before a ``PARTITION BY`` clause and trailing comments; a
    charset stated in a MySQL executable comment (``/*!40101 … */``) counts as stated."""
    masked, restore = _mask(query)
    span = _options_span(masked)
    if not charset or span is None:
        return query
    start, end = span
    options = masked[start:end]
    executable = " ".join(p for p in re.findall(r"\x01\d+\x01", options) if restore(p).startswith("/*!"))
    if _CHARSET.search(options) or _CHARSET.search(restore(executable)):
        return query
    # after the last option: trailing whitespace and comments stay after the clause
    at = start + len(re.sub(r"(\s|\x01\d+\x01)*$", "", options))
    clause = f" DEFAULT CHARACTER SET {charset}" + (f" COLLATE {collate}" if collate else "")
    sep = " " if at < len(masked) and not masked[at].isspace() else ""
    return restore(masked[:at] + clause + sep + masked[at:])


def split_statements(query: str) -> list[str]:
    """The statements of ``query`` (``;``-separated outside comments and quoted text), without
    empty ones: a CREATE TABLES job's query is its CREATE TABLE statements joined."""
    masked, restore = _mask(query)
    return [s for s in (restore(piece).strip() for piece in masked.split(";")) if s]


def _create_tables(job: Job, query: str, table_filter: TableFilter, tidb: bool) -> DDLStatement:
    """A CREATE TABLES batch as its CREATE TABLE statements (each with the upstream's charset for
    MySQL), the filtered-out tables left out."""
    db = job.schema_name
    infos = {t.name.lower(): t for t in job.binlog.multiple_table_infos}
    kept = []
    for each in split_statements(query):
        name = _created_table(each)
        if name is not None and not table_filter.allows(db, name):
            continue
        info = infos.get(name.lower()) if name else None
        kept.append(with_charset(each, info.charset, info.collate) if info is not None and not tidb else each)
    if not kept:
        return DDLStatement(db, query, skip=f"every table of the batch in {db} is filtered out")
    return DDLStatement(db, ";\n".join(kept), create_db=db)


def _refusal(job: Job, tidb: bool, commit_ts: int) -> str:
    """Why the downstream cannot take ``job`` and what to do ("" when it can)."""
    fix = (f"The run stopped at it; the checkpoint is the last transaction before it. To go on: load the "
           f"tables it concerns into the downstream from a snapshot of the upstream at ts {commit_ts} "
           f"(Dumpling and Lightning), then add {commit_ts} to [syncer] ignore-txn-commit-ts and run again")
    if job.type == ddl_kinds.FLASHBACK_CLUSTER or (not tidb and job.type in ddl_kinds.RECOVERS):
        return (f"{ddl_kinds.describe(job, commit_ts)}: it {ddl_kinds.ROWS_WITHOUT_BINLOG[job.type]} without "
                f"writing them to the binlog, and the {'TiDB' if tidb else 'MySQL'} downstream cannot do the "
                f"same. {fix}")
    return ""


def plan_ddl(job: Job, table_filter: TableFilter, tidb: bool, commit_ts: int = 0) -> DDLStatement:
    """The statement for ``job`` on the downstream, or why it is skipped (filtered out, a failed
    job, a job that changes nothing downstream: TiDB Binlog skips placement, resource group,
    attribute, lock and cache jobs; TTL jobs for MySQL). A CREATE TABLES batch (TiDB 8's
    ``tidb_enable_fast_create_table``) is its CREATE TABLE statements, each rewritten as one.
    Raises :class:`UnreplicableDDLError` for a job whose rows the downstream cannot get (RECOVER or
    FLASHBACK of a table or database into MySQL, FLASHBACK CLUSTER into anything)."""
    db = ddl_kinds.schema_of(job)
    query = job.query if tidb else for_mysql(job.query)
    schema_level = job.type in (CREATE_SCHEMA, DROP_SCHEMA, ddl_kinds.RECOVER_SCHEMA)
    if job.binlog.schema_version == 0:
        return DDLStatement(None, query, skip="failed DDL job (schema version 0)")
    if ddl_kinds.no_effect(job):
        return DDLStatement(None, query, skip=f"{ddl_kinds.name(job)} changes no table (TiDB Binlog skips it)")
    if not tidb and job.type in ddl_kinds.TTL:
        return DDLStatement(None, query, skip="TTL is TiDB's (the rows TiDB's TTL jobs delete come as row changes)")
    if not tidb and db.lower() == TIDB_SYS_SCHEMA:
        return DDLStatement(None, query, skip="sys is TiDB's system schema (its bootstrap builds views over TiDB's own "
                                              "information_schema); MySQL and MariaDB keep a sys schema of their own")
    if job.type == ddl_kinds.FLASHBACK_CLUSTER:
        raise ddl_kinds.UnreplicableDDLError(_refusal(job, tidb, commit_ts))
    if job.type == CREATE_TABLES:
        return _create_tables(job, query, table_filter, tidb)
    if not query:
        return DDLStatement(None, query, skip="the job has no query")
    refused = _refusal(job, tidb, commit_ts)
    if schema_level:
        if not table_filter.allows_schema(db):
            return DDLStatement(None, query, skip=f"database {db} is filtered out")
        if refused:
            raise ddl_kinds.UnreplicableDDLError(refused)
        if job.type == CREATE_SCHEMA and not tidb:
            info = job.binlog.db_info or {}
            query = with_charset(query, str(info.get("charset") or "utf8mb4"), str(info.get("collate") or ""))
        return DDLStatement(None, query)
    if not table_filter.allows(db, job.table_name):
        return DDLStatement(db, query, skip=f"{db}.{job.table_name} is filtered out")
    if refused:
        raise ddl_kinds.UnreplicableDDLError(refused)
    table = job.binlog.table_info
    if job.type == CREATE_TABLE and table is not None and not tidb:
        query = with_charset(query, table.charset, table.collate)
    return DDLStatement(db, query, create_db=db if job.type == CREATE_TABLE else None)


def without_ignored(stmt: DDLStatement, ddl: DDLJob, events: EventFilter) -> DDLStatement:
    """``stmt`` less what TiDB Binlog's binlog event filter ignores: the job, by the names the drainer
    gives it (``DDLJob.names``), its query's event type and its query; a CREATE TABLES batch (which TiDB
    Binlog never runs downstream) statement by statement, each as the CREATE TABLE job it stands for."""
    job = ddl.job
    if stmt.skip or not events:
        return stmt
    db, table = ddl.names or (job.schema_name, job.table_name)
    if job.type != CREATE_TABLES:
        rule = events.rule_for(db, table, ddl_event(job.query), job.query)
        return stmt if rule is None else replace(stmt, skip=f"{rule.label} ignores it")
    names = {t.name.lower(): t.name for t in job.binlog.multiple_table_infos}
    ignored = set()
    for each in split_statements(job.query):
        name = _created_table(each)
        if name is not None and events.rule_for(db, names.get(name.lower(), name), ddl_event(each), each):
            ignored.add(name.lower())
    kept = [s for s in split_statements(stmt.sql) if (_created_table(s) or "").lower() not in ignored]
    if not kept:
        return replace(stmt, skip=f"binlog-filter-rule ignores every table of the batch in {db}")
    return replace(stmt, sql=";\n".join(kept))
