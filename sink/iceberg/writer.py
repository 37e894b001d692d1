"""The Iceberg sink: per upstream table, an append-only changelog and a current-state mirror.

A run is planned, then executed; the plan is finished before anything is written:

1. Plan (:meth:`IcebergSink.plan`: ``sink.iceberg.plan`` from the run's metadata alone, then
   ``sink.iceberg.planner`` against the catalog): the run's table ids grouped per upstream table
   name (TRUNCATE and DROP + CREATE give one name several table ids), in the order the tables are
   worked on, each with its catalog steps, and its changelog's and mirror's writes with every
   decision taken (progress, reset, moved bucket, merge buckets, backfill, schema and spec updates,
   the files read): a ``sink.iceberg.write_plan.WritePlan``, which a dry run prints.
2. Catalog moves (``sink.iceberg.tables``), plan by plan: RENAME TABLE renames both Iceberg tables;
   DROP TABLE keeps the mirror as ``<table>__dropped_<commit_ts>`` and the changelog as
   ``<table>__changelog_dropped_<commit_ts>`` (the name is free for a table created or renamed into
   it later, even in the same run). Renames and drops are recorded in the ``_binlake`` namespace
   (``sink.iceberg.lineage``): ``verify --ts T`` finds a table by what it was called at T.
3. Execute (``sink.iceberg.execute``): missing tables are created (mirror ``<db>.<table>`` with
   identifier fields = primary key or ``_tidb_rowid``; changelog ``<db>.<table>__changelog``
   partitioned by day of ``_tidb_commit_time``), each table's transaction is staged with its planned
   schema evolution to the table's final TableInfo, and ONE Spark pass writes every changelog's files
   and merges every mirror's key buckets. A table another writer changed since the plan raises
   ``TableMovedError`` (a ``ConcurrentRunError``).
4. Commit (``sink.iceberg.commit``), table by table in plan order: the changelog appends every row
   change of the range; the mirror deletes every row when the range truncated the table and every
   key the range touched, and appends the surviving after-images.

Each table records ``binlake.to-ts`` in its properties in the same transaction, and every snapshot
carries the run markers. A table already at the run's ``to_ts`` is skipped, so re-running a range
is a no-op; the checkpoint (namespace ``_binlake``, ``sink.iceberg.checkpoint``) advances only after
every table committed. With ``tag_runs`` each table's snapshot at the end of a run is tagged
``tidb-ts-<to_ts>``.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, cast

from pyiceberg.catalog import Catalog

from sink.base import Sink, TableReport
from sink.changelog import CHANGELOG_SUFFIX as CHANGELOG_SUFFIX
from sink.changelog import DROPPED_INFIX as DROPPED_INFIX
from sink.changelog import TAG_PREFIX as TAG_PREFIX
from sink.iceberg import execute, lineage
from sink.iceberg.checkpoint import CheckpointError as CheckpointError
from sink.iceberg.checkpoint import MetaNamespace
from sink.iceberg.checkpoint import checkpoint_from as checkpoint_from
from sink.iceberg.commit import ConcurrentRunError as ConcurrentRunError
from sink.iceberg.commit import commit, tag
from sink.iceberg.lineage import META_NAMESPACE as META_NAMESPACE
from sink.iceberg.planner import plan_write
from sink.iceberg.removals import mirror_state
from sink.iceberg.tables import DEFAULT_MIRROR_BUCKETS as DEFAULT_MIRROR_BUCKETS
from sink.iceberg.tables import Tables
from sink.iceberg.write_plan import TableMovedError as TableMovedError
from sink.iceberg.write_plan import WritePlan
from transform import changes as ch
from transform import failpoints
from transform.partition_drops import removal_tasks, with_removals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from transform.history import SchemaHistory


class IcebergSink(Sink):
    """Writes runs into a pyiceberg catalog (see the module doc). ``spark`` is the session the
    executors write on; without it a run takes the one it was computed on (``RunBatch.spark``)."""

    def __init__(self, catalog: Catalog, tag_runs: bool = False, mirror_buckets: int = DEFAULT_MIRROR_BUCKETS,
                 table_buckets: Mapping[str, int] | None = None, spark: SparkSession | None = None) -> None:
        self.catalog = catalog
        self.tag_runs = tag_runs
        self.mirror_buckets = mirror_buckets
        self.table_buckets = dict(table_buckets or {})
        self.spark = spark
        self._meta = MetaNamespace(catalog)
        self._tables = Tables(catalog, mirror_buckets, self.table_buckets)
        self._commits = 0

    # -- checkpoint --------------------------------------------------------------------------

    def checkpoint(self) -> int | None:
        return self._meta.checkpoint()

    def check_cluster(self, cluster_id: int) -> None:
        """Refuse to mix clusters in one catalog."""
        self._meta.check_cluster(cluster_id)

    def save_checkpoint(self, run: ch.RunBatch) -> None:
        self._meta.save_checkpoint(run)

    def record_history(self, history: SchemaHistory, run: ch.RunBatch) -> None:
        """The jobs of ``run``'s range and those before it that ``_binlake.ddl_history`` lacks
        (``sink.iceberg.ddl_history``)."""
        from sink.iceberg import ddl_history

        ddl_history.record(self.catalog, history, ddl_history.to_record(history, run))

    # -- the run -----------------------------------------------------------------------------

    def plan(self, run: ch.RunBatch) -> WritePlan:
        """What :meth:`write` does to each table of ``run``, decided against the catalog as it is now;
        writes nothing."""
        return plan_write(run.carried_over(), self._tables.load, self._tables)

    def write(self, run: ch.RunBatch) -> list[TableReport]:
        """Plan, move, stage, one Spark pass, then commit table by table; the whole write is one item
        to ``observer`` (the run is the lake's commit batch)."""
        started = time.perf_counter()
        run = run.carried_over()   # a table that went on under a new id stays one table
        moves = lineage.moves(self._meta.properties()) if run.removals else []
        run, release = with_removals(run, partial(mirror_state, run, self._tables.load, moves), removal_tasks(run))
        try:
            planned = self.plan(run)
            for t in planned.tables:
                self._tables.move(t.moves, self._meta)
            work = [execute.stage(self._tables, t) for t in planned.tables]
            # a run computed in this process brings a LocalSession: it answers the calls run_pass makes
            spark = cast("SparkSession | None", self.spark or run.spark)
            written = execute.run_pass(spark, run, [s for w in work for s in w.staged()])
        finally:
            release()
        reports: dict[str, TableReport] = {}
        for w in work:
            report = self._commit(w, written, run)
            first = reports.get(report.table)
            if first is None:
                reports[report.table] = report
            else:   # the name was dropped and taken again: one report, the dropped table's first
                for op, n in first.rows.items():
                    report.rows[op] = report.rows.get(op, 0) + n
                report.ddl = first.ddl + report.ddl
                reports[report.table] = report
        self.observer.executed(time.perf_counter() - started)
        return list(reports.values())

    def _commit(self, w: execute.Work, written: Mapping[str, execute.Written], run: ch.RunBatch) -> TableReport:
        """The plan's changelog then its mirror committed; what the run report says of the table."""
        plan = w.write.plan
        report = TableReport(table=plan.table, ddl=[e.job.query for e in plan.events], skipped=w.write.skipped)
        if plan.info is not None:
            report.rows = {"I": 0, "U": 0, "D": 0}
        for staged in w.staged():
            got = written.get(staged.name, execute.Written())
            commit(staged, got, run)
            if staged is w.changelog:
                report.rows.update(got.counts)
            self._commits += 1
            failpoints.inject("sink-commit", self._commits)
            if self.tag_runs:
                tag(self.catalog, staged.table.name(), run.to_ts)
        return report
