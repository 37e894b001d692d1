"""What the Iceberg sink holds of a table whose partitions a run drops or truncates
(``transform.partition_drops``): its mirror's rows, read by the run's executors (one task per data
file) in the layout of the table before the job, and the ts the mirror is complete to.

The mirror is found by the table's name at the start of the run (a RENAME later in the run moves it
only after this). A mirror holding another table id than the table's own (or one it went on from)
holds none of its rows.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
from pyiceberg.table import FileScanTask, Table

from sink import changelog as fmt
from sink.iceberg import pit, pit_tasks
from sink.iceberg import plan as pl
from transform import changes as ch
from transform.history import ColumnPast
from transform.partition_drops import STATE_VERSION, Removal, RemovalRefused, SinkState, state_rows

_RECORD = pa.schema([("table_id", pa.int64()), ("schema_version", pa.int64()), ("commit_ts", pa.int64()),
                     ("rows", pa.int64()), ("data", pa.binary())])


@dataclass(frozen=True)
class _Read:
    """A file-reading task's job: the mirror's files under the projection of the table before the job."""

    removal: Removal
    source: pit.Source


def _read(job: _Read, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over file indexes: each file's rows as a :data:`STATE_VERSION` record."""
    r = job.removal
    for b in batches:
        for i in b.column("i").to_pylist():
            task: FileScanTask = job.source.tasks[i]
            rows = pit_tasks.shaped(pit_tasks.read(job.source, [task]), r.before, (ch.ROWID,), ColumnPast())
            if rows.num_rows:
                yield pa.RecordBatch.from_pylist([{"table_id": r.table_id, "schema_version": STATE_VERSION,
                                                   "commit_ts": 0, "rows": rows.num_rows,
                                                   "data": ch.write_segment(state_rows(r.before, rows))}],
                                                 schema=_RECORD)


def mirror_state(run: ch.RunBatch, load: Callable[[pl.Ident], Table | None], removal: Removal) -> SinkState:
    """The mirror's rows of ``removal``'s table and the ts they are complete to (see the module doc).
    :class:`~transform.partition_drops.RemovalRefused` when the mirror is complete to a ts inside the
    job's running (rows written then may sit where the job's first step put them, which the lake
    cannot tell)."""
    tc = run.tables[removal.table_id]
    first = next((e.before for e in tc.events if e.before), None)
    mirror = load(first or (tc.db, tc.name))
    if mirror is None:
        return SinkState(run.from_ts)
    stored = mirror.properties.get(fmt.TABLE_ID_KEY)
    if stored not in {str(i) for i in (*removal.lineage, removal.table_id)}:
        return SinkState(run.from_ts)
    _, since = pl.progress(mirror.properties, run)
    if removal.started < since < removal.commit_ts:
        raise RemovalRefused(
            f"{removal.describe()}: the lake's mirror of {tc.db}.{tc.name} is complete to ts {since}, while the job "
            f"ran (it started at {removal.started}): rows written then may be in the partitions it dropped or in "
            f"the ones that took their values, and the lake cannot tell which. Restore the table from the lake at "
            f"a ts before {removal.started} into a new warehouse and drain from there, or leave the table out")
    if mirror.current_snapshot() is None:
        return SinkState(since)
    projection = pit.projection(mirror, removal.before, ())
    tasks = tuple(mirror.scan().plan_files())
    if not tasks:
        return SinkState(since)
    session: Any = run.spark
    assert session is not None, "a run brings the session it was computed on"
    source = pit.Source(mirror.metadata, dict(mirror.io.properties), projection, tasks)
    files = session.createDataFrame([(i,) for i in range(len(tasks))], "i int")
    frame = files.repartition(max(1, min(len(tasks), session.sparkContext.defaultParallelism))).mapInArrow(
        partial(_read, _Read(removal, source)), ch.FRAME_SCHEMA)
    return SinkState(since, frame, one_per_key=True)
