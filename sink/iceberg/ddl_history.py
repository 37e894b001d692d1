"""The upstream's DDL history kept in the lake: ``_binlake.ddl_history``, one row per DDL job.

Each row holds the job's JSON as TiDB's ``/ddl/history`` gave it, its schema version, its
``FinishedTS`` and the commit ts of its DDL binlog (null for a job whose binlog came before the
lake's first run: such a job is placed at its ``FinishedTS``). A drain records, before its
checkpoint moves, the jobs whose DDL binlog its range holds and the other jobs finished by its end
that the table lacks (the whole history before a lake's first run, or before this table existed):
so the table holds every job up to the checkpoint, and ``restore`` and ``check`` read the history
from the lake, asking the upstream for nothing. A job is recorded once; a killed run's rows are
recorded again by the run that completes the range, and two rows of one job (two racing drains)
read as one.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from sink.iceberg.catalog import table_or_none
from sink.iceberg.checkpoint import ensure_namespace
from sink.iceberg.lineage import META_NAMESPACE
from transform import failpoints
from transform.changes import RunBatch
from transform.codec.model import Job
from transform.history import SchemaHistory

TABLE = (META_NAMESPACE, "ddl_history")
SCHEMA = Schema(
    NestedField(1, "job_id", LongType(), required=True),
    NestedField(2, "schema_version", LongType(), required=True),
    NestedField(3, "finished_ts", LongType(), required=True),
    NestedField(4, "commit_ts", LongType(), required=False),
    NestedField(5, "job", StringType(), required=True),
    identifier_field_ids=[1],
)


@dataclass(frozen=True)
class Recorded:
    """One job as the lake holds it: TiDB's JSON and the commit ts of its DDL binlog (None: unknown)."""

    job: str
    commit_ts: int | None


def read(catalog: Catalog) -> dict[int, Recorded] | None:
    """Every job the lake holds by id; None when the lake has no history table (written before
    binlake kept one)."""
    table = table_or_none(catalog, TABLE)
    if table is None:
        return None
    out: dict[int, Recorded] = {}
    for row in table.scan(selected_fields=("job_id", "commit_ts", "job")).to_arrow().to_pylist():
        have = out.get(row["job_id"])
        if have is None or have.commit_ts is None:   # a racing drain's copy: the one that knows its commit
            out[row["job_id"]] = Recorded(row["job"], row["commit_ts"])
    return out


def history(recorded: dict[int, Recorded]) -> SchemaHistory:
    """The :class:`SchemaHistory` of the recorded jobs, each placed at its DDL binlog's commit ts
    where the lake knows it."""
    docs = [json.loads(r.job) for r in recorded.values()]
    return SchemaHistory((Job.from_json(d) for d in docs),
                         commit_ts={i: r.commit_ts for i, r in recorded.items() if r.commit_ts is not None},
                         raw={i: r.job for i, r in recorded.items()})


def to_record(history: SchemaHistory, run: RunBatch) -> list[tuple[Job, int | None]]:
    """The jobs a run records: those whose DDL binlog its range holds (with that binlog's commit ts)
    and the others finished by its end (commit ts unknown: their binlog came before the lake's first
    run, or never was, or, for a DDL transaction that outlasts the run, comes in the next run, which
    records its commit ts). :func:`record` skips the ones already held."""
    in_range = {e.job.id: e.commit_ts for e in run.ddl}
    out: list[tuple[Job, int | None]] = []
    for job in history.jobs.values():
        if job.id in in_range:
            out.append((job, in_range[job.id]))
        elif 0 < job.binlog.finished_ts <= run.to_ts:
            out.append((job, None))
    return out


def record(catalog: Catalog, history: SchemaHistory, jobs: Iterable[tuple[Job, int | None]]) -> int:
    """Append the jobs the lake lacks (one commit; none when it lacks none); the number appended.
    A job held without its commit ts gets a second row once the ts is known. A commit another
    process makes meanwhile (``binlake maintain``'s compaction, a racing drain) is met by pyiceberg's
    own retry of the append (``commit.retry.num-retries``) on the table as it is then."""
    table = table_or_none(catalog, TABLE)
    held: dict[int, bool] = {}   # job id → its commit ts is held
    if table is not None:
        for row in table.scan(selected_fields=("job_id", "commit_ts")).to_arrow().to_pylist():
            held[row["job_id"]] = held.get(row["job_id"], False) or row["commit_ts"] is not None
    new = [(job, ts) for job, ts in jobs if job.id not in held or (not held[job.id] and ts is not None)]
    if not new:
        return 0
    if table is None:
        ensure_namespace(catalog, META_NAMESPACE)
        try:
            table = catalog.create_table(TABLE, schema=SCHEMA)
        except Exception:   # a racing drain created it first
            table = table_or_none(catalog, TABLE)
            if table is None:
                raise
    rows = pa.Table.from_pylist([{"job_id": job.id, "schema_version": job.binlog.schema_version,
                                  "finished_ts": job.binlog.finished_ts, "commit_ts": ts,
                                  "job": history.raw_job(job.id)} for job, ts in new], schema=SCHEMA.as_arrow())
    failpoints.inject("ddl-history-append", len(new))
    table.append(rows)
    return len(new)
