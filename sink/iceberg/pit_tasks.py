"""The rows of tables at an upstream ts, computed and loaded on Spark's executors (``binlake restore``).

Two Spark jobs over metadata (``sink.iceberg.pit``); the driver never holds a row:

1. one task per table with a changelog tail reads the tail's files, keeps the row changes in
   ``(base, ts]``, and reduces them in commit order to the net change per key
   (``transform.reduce.net_change``: the keys touched, the images that survive);
2. one task unit per base file of a mirror, and one per table for its surviving images: a base
   file's rows lose the keys the tail touched, and each unit's rows go to the target's
   :class:`~sink.restore.RowWriter`. Units are spread over the session's task slots. A file gets
   only the touched keys that can be in it: a mirror partitioned by ``bucket(N, first key)`` has
   its tail's keys cut by bucket in job 1 (``Source.routes``), so each key travels to the files of
   its bucket, not to every file. What every unit of a table shares (its TableInfo, the base's
   metadata) is broadcast once.

Rows reach the writer as the table was at ``ts``: every column named as then, typed as the decoder
types it (``transform.codec.model.arrow_type``), a column the lake never held filled with its
origin default, plus ``_tidb_rowid`` (a table without a primary key) and the commit ts and time.
"""
from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import FileScanTask
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import IcebergType
from pyspark import Broadcast
from pyspark.sql import SparkSession

from sink import changelog as fmt
from sink.iceberg import schema as ks
from sink.iceberg.pit import ANY_BUCKET, Source, TableAt
from sink.restore import RowWriter
from transform import changes as ch
from transform.codec.model import TableInfo, arrow_type
from transform.reduce import net_change

_KEEP = (ch.ROWID, ch.COMMIT_TS, ch.COMMIT_TIME)
_TAIL_META = (ch.ROWID, ch.OP, ch.COMMIT_TS, ch.SEQ, ch.COMMIT_TIME, ch.BEFORE)


def read(source: Source, task: FileScanTask) -> pa.Table:
    """One file's rows under ``source``'s projection (the changelog's: only those in ``(low, high]``)."""
    io = load_file_io(source.io_properties, source.metadata.location)
    rows = ArrowScan(source.metadata, io, source.projection.schema, AlwaysTrue()).to_table([task])
    if source.high and rows.num_rows:
        ts = rows.column(ch.COMMIT_TS)
        rows = rows.filter(pc.and_(pc.greater(ts, source.low), pc.less_equal(ts, source.high)))
    return rows


def shaped(rows: pa.Table, info: TableInfo, meta: Sequence[str], born: Mapping[str, int]) -> pa.Table:
    """``rows`` as the table ``info``: its columns (missing ones at their origin default) typed as the
    decoder types them, then the ``meta`` columns ``rows`` has. A row last written before a column
    was added (``born``: column → position of its ADD COLUMN) holds that column's origin default."""
    rows = ks.fill_missing(rows, info)
    fields = [pa.field(c.name, arrow_type(c)) for c in info.columns]
    fields += [rows.schema.field(m) for m in meta if m in rows.column_names]
    rows = fmt.conform(rows.select([f.name for f in fields]), pa.schema(fields))
    if born and rows.num_rows:
        committed = rows.column(ch.COMMIT_TS)
        for col in info.columns:
            at = born.get(col.name)
            if at is not None:
                older = pc.fill_null(pc.less(committed, at), False)
                if pc.any(older).as_py():
                    value = ks.default_value(col)
                    i = rows.schema.get_field_index(col.name)
                    rows = rows.set_column(i, rows.schema.field(i),
                                           pc.if_else(older, value.cast(fields[i].type), rows.column(i)))
    return rows


@dataclass(frozen=True)
class TailUnit:
    """Job 1's unit: one table's changelog tail, and the routes of its base files (``Source.routes``)
    its touched keys are cut by."""

    info: TableInfo
    born: dict[str, int]
    tail: Source
    routes: frozenset[str]
    key_type: IcebergType | None


UPSERTS = "+"   # the route of a table's surviving tail images


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
            first = keys.column(0).combine_chunks()
            by_n[int(n)] = BucketTransform(int(n)).pyarrow_transform(key_type)(first)
        part = keys.filter(pc.equal(by_n[int(n)], int(b)))
        if part.num_rows:
            yield route, part


def _tail(unit: TailUnit) -> Iterator[tuple[str, bytes | None, bytes | None]]:
    parts = [shaped(p, unit.info, _TAIL_META, unit.born) for p in (read(unit.tail, t) for t in unit.tail.tasks)
             if p.num_rows]
    if not parts:
        return
    rows = pa.concat_tables(parts, promote_options="default")
    net = net_change(rows.sort_by(ch.ORDER), list(unit.tail.projection.keys))
    upserts = net.upserts.select([c for c in net.upserts.column_names if c not in (ch.OP, ch.SEQ, ch.BEFORE)])
    if upserts.num_rows:
        yield UPSERTS, None, ch.write_segment(upserts)
    if net.touched_keys.num_rows:
        for route, keys in _split(net.touched_keys, unit.routes, unit.key_type):
            yield route, ch.write_segment(keys), None


def tails(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body of job 1: ``t int, unit binary`` → ``t int, route string, touched binary,
    upserts binary`` (a row per base-file route with touched keys, one with the surviving images)."""
    out: dict[str, list[object]] = {"t": [], "route": [], "touched": [], "upserts": []}
    for rb in batches:
        for index, blob in zip(rb.column(0).to_pylist(), rb.column(1).to_pylist()):
            for route, touched, upserts in _tail(pickle.loads(blob)):
                for k, v in (("t", index), ("route", route), ("touched", touched), ("upserts", upserts)):
                    out[k].append(v)
    if out["t"]:
        yield pa.RecordBatch.from_pydict(out, schema=TAILS_SCHEMA)


TAILS_SCHEMA = pa.schema([("t", pa.int32()), ("route", pa.string()), ("touched", pa.binary()),
                          ("upserts", pa.binary())])


@dataclass(frozen=True)
class TableShape:
    """What every unit of one table needs (broadcast once): the table at the ts and its base files'
    source without the file list."""

    info: TableInfo
    born: dict[str, int]
    base: Source | None


def _load_rows(shape: TableShape, route: str, task: bytes | None, touched: bytes | None, upserts: bytes | None
               ) -> pa.Table | None:
    if route == UPSERTS:
        return shaped(ch.read_segment(upserts), shape.info, _KEEP, shape.born) if upserts else None
    assert shape.base is not None and task is not None
    rows = shaped(read(shape.base, pickle.loads(task)), shape.info, _KEEP, shape.born)
    if touched and rows.num_rows:
        keys = ch.read_segment(touched)
        keys = keys.cast(pa.schema([rows.schema.field(k) for k in keys.column_names]))
        rows = rows.join(keys, keys.column_names, join_type="left anti")
    return rows


def make_loader(writer: RowWriter, shapes: Broadcast[dict[int, TableShape]]
                ) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``mapInArrow`` body of job 2 over ``t int, route string, task binary, touched binary, upserts
    binary``: each unit's rows written with ``writer``; out ``t int, rows long, result binary``."""

    def load(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        session = writer.open()
        counts: dict[int, int] = {}
        for rb in batches:
            cols = rb.to_pydict()
            for index, route, task, touched, upserts in zip(cols["t"], cols["route"], cols["task"], cols["touched"],
                                                            cols["upserts"]):
                rows = _load_rows(shapes.value[index], route, task, touched, upserts)
                if rows is not None and rows.num_rows:
                    session.write(index, rows)
                    counts[index] = counts.get(index, 0) + rows.num_rows
        result = session.close()
        yield pa.RecordBatch.from_pydict({"t": list(counts) or [-1], "rows": list(counts.values()) or [0],
                                          "result": [result] + [b""] * (max(len(counts), 1) - 1)},
                                         schema=LOADED_SCHEMA)

    return load


LOADED_SCHEMA = pa.schema([("t", pa.int32()), ("rows", pa.int64()), ("result", pa.binary())])


def load_tables(spark: SparkSession, tables: Sequence[TableAt], writer: RowWriter
                ) -> tuple[dict[int, int], list[bytes]]:
    """Every table's rows at its ts written with ``writer`` (module doc): rows per table index, and what
    each task's writer session returned."""
    slots = max(1, spark.sparkContext.defaultParallelism)
    tail_units: list[tuple[int, bytes]] = []
    units: list[tuple[int, str, bytes | None]] = []
    for i, t in enumerate(tables):
        if t.base is not None:
            units += [(i, route, pickle.dumps(task)) for task, route in zip(t.base.tasks, t.base.routes)]
        if t.tail is not None:
            routes = frozenset(t.base.routes) if t.base is not None else frozenset()
            key_type = t.base.key_type() if t.base is not None else None
            tail_units.append((i, pickle.dumps(TailUnit(t.info, t.born, t.tail, routes, key_type))))
            units.append((i, UPSERTS, None))
    if not units:
        return {}, []
    shapes = spark.sparkContext.broadcast(
        {i: TableShape(t.info, t.born, t.base.without_tasks() if t.base is not None else None)
         for i, t in enumerate(tables)})
    frame = spark.createDataFrame(units, "t int, route string, task binary")
    if tail_units:
        nets = (spark.createDataFrame(tail_units, "t int, unit binary")
                .repartition(min(len(tail_units), slots * 2), "t")
                .mapInArrow(tails, "t int, route string, touched binary, upserts binary"))
        frame = frame.join(nets, ["t", "route"], "left")
    else:
        frame = frame.selectExpr("*", "CAST(NULL AS binary) AS touched", "CAST(NULL AS binary) AS upserts")
    try:
        loaded = frame.repartition(min(len(units), slots * 2)).mapInArrow(
            make_loader(writer, shapes), "t int, rows long, result binary").collect()
    finally:
        shapes.destroy()
    counts: dict[int, int] = {}
    results: list[bytes] = []
    for row in loaded:
        if row["t"] >= 0:
            counts[row["t"]] = counts.get(row["t"], 0) + row["rows"]
        if row["result"]:
            results.append(row["result"])
    return counts, results
