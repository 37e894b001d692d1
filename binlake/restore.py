"""``binlake restore --ts T --into URI``: the upstream's tables as they were at ``T``, rebuilt from the
lake (the Iceberg mirrors and changelogs), long after the pumps have forgotten that range.

1. The lake's range (``sink.iceberg.pit.lake_range``): ``T`` must lie between the start of its first
   run and its checkpoint, else the command stops naming that range.
2. The upstream's DDL history (``[upstream] status-url``) gives the tables alive at ``T`` and their
   definitions then; ``[syncer]`` filters and ``--tables`` select among them.
3. The target (``sink.restore.target_for``: ``mysql://``, ``tidb://``, ``iceberg://NAMESPACE``) makes
   the tables, Spark's executors compute each table's rows at ``T`` and load them
   (``sink.iceberg.pit_tasks``), and the target records the restore (a MySQL target's checkpoint row
   at ``T``).
"""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import TYPE_CHECKING, TextIO

from binlake.drain_config import DrainerConfig
from sink.iceberg.plugin import catalog_for

if TYPE_CHECKING:
    from sink.iceberg.pit import TableAt
    from transform.history import SchemaHistory


def run_restore_command(options: DrainerConfig, ts: int, into: str, replace: bool = False,
                        out: TextIO = sys.stdout) -> dict[str, int]:
    """Restore the upstream at ``ts`` into ``into``; the rows restored per table (``db.table``)."""
    from binlake.drain import upstream_status_url
    from sink.iceberg import lineage
    from sink.iceberg.checkpoint import CLUSTER_ID, MetaNamespace
    from sink.iceberg.pit import lake_range, table_at
    from sink.iceberg.pit_tasks import load_tables
    from sink.restore import RestoredTable, RestorePlan, target_for
    from transform.history import SchemaHistory
    from transform.spark import spark_session

    status_url = upstream_status_url(options, "restore reads the tables and their definitions at the ts from "
                                              "the upstream's DDL history")
    catalog = catalog_for(options)
    lake_range(catalog).check(ts)
    props = MetaNamespace(catalog, read_only=True).properties()
    cluster_id = int(props.get(CLUSTER_ID, options.cluster_id or 0))
    history = SchemaHistory.fetch(status_url)
    filt = options.table_filter()
    if options.tables:   # exactly these (the ignore rules still apply)
        filt = dataclasses.replace(filt, do_dbs=(), do_tables=tuple(options.tables))
    alive = [(v, began) for v, began in history.tables_at(ts) if v.table is not None
             and filt.allows(v.db, v.table.name)]
    jobs = history.done_by(ts)
    plan = RestorePlan(ts, jobs, [RestoredTable(v.db, v.table) for v, _ in alive if v.table is not None], filt,
                       cluster_id, max((j.binlog.schema_version for j in jobs), default=0))
    target = target_for(into, catalog, options)
    t0 = time.perf_counter()
    print(f"binlake restore: the upstream at {ts} into {target.describe()}: {len(plan.tables)} table(s)",
          file=out, flush=True)
    try:
        writer = target.prepare(plan, replace)
        moves = lineage.moves(props)
        where = [table_at(catalog, moves, t.name, t.info, ts, began, history)
                 for t, (_, began) in zip(plan.tables, alive)]
        spark = spark_session(options.spark.master, "binlake-restore", options.spark.conf)
        counts, results = load_tables(spark, where, writer)
        notes = target.finish(plan, results)
    finally:
        target.close()
    restored = {t.name: counts.get(i, 0) for i, t in enumerate(where)}
    for t in where:
        base = f"mirror at {t.base_ts}" if t.base is not None else "empty"
        tail = f" + changelog ({t.tail.low}, {ts}]" if t.tail is not None else ""
        print(f"  {t.name:<40} {restored[t.name]:>10} rows  ({base}{tail})", file=out)
        for note in [*t.notes, *_lost_columns(history, t)]:
            print(f"    {note}", file=out)
    for note in notes:
        print(f"  {note}", file=out)
    print(f"  {sum(restored.values())} rows in {time.perf_counter() - t0:.1f} s", file=out, flush=True)
    return restored


def _lost_columns(history: SchemaHistory, t: TableAt) -> list[str]:
    """A warning when the run holding ``t``'s changelog tail dropped some of its columns after the ts
    and its changelog did not keep them (binlake before the changelog kept dropped columns wrote a
    run's changelog in the table's shape at its end): the lake lacks those columns' values for the
    rows changed in the tail (they are restored at their default)."""
    if t.tail is None or t.tail_run_end is None:
        return []
    end = history.last_table(t.info.id, t.tail_run_end)
    lost = [c.name for c in t.info.columns
            if end is not None and end.column_by_id(c.id) is None and c.name in t.unkept]
    if not lost:
        return []
    return [f"warning: column(s) {', '.join(lost)} were dropped by the run ending at {t.tail_run_end}, which "
            f"holds the changes after {t.tail.low}: the lake lacks their values for rows changed in "
            f"({t.tail.low}, {t.ts}], restored at their default; a ts at or before {t.tail.low} or at or after "
            f"{t.tail_run_end} is exact"]
