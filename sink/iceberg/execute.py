"""A run's table work before the commits: each table's planned write staged on the driver, then one
Spark pass. Nothing here decides: the run's :class:`~sink.iceberg.write_plan.WritePlan` did.

:func:`stage` takes a :class:`~sink.iceberg.write_plan.TableWrite` whose catalog moves are done and,
for its changelog and its mirror, opens the table as planned (created when the plan says so; a table
another writer changed since the plan raises :class:`~sink.iceberg.write_plan.TableMovedError`), and
opens the transaction its commit will be with the planned schema and spec updates replayed. Against
the metadata that transaction will commit it builds the task job the plan describes: a
``tasks.ChangelogJob`` (the rows after the table's progress) or a ``tasks.MirrorJob`` (the merge of
the live id's changes into the files of their key buckets; after a TRUNCATE, into none).

A table whose evolution the plan refused (a DDL Iceberg cannot follow, a rewritten column binlake
cannot convert) is staged with its error: it is raised at the table's commit, after the tables
before it.

:func:`run_pass` runs every job of the run in one Spark job: the changelogs' files are written by a
``mapInArrow`` over the run's frame, the mirrors' rows are routed per (mirror, key bucket), shuffled
once and merged bucket by bucket (a task takes several buckets when the session has fewer task slots
than buckets); what comes back to the driver is file metadata per table (:class:`Written`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from sink.errors import IncompatibleSchemaChange, SinkError
from sink.iceberg import tasks
from sink.iceberg.steps import replay
from sink.iceberg.tables import Tables
from sink.iceberg.write_plan import ChangelogWrite, MirrorWrite, TableWrite
from transform import changes as ch
from transform.codec.model import TableInfo


@dataclass
class Written:
    """What a table's tasks returned: new files, paths of the files they replace, row changes per op."""

    files: list[DataFile] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class Staged:
    """One Iceberg table's part of the run before its commit."""

    table: Table
    tx: Transaction                                     # the evolution staged; the data and properties follow
    info: TableInfo
    version: int
    job: tasks.ChangelogJob | tasks.MirrorJob | None = None
    sources: frozenset[int] = frozenset()               # a changelog: the table ids whose rows it takes
    files: list[DataFile] = field(default_factory=list)  # a mirror: its files the merge read
    reset: bool = False                                 # a mirror: every file goes (a TRUNCATE in the range)
    deletes: dict[str, list[DataFile]] = field(default_factory=dict)   # a mirror: data file path → its deletes
    error: Exception | None = None                      # the staging was refused: raised at the commit

    @property
    def name(self) -> str:
        return ".".join(self.table.name())


@dataclass
class Work:
    """What the run does to one planned table's Iceberg tables."""

    write: TableWrite
    changelog: Staged | None = None
    mirror: Staged | None = None

    def staged(self) -> list[Staged]:
        return [s for s in (self.changelog, self.mirror) if s is not None]


def stage(tables: Tables, write: TableWrite) -> Work:
    """The planned changelog and mirror staged (see the module doc); run after every table's moves."""
    work = Work(write)
    plan = write.plan
    info = plan.info
    if info is None:
        return work
    if write.changelog is not None:
        work.changelog = _stage_changelog(tables, write.changelog, info, plan.version)
    if write.mirror is not None:
        work.mirror = _stage_mirror(tables, write.mirror, info, plan.version)
    return work


def _stage_changelog(tables: Tables, planned: ChangelogWrite, info: TableInfo, version: int) -> Staged:
    log = tables.open(planned.ident, planned.expect, info, version, changelog=True)
    staged = Staged(log, log.transaction(), info, version, sources=planned.sources)
    if planned.refused is not None:
        staged.error = planned.refused
        return staged
    replay(staged.tx, planned.updates)
    staged.job = tasks.ChangelogJob(planned.segments, planned.since,
                                    tasks.FileWriter(staged.tx.table_metadata, dict(log.io.properties)), staged.name)
    return staged


def _stage_mirror(tables: Tables, planned: MirrorWrite, info: TableInfo, version: int) -> Staged:
    mirror = tables.open(planned.ident, planned.expect, info, version, changelog=False)
    staged = Staged(mirror, mirror.transaction(), info, version, files=list(planned.files),
                    reset=planned.reset is not None,
                    deletes={p: list(ds) for p, ds in planned.deletes.items()})
    if planned.refused is not None:
        staged.error = planned.refused
        return staged
    assert planned.segments is not None
    replay(staged.tx, planned.updates)
    staged.job = tasks.MirrorJob(
        segments=planned.segments, live_id=planned.live_id, after=planned.after, keys=list(planned.keys),
        buckets=planned.buckets, bucket_type=planned.bucket_type, epochs=planned.epochs, backfill=planned.backfill,
        existing={b: tasks.pack_files(fs) for b, fs in planned.existing.items()}, old_metadata=mirror.metadata,
        old_map=dict(planned.old_map), writer=tasks.FileWriter(staged.tx.table_metadata, dict(mirror.io.properties)),
        epoch_keys=dict(planned.epoch_keys), table=staged.name,
        deletes={path: tasks.pack_files(ds) for path, ds in planned.deletes.items()},
        merge_on_read=planned.merge_on_read, fold=planned.fold)
    return staged


# ---------------------------------------------------------------------------------------------
# the Spark pass

def run_pass(spark: SparkSession | None, run: ch.RunBatch, staged: Sequence[Staged]) -> dict[str, Written]:
    """Every staged job in one Spark job (see the module doc); what the tasks returned, per table name.
    ``spark`` (default: the frame's) creates the records of mirror buckets rewritten without a change
    in them (a backfill); a run without rows needs it only for those."""
    changelogs: dict[int, tasks.ChangelogJob] = {}
    mirrors: dict[str, tasks.MirrorJob] = {}
    for s in staged:
        if isinstance(s.job, tasks.ChangelogJob):
            for tid in s.sources:
                assert tid not in changelogs, f"table id {tid} goes to two changelogs"
                changelogs[tid] = s.job
        elif isinstance(s.job, tasks.MirrorJob):
            assert s.name not in mirrors, f"two merges into {s.name}"
            mirrors[s.name] = s.job
    # the merges first: Spark starts a stage's tasks in partition order, and the few bucket merges
    # are its longest tasks (the changelog writes fill the other task slots around them)
    pieces: list[DataFrame] = []
    merged = _merges(spark, run, mirrors)
    if merged is not None:
        pieces.append(merged)
    frame = run.rows_of(set(changelogs)) if changelogs else None
    if frame is not None:
        pieces.append(frame.mapInArrow(partial(tasks.write_changelogs, changelogs), tasks.TABLE_FILES_DDL))
    if not pieces:
        return {}
    out = pieces[0] if len(pieces) == 1 else pieces[0].unionByName(pieces[1])
    try:
        return _collect(out)
    except PySparkException as e:
        refused = _refused_conversion(e, mirrors)
        if refused is None:
            raise
        raise refused from e


def _merges(spark: SparkSession | None, run: ch.RunBatch, jobs: Mapping[str, tasks.MirrorJob]) -> DataFrame | None:
    """The mirror merges (``jobs`` by mirror name): the run's rows routed per (mirror, key bucket), each
    bucket merged by one task; ``TABLE_FILES_DDL`` records. None when no mirror has anything to merge."""
    pieces: list[DataFrame] = []
    frame = run.rows_of({j.live_id for j in jobs.values()}) if jobs else None
    if frame is not None:
        routes = {j.live_id: j for j in jobs.values()}
        pieces.append(frame.mapInArrow(partial(tasks.route_mirrors, routes), tasks.MIRROR_ROUTED_DDL))
        spark = spark or frame.sparkSession
    # buckets whose files are rewritten without a change in them
    idle = [(name, b, b"") for name, j in jobs.items() if j.backfill or (j.epochs and j.existing) for b in j.existing]
    if idle:
        if spark is None:
            raise SinkError(f"the Iceberg sink rewrites {', '.join(sorted({n for n, _, _ in idle}))} on Spark "
                            f"executors and has no Spark session: give IcebergSink(spark=...) or RunBatch.spark")
        pieces.append(spark.createDataFrame(idle, tasks.MIRROR_ROUTED_DDL))
    if not pieces:
        return None
    assert spark is not None
    routed = pieces[0] if len(pieces) == 1 else pieces[0].unionByName(pieces[1])
    slots = max(1, min(sum(j.buckets for j in jobs.values()), spark.sparkContext.defaultParallelism))
    return routed.repartition(slots, "table", "bucket").mapInArrow(partial(tasks.merge_mirrors, dict(jobs)),
                                                                   tasks.TABLE_FILES_DDL)


def _collect(frame: DataFrame) -> dict[str, Written]:
    """What write tasks returned (``TABLE_FILES_DDL``), per table they name."""
    out: dict[str, Written] = {}
    for r in frame.toArrow().to_pylist():
        w = out.setdefault(r["table"], Written())
        w.files.extend(tasks.unpack_files(r["files"]))
        w.removed.extend(tasks.unpack_paths(r["removed"]))
        if r["op"]:
            w.counts[r["op"]] = w.counts.get(r["op"], 0) + r["rows"]
    return out


def _refused_conversion(e: Exception, jobs: Mapping[str, tasks.MirrorJob]) -> IncompatibleSchemaChange | None:
    """The :class:`IncompatibleSchemaChange` an executor raised converting a rewritten column's value
    (naming the mirrors that convert one), None for any other failure."""
    marker = f"{IncompatibleSchemaChange.__name__}: "
    text = str(e)
    tables = sorted(name for name, j in jobs.items() if j.segments.retypes)
    if not tables or marker not in text:
        return None
    return IncompatibleSchemaChange(f"table {' or '.join(tables)}: {text.split(marker, 1)[1].splitlines()[0]}")
