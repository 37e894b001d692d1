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
from sink.iceberg import lineage, pit, pit_tasks
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


_CHANGE_META = (ch.OP, ch.COMMIT_TS, ch.COMMIT_TIME, ch.START_TS, ch.SEQ)


def _read(job: _Read, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over file indexes: each file's rows as a :data:`STATE_VERSION` record (a
    mirror's as inserts before the run; a changelog's as the changes they are)."""
    r = job.removal
    changes = bool(job.source.high)
    for b in batches:
        for i in b.column("i").to_pylist():
            task: FileScanTask = job.source.tasks[i]
            meta = (*_CHANGE_META, ch.ROWID, ch.BEFORE) if changes else (ch.ROWID,)
            rows = pit_tasks.shaped(pit_tasks.read(job.source, [task]), r.before, meta, ColumnPast())
            if not rows.num_rows:
                continue
            if changes:   # the segment layout: the row metadata first
                first = [c for c in (*_CHANGE_META, ch.ROWID) if c in rows.column_names]
                rows = rows.select(first + [c for c in rows.column_names if c not in first])
            else:
                rows = state_rows(r.before, rows)
            yield pa.RecordBatch.from_pylist([{"table_id": r.table_id, "schema_version": STATE_VERSION,
                                               "commit_ts": 0, "rows": rows.num_rows,
                                               "data": ch.write_segment(rows)}], schema=_RECORD)


def mirror_state(run: ch.RunBatch, load: Callable[[pl.Ident], Table | None], moves: list[lineage.Move],
                 removal: Removal) -> SinkState:
    """The mirror's rows of ``removal``'s table and the ts they are complete to (see the module doc);
    for a table brought back (RECOVER / FLASHBACK TABLE) dropped before the run, the mirror its DROP
    kept (``moves``: the lake's lineage). :class:`~transform.partition_drops.RemovalRefused` when the
    mirror is complete to a ts inside the job's running (rows written then may sit where the job's
    first step put them, which the lake cannot tell), or the lake kept no mirror of a table brought
    back."""
    ids = {str(i) for i in (*removal.lineage, removal.table_id)}
    if removal.arrive_only and not removal.dropped_in_run:
        return _kept_state(run, load, moves, removal, ids)
    tc = run.tables[removal.table_id]
    first = next((e.before for e in tc.events if e.before), None)
    mirror = load(removal.source if removal.arrive_only else first or (tc.db, tc.name))
    if mirror is None:
        return SinkState(run.from_ts)
    if mirror.properties.get(fmt.TABLE_ID_KEY) not in ids:
        return SinkState(run.from_ts)
    _, since = pl.progress(mirror.properties, run)
    return _read_state(run, mirror, removal, since)


def _kept_state(run: ch.RunBatch, load: Callable[[pl.Ident], Table | None], moves: list[lineage.Move],
                removal: Removal, ids: set[str]) -> SinkState:
    """The mirror a DROP TABLE kept of the table a RECOVER / FLASHBACK TABLE brings back."""
    for move in sorted((m for m in moves if m.kind == lineage.DROP), key=lambda m: -m.ts):
        db, _, name = move.new.partition(".")
        kept = load((db, name))
        if kept is None or kept.properties.get(fmt.TABLE_ID_KEY) not in ids:
            continue
        # the kept mirror is the table at the end of the run before the one that dropped it; the
        # changelog set aside beside it holds the changes from then to the drop
        at = int(kept.properties.get(fmt.TO_TS_KEY, "0") or 0)
        mirror = _read_state(run, kept, removal, run.from_ts)
        log_db, _, log_name = pit.changelog_of(move.new).partition(".")
        log = load((log_db, log_name))
        tail = _read_changes(run, log, removal, at) if log is not None else None
        frames = [f for f in (mirror.frame, tail) if f is not None]
        frame = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1]) if frames else None
        return SinkState(run.from_ts, frame, one_per_key=False)
    db, name = removal.source
    raise RemovalRefused(
        f"{removal.describe()}: it brings back {db}.{name} with the rows it had when it was dropped, and the lake "
        f"kept no mirror of that table (it was left out, or dropped before the lake's first run). The run stopped "
        f"before writing anything; the checkpoint stays where it was. To go on: leave {db}.{removal.after.name} "
        f"out of this drainer ([[syncer.ignore-table]]), or replicate it with db-type tidb")


def _read_changes(run: ch.RunBatch, log: Table, removal: Removal, after: int) -> Any:
    """A changelog's changes after ``after`` as :data:`STATE_VERSION` records read on the run's
    executors (None when it has none)."""
    if log.current_snapshot() is None:
        return None
    projection = pit.projection(log, removal.before, (*_CHANGE_META, ch.BEFORE))
    high = (1 << 63) - 1
    tasks = tuple(log.scan().plan_files())
    if not tasks:
        return None
    session: Any = run.spark
    source = pit.Source(log.metadata, dict(log.io.properties), projection, tasks, after, high)
    files = session.createDataFrame([(i,) for i in range(len(tasks))], "i int")
    return files.repartition(max(1, min(len(tasks), session.sparkContext.defaultParallelism))).mapInArrow(
        partial(_read, _Read(removal, source)), ch.FRAME_SCHEMA)


def _read_state(run: ch.RunBatch, mirror: Table, removal: Removal, since: int) -> SinkState:
    """``mirror``'s rows (complete to ``since``) read on the run's executors."""
    if not removal.arrive_only and removal.started < since < removal.commit_ts:
        tc = run.tables[removal.table_id]
        raise RemovalRefused(
            f"{removal.describe()}: the lake's mirror of {tc.db}.{tc.name} is complete to ts {since}, while the job "
            f"ran (it started at {removal.started}): rows written then may be in the partitions it dropped or in "
            f"the ones that took their values, and the lake cannot tell which. The run stopped before writing "
            f"anything; the checkpoint stays where it was. To go on: leave {tc.db}.{tc.name} out of this drainer "
            f"([[syncer.ignore-table]])")
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
