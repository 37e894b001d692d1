"""One Drainer run in this process, without Spark, for a range small enough: the stages of
``transform.drain`` (pull → pair → decode → collect) over Arrow tables in memory, the same task
functions (``transform.pull.pull_task``, ``transform.rowchanges.decode_transactions``) and the same
assembly, leaving the rows in a ``transform.local_frame.LocalFrame`` for the sinks.

The pull stage counts the payload bytes it receives; past ``limit`` it stops and raises
:class:`RangeTooLarge` (what was pulled is dropped, nothing was written), and the caller runs the range
on Spark. So memory stays bounded by ``limit`` (the payloads, and the decoded rows of those payloads),
whatever the range. Pumps are read one after another, each as one task.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.compute as pc

from ingest import binlog as bl
from ingest.errors import MalformedBinlog
from transform import changes as ch
from transform.drain import (
    FRAME_COLUMNS,
    DrainResult,
    StageProgress,
    Stages,
    assemble,
    decode_context,
    looked_up,
    pull_task_rows,
    refuse_skipped_ddl,
    row_changes,
    run_counts,
)
from transform.errors import DrainError, UndecodableBinlog
from transform.event_filter import EventFilter
from transform.filters import TableFilter
from transform.history import SchemaHistory
from transform.local_frame import LOCAL, LocalFrame, ddl_names
from transform.plan import Plan
from transform.pull import LOOKUP_SOURCE, RAW_SCHEMA, TASK_DDL, Reads, pull_task
from transform.rowchanges import OUT_SCHEMA, decode_transactions


class RangeTooLarge(DrainError):
    """The range's binlogs passed the in-process limit: the caller runs it on Spark (transient: a user
    never sees it)."""

    transient = True


@contextmanager
def _errors(stage: str) -> Iterator[None]:
    """A binlog that does not decode, as the Spark stages name it."""
    try:
        yield
    except MalformedBinlog as e:
        raise UndecodableBinlog.in_stage(stage, str(e)) from e


def run_drain_here(plan: Plan, history: SchemaHistory, limit: int, table_filter: TableFilter | None = None,
                   progress: StageProgress | None = None, per_transaction: bool = False,
                   skip_commit_ts: frozenset[int] = frozenset(), loopback_channel: int | None = None,
                   pulled: Callable[[Reads], None] | None = None,
                   event_filter: EventFilter | None = None) -> DrainResult:
    """``transform.drain.run_drain`` in this process (its arguments mean the same); raises
    :class:`RangeTooLarge` once the pumps have sent more than ``limit`` payload bytes."""
    table_filter = table_filter or TableFilter()
    stages = Stages(progress, _errors)
    batch = ch.RunBatch(plan.cluster_id, plan.from_ts, plan.to_ts, uuid.uuid4().hex[:16],
                        per_transaction=per_transaction, spark=LOCAL)
    result = DrainResult(batch, stages.seconds)
    if plan.empty:
        return result
    received: Reads = {}
    raw = stages.run("pull", lambda: _pull(plan, limit, received))
    if pulled is not None:
        pulled(received)
    tp = raw.column("tp")
    prewrites = raw.filter(pc.equal(tp, bl.PREWRITE)).select(["start_ts", "source", "payload"])
    commits = raw.filter(pc.equal(tp, bl.COMMIT)).select(["start_ts", "commit_ts", "ddl_job_id"])
    paired, ddl_commits, lost = stages.run("pair", lambda: _pair(prewrites, commits),
                                           lambda v: f"{len(v[2])} commits need their prewrite looked up")
    refuse_skipped_ddl(ddl_commits, skip_commit_ts)
    if skip_commit_ts:
        skip = pa.array(sorted(skip_commit_ts), pa.int64())
        paired = paired.filter(pc.invert(pc.is_in(paired.column("commit_ts"), value_set=skip)))
    if lost:
        found = looked_up(plan, lost).select(["start_ts", "source", "payload"]).cast(prewrites.schema)
        prewrites = pa.concat_tables([prewrites, found])
        paired = paired.set_column(paired.schema.get_field_index("source"), "source",
                                   pc.fill_null(paired.column("source"), LOOKUP_SOURCE))
    txns = prewrites.join(paired, ["start_ts", "source"], join_type="inner").select(["start_ts", "commit_ts",
                                                                                     "payload"])
    ctx = decode_context(plan, history, table_filter, batch, ddl_commits, loopback_channel, event_filter)
    decoded = stages.run("decode", lambda: pa.Table.from_batches(
        list(decode_transactions(ctx, txns.to_batches())), schema=OUT_SCHEMA))
    meta = stages.run("collect", lambda: _metadata(decoded), lambda t: f"{row_changes(t)} row changes")
    assemble(batch, meta, history, table_filter)
    rows = decoded.filter(pc.equal(decoded.column("kind"), "rows")).select(list(FRAME_COLUMNS))
    batch.frame = LocalFrame(rows.to_batches())
    result.counts = run_counts(batch, paired.num_rows, len(lost))
    return result


def _pull(plan: Plan, limit: int, received: Reads) -> pa.Table:
    """Every pump's records of the range, one task per pump; :class:`RangeTooLarge` past ``limit`` bytes."""
    names = ddl_names(TASK_DDL)
    batches: list[pa.RecordBatch] = []
    size = 0
    for row in pull_task_rows(plan, 1):
        for b in pull_task(dict(zip(names, row)), plan.security, plan.compressor, received):
            size += b.column("payload").nbytes
            if size > limit:
                raise RangeTooLarge(f"the range's binlogs passed {limit} bytes")
            batches.append(b)
    return pa.Table.from_batches(batches, schema=RAW_SCHEMA)


def _pair(prewrites: pa.Table, commits: pa.Table) -> tuple[pa.Table, dict[int, int], list[int]]:
    """One record per transaction (``start_ts, commit_ts, ddl_job_id, source``: the pull task holding a
    copy of its prewrite, null when none does), the DDL jobs' commit ts, and the start ts of the
    commits whose prewrite no task holds."""
    commits = (commits.group_by("start_ts", use_threads=False)   # a commit stored on two pumps: once
               .aggregate([("commit_ts", "max"), ("ddl_job_id", "max")])
               .rename_columns(["start_ts", "commit_ts", "ddl_job_id"]))
    copies = (prewrites.group_by("start_ts", use_threads=False).aggregate([("source", "min")])
              .rename_columns(["start_ts", "source"]))
    paired = commits.join(copies, "start_ts", join_type="left outer")
    ddl_commits: dict[int, int] = {}
    jobs = paired.filter(pc.greater(paired.column("ddl_job_id"), 0))
    for job, ts in zip(jobs.column("ddl_job_id").to_pylist(), jobs.column("commit_ts").to_pylist()):
        ddl_commits[job] = max(ts, ddl_commits.get(job, 0))
    lost = paired.filter(pc.is_null(paired.column("source"))).column("start_ts").to_pylist()
    return paired, ddl_commits, lost


def _metadata(decoded: pa.Table) -> pa.Table:
    """``transform.drain``'s collect stage over a table: the decoded records without their rows (a
    DDL's keeps its query), those of one kind, table and schema version summed into one (the first
    commit_ts; the last for ``written_last``)."""
    kind = decoded.column("kind")
    summed = (decoded.filter(pc.not_equal(kind, "ddl"))
              .group_by(["kind", "table_id", "schema_version", "job_id"], use_threads=False)
              .aggregate([("commit_ts", "min"), ("commit_ts", "max"), ("rows", "sum"), ("nulled", "sum")]))
    records = decoded.filter(pc.equal(kind, "ddl")).to_pylist()
    for r in summed.to_pylist():
        records.append({"kind": r["kind"], "table_id": r["table_id"], "schema_version": r["schema_version"],
                        "commit_ts": r["commit_ts_max"] if r["kind"] == "written_last" else r["commit_ts_min"],
                        "job_id": r["job_id"], "rows": r["rows_sum"], "nulled": r["nulled_sum"], "data": None})
    return pa.Table.from_pylist(records, schema=OUT_SCHEMA)
