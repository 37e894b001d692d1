"""A run's table work before the commits: each table staged on the driver, then one Spark pass.

:func:`stage` takes a :class:`~sink.iceberg.plan.TablePlan` whose catalog moves are done and, for
its changelog and its mirror, loads the table (or creates it), leaves out a table already at the
run's ``to_ts``, and opens the transaction its commit will be: the schema evolution to the table's
final TableInfo (for a mirror whose key moved, the bucket spec moves first). Against the metadata
that transaction will commit (and, for a mirror, the table's current files) it builds the task job:
a ``tasks.ChangelogJob`` (the rows after the table's progress) or a ``tasks.MirrorJob`` (the merge of
the live id's changes into the files of their key buckets; after a TRUNCATE, into none).

A table whose evolution is refused (a DDL Iceberg cannot follow, a rewritten column binlake cannot
convert) is staged with its error: it is raised at the table's commit, after the tables before it.

:func:`run_pass` runs every job of the run in one Spark job: the changelogs' files are written by a
``mapInArrow`` over the run's frame, the mirrors' rows are routed per (mirror, key bucket), shuffled
once and merged bucket by bucket (a task takes several buckets when the session has fewer task slots
than buckets); what comes back to the driver is file metadata per table (:class:`Written`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from pyiceberg.exceptions import ValidationError
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction
from pyiceberg.transforms import BucketTransform
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from sink import changelog as fmt
from sink.errors import IncompatibleSchemaChange, SinkError
from sink.iceberg import plan as pl
from sink.iceberg import schema as ks
from sink.iceberg import tasks
from sink.iceberg.tables import Tables
from transform import changes as ch
from transform.codec.model import TableInfo

# what a refused schema evolution raises: ours (naming the DDL), pyiceberg's update checks
REFUSED = (IncompatibleSchemaChange, ValueError, ValidationError)


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
    error: Exception | None = None                      # the staging was refused: raised at the commit

    @property
    def name(self) -> str:
        return ".".join(self.table.name())


@dataclass
class Work:
    """What the run does to one plan's tables."""

    plan: pl.TablePlan
    changelog: Staged | None = None
    mirror: Staged | None = None
    skipped: str = ""                                   # why the table was left alone ("" if written)

    def staged(self) -> list[Staged]:
        return [s for s in (self.changelog, self.mirror) if s is not None]


def stage(tables: Tables, plan: pl.TablePlan, run: ch.RunBatch) -> Work:
    """The plan's changelog and mirror staged (see the module doc); run after the plan's moves."""
    work = Work(plan)
    info = plan.info
    if info is None:   # dropped in the range with no row changes: only catalog operations
        return work
    log = tables.load_or_create(plan.changelog, info, plan.version, changelog=True)
    skip_log, since = pl.progress(log.properties, run)
    if not skip_log:
        work.changelog = _stage_changelog(log, plan, info, since)
    live = plan.live
    if live is None:
        work.skipped = skip_log
        return work
    mirror = tables.load_or_create(plan.mirror, info, plan.version, changelog=False)
    skip_mirror, since = pl.progress(mirror.properties, run)
    if not skip_mirror:
        work.mirror = _stage_mirror(mirror, plan, info, since, run)
    work.skipped = skip_log if skip_log and skip_mirror else ""
    return work


def _stage_changelog(log: Table, plan: pl.TablePlan, info: TableInfo, since: int) -> Staged:
    staged = Staged(log, log.transaction(), info, plan.version, sources=frozenset(plan.source_ids))
    try:
        evolve(staged.tx, log, info, ks.CHANGELOG, plan.events)
    except REFUSED as e:
        staged.error = e
        return staged
    segments = segment_map(plan.group, info)
    shapes = [t for (tid, _), t in segments.tables.items() if tid in segments.renamed]
    with staged.tx.update_schema() as update:
        ks.add_kept_columns(update, staged.tx.table_metadata.schema(), info, shapes)
    staged.job = tasks.ChangelogJob(segments, since,
                                    tasks.FileWriter(staged.tx.table_metadata, dict(log.io.properties)), staged.name)
    return staged


def _stage_mirror(mirror: Table, plan: pl.TablePlan, info: TableInfo, since: int, run: ch.RunBatch) -> Staged:
    has_rows = mirror.current_snapshot() is not None
    files = [t.file for t in mirror.scan().plan_files()] if has_rows else []
    reset = pl.reset_ts(plan, mirror.properties, has_rows, since, run)
    respec = pl.moving_bucket(mirror.spec(), mirror.schema(), mirror.properties, info)
    staged = Staged(mirror, mirror.transaction(), info, plan.version, files=files, reset=reset is not None)
    try:
        if respec:   # the bucket field goes before the evolution (which may drop its column)
            bucket = pl.bucket_field(mirror.spec())
            assert bucket is not None
            with staged.tx.update_spec() as update:
                update.remove_field(bucket.name)
        evolve(staged.tx, mirror, info, ks.MIRROR, plan.events)
        staged.job = _mirror_job(mirror, files, plan, info, since, reset, respec, staged.tx)
    except REFUSED as e:
        staged.error = e
    return staged


def evolve(tx: Transaction, tbl: Table, info: TableInfo, kind: str, events: list[ch.DDLEvent]) -> None:
    """The schema evolution of ``tbl`` to ``info`` in ``tx``: removals first (a name they free can be
    taken by an added column), then additions and promotions."""
    ddl = "; ".join(e.job.query for e in events) or "(schema as of the run)"
    with tx.update_schema(allow_incompatible_changes=True) as update:
        ks.evolve_remove(update, tbl.schema(), tbl.properties, info, kind)
    with tx.update_schema() as update:
        ks.evolve_add(update, tx.table_metadata.schema(), tbl.properties, info, kind, ddl)


def _mirror_job(tbl: Table, files: list[DataFile], plan: pl.TablePlan, final: TableInfo, since: int,
                reset: int | None, respec: int | None, tx: Transaction) -> tasks.MirrorJob:
    """The merge of the live id's changes after ``since`` (and after a TRUNCATE at ``reset``) into
    ``tbl``'s ``files`` as ``tx`` leaves the table (a bucket spec moved to the new first key column
    when ``respec``). A rewritten column binlake cannot convert at all is refused here."""
    live = plan.live
    assert live is not None
    keys = ks.key_columns(final)
    retyped = ks.retypes(plan.events)
    for chain in ks.retype_chains({str(r.old.id) for r in retyped}, final, retyped).values():
        for step in chain:
            step.check()
    segments = segment_map(plan.group, final, retyped)
    epoch_keys = {(tid, v): ",".join(final_names(ks.key_columns(info), info, final))
                  for (tid, v), info in segments.tables.items() if tid == live.table_id}
    epochs = any(k != ",".join(keys) for k in epoch_keys.values())
    if respec:   # the key's first column changed: bucket the new one, rewriting the whole table here
        source = tx.table_metadata.schema().find_field(keys[0])
        if BucketTransform(respec).can_transform(source.field_type):
            with tx.update_spec() as update:
                update.add_field(keys[0], BucketTransform(respec), f"{keys[0]}_bucket")
    buckets, bucket_type = pl.merge_buckets(tx.table_metadata, keys[0]) if not (epochs or respec) else (1, None)
    spec_id = tx.table_metadata.spec().spec_id
    existing: dict[int, list[DataFile]] = {}
    if reset is None:
        for f in files:
            b = 0 if buckets == 1 else f.partition[0] if f.spec_id == spec_id else None
            if b is None:   # a file of an older spec: this run merges in one bucket
                buckets, bucket_type = 1, None
                existing = {0: files}
                break
            existing.setdefault(b, []).append(f)
    same_table = tbl.properties.get(fmt.TABLE_ID_KEY) == str(final.id)
    backfill = bool(existing) and pl.needs_backfill(tbl.properties, final, retyped)
    return tasks.MirrorJob(
        segments=segments, live_id=live.table_id, after=max(since, reset) if reset is not None else since,
        keys=keys, buckets=buckets, bucket_type=bucket_type, epochs=epochs, backfill=backfill,
        existing={b: tasks.pack_files(fs) for b, fs in existing.items()}, old_metadata=tbl.metadata,
        old_map=ks.stored_columns(tbl.properties) if same_table else {},
        writer=tasks.FileWriter(tx.table_metadata, dict(tbl.io.properties)), epoch_keys=epoch_keys,
        table=".".join(tbl.name()))


def segment_map(g: pl.Group, final: TableInfo, retyped: tuple[ks.Retype, ...] = ()) -> tasks.SegmentMap:
    """The TableInfo of every segment of the group; ids renamed into ``final``: the live ones and
    ``final``'s own (a dropped table's rows keep their names); ``retyped``: the rewritten columns
    whose values rows written before the rewrite carry into ``final`` (the mirror's, not the
    changelog's: the changelog keeps each change as it was written)."""
    tables = {(tc.table_id, s.schema_version): s.table for tc in g.parts for s in tc.segments}
    renamed = frozenset(tc.table_id for tc in g.parts if tc.final is not None or tc.table_id == final.id)
    return tasks.SegmentMap(final, tables, renamed, retyped)


def final_names(names: list[str], old: TableInfo, new: TableInfo) -> list[str]:
    """Column names of ``old`` as ``new`` calls them (by column id); hidden columns and columns
    ``new`` dropped keep their ``old`` name."""
    ids = {c.name: c.id for c in old.columns}
    out = []
    for n in names:
        col = new.column_by_id(ids[n]) if n in ids else None
        out.append(col.name if col is not None else n)
    return out


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
