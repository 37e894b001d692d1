"""The rows of tables at an upstream ts, computed and loaded on Spark's executors (``binlake restore``).

Two stages of one Spark job over metadata (``sink.iceberg.pit``), on plain RDDs (the units are
Python objects, and a first DataFrame query costs seconds of JVM warm-up a restore would pay each
time); the driver never holds a row:

1. one task per table with a changelog tail reads the tail's files, keeps the row changes in
   ``(base, ts]``, and reduces them in commit order to the net change per key
   (``transform.reduce.net_change``: the keys touched, the images that survive);
2. one task unit per base file of a mirror, and one per table for its surviving images: a base
   file's rows lose the keys the tail touched, and each unit's rows go to the target's
   :class:`~sink.restore.RowWriter`. Units are spread over the session's task slots. A file gets
   only the touched keys that can be in it: a mirror partitioned by ``bucket(N, first key)`` has
   its tail's keys cut by bucket in job 1 (``Source.routes``), so each key travels to the files of
   its bucket, not to every file. The surviving images are cut into ``2 × task slots`` parts by a
   bucket of the first key, so they load in parallel too. What every unit of a table shares (its
   TableInfo, the base's metadata) is broadcast once.

Rows reach the writer as the table was at ``ts``: every column named as then, typed as the decoder
types it (``transform.codec.model.arrow_type``), a column the lake never held filled with its
origin default, plus ``_tidb_rowid`` (a table without a primary key) and the commit ts and time.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, GreaterThan, LessThanOrEqual
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import FileScanTask
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import IcebergType

from sink import changelog as fmt
from sink.iceberg import schema as ks
from sink.iceberg.pit import ANY_BUCKET, Source, TableAt, carried_name
from sink.restore import RowWriter
from transform import changes as ch
from transform.codec import convert
from transform.codec.model import ColumnInfo, TableInfo, arrow_type
from transform.history import ColumnPast
from transform.reduce import net_change

if TYPE_CHECKING:
    from pyspark import Broadcast
    from pyspark.sql import SparkSession

_KEEP = (ch.ROWID, ch.COMMIT_TS, ch.COMMIT_TIME)
_TAIL_META = (ch.ROWID, ch.OP, ch.COMMIT_TS, ch.SEQ, ch.COMMIT_TIME, ch.BEFORE)


def read(source: Source, tasks: Sequence[FileScanTask]) -> pa.Table:
    """The rows of ``tasks``' files under ``source``'s projection (the changelog's: only those in
    ``(low, high]``, filtered as the files are read; pyiceberg reads several files at once)."""
    io = load_file_io(source.io_properties, source.metadata.location)
    row_filter: BooleanExpression = AlwaysTrue()
    if source.high:
        row_filter = And(GreaterThan(term=ch.COMMIT_TS, value=source.low),
                         LessThanOrEqual(term=ch.COMMIT_TS, value=source.high))
    return ArrowScan(source.metadata, io, source.projection.schema, row_filter).to_table(tasks)


def carried(rows: pa.Table, past: ColumnPast) -> pa.Table:
    """``rows`` with each column a MODIFY rewrote under a new id holding, where it is absent or NULL,
    the value of its newest old column read (``pit.carried_name``) converted as TiDB's backfill
    converted it; the old columns removed."""
    for name, steps in past.carried.items():
        values = rows.column(name).combine_chunks() if name in rows.column_names else None
        for i in range(len(steps) - 1, -1, -1):
            src = carried_name(steps[i][0].id)
            if src not in rows.column_names:
                continue
            old = rows.column(src).combine_chunks()
            for before, after in steps[i:]:
                old = convert.convert_array(old, before, after)
            values = old if values is None else pc.coalesce(values.cast(old.type), old)
            rows = rows.drop_columns([src])
        if values is not None and name in rows.column_names:
            rows = rows.set_column(rows.column_names.index(name), name, values)
        elif values is not None:
            rows = rows.append_column(name, values)
    return rows


def shaped(rows: pa.Table, info: TableInfo, meta: Sequence[str], past: ColumnPast) -> pa.Table:
    """``rows`` as the table ``info``: its columns (missing ones at their origin default) typed as the
    decoder types them, then the ``meta`` columns ``rows`` has. A row last written before a column
    was added (``past.born``: column → position of its ADD COLUMN) holds that column's origin
    default; one written before a column was rewritten under a new id, the old value converted
    (:func:`carried`)."""
    rows = ks.fill_missing(carried(rows, past), info)
    fields = [pa.field(c.name, arrow_type(c)) for c in info.columns]
    fields += [rows.schema.field(m) for m in meta if m in rows.column_names]
    rows = fmt.conform(rows.select([f.name for f in fields]), pa.schema(fields))
    if past.born and rows.num_rows:
        committed = rows.column(ch.COMMIT_TS)
        for col in info.columns:
            at = past.born.get(col.name)
            if at is not None:
                older = pc.fill_null(pc.less(committed, at), False)
                if pc.any(older).as_py():
                    value = _origin(col, past.carried.get(col.name, ()))
                    i = rows.schema.get_field_index(col.name)
                    rows = rows.set_column(i, rows.schema.field(i),
                                           pc.if_else(older, value.cast(fields[i].type), rows.column(i)))
    return rows


def _origin(col: ColumnInfo, rewrites: Sequence[tuple[ColumnInfo, ColumnInfo]]) -> pa.Scalar:
    """What a row written before ``col`` was added holds: its origin default; for a column rewritten
    since (``rewrites``, oldest first), the origin default of the column it was added as, converted as
    TiDB's backfill converted it."""
    if not rewrites:
        return ks.default_value(col)
    values = pa.array([ks.default_value(rewrites[0][0]).as_py()], arrow_type(rewrites[0][0]))
    for before, after in rewrites:
        values = convert.convert_array(values, before, after)
    return values[0]


@dataclass(frozen=True)
class TailUnit:
    """Job 1's unit: one table's changelog tail, the routes of its base files (``Source.routes``) its
    touched keys are cut by, and how many parts its surviving images are spread over."""

    index: int
    info: TableInfo
    past: ColumnPast
    tail: Source
    routes: frozenset[str]
    key_type: IcebergType | None
    parts: int


UPSERTS = "+"   # the routes of a table's surviving tail images: "+0" … "+<parts - 1>"


def _buckets(column: pa.ChunkedArray | pa.Array, n: int, key_type: IcebergType | None) -> pa.Array:
    """Iceberg's ``bucket(n)`` of each value (all 0 when ``n`` is 1 or the type has no bucket transform)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if n <= 1 or key_type is None or not BucketTransform(n).can_transform(key_type):
        return pa.array(np.zeros(len(arr), np.int32))
    out: pa.Array = BucketTransform(n).pyarrow_transform(key_type)(arr)
    return out


def _split(keys: pa.Table, routes: frozenset[str], key_type: IcebergType | None) -> Iterator[tuple[str, pa.Table]]:
    """The touched ``keys`` each base-file route needs: all of them for :data:`ANY_BUCKET`, those whose
    first column falls in bucket ``b`` of ``N`` for ``"N:b"``."""
    by_n: dict[int, pa.Array] = {}
    for route in sorted(routes):
        if route == ANY_BUCKET or key_type is None:
            yield route, keys
            continue
        n, _, b = route.partition(":")
        if int(n) not in by_n:
            by_n[int(n)] = _buckets(keys.column(0), int(n), key_type)
        part = keys.filter(pc.equal(by_n[int(n)], int(b)))
        if part.num_rows:
            yield route, part


Net = tuple[bytes | None, bytes | None]   # (touched keys, surviving images), Arrow IPC


def tail_pairs(unit: TailUnit) -> Iterator[tuple[tuple[int, str], Net]]:
    """Job 1 (a ``flatMap``): one table's tail reduced to the net change per key, as
    ((table, route), (touched keys, None)) per base-file route and ((table, "+j"), (None, images))
    per part of the surviving images."""
    rows = read(unit.tail, unit.tail.tasks)
    if not rows.num_rows:
        return
    rows = shaped(rows, unit.info, _TAIL_META, unit.past)
    keys = list(unit.tail.projection.keys)
    net = net_change(rows.sort_by(ch.ORDER), keys)
    if net.touched_keys.num_rows:
        for route, touched in _split(net.touched_keys, unit.routes, unit.key_type):
            yield (unit.index, route), (ch.write_segment(touched), None)
    upserts = net.upserts.select([c for c in net.upserts.column_names if c not in (ch.OP, ch.SEQ, ch.BEFORE)])
    if upserts.num_rows:
        part = _buckets(upserts.column(keys[0]), unit.parts, unit.key_type)
        for j in range(unit.parts):
            piece = upserts.filter(pc.equal(part, j))
            if piece.num_rows:
                yield (unit.index, f"{UPSERTS}{j}"), (None, ch.write_segment(piece))


@dataclass(frozen=True)
class TableShape:
    """What every unit of one table needs (broadcast once): the table at the ts and its base files'
    source without the file list."""

    info: TableInfo
    past: ColumnPast
    base: Source | None


def _load_rows(shape: TableShape, route: str, task: FileScanTask | None, net: Net | None) -> pa.Table | None:
    touched, upserts = net or (None, None)
    if route.startswith(UPSERTS):
        return shaped(ch.read_segment(upserts), shape.info, _KEEP, shape.past) if upserts else None
    assert shape.base is not None and task is not None
    rows = shaped(read(shape.base, [task]), shape.info, _KEEP, shape.past)
    if touched and rows.num_rows:
        keys = ch.read_segment(touched)
        keys = keys.cast(pa.schema([rows.schema.field(k) for k in keys.column_names]))
        rows = rows.join(keys, keys.column_names, join_type="left anti")
    return rows


Unit = tuple[tuple[int, str], tuple[FileScanTask | None, Net | None]]


@dataclass(frozen=True)
class _Shared:
    """``Broadcast``'s ``value``, for the loader run in this process."""

    value: dict[int, TableShape]


def make_loader(writer: RowWriter, shapes: Broadcast[dict[int, TableShape]] | _Shared
                ) -> Callable[[Iterable[Unit]], Iterator[tuple[dict[int, int], bytes]]]:
    """Job 2 (a ``mapPartitions``): each unit's rows written with ``writer`` (a session opened once
    the partition has rows); yields (rows per table, what the session returned)."""

    def load(units: Iterable[Unit]) -> Iterator[tuple[dict[int, int], bytes]]:
        session = None
        counts: dict[int, int] = {}
        for (index, route), (task, net) in units:
            rows = _load_rows(shapes.value[index], route, task, net)
            if rows is not None and rows.num_rows:
                session = session or writer.open()
                session.write(index, rows)
                counts[index] = counts.get(index, 0) + rows.num_rows
        if session is not None:
            yield counts, session.close()

    return load


@dataclass
class _Work:
    """A load's units: the tails to reduce (job 1), the units to load (job 2), what a table's units share."""

    tails: list[TailUnit]
    units: list[tuple[tuple[int, str], FileScanTask | None]]
    shapes: dict[int, TableShape]


def _work(tables: Sequence[TableAt], slots: int) -> _Work:
    """The units of ``tables`` for ``slots`` parallel tasks (module doc)."""
    tails: list[TailUnit] = []
    units: list[tuple[tuple[int, str], FileScanTask | None]] = []
    for i, t in enumerate(tables):
        if t.base is not None:
            units += [((i, route), task) for task, route in zip(t.base.tasks, t.base.routes)]
        if t.tail is not None:
            source = t.base if t.base is not None else t.tail
            parts = slots * 2
            tails.append(TailUnit(i, t.info, t.past, t.tail, frozenset(t.base.routes) if t.base else frozenset(),
                                  source.key_type(), parts))
            units += [((i, f"{UPSERTS}{j}"), None) for j in range(parts)]
    shapes = {i: TableShape(t.info, t.past, t.base.without_tasks() if t.base is not None else None)
              for i, t in enumerate(tables)}
    return _Work(tails, units, shapes)


def _summed(loaded: Iterable[tuple[dict[int, int], bytes]]) -> tuple[dict[int, int], list[bytes]]:
    counts: dict[int, int] = {}
    results: list[bytes] = []
    for part_counts, result in loaded:
        for index, rows in part_counts.items():
            counts[index] = counts.get(index, 0) + rows
        if result:
            results.append(result)
    return counts, results


def load_tables(spark: SparkSession, tables: Sequence[TableAt], writer: RowWriter
                ) -> tuple[dict[int, int], list[bytes]]:
    """Every table's rows at its ts written with ``writer`` (module doc): rows per table index, and what
    each task's writer session returned. Plain RDDs: the units are Python objects end to end."""
    sc = spark.sparkContext
    slots = max(1, sc.defaultParallelism)
    work = _work(tables, slots)
    if not work.units:
        return {}, []
    shapes = sc.broadcast(work.shapes)
    n = min(len(work.units), slots * 2)
    try:
        frame = sc.parallelize(work.units, n)
        if work.tails:
            nets = sc.parallelize(work.tails, min(len(work.tails), slots * 2)).flatMap(tail_pairs)
            joined = frame.leftOuterJoin(nets, numPartitions=n)
        else:
            joined = frame.mapValues(lambda task: (task, None))
        loaded = joined.mapPartitions(make_loader(writer, shapes)).collect()
    finally:
        shapes.destroy()
    return _summed(loaded)


def load_tables_here(tables: Sequence[TableAt], writer: RowWriter, workers: int) -> tuple[dict[int, int], list[bytes]]:
    """:func:`load_tables` without Spark, in this process: the same two jobs, each on ``workers``
    threads (the rows are read, reduced and rendered by Arrow's kernels and sent by the writer's
    connections, which release the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    work = _work(tables, workers)
    if not work.units:
        return {}, []
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="restore") as pool:
        nets = dict(pair for pairs in pool.map(lambda u: list(tail_pairs(u)), work.tails) for pair in pairs)
        joined = [(key, (task, nets.get(key))) for key, task in work.units]
        load = make_loader(writer, _Shared(work.shapes))
        parts = [joined[w::workers] for w in range(workers)]
        loaded = [r for rs in pool.map(lambda part: list(load(part)), parts) for r in rs]
    return _summed(loaded)
