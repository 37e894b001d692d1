"""A run's transactions in commit order, as a bounded stream for sinks that apply them one by one
(the MySQL sink).

The run's frame holds one record per transaction and table (``RunBatch.per_transaction``: the
decode stage cuts its output there for a sink that reads this stream). On Spark the records are
range-partitioned and sorted by ``(commit_ts, table_id)`` — unique: a transaction has one schema
version — one partition per ``ROWS_PER_PARTITION`` row changes, so a partition's size does not
grow with the run, and each sorted partition's records are joined again into *bundles* of about
``BUNDLE_ROWS`` rows, one record per table and schema version (a transaction is tiny; reading one
record per transaction cost more than applying it). The driver reads the sorted partitions one at a
time (``toLocalIterator``, prefetching the next while this one is applied), cuts each bundle at its
transactions and merges its tables in commit order; it holds a partition or two, never the run. DDL
jobs of the range (driver metadata) are merged in at their commit_ts: a DDL is its own transaction.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import pyarrow as pa

from transform import changes as ch

BUNDLE_SCHEMA = "bundle long, table_id long, schema_version long, data binary"
_BUNDLE_ARROW = pa.schema([("bundle", pa.int64()), ("table_id", pa.int64()), ("schema_version", pa.int64()),
                           ("data", pa.binary())])
ROWS_PER_PARTITION = 250_000   # row changes per sorted partition: what the driver's JVM holds at a time
BUNDLE_ROWS = 20_000           # rows per bundle: what the driver's Python reads at a time


@dataclass
class TableRows:
    """The row changes of one transaction on one table, under one schema version, in ``_tidb_seq``
    order: ``rows``, which are ``source`` (the bundle's rows of that table) from ``offset`` on when
    ``source`` is set — a consumer converting rows converts the bundle once, not every transaction."""

    table_id: int
    schema_version: int
    rows: pa.Table
    source: pa.Table | None = None
    offset: int = 0


T = TypeVar("T")


class PerBundle(Generic[T]):
    """``convert(table_id, schema_version, rows)`` (one item per row, in order) of pieces' rows,
    computed once per bundle: a piece cut from a bundle gets its slice of the bundle's items."""

    def __init__(self, convert: Callable[[int, int, pa.Table], list[T]]) -> None:
        self.convert = convert
        self.cache: dict[tuple[int, int], tuple[pa.Table, list[T]]] = {}

    def __call__(self, piece: TableRows) -> list[T]:
        if piece.source is None:
            return self.convert(piece.table_id, piece.schema_version, piece.rows)
        key = (piece.table_id, piece.schema_version)
        hit = self.cache.get(key)
        if hit is None or hit[0] is not piece.source:
            hit = self.cache[key] = (piece.source, self.convert(*key, piece.source))
        return hit[1][piece.offset:piece.offset + piece.rows.num_rows]


@dataclass
class Transaction:
    """One upstream transaction: either DML (``tables``) or one DDL job (``ddl``)."""

    commit_ts: int
    tables: list[TableRows] = field(default_factory=list)
    ddl: ch.DDLJob | None = None


def bundle_pieces(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Spark task over sorted per-transaction ``FRAME_SCHEMA`` records: consecutive ones joined per
    (table, schema version) into bundles of about ``BUNDLE_ROWS`` rows (``BUNDLE_SCHEMA``; the
    records of one bundle share its ``bundle`` number, which grows along the partition). Each record's rows stay in
    (commit_ts, seq) order, as one Arrow record batch (as a thousand small ones, reading a bundle
    on the driver cost more than converting its rows)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    number = (ctx.partitionId() if ctx is not None else 0) << 32
    groups: dict[tuple[int, int], list[pa.Table]] = {}
    size = 0

    def emit() -> pa.RecordBatch:
        keys = list(groups)
        data = [ch.write_segment(pa.concat_tables(groups[k]).combine_chunks()) for k in keys]
        return pa.RecordBatch.from_pydict(
            {"bundle": [number] * len(keys), "table_id": [k[0] for k in keys],
             "schema_version": [k[1] for k in keys], "data": data}, schema=_BUNDLE_ARROW)

    for batch in batches:
        tids, versions, blobs = (batch.column(n).to_pylist() for n in ("table_id", "schema_version", "data"))
        for tid, version, blob in zip(tids, versions, blobs):
            rows = ch.read_segment(blob)
            groups.setdefault((tid, version), []).append(rows)
            size += rows.num_rows
            if size >= BUNDLE_ROWS:
                yield emit()
                groups, size, number = {}, 0, number + 1
    if groups:
        yield emit()


def _unbundle(records: list[tuple[int, int, bytes]]) -> list[Transaction]:
    """One bundle's records (table id, schema version, segment) → its transactions in commit order."""
    slices: list[tuple[int, int, TableRows]] = []
    for tid, version, data in records:
        rows = ch.read_segment(data)
        commit = rows.column(ch.COMMIT_TS).to_numpy()
        for a, b in ch.transaction_runs(commit):
            slices.append((int(commit[a]), tid, TableRows(tid, version, rows.slice(a, b - a), rows, a)))
    slices.sort(key=lambda s: s[:2])
    out: list[Transaction] = []
    for commit_ts, _, piece in slices:
        if not out or out[-1].commit_ts != commit_ts:
            out.append(Transaction(commit_ts))
        out[-1].tables.append(piece)
    return out


def _partitions(run: ch.RunBatch, table_ids: set[int], spark_partitions: int) -> int:
    """Sorted partitions: one per ``ROWS_PER_PARTITION`` rows, and at least ``spark_partitions`` once
    there are ``BUNDLE_ROWS`` rows per partition (the driver applies one while the next is sorted);
    a small range (follow mode) is one partition, which Spark sorts without sampling it first."""
    rows = sum(run.tables[t].row_count for t in table_ids if t in run.tables)
    return max(1, min(spark_partitions, rows // BUNDLE_ROWS), -(-rows // ROWS_PER_PARTITION))


def _dml_stream(run: ch.RunBatch, table_ids: set[int]) -> Iterator[Transaction]:
    if not run.per_transaction:
        raise ValueError("the ordered stream reads per-transaction frame records (run_drain(per_transaction=True))")
    frame = run.rows_of(table_ids)
    if frame is None:
        return
    order = ["commit_ts", "table_id"]
    partitions = _partitions(run, table_ids, int(frame.sparkSession.conf.get("spark.sql.shuffle.partitions") or 1))
    bundles = (frame.repartitionByRange(partitions, *order)
               .sortWithinPartitions(*order).mapInArrow(bundle_pieces, BUNDLE_SCHEMA))
    current: Transaction | None = None
    records: list[tuple[int, int, bytes]] = []
    number: int | None = None

    def merged(txns: list[Transaction]) -> Iterator[Transaction]:
        """The bundle's transactions; one cut by the bundle's edge is joined to its rest."""
        nonlocal current
        for txn in txns:
            if current is not None and current.commit_ts == txn.commit_ts:
                for piece in txn.tables:
                    last = current.tables[-1]
                    if (last.table_id, last.schema_version) == (piece.table_id, piece.schema_version):
                        last.rows, last.source = pa.concat_tables([last.rows, piece.rows]), None
                    else:
                        current.tables.append(piece)
                continue
            if current is not None:
                yield current
            current = txn

    for rec in bundles.toLocalIterator(prefetchPartitions=True):
        if number is not None and rec["bundle"] != number:
            yield from merged(_unbundle(records))
            records = []
        number = rec["bundle"]
        records.append((int(rec["table_id"]), int(rec["schema_version"]), bytes(rec["data"])))
    if records:
        yield from merged(_unbundle(records))
    if current is not None:
        yield current


def ordered_transactions(run: ch.RunBatch, table_ids: set[int] | None = None) -> Iterator[Transaction]:
    """Every transaction of ``run`` on ``table_ids`` (default: all of the run's tables) and every DDL
    job of the range, in commit order."""
    ids = set(run.tables) if table_ids is None else table_ids
    ddl = iter(sorted(run.ddl, key=lambda j: j.commit_ts))
    pending = next(ddl, None)
    for txn in _dml_stream(run, ids):
        while pending is not None and pending.commit_ts < txn.commit_ts:
            yield Transaction(pending.commit_ts, ddl=pending)
            pending = next(ddl, None)
        yield txn
    while pending is not None:
        yield Transaction(pending.commit_ts, ddl=pending)
        pending = next(ddl, None)
