"""A run's transactions in commit order, as a bounded stream for sinks that apply them one by one
(the MySQL sink).

On Spark, every ``RunBatch.frame`` record is cut at its commit_ts boundaries (one piece per
transaction and table) and the pieces are range-sorted by ``(commit_ts, table_id, first seq)``; the
driver then reads the sorted partitions one at a time (``toLocalIterator`` without prefetch), so
it holds one partition, never the run. DDL jobs of the range (driver metadata) are merged in at
their commit_ts: a DDL is its own transaction.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from transform import changes as ch

PIECE_SCHEMA = "commit_ts long, table_id long, schema_version long, seq int, data binary"
_PIECE_ARROW = pa.schema([("commit_ts", pa.int64()), ("table_id", pa.int64()), ("schema_version", pa.int64()),
                          ("seq", pa.int32()), ("data", pa.binary())])


@dataclass
class TableRows:
    """The row changes of one transaction on one table, under one schema version, in ``_tidb_seq`` order."""

    table_id: int
    schema_version: int
    rows: pa.Table


@dataclass
class Transaction:
    """One upstream transaction: either DML (``tables``) or one DDL job (``ddl``)."""

    commit_ts: int
    tables: list[TableRows] = field(default_factory=list)
    ddl: ch.DDLJob | None = None


def split_by_transaction(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Spark task: ``FRAME_SCHEMA`` records → one piece per (commit_ts, table, schema version)."""
    for batch in batches:
        tids, versions, blobs = (batch.column(n).to_pylist() for n in ("table_id", "schema_version", "data"))
        out: dict[str, list[object]] = {n: [] for n in _PIECE_ARROW.names}
        for tid, version, blob in zip(tids, versions, blobs):
            rows = ch.read_segment(blob)
            commit = rows.column(ch.COMMIT_TS).to_numpy()
            if len(commit) > 1 and bool(np.any(commit[1:] < commit[:-1])):
                rows = rows.sort_by(ch.ORDER)
                commit = rows.column(ch.COMMIT_TS).to_numpy()
            cuts = [0, *(np.flatnonzero(commit[1:] != commit[:-1]) + 1).tolist(), len(commit)]
            seq = rows.column(ch.SEQ)
            for a, b in zip(cuts, cuts[1:]):
                if a == b:
                    continue
                out["commit_ts"].append(int(commit[a]))
                out["table_id"].append(tid)
                out["schema_version"].append(version)
                out["seq"].append(seq[a].as_py())
                out["data"].append(ch.write_segment(rows.slice(a, b - a)))
        if out["commit_ts"]:
            yield pa.RecordBatch.from_pydict(out, schema=_PIECE_ARROW)


def _dml_stream(run: ch.RunBatch, table_ids: set[int]) -> Iterator[Transaction]:
    frame = run.rows_of(table_ids)
    if frame is None:
        return
    pieces = frame.mapInArrow(split_by_transaction, PIECE_SCHEMA).orderBy("commit_ts", "table_id", "seq")
    current: Transaction | None = None
    for rec in pieces.toLocalIterator(prefetchPartitions=False):
        commit_ts = int(rec["commit_ts"])
        if current is None or current.commit_ts != commit_ts:
            if current is not None:
                yield current
            current = Transaction(commit_ts)
        rows = ch.read_segment(bytes(rec["data"]))
        last = current.tables[-1] if current.tables else None
        if last is not None and (last.table_id, last.schema_version) == (rec["table_id"], rec["schema_version"]):
            last.rows = pa.concat_tables([last.rows, rows])
        else:
            current.tables.append(TableRows(int(rec["table_id"]), int(rec["schema_version"]), rows))
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
