"""What the Parquet sink holds of a table whose partitions a run drops or truncates
(``transform.partition_drops``): every change its committed files hold for the table's ids (through
PARTITION BY / REMOVE PARTITIONING; an id a TRUNCATE TABLE ended is another table), read by the
run's executors (one task per file) in the layout of the table before the job, and the ts they are
complete to. The removal reduces them per key, as replaying the changelog would.

The directory is the table's name at the start of the run (a RENAME later in the run writes under the
new name).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sink.parquet.files import load_manifest, table_dir, version_table
from transform import changes as ch
from transform.codec.model import TableInfo
from transform.partition_drops import STATE_VERSION, Removal, RemovalRefused, SinkState, in_layout

_RECORD = pa.schema([("table_id", pa.int64()), ("schema_version", pa.int64()), ("commit_ts", pa.int64()),
                     ("rows", pa.int64()), ("data", pa.binary())])


@dataclass(frozen=True)
class _Read:
    """A file-reading task's job: the files, each with the TableInfo its rows were written as."""

    removal: Removal
    files: tuple[tuple[str, TableInfo], ...]


def _read(job: _Read, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over file indexes: each file's changes as a :data:`STATE_VERSION` record."""
    r = job.removal
    for b in batches:
        for i in b.column("i").to_pylist():
            path, table = job.files[i]
            rows = in_layout(pq.read_table(path), table, r.before)
            if rows.num_rows:
                yield pa.RecordBatch.from_pylist([{"table_id": r.table_id, "schema_version": STATE_VERSION,
                                                   "commit_ts": 0, "rows": rows.num_rows,
                                                   "data": ch.write_segment(rows)}], schema=_RECORD)


def changelog_state(run: ch.RunBatch, root: Path, removal: Removal) -> SinkState:
    """The committed changes of ``removal``'s table and the ts they are complete to (see the module
    doc); :class:`~transform.partition_drops.RemovalRefused` when that ts falls inside the job's
    running (rows written then may sit where the job's first step put them)."""
    tc = run.tables[removal.table_id]
    db, name = removal.source if removal.arrive_only else (
        next((e.before for e in tc.events if e.before), None) or (tc.db, tc.name))
    tdir = table_dir(root, db, name)
    ids = {*removal.lineage, removal.table_id}
    runs = [r for r in load_manifest(tdir) if r.table_id in ids and r.cluster_id == run.cluster_id]
    since = max([run.from_ts, *(r.to_ts for r in runs if r.to_ts <= run.to_ts)])
    if removal.arrive_only and not removal.dropped_in_run:
        if not runs:
            raise RemovalRefused(
                f"{removal.describe()}: it brings back {db}.{name} with the rows it had when it was dropped, and "
                f"the Parquet changelog holds none of that table (it was left out, or dropped before the sink's "
                f"first run); leave {db}.{removal.after.name} out of this drainer ([[syncer.ignore-table]])")
        since = run.from_ts   # every committed change of the table is from before its drop
    elif not removal.arrive_only and removal.started < since < removal.commit_ts:
        raise RemovalRefused(
            f"{removal.describe()}: the Parquet changelog of {db}.{name} is complete to ts {since}, while the job "
            f"ran (it started at {removal.started}): rows written then may be in the partitions it dropped or in "
            f"the ones that took their values, and the lake cannot tell which; leave the table out of this drainer")
    tables: dict[str, TableInfo] = {}
    files: list[tuple[str, TableInfo]] = []
    for r in runs:
        if r.to_ts > since:
            continue
        dirs = {int(v["schema_version"]): str(v["dir"]) for v in r.versions}
        for f in r.files:
            folder = dirs[int(f["schema_version"])]
            if folder not in tables:
                tables[folder] = version_table(tdir, folder)
            files.append((str(tdir / f["path"]), tables[folder]))
    if not files:
        return SinkState(since)
    session: Any = run.spark
    assert session is not None, "a run brings the session it was computed on"
    indexes = session.createDataFrame([(i,) for i in range(len(files))], "i int")
    frame = indexes.repartition(max(1, min(len(files), session.sparkContext.defaultParallelism))).mapInArrow(
        partial(_read, _Read(removal, tuple(files))), ch.FRAME_SCHEMA)
    return SinkState(since, frame, one_per_key=False)
