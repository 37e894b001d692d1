"""What a DDL job does to a binlog consumer, by TiDB's job type (``ActionType``: pingcap/tidb
``pkg/meta/model/job.go``, ``parser/model/ddl.go`` in older releases).

Most jobs change a table's definition, which the schema history follows. Some change a table's
*rows* without writing them to the binlog, and a consumer that rebuilds tables from row changes (the
lake: Iceberg, Parquet) cannot follow them: :func:`lake_refusal` says why and what the user can do.
A consumer that replays statements (MySQL, TiDB) follows them by running the statement, where the
downstream takes it. Others change nothing a consumer holds (placement, resource groups, attributes,
locks, cached tables): TiDB Binlog's drainer skips them (:func:`no_effect`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from transform.changes import DDLJob
from transform.codec.model import Job
from transform.errors import DrainError
from transform.filters import TableFilter
from transform.history import (
    DROP_PARTITION,
    EXCHANGE_PARTITION,
    RECOVER_TABLE,
    TRUNCATE_PARTITION,
    SchemaHistory,
)

# job type → the name TiDB gives it (``ActionType.String()`` style, for messages)
NAMES: dict[int, str] = {
    1: "create schema", 2: "drop schema", 3: "create table", 4: "drop table", 5: "add column", 6: "drop column",
    7: "add index", 8: "drop index", 9: "add foreign key", 10: "drop foreign key", 11: "truncate table",
    12: "modify column", 13: "rebase auto_increment ID", 14: "rename table", 15: "set default value",
    16: "shard row ID", 17: "modify table comment", 18: "rename index", 19: "add partition",
    20: "drop partition", 21: "create view", 22: "modify table charset and collate", 23: "truncate partition",
    24: "drop view", 25: "recover table", 26: "modify schema charset and collate", 27: "lock table",
    28: "unlock table", 29: "repair table", 30: "set tiflash replica", 31: "update tiflash replica status",
    32: "add primary key", 33: "drop primary key", 34: "create sequence", 35: "alter sequence",
    36: "drop sequence", 37: "add columns", 38: "drop columns", 39: "modify table auto id cache",
    40: "rebase auto_random ID", 41: "alter index visibility", 42: "exchange partition",
    43: "add check constraint", 44: "drop check constraint", 45: "alter check constraint", 47: "rename tables",
    48: "drop indexes", 49: "alter table attributes", 50: "alter table partition attributes",
    51: "create placement policy", 52: "alter placement policy", 53: "drop placement policy",
    54: "alter table partition placement", 55: "modify schema default placement", 56: "alter table placement",
    57: "alter table cache", 58: "alter table statistics options", 59: "alter table no cache",
    60: "create tables", 61: "alter table multi-schema change", 62: "flashback cluster", 63: "recover schema",
    64: "alter table reorganize partition", 65: "alter table ttl", 67: "alter table no_ttl",
    68: "create resource group", 69: "alter resource group", 70: "drop resource group",
    71: "alter table partition by", 72: "alter table remove partitioning",
}

FLASHBACK_CLUSTER, RECOVER_SCHEMA = 62, 63

# rows appear or vanish with no row change in the binlog: what each job did to them
ROWS_WITHOUT_BINLOG: dict[int, str] = {
    DROP_PARTITION: "deleted the partition's rows",
    TRUNCATE_PARTITION: "deleted the partition's rows",
    EXCHANGE_PARTITION: "swapped the partition's rows with the other table's",
    RECOVER_TABLE: "brought the dropped table back with the rows it had",
    RECOVER_SCHEMA: "brought the dropped database back with the rows its tables had",
    FLASHBACK_CLUSTER: "set every table back to its rows at an earlier ts",
}
PARTITION_DROPS = frozenset({DROP_PARTITION, TRUNCATE_PARTITION})
RECOVERS = frozenset({RECOVER_TABLE, RECOVER_SCHEMA})   # RECOVER/FLASHBACK TABLE, FLASHBACK DATABASE
TTL = frozenset({65, 67})
# jobs TiDB Binlog's drainer skips for every downstream: nothing a consumer holds changes
NO_EFFECT = frozenset({27, 28, 31, 49, 50, 51, 52, 53, 54, 55, 56, 57, 59, 68, 69, 70})


class UnreplicableDDLError(DrainError):
    """A DDL job the sink cannot replicate exactly (terminal: running again meets it again)."""

    transient = False


def name(job: Job) -> str:
    """The job's type as TiDB names it (``"truncate partition"``), or ``"type N"``."""
    return NAMES.get(job.type, f"type {job.type}")


def no_effect(job: Job) -> bool:
    """True for a job that changes no table's columns or rows (TiDB Binlog skips it)."""
    return job.type in NO_EFFECT


def describe(job: Job, commit_ts: int) -> str:
    """``DDL job 42 (truncate partition, committed at ts N): `ALTER …```, for messages."""
    query = " ".join(job.query.split())
    return f"DDL job {job.id} ({name(job)}, committed at ts {commit_ts}): `{query[:300]}`"


def lake_refusal(job: Job, commit_ts: int, sink: str) -> str | None:
    """Why a sink that rebuilds tables from row changes (``sink`` names it) cannot follow ``job``,
    and what the user can do; None when it can."""
    did = ROWS_WITHOUT_BINLOG.get(job.type)
    if did is None:
        return None
    table = f"{job.schema_name}.{job.table_name}" if job.table_name else f"database {schema_of(job)}"
    why = (f"it {did} without writing them to the binlog, so the {sink} sink cannot know which rows "
           f"{table} holds after it")
    replays = ("" if job.type in (EXCHANGE_PARTITION, FLASHBACK_CLUSTER)
               else "replicate it with db-type tidb, or " if job.type in RECOVERS
               else "replicate it with a sink that replays DDL (db-type mysql or tidb), or ")
    return (f"{describe(job, commit_ts)}: {why}. The run stopped before writing anything; the checkpoint "
            f"stays where it was. To go on: {replays}leave {table} out of this drainer ([[syncer.ignore-table]]) "
            f"and run again")


def schema_of(job: Job) -> str:
    """The database ``job`` is on: its schema name, or for FLASHBACK DATABASE (submitted without one)
    the database it brought back."""
    if job.schema_name:
        return job.schema_name
    db = job.binlog.db_info
    if isinstance(db, dict) and isinstance(db.get("db_name"), dict):
        return str(db["db_name"].get("O", ""))
    return ""


def refuse_for_lake(ddl: Sequence[DDLJob], table_filter: TableFilter, sink: str) -> None:
    """Raise :class:`UnreplicableDDLError` for the first job of ``ddl`` that a lake sink (``sink``
    names it) cannot follow: FLASHBACK DATABASE of a database ``table_filter`` replicates, FLASHBACK
    CLUSTER (the others, ``transform.partition_drops`` makes)."""
    for d in ddl:
        job = d.job
        if job.type == FLASHBACK_CLUSTER:
            concerned = True
        elif job.type == RECOVER_SCHEMA:
            concerned = table_filter.allows_schema(schema_of(job))
        else:
            continue
        reason = lake_refusal(job, d.commit_ts, sink) if concerned else None
        if reason is not None:
            raise UnreplicableDDLError(reason)


def needed_before(ddl: Sequence[DDLJob], written: Mapping[int, Sequence[tuple[int, int]]],
                  history: SchemaHistory) -> dict[int, int]:
    """Job id → the commit ts of the first transaction that needed the job's schema, for the jobs
    where it commits before the job's DDL binlog. ``written``: table id → (the schema version a
    transaction was written under, the first commit written under it).

    TiDB may publish a job's schema before the transaction that writes its DDL binlog (a
    multi-schema ALTER finishes in a transaction of its own), so a transaction written under the
    job's version can commit first. DROP and TRUNCATE PARTITION take the partition's rows away at
    their first step: a transaction written during the job (under a version newer than every job
    done before it started, by ``real_start_ts``; exact while no other DDL runs at the same time)
    already writes without them. A consumer replaying statements runs the job before such a
    transaction."""
    out: dict[int, int] = {}
    for d in ddl:
        threshold = history.began(d.job) if d.job.type in PARTITION_DROPS else d.job.binlog.schema_version
        firsts = [first for tid in _table_ids(d.job) for version, first in written.get(tid, ()) if version >= threshold]
        if firsts and min(firsts) < d.commit_ts:
            out[d.job.id] = min(firsts)
    return out


def written_late(ddl: Sequence[DDLJob], written_last: Mapping[int, Sequence[tuple[int, int]]],
                 history: SchemaHistory) -> dict[int, int]:
    """Job id → the commit ts of a transaction written before a DROP or TRUNCATE PARTITION began
    that committed after the job started running (``written_last``: table id → (schema version
    written under, the last commit written under it)). Each statement of such a transaction ran with
    the schema of its moment, so its rows in the partition's range went into the partition (and with
    it) or into the one that took the range, and the binlog says neither: a consumer replaying
    statements cannot be exact. (The lake asks TiDB's MVCC records where each such row went:
    ``transform.rowchanges``.)"""
    out: dict[int, int] = {}
    for d in ddl:
        if d.job.type not in PARTITION_DROPS:
            continue
        began, started = history.began(d.job), d.job.real_start_ts or d.job.start_ts
        lasts = [last for tid in _table_ids(d.job) for version, last in written_last.get(tid, ()) if version < began]
        if lasts and max(lasts) > started:
            out[d.job.id] = max(lasts)
    return out


def _table_ids(job: Job) -> set[int]:
    info = job.binlog.table_info
    return {job.table_id} | ({info.id} if info is not None else set())
