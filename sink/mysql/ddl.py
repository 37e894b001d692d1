"""DDL for the MySQL sink: which upstream DDL jobs are applied, and their text made acceptable to
MySQL and MariaDB.

TiDB writes its own options in ``/*T![feature] … */`` comments, which MySQL and MariaDB ignore as
plain comments; what TiDB may write outside comments is removed here: ``AUTO_RANDOM(…)``,
``CLUSTERED``/``NONCLUSTERED`` after a primary key, ``SHARD_ROW_ID_BITS``, ``PRE_SPLIT_REGIONS``,
``AUTO_ID_CACHE``, ``PLACEMENT POLICY`` and ``TTL`` table options. CREATE TABLE and CREATE
DATABASE that state no charset get the upstream's (TiDB defaults to utf8mb4/utf8mb4_bin; MySQL and
MariaDB would use their own server default). A downstream TiDB (``db-type =
"tidb"``) gets the query unchanged. Errors saying the object already exists or is already gone are
ignored, as TiDB Binlog's loader does, so a DDL replayed after a crash does not stop the run.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from transform.codec.model import Job
from transform.filters import TableFilter
from transform.history import CREATE_SCHEMA, CREATE_TABLE, CREATE_TABLES, DROP_SCHEMA

# MySQL error codes meaning "already done": database exists / doesn't exist, table exists, unknown
# table, duplicate column or key name, can't drop a column or key that is not there
IGNORED_ERRORS = frozenset({1007, 1008, 1050, 1051, 1060, 1061, 1091})

_TIDB_ONLY = [
    re.compile(r"\bAUTO_RANDOM\s*(\(\s*\d+\s*(,\s*\d+\s*)?\))?", re.I),
    re.compile(r"\b(NON)?CLUSTERED\b", re.I),
    re.compile(r"\b(SHARD_ROW_ID_BITS|PRE_SPLIT_REGIONS|AUTO_ID_CACHE)\s*=?\s*\d+", re.I),
    re.compile(r"\bPLACEMENT\s+POLICY\s*=?\s*(`[^`]*`|\w+)", re.I),
    re.compile(r"\bTTL\s*=\s*`?\w+`?\s*\+\s*INTERVAL\s+\S+\s+\w+(\s+TTL_ENABLE\s*=\s*'\w+')?", re.I),
]


def for_mysql(query: str) -> str:
    """``query`` without the TiDB-only syntax MySQL and MariaDB reject (comments are left as they are)."""
    out = []
    for part in re.split(r"(/\*.*?\*/|'(?:[^'\\]|\\.)*')", query, flags=re.S):
        if part.startswith(("/*", "'")):
            out.append(part)
            continue
        for pattern in _TIDB_ONLY:
            part = pattern.sub("", part)
        out.append(part)
    return "".join(out).strip().rstrip(";")


@dataclass(frozen=True)
class DDLStatement:
    """What to run for one job: ``use`` the database (None for schema-level DDL) and ``sql``;
    ``skip`` says why nothing runs ("" when it runs)."""

    use: str | None
    sql: str
    skip: str = ""
    create_db: str | None = None   # CREATE TABLE into a database the downstream may not have yet


_CHARSET = re.compile(r"\b(CHARSET|CHARACTER\s+SET|COLLATE)\b", re.I)


def with_charset(query: str, charset: str, collate: str) -> str:
    """``query`` (CREATE TABLE/DATABASE) with the upstream's default charset and collation appended
    when it states none: MySQL and MariaDB would otherwise pick their own server default (often
    latin1, or a case-insensitive collation that makes case-differing unique keys collide)."""
    tail = query[query.rfind(")") + 1:] if ")" in query else query
    if not charset or _CHARSET.search(tail):
        return query
    return f"{query} DEFAULT CHARACTER SET {charset}" + (f" COLLATE {collate}" if collate else "")


def plan_ddl(job: Job, table_filter: TableFilter, tidb: bool) -> DDLStatement:
    """The statement for ``job`` on the downstream, or why it is skipped (filtered out, a failed
    job, CREATE TABLES batches as TiDB Binlog skips them for MySQL)."""
    db = job.schema_name
    query = job.query if tidb else for_mysql(job.query)
    schema_level = job.type in (CREATE_SCHEMA, DROP_SCHEMA)
    if job.binlog.schema_version == 0:
        return DDLStatement(None, query, skip="failed DDL job (schema version 0)")
    if job.type == CREATE_TABLES:
        return DDLStatement(None, query, skip="CREATE TABLES batch (TiDB Binlog skips it for MySQL)")
    if not query:
        return DDLStatement(None, query, skip="the job has no query")
    if schema_level:
        if not table_filter.allows_schema(db):
            return DDLStatement(None, query, skip=f"database {db} is filtered out")
        if job.type == CREATE_SCHEMA and not tidb:
            info = job.binlog.db_info or {}
            query = with_charset(query, str(info.get("charset") or "utf8mb4"), str(info.get("collate") or ""))
        return DDLStatement(None, query)
    if not table_filter.allows(db, job.table_name):
        return DDLStatement(db, query, skip=f"{db}.{job.table_name} is filtered out")
    table = job.binlog.table_info
    if job.type == CREATE_TABLE and table is not None and not tidb:
        query = with_charset(query, table.charset, table.collate)
    return DDLStatement(db, query, create_db=db if job.type == CREATE_TABLE else None)
