"""``binlake restore --ts T --into URI``: the upstream's tables as they were at ``T``, rebuilt from the
lake (for the Iceberg sink: its mirrors and changelogs), long after the pumps have forgotten that range.

1. The lake (:class:`sink.lake.Lake`, from the configured sink's spec, or the one registered sink that
   keeps a lake): ``T`` must lie between the start of its first run and its checkpoint, else the
   command stops naming that range.
2. The DDL history the lake holds (:meth:`sink.lake.Lake.ddl_history`: every job up to its
   checkpoint, each at its DDL binlog's commit ts) gives the tables alive at ``T`` and their
   definitions then; ``[syncer]`` filters and ``--tables`` select among them. Only a lake written
   before binlake kept that history sends the command to the upstream's (``[upstream] status-url``);
   so a restore needs no PD, pump or TiDB.
3. The target (``sink.restore.target_for``: ``mysql://``, ``tidb://``, ``iceberg://NAMESPACE``) makes
   the tables, the lake locates each table's rows at ``T`` and Spark's executors load them
   (:meth:`sink.lake.Lake.point_in_time`), and the target records the restore (a MySQL target's
   checkpoint row at ``T``).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from binlake.drain_config import DrainerConfig
from ingest.config import ConfigError

if TYPE_CHECKING:
    from sink.lake import Lake
    from transform.history import SchemaHistory


def lake_of(options: DrainerConfig) -> Lake:
    """The lake a restore reads: the configured sink's when it keeps one, else the one registered
    sink that does (its section of ``options``)."""
    from sink.plugin import SinkSpec
    from sink.registry import specs

    spec: SinkSpec[Any] = options.sink_spec()
    if not spec.capabilities.lake:
        lakes = [s for s in specs() if s.capabilities.lake]
        if len(lakes) != 1:
            raise ConfigError(f"restore reads a lake: set [syncer] db-type to one of "
                              f"{', '.join(s.names[0] for s in lakes) or '(none registered)'}")
        spec = lakes[0]
    return spec.lake(spec.settings(options))


def lake_history(lake: Lake, options: DrainerConfig, out: TextIO) -> SchemaHistory:
    """The DDL history a command reading ``lake`` works with: the lake's own; for a lake written
    before binlake kept one, the upstream's (the next drain records it in the lake), or a
    :class:`ConfigError` saying neither is there."""
    from binlake.drain import upstream_status_url
    from transform.history import SchemaHistory

    held = lake.ddl_history()
    if held is not None:
        return held
    try:
        status_url = upstream_status_url(options, "")
    except ConfigError:
        raise ConfigError(f"{lake.describe()} holds no DDL history yet (it was written before binlake kept "
                          f"one there: the next drain records it) and no [upstream] status-url is set to "
                          f"read TiDB's") from None
    print(f"  {lake.describe()} holds no DDL history yet (the next drain records it): reading the "
          f"upstream's, {status_url}/ddl/history", file=out, flush=True)
    return SchemaHistory.fetch(status_url)


def run_restore_command(options: DrainerConfig, ts: int, into: str, replace: bool = False,
                        out: TextIO = sys.stdout, report_path: str | None = None) -> dict[str, int]:
    """Restore the upstream at ``ts`` into ``into``; the rows restored per table (``db.table``).
    ``report_path``: where the :class:`~binlake.restore_report.RestoreReport` is written (JSON)."""
    from sink.restore import RestoredTable, RestorePlan, target_for
    from transform.changes import DDLJob

    lake = lake_of(options)
    lake.check_restorable(ts)
    cluster_id = lake.cluster_id() or options.cluster_id or 0
    history = lake_history(lake, options, out)
    filt = options.table_filter()
    if options.tables:   # exactly these (the ignore rules still apply)
        filt = dataclasses.replace(filt, do_dbs=(), do_tables=tuple(options.tables))
    alive = [(v, began) for v, began in history.tables_at(ts) if v.table is not None
             and filt.allows(v.db, v.table.name)]
    jobs = history.done_by(ts)
    plan = RestorePlan(ts, [DDLJob(history.placed_ts(j), j) for j in jobs],
                       [RestoredTable(v.db, v.table) for v, _ in alive if v.table is not None], filt,
                       cluster_id, max((j.binlog.schema_version for j in jobs), default=0))
    target = target_for(into, options)
    t0 = time.perf_counter()
    stages: dict[str, float] = {}

    def timed(stage: str, started: float) -> float:
        now = time.perf_counter()
        stages[stage] = round(now - started, 3)
        return now

    print(f"binlake restore: the upstream at {ts} into {target.describe()}: {len(plan.tables)} table(s)",
          file=out, flush=True)
    try:
        writer = target.prepare(plan, replace)
        clock = timed("prepare", t0)
        located = lake.point_in_time(plan, [began for _, began in alive], history)
        clock = timed("locate", clock)
        if located.input_bytes() <= options.spark.in_process_below:
            counts, results = located.load_here(writer, min(8, max(2, os.cpu_count() or 2)))
            engine = "in process"
        else:
            from transform.spark import spark_session

            spark = spark_session(options.spark.master, "binlake-restore", options.spark.conf,
                                  options.spark.class_archive)
            counts, results = located.load(spark, writer)
            engine = f"Spark ({options.spark.master})"
        clock = timed("load", clock)
        notes = target.finish(plan, results)
        timed("finish", clock)
    finally:
        target.close()
    restored = {t.name: counts.get(i, 0) for i, t in enumerate(located.tables)}
    for t in located.tables:
        print(f"  {t.name:<40} {restored[t.name]:>10} rows  ({t.origin()})", file=out)
        for note in t.notes:
            print(f"    {note}", file=out)
    for note in notes:
        print(f"  {note}", file=out)
    timed("total", t0)
    print(f"  {sum(restored.values())} rows in {stages['total']:.1f} s (loaded {engine})", file=out, flush=True)
    if report_path:
        from binlake.restore_report import RestoredTableReport, RestoreReport
        from ingest.atomic import replace_file

        report = RestoreReport(ts=ts, target=target.describe(), lake=lake.describe(), cluster_id=cluster_id,
                               schema_version=plan.schema_version, rows=sum(restored.values()), notes=notes,
                               stages=stages, engine=engine,
                               tables=[RestoredTableReport(table=t.name, rows=restored[t.name], origin=t.origin(),
                                                           base_ts=t.base_ts, tail_from=t.tail_from,
                                                           notes=list(t.notes))
                                       for t in located.tables])
        replace_file(Path(report_path), report.model_dump_json(indent=2).encode())
    return restored
