"""One Drainer run on Spark: pull → pair → decode, giving a :class:`transform.changes.RunBatch`.

Stages (each timed in :attr:`DrainResult.stages`):

1. **pull** — one Spark task per pump and ts sub-range streams the pump's prewrites and real
   commits in ``(from_ts, to_ts]`` (fake binlogs and rollbacks are dropped as they arrive), through
   binlake's range scan or, from a pump without it, TiDB's PullBinlogs (``transform.pull``).
2. **pair** — without their payloads: each commit finds the pull task (``source``) holding a copy
   of its prewrite (one copy when the transaction was written to two pumps), giving one small
   record per transaction; commits whose prewrite is older than the range are completed by looking
   the prewrite up on every PumpScan pump (a PullBinlogs pump sends each commit with its prewrite
   joined, and resolves its own lost commits). A commit whose prewrite no pump has fails the run
   (nothing is skipped).
3. **decode** — the prewrites join their pairs where they were pulled (the pairs broadcast; above
   ``BROADCAST_PAIRS`` transactions the prewrites shuffle by key instead; no global sort either,
   that would move every payload once more) and are decoded on the executors with the TableInfo in
   force at each transaction's commit position (history and the range's DDL commit ts broadcast;
   the pair stage finds the latter in the DDL transactions' commit binlogs); each decoded record
   holds its rows in commit order. The decoded segments are checkpointed on the executors' local
   disks: they are ``RunBatch.frame``.
4. **collect** — the driver collects one small record per segment piece (table id, schema version,
   row count, first commit_ts), never the rows.

What the pumps sent (payload sizes, commit-to-arrival seconds, as histogram counts per pump: see
``transform.pull``) reaches the driver through a Spark accumulator and is handed to ``pulled`` as the
pull stage ends. A pull or decode task failing on a binlog that does not decode fails the run with
:class:`UndecodableBinlog`.
"""
from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Protocol, TypeVar

import pyarrow as pa
from pyspark.accumulators import Accumulator
from pyspark.errors import PythonException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ingest import binlog as bl
from ingest.errors import MalformedBinlog
from transform import changes as ch
from transform import failpoints
from transform.codec.model import Job, TableInfo
from transform.ddl import needed_before, written_late
from transform.errors import DrainError, UndecodableBinlog
from transform.event_filter import EventFilter
from transform.filters import TableFilter
from transform.history import (
    CONTINUING,
    DROP_SCHEMA,
    DROP_TABLE,
    EXCHANGE_PARTITION,
    PARTITION_REMOVALS,
    RECOVER_TABLE,
    TRUNCATE_TABLE,
    CommitOrder,
    SchemaHistory,
    TableVersion,
    exchanged_partition,
)
from transform.partition_drops import Removal, removal_of
from transform.plan import Plan
from transform.pull import (
    LOOKUP_SOURCE,
    PUMP_SCAN,
    RAW_SCHEMA,
    TASK_DDL,
    Reads,
    ReadsParam,
    lookup_prewrites,
    pull_tasks,
    split_range,
)
from transform.rowchanges import OUT_SCHEMA, DecodeContext, OutRecord, decode_transactions
from transform.spark import kept_on_disk, spark_ddl
from transform.worker import tune_worker

T = TypeVar("T")
# transactions whose pairs (start_ts, commit_ts, source: ~40 bytes each) are broadcast to the decode
# tasks; a range with more shuffles its prewrites instead (the driver builds the broadcast)
BROADCAST_PAIRS = 1_000_000
# the decoded records' columns the run's frame keeps (kind "rows")
FRAME_COLUMNS = ("table_id", "schema_version", "commit_ts", "rows", "data")
# how a task's MalformedBinlog is named in the traceback Spark hands back
_MALFORMED = f"{MalformedBinlog.__module__}.{MalformedBinlog.__qualname__}: "

log = logging.getLogger(__name__)


@dataclass
class DrainResult:
    """A run's changes plus what it took: seconds per stage and record counts. ``release`` frees the
    run's rows on the executors once the sinks have written them."""

    batch: ch.RunBatch
    stages: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    release: Callable[[], object] = lambda: None


@contextmanager
def _task_errors(stage: str) -> Iterator[None]:
    """Re-raise a Spark task's Python error as a DrainError carrying its own message
    (:class:`UndecodableBinlog` for a binlog that does not decode)."""
    try:
        yield
    except PythonException as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        malformed = next((ln for ln in reversed(lines) if ln.startswith(_MALFORMED)), None)
        if malformed is not None:
            raise UndecodableBinlog.in_stage(stage, malformed.removeprefix(_MALFORMED)) from e
        cause = next((ln for ln in reversed(lines) if "Error:" in ln or "Exception:" in ln),
                     lines[-1] if lines else repr(e))
        raise DrainError(f"{stage} stage failed in a Spark task: {cause}") from e


class StageProgress(Protocol):
    """Told when each stage of a run starts and ends (a console, a log, a metrics sink)."""

    def started(self, stage: str) -> None:
        """``stage`` began."""

    def finished(self, stage: str, seconds: float, detail: str) -> None:
        """``stage`` ended after ``seconds``; ``detail`` says what it did (may be empty)."""


class Stages:
    """Runs the stages, times them into ``seconds`` and tells ``progress``; ``errors(stage)`` turns what a
    stage raises into binlake's errors (default: a Spark task's)."""

    def __init__(self, progress: StageProgress | None,
                 errors: Callable[[str], AbstractContextManager[None]] = _task_errors) -> None:
        self.progress = progress
        self.errors = errors
        self.seconds: dict[str, float] = {}

    def run(self, name: str, fn: Callable[[], T], detail: Callable[[T], str] = lambda _: "") -> T:
        t0 = time.perf_counter()
        if self.progress:
            self.progress.started(name)
        with self.errors(name):
            value = fn()
        took = time.perf_counter() - t0
        self.seconds[name] = self.seconds.get(name, 0.0) + took
        if self.progress:
            self.progress.finished(name, took, detail(value))
        failpoints.inject("drain-stage", name)
        return value


def pull_task_rows(plan: Plan, splits: int) -> list[tuple[str, str, int, int, int, int, str]]:
    """The pull tasks (``TASK_DDL`` rows): every pump's range cut in ``splits``, numbered as ``source``.
    A PullBinlogs task seeks to its sub-range's start as a scan does (the pump's index is keyed by ts)."""
    tasks = [(p.addr, p.node_id, plan.cluster_id, a, b, p.protocol)
             for p in plan.pumps for a, b in split_range(plan.from_ts, plan.to_ts, splits)]
    return [(addr, node, cluster, a, b, source, protocol)
            for source, (addr, node, cluster, a, b, protocol) in enumerate(tasks)]


def _pull(spark: SparkSession, plan: Plan, splits: int, received: Accumulator[Reads]) -> DataFrame:
    rows = pull_task_rows(plan, splits)
    df = spark.createDataFrame(rows, TASK_DDL)
    return df.repartition(len(rows)).mapInArrow(partial(pull_tasks, plan.security, plan.compressor, received),
                                                spark_ddl(RAW_SCHEMA))


def run_drain(spark: SparkSession, plan: Plan, history: SchemaHistory, table_filter: TableFilter | None = None,
              splits_per_pump: int = 1, progress: StageProgress | None = None,
              per_transaction: bool = False, skip_commit_ts: frozenset[int] = frozenset(),
              loopback_channel: int | None = None, pulled: Callable[[Reads], None] | None = None,
              event_filter: EventFilter | None = None) -> DrainResult:
    """Run the Spark stages of one range and return its changes (nothing is written here);
    ``progress`` hears of each stage. Each pump's range is cut into at least ``splits_per_pump``
    pull tasks, and into enough for one task per core of the cluster (Spark's default parallelism).
    ``per_transaction``: the frame's records are each one transaction's rows of one table.
    ``skip_commit_ts``: transactions left out (TiDB Binlog's ``ignore-txn-commit-ts``); a DDL job's
    binlog among them is a :class:`DrainError` (the tables follow the DDL history).
    ``loopback_channel``: transactions carrying that channel's loopback mark are left out
    (``transform.loopback``). ``pulled`` is told what each pump sent (by node id) once the pull
    stage has ended. ``event_filter``: the row changes it ignores are left out (counted as
    ``ignored_row_changes``)."""
    table_filter = table_filter or TableFilter()
    stages = Stages(progress)
    batch = ch.RunBatch(plan.cluster_id, plan.from_ts, plan.to_ts, uuid.uuid4().hex[:16],
                        per_transaction=per_transaction, spark=spark)
    result = DrainResult(batch, stages.seconds)
    if plan.empty:
        return result

    # what only the stages read (the pulled and paired checkpoints, the decode context) is deleted
    # when they end, also when one fails; the decoded rows when the sinks have written them
    with ExitStack() as scratch:
        release = _stages(spark, plan, history, table_filter, splits_per_pump, stages, result, scratch,
                          skip_commit_ts, loopback_channel, pulled, event_filter or EventFilter())
    result.release = release
    return result


def _kept(scratch: ExitStack, checkpointed: tuple[DataFrame, Callable[[], None]]) -> DataFrame:
    frame, release = checkpointed
    scratch.callback(release)
    return frame


def _stages(spark: SparkSession, plan: Plan, history: SchemaHistory, table_filter: TableFilter,
            splits_per_pump: int, stages: Stages, result: DrainResult, scratch: ExitStack,
            skip_commit_ts: frozenset[int] = frozenset(), loopback_channel: int | None = None,
            pulled: Callable[[Reads], None] | None = None,
            event_filter: EventFilter | None = None) -> Callable[[], None]:
    """Pull, pair, decode and collect into ``result``; returns what deletes the decoded rows."""
    batch = result.batch
    # prewrites are decoded in the task that pulled them: at least one pull task per core of the cluster
    splits = max(splits_per_pump, -(-spark.sparkContext.defaultParallelism // max(1, len(plan.pumps))))
    received = spark.sparkContext.accumulator({}, ReadsParam())
    raw = _kept(scratch, stages.run("pull", lambda: kept_on_disk(_pull(spark, plan, splits, received))))
    if pulled is not None:
        pulled(received.value)
    # pairing moves no payload: the transactions' small records (start_ts, commit_ts, the pull task
    # holding the prewrite copy to decode) are paired apart, then join the prewrites where they were pulled
    prewrites = raw.where(F.col("tp") == bl.PREWRITE).select("start_ts", "source", "payload")
    commits = (raw.where(F.col("tp") == bl.COMMIT).select("start_ts", "commit_ts", "ddl_job_id")
               .dropDuplicates(["start_ts"]))
    copies = prewrites.groupBy("start_ts").agg(F.min("source").alias("source"))   # a txn stored twice: one copy
    paired = _kept(scratch, stages.run("pair", lambda: kept_on_disk(commits.join(copies, "start_ts", "left"))))
    pairs = paired.select("start_ts", "commit_ts", "source")
    ddl_commits: dict[int, int] = {}

    def missing() -> tuple[int, list[int]]:
        # one pass: the commits whose prewrite no pull task has, and the DDL jobs' commit positions
        rows = (paired.where(F.col("source").isNull() | (F.col("ddl_job_id") > 0))
                .select("start_ts", "commit_ts", "ddl_job_id", "source").toArrow().to_pylist())
        for r in rows:
            if r["ddl_job_id"]:
                ddl_commits[r["ddl_job_id"]] = max(r["commit_ts"], ddl_commits.get(r["ddl_job_id"], 0))
        return pairs.count(), [r["start_ts"] for r in rows if r["source"] is None]

    txn_count, lost = stages.run("pair", missing, lambda v: f"{len(v[1])} commits need their prewrite looked up")
    refuse_skipped_ddl(ddl_commits, skip_commit_ts)
    if skip_commit_ts:
        pairs = pairs.where(~F.col("commit_ts").isin(sorted(skip_commit_ts)))
    if lost:
        found = looked_up(plan, lost)
        prewrites = prewrites.unionByName(spark.createDataFrame(found.to_pandas(), "start_ts long, payload binary, "
                                                                                  "source int"))
        pairs = pairs.fillna({"source": LOOKUP_SOURCE})
    # a range of up to BROADCAST_PAIRS transactions joins its pairs on every task (no shuffle: each
    # prewrite is decoded in the pull task that read it); a larger one shuffles the prewrites by key
    small = pairs if txn_count > BROADCAST_PAIRS else F.broadcast(pairs)
    txns = prewrites.join(small, ["start_ts", "source"]).select("start_ts", "commit_ts", "payload")

    ctx = spark.sparkContext.broadcast(decode_context(plan, history, table_filter, batch, ddl_commits,
                                                      loopback_channel, event_filter))
    scratch.callback(ctx.destroy)

    def decode(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tune_worker()   # the Python worker's collector settings (the codec allocates millions of objects)
        return decode_transactions(ctx.value, batches)

    # the decoded segments stay on the executors (checkpointed: the sinks read them once per table
    # without pulling again); the driver collects one small record per (table, schema version) and
    # per DDL job, no rows: its memory does not grow with the range
    decoded, release_decoded = stages.run("decode",
                                          lambda: kept_on_disk(txns.mapInArrow(decode, spark_ddl(OUT_SCHEMA))))
    try:
        meta = stages.run("collect", lambda: _metadata(decoded),
                          lambda t: f"{row_changes(t)} row changes")
        assemble(batch, meta, history, table_filter)
    except BaseException:
        release_decoded()
        raise
    batch.frame = decoded.where(F.col("kind") == "rows").select(*FRAME_COLUMNS)
    result.counts = run_counts(batch, txn_count, len(lost))
    return release_decoded


def refuse_skipped_ddl(ddl_commits: dict[int, int], skip_commit_ts: frozenset[int]) -> None:
    """Refuse an ``ignore-txn-commit-ts`` that names a DDL job's binlog (``ddl_commits``: job → commit
    ts); log the transactions left out."""
    skipped_ddl = sorted(job for job, ts in ddl_commits.items() if ts in skip_commit_ts)
    if skipped_ddl:
        raise DrainError(f"ignore-txn-commit-ts names the DDL binlog of job {skipped_ddl[0]} (commit ts "
                         f"{ddl_commits[skipped_ddl[0]]}): this sink's tables follow the DDL history, so a DDL cannot "
                         f"be left out; remove that ts")
    if skip_commit_ts:
        log.warning("leaving out the transactions committed at %s (ignore-txn-commit-ts)", sorted(skip_commit_ts))


def looked_up(plan: Plan, lost: list[int]) -> pa.Table:
    """The prewrites of the commits ``lost`` (start ts) that no pull task holds, looked up on every
    PumpScan pump (``start_ts, payload, source``); a :class:`DrainError` when one is on none."""
    found = lookup_prewrites([p.addr for p in plan.pumps if p.protocol == PUMP_SCAN], plan.cluster_id, lost,
                             plan.security)
    absent = sorted(set(lost) - set(found.column("start_ts").to_pylist()))
    if absent:
        raise DrainError(f"{len(absent)} commits have no prewrite on any pump (first start_ts {absent[0]}); "
                         f"refusing to drop committed transactions")
    return found


def decode_context(plan: Plan, history: SchemaHistory, table_filter: TableFilter, batch: ch.RunBatch,
                   ddl_commits: dict[int, int], loopback_channel: int | None,
                   event_filter: EventFilter | None) -> DecodeContext:
    """What the decode stage needs: the history, the filters, and the DDL jobs' commit positions."""
    return DecodeContext(history, table_filter, batch.per_transaction, CommitOrder(plan.from_ts, ddl_commits),
                         loopback_channel, event_filter or EventFilter(), plan.upstream)


def run_counts(batch: ch.RunBatch, transactions: int, lookups: int) -> dict[str, int]:
    """A run's counts for its report, once ``batch`` is assembled."""
    return {"transactions": transactions, "lookups": lookups,
            "row_changes": sum(t.row_count for t in batch.tables.values()),
            "stale_row_changes": batch.stale_rows, "loopback_transactions": batch.loopback_txns,
            "ignored_row_changes": batch.ignored_rows}


def row_changes(meta: pa.Table) -> int:
    """The row changes the metadata counts (stale ones not among them)."""
    kinds, rows = meta.column("kind").to_pylist(), meta.column("rows").to_pylist()
    return sum(n for k, n in zip(kinds, rows) if k == "rows")


def _metadata(decoded: DataFrame) -> pa.Table:
    """The decoded records without their rows (``OUT_SCHEMA``, ``data`` only a DDL's query), the
    records of one kind, table, schema version and job summed into one (its first commit_ts, the
    last for ``written_last``, its row and nulled-value counts)."""
    kind = F.col("kind")
    counted = (decoded.where(kind != "ddl").groupBy("kind", "table_id", "schema_version", "job_id")
               .agg(F.min("commit_ts").alias("first"), F.max("commit_ts").alias("last"),
                    F.sum("rows").alias("rows"), F.sum("nulled").alias("nulled"))
               .withColumn("commit_ts", F.when(kind == "written_last", F.col("last")).otherwise(F.col("first")))
               .withColumn("data", F.lit(None).cast("binary"))
               .drop("first", "last"))
    meta: pa.Table = decoded.where(kind == "ddl").unionByName(counted).toArrow()
    return meta


def _event_table_id(job: Job) -> int:
    info = job.binlog.table_info
    if job.type == DROP_TABLE or info is None:
        return job.table_id
    return info.id


def assemble(batch: ch.RunBatch, decoded: pa.Table, history: SchemaHistory, table_filter: TableFilter) -> None:
    """Group the decoded records' metadata (``OUT_SCHEMA``, ``data`` only a DDL's query) into
    ``batch.tables``: segments (row counts per schema version) and DDL events per table id."""
    segs: dict[int, list[tuple[int, int, int]]] = defaultdict(list)   # (version, first commit_ts, rows)
    events: dict[int, list[ch.DDLEvent]] = defaultdict(list)
    versions: dict[int, int] = defaultdict(int)
    records: list[OutRecord] = decoded.to_pylist()  # rows of OUT_SCHEMA (``data`` only a DDL's query)
    recovers: list[tuple[int, Job, TableInfo]] = []
    written: dict[str, dict[int, list[tuple[int, int]]]] = {"written": defaultdict(list),
                                                            "written_last": defaultdict(list)}
    for rec in records:
        if rec["kind"] == "stale":
            batch.stale_rows += rec["rows"]
            continue
        if rec["kind"] == "loopback":
            batch.loopback_txns += rec["rows"]
            continue
        if rec["kind"] == "ignored":
            batch.ignored_rows += rec["rows"]
            continue
        if rec["kind"] == "ambiguous":
            first = batch.ambiguous.get(rec["job_id"])
            batch.ambiguous[rec["job_id"]] = rec["commit_ts"] if first is None else min(first, rec["commit_ts"])
            continue
        if rec["kind"] in written:
            written[rec["kind"]][rec["table_id"]].append((rec["schema_version"], rec["commit_ts"]))
            continue
        if rec["kind"] == "ddl":
            job = history.job(rec["job_id"])
            query = rec.get("data")
            batch.ddl.append(ch.DDLJob(rec["commit_ts"], job, history.names_of(job), query.decode() if query else ""))
            tid = _event_table_id(job)
            if job.type == DROP_SCHEMA:  # every table of the database ends here
                for ended in history.ended_by(job.id):
                    table = ended.table
                    assert table is not None, "ended_by gives the definitions before the drop"
                    events[table.id].append(ch.DDLEvent(rec["commit_ts"], job, None, (ended.db, table.name)))
                    versions[table.id] = max(versions[table.id], job.binlog.schema_version)
                continue
            if not tid or history.is_view(tid):
                continue  # schema-level DDL (CREATE DATABASE …) or a view's: no table's rows or columns
            info = job.binlog.table_info if job.type != DROP_TABLE else None
            info = info.without_virtual_columns() if info is not None else None   # as the history's tables
            prev = history.version_at(job.table_id if job.type in CONTINUING else tid, job.binlog.schema_version - 1)
            before = (prev.db, prev.table.name) if prev is not None and prev.table is not None else None
            previous = prev.table if prev is not None else None
            events[tid].append(ch.DDLEvent(rec["commit_ts"], job, info, before, previous))
            versions[tid] = max(versions[tid], job.binlog.schema_version)
            was = history.before_job(job) if job.type in PARTITION_REMOVALS and info is not None else None
            if was is not None and was.table is not None and info is not None:
                removal = removal_of(tid, rec["commit_ts"], job, was.table, was.schema_version, info,
                                     history.began(job), history.lineage_ids(tid))
                if removal is not None:
                    batch.removals.append(removal)
            if job.type == RECOVER_TABLE and info is not None:
                recovers.append((rec["commit_ts"], job, info))
            if job.type == EXCHANGE_PARTITION and info is not None and prev is not None and prev.table is not None:
                for plain_db, plain, old_id in _exchanged(batch, history, rec["commit_ts"], job, prev, info):
                    plain_name = (plain_db, plain.name)
                    for one, event in ((old_id, ch.DDLEvent(rec["commit_ts"], job, None, plain_name)),
                                       (plain.id, ch.DDLEvent(rec["commit_ts"], job, plain, plain_name,
                                                              replace(plain, id=old_id)))):
                        events[one].append(event)
                        versions[one] = max(versions[one], job.binlog.schema_version)
            if job.type in (TRUNCATE_TABLE, *CONTINUING) and job.table_id != tid:  # the old id ends here
                events[job.table_id].append(ch.DDLEvent(rec["commit_ts"], job, None, before))
                versions[job.table_id] = max(versions[job.table_id], job.binlog.schema_version)
                if job.type in CONTINUING:
                    batch.continued[job.table_id] = tid
        else:
            segs[rec["table_id"]].append((rec["schema_version"], rec["commit_ts"], rec["rows"]))
            versions[rec["table_id"]] = max(versions[rec["table_id"]], rec["schema_version"])
            batch.nulled_values += rec["nulled"]
    batch.ddl.sort(key=lambda d: d.commit_ts)
    in_range = {d.job.id: d.commit_ts for d in batch.ddl}
    for commit_ts, job, info in recovers:
        recovered = _recovered(history, in_range, commit_ts, job, info)
        if recovered is not None:
            batch.removals.append(recovered)
    batch.ddl_needed = needed_before(batch.ddl, written["written"], history)
    batch.ddl_late = written_late(batch.ddl, written["written_last"], history)
    for tid in sorted(set(segs) | set(events)):
        last = history.version_at(tid, versions[tid])
        named = last if last is not None and last.table is not None else _last_named(history, tid, versions[tid])
        if named is None or named.table is None:
            raise DrainError(f"table id {tid} has changes but no name in the DDL history")
        if not table_filter.allows(named.db, named.table.name):
            continue
        final = last.table if last is not None else None
        tc = ch.TableChanges(tid, named.db, named.table.name, final)
        tc.events = sorted(events.get(tid, []), key=lambda e: e.commit_ts)
        by_version: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for version, first_commit, rows in segs.get(tid, []):
            by_version[version].append((first_commit, rows))
        for version in sorted(by_version, key=lambda v: min(c for c, _ in by_version[v])):
            count = sum(n for _, n in by_version[version])
            at = history.version_at(tid, version)
            tc.segments.append(ch.Segment(version, history.table_at(tid, version), count, at.db if at else named.db))
        batch.tables[tid] = tc


def _exchanged(batch: ch.RunBatch, history: SchemaHistory, commit_ts: int, job: Job, was: TableVersion,
               pt: TableInfo) -> list[tuple[str, TableInfo, int]]:
    """EXCHANGE PARTITION of ``pt`` (before it: ``was``) at ``commit_ts``: the two removals that move
    the partition's rows to the plain table and the plain table's to the partition (``batch.removals``),
    the plain table's old id folded into its new one (``batch.continued``); returns the plain table as
    it goes on (under the partition's old id) with its database and old id, or nothing when the history
    cannot tell."""
    assert was.table is not None
    version = job.binlog.schema_version
    swapped = exchanged_partition(was.table, pt, job.table_id)
    plain = history.version_at(job.table_id, version - 1)
    now = history.version_at(swapped, version) if swapped is not None else None
    if swapped is None or plain is None or plain.table is None or now is None or now.table is None:
        return []
    pt = pt.without_virtual_columns()
    batch.continued[job.table_id] = swapped
    batch.removals.append(Removal(pt.id, commit_ts, job, was.table, was.schema_version, pt, version,
                                  frozenset({swapped}), tuple(history.lineage_ids(pt.id)),
                                  into=swapped, into_table=now.table, into_version=version))
    batch.removals.append(Removal(swapped, commit_ts, job, plain.table, plain.schema_version, now.table, version,
                                  frozenset(), (job.table_id,), whole=True, into=pt.id, into_table=pt,
                                  into_version=version))
    return [(now.db, now.table, job.table_id)]


def _recovered(history: SchemaHistory, in_range: dict[int, int], commit_ts: int, job: Job,
               info: TableInfo) -> Removal | None:
    """RECOVER / FLASHBACK TABLE at ``commit_ts``: the rows the table held when it was dropped arrive
    again (a :class:`~transform.partition_drops.Removal` that only inserts; ``in_range``: the commit ts
    of the run's DDL jobs, the drop's among them when it is in the run). A table a TRUNCATE ended
    (recovered under its old id) is refused: the lake emptied it at the TRUNCATE."""
    version = job.binlog.schema_version
    ended = history.version_at(info.id, version - 1)
    if ended is None or ended.table is not None:
        return None
    was = history.version_at(info.id, ended.schema_version - 1)
    if was is None or was.table is None:
        return None
    at = in_range.get(ended.job.id)
    refused = ""
    if ended.job.type not in (DROP_TABLE, DROP_SCHEMA):
        refused = (f"DDL job {job.id} (committed at ts {commit_ts}): `{' '.join(job.query.split())[:200]}`: it "
                   f"brought back {was.db}.{was.table.name} as it was before DDL job {ended.job.id} "
                   f"(`{' '.join(ended.job.query.split())[:100]}`), whose rows the lake did not keep. The run stopped "
                   f"before writing anything; the checkpoint stays where it was. To go on: leave "
                   f"{was.db}.{info.name} out of this drainer ([[syncer.ignore-table]]), or replicate it with "
                   f"db-type tidb")
    return Removal(info.id, commit_ts, job, was.table, was.schema_version, info, version, frozenset(),
                   tuple(history.lineage_ids(info.id)), whole=True, into=info.id, into_table=info,
                   into_version=version, arrive_only=True, state_ts=at or 0, source=(was.db, was.table.name),
                   dropped_in_run=at is not None, refused=refused)


def _last_named(history: SchemaHistory, tid: int, version: int) -> TableVersion | None:
    """The newest definition of ``tid`` up to ``version`` that names a live table (None: never had one)."""
    for v in reversed(history.versions(tid)):
        if v.table is not None and v.schema_version <= version:
            return v
    return None
