"""What one Drainer run hands to the sinks: row-level changes per upstream table, in commit order.

A run covers the commit_ts range ``(from_ts, to_ts]``. For every upstream table it touched, the
run produces a :class:`TableChanges`: its DDL events and its row changes split into
:class:`Segment`s, one per schema version the rows were written under (TiDB semantics: the
``PrewriteValue.schema_version`` of the transaction), in commit order.

The driver holds only this metadata. The rows stay in Spark: ``RunBatch.frame`` is a DataFrame of
``FRAME_SCHEMA`` records (for a small run computed in this process, a
``transform.local_frame.LocalFrame`` of the same records, with the DataFrame methods the sinks call),
each an Arrow IPC stream (:func:`read_segment`) of some row changes of one (table id, schema
version), in commit order within the record; records of one segment come from different Spark
tasks, so a consumer that needs one order sorts by ``(_tidb_commit_ts, _tidb_seq)``, which is unique
per table. Columns of a record's rows:

=======================  ================================  =============================================
column                   type                              meaning
=======================  ================================  =============================================
``_tidb_op``             string, not null                  ``"I"`` insert, ``"U"`` update, ``"D"`` delete
``_tidb_commit_ts``      int64, not null                   the transaction's commit_ts (a TSO)
``_tidb_commit_time``    timestamp[us, UTC], not null      the physical part of the commit_ts
``_tidb_start_ts``       int64, not null                   the transaction's start_ts
``_tidb_seq``            int32, not null                   order of the row change within the transaction
``_tidb_rowid``          int64                             only for tables without a primary-key handle
<table columns>          ``schema.arrow_type`` per column  after-image (before-image for deletes)
``_tidb_before``         struct of the table columns       before-image of updates, NULL otherwise
=======================  ================================  =============================================

A DDL that moves rows without binlogs (DROP/TRUNCATE/EXCHANGE PARTITION, RECOVER TABLE) gives a lake
sink row changes of its own (``transform.partition_drops``): at the DDL's commit ts, with
``_tidb_start_ts`` equal to it (no transaction of TiDB's starts and commits at one ts).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from transform.codec import mysqltypes as mt
from transform.codec.model import Job, TableInfo
from transform.local_frame import LocalFrame, LocalSession

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from transform.partition_drops import Removal

OP = "_tidb_op"
COMMIT_TS = "_tidb_commit_ts"
COMMIT_TIME = "_tidb_commit_time"
START_TS = "_tidb_start_ts"
SEQ = "_tidb_seq"
ROWID = mt.EXTRA_HANDLE_NAME
BEFORE = "_tidb_before"
COMMIT_TIME_TYPE = pa.timestamp("us", tz="UTC")
ORDER = [(COMMIT_TS, "ascending"), (SEQ, "ascending")]   # commit order of a table's row changes

# ``RunBatch.frame``: one record per piece of a segment (Spark DDL of the columns)
FRAME_SCHEMA = "table_id long, schema_version long, commit_ts long, rows long, data binary"

# the run markers: ``binlake.*`` properties on everything a run writes (:class:`RunMarkers`)
FROM_TS_MARKER = "binlake.from-ts"
TO_TS_MARKER = "binlake.to-ts"
BATCH_ID_MARKER = "binlake.batch-id"
CLUSTER_ID_MARKER = "binlake.cluster-id"


def relabelled(frame: DataFrame | LocalFrame, ids: Mapping[int, int]) -> DataFrame | LocalFrame:
    """``frame``'s records with each table id of ``ids`` replaced by the id it maps to."""
    if isinstance(frame, LocalFrame):
        return frame.relabelled("table_id", ids)
    from pyspark.sql import functions as F

    col = F.col("table_id")
    expr = col
    for old, new in ids.items():
        expr = F.when(col == old, F.lit(new)).otherwise(expr)
    return frame.withColumn("table_id", expr.cast("long"))


def key_columns(table: TableInfo) -> list[str]:
    """The columns a table's rows are keyed by (a mirror's identifier fields): the primary key, else
    the hidden ``_tidb_rowid``."""
    if table.pk_is_handle and table.pk_handle_column is not None:
        return [table.pk_handle_column.name]
    pk = table.primary_index
    if pk is not None:
        return [c.name for c in pk.columns]
    return [ROWID]


def read_segment(data: bytes) -> pa.Table:
    """The rows of one ``RunBatch.frame`` record (an Arrow IPC stream)."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


# segments cross the JVM several times (checkpoint write and reads, Arrow transfers, shuffles): LZ4
# frames cost the Python side little and move a fraction of the bytes
SEGMENT_IPC = pa.ipc.IpcWriteOptions(compression="lz4")


def write_segment(rows: pa.Table) -> bytes:
    """``rows`` as the Arrow IPC stream (LZ4-compressed buffers) a ``RunBatch.frame`` record holds."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema, options=SEGMENT_IPC) as w:
        w.write_table(rows)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def transaction_runs(commit_ts: np.ndarray) -> list[tuple[int, int]]:
    """``(first, end)`` of each run of equal values in ``commit_ts`` (a segment's column in commit
    order): the rows of one transaction."""
    cuts = [0, *(np.flatnonzero(commit_ts[1:] != commit_ts[:-1]) + 1).tolist(), len(commit_ts)]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if a < b]


@dataclass(frozen=True)
class RunMarkers:
    """The run a snapshot or a file belongs to, as the ``binlake.*`` properties every Iceberg snapshot
    summary and every Parquet file's key-value metadata of the run carries: :meth:`summary` writes
    them (``RunBatch.markers``), :meth:`from_summary` reads them back. Sinks take them from
    ``sink.changelog``, which owns the output format; they are defined here because the run renders
    them and ``transform`` imports no sink."""

    from_ts: int
    to_ts: int
    batch_id: str = ""
    cluster_id: str = ""

    def summary(self) -> dict[str, str]:
        """The markers as summary properties."""
        return {FROM_TS_MARKER: str(self.from_ts), TO_TS_MARKER: str(self.to_ts), BATCH_ID_MARKER: self.batch_id,
                CLUSTER_ID_MARKER: self.cluster_id}

    @classmethod
    def from_summary(cls, props: Mapping[str, str]) -> RunMarkers | None:
        """The markers in ``props``; None unless it holds an integer from-ts and to-ts (a snapshot no run
        wrote). A missing batch or cluster id reads as ``""``."""
        try:
            return cls(int(props[FROM_TS_MARKER]), int(props[TO_TS_MARKER]), str(props.get(BATCH_ID_MARKER, "")),
                       str(props.get(CLUSTER_ID_MARKER, "")))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Segment:
    """Row changes of one table written under one schema version (``table`` is that version's
    TableInfo, ``db`` its database then); ``rows`` counts them, the rows are in the run's frame."""

    schema_version: int
    table: TableInfo
    rows: int
    db: str = ""


@dataclass(frozen=True)
class DDLEvent:
    """A DDL job committed inside the run's range, with the TableInfo after it (None for drops),
    the table's ``(db, name)`` before it (None when it did not exist) and its TableInfo before it
    (``previous``; None when it did not exist or was not given)."""

    commit_ts: int
    job: Job
    table: TableInfo | None
    before: tuple[str, str] | None = None
    previous: TableInfo | None = None


@dataclass(frozen=True)
class DDLJob:
    """A DDL job committed inside the run's range, as the upstream ran it (schema-level ones too):
    sinks that replay statements (MySQL) apply ``job.query`` in commit order. ``names``: the
    (schema, table) TiDB Binlog's drainer names the job by (``SchemaHistory.names_of``; None: the
    job's own lower-cased ones). ``query``: the text the DDL binlog carries, which TiDB Binlog's
    outputs carry ("" when unknown); TiDB writes some statements there as it restores them (CREATE
    DATABASE as ``CREATE DATABASE `d`;``) and its own options in ``/*T![…] */`` comments."""

    commit_ts: int
    job: Job
    names: tuple[str, str] | None = None
    query: str = ""

    @property
    def binlog_query(self) -> str:
        """The DDL binlog's query, else the job's."""
        return self.query or self.job.query


@dataclass
class TableChanges:
    """Everything one run does to one upstream table (identified by its TiDB table id).

    ``db``/``name`` are the table's names at the end of the range (before a DROP, if dropped);
    ``final`` is its TableInfo at the end of the range (None when it was dropped in the range);
    ``events`` the table's DDLs in the range in commit order; ``segments`` its row changes.
    """

    table_id: int
    db: str
    name: str
    final: TableInfo | None
    segments: list[Segment] = field(default_factory=list)
    events: list[DDLEvent] = field(default_factory=list)

    @property
    def row_count(self) -> int:
        """Number of row changes in the run."""
        return sum(s.rows for s in self.segments)


@dataclass
class RunBatch:
    """One run's output: the range, its identity markers, the changes per table id (metadata), the
    DDL jobs, and ``frame``, the row changes themselves (None when the run has none). With
    ``per_transaction`` each frame record holds one transaction's rows of one table (what a sink
    reading the ordered stream asks for: ``Capabilities.per_transaction``); else records of many."""

    cluster_id: int
    from_ts: int
    to_ts: int
    batch_id: str
    tables: dict[int, TableChanges] = field(default_factory=dict)
    nulled_values: int = 0
    stale_rows: int = 0   # row changes written to a table id that had ended before they committed: dropped
    loopback_txns: int = 0   # transactions left out for carrying the drainer's loopback mark
    ignored_rows: int = 0   # row changes left out: the binlog event filter ignores them
    frame: DataFrame | LocalFrame | None = None
    ddl: list[DDLJob] = field(default_factory=list)   # every DDL job of the range, in commit order
    # job id → the commit ts of the first transaction that needed the job's schema, where it commits
    # before the job's DDL binlog (``transform.ddl.needed_before``)
    ddl_needed: dict[int, int] = field(default_factory=dict)
    # job id → the commit ts of a transaction begun before a partition drop that committed while it
    # ran (``transform.ddl.written_late``): TiDB kept its rows or not by when each statement ran
    ddl_late: dict[int, int] = field(default_factory=dict)
    per_transaction: bool = False
    # the session the run was computed on (a sink's own frames go there)
    spark: SparkSession | LocalSession | None = None
    # table id → the id its table went on under in the range, rows and all (ALTER TABLE … PARTITION BY,
    # REMOVE PARTITIONING): :meth:`carried_over` makes them one table
    continued: dict[int, int] = field(default_factory=dict)
    # the DROP / TRUNCATE PARTITIONs of the range whose rows a lake sink deletes
    # (``transform.partition_drops``; sinks that replay DDL run the statement instead)
    removals: list[Removal] = field(default_factory=list)
    # job id → the first commit of a row change written before a partition job began that it ran
    # across where nobody can tell which partition took it (``transform.rowchanges._across``)
    ambiguous: dict[int, int] = field(default_factory=dict)

    def rows_of(self, table_ids: set[int]) -> DataFrame | None:
        """The frame's records of these table ids (None when there are none)."""
        if self.frame is None or not any(self.tables[t].segments for t in table_ids if t in self.tables):
            return None
        if isinstance(self.frame, LocalFrame):   # a run computed in this process (transform.in_process)
            return self.frame.of_tables(table_ids)  # type: ignore[return-value]  # the DataFrame methods sinks call
        from pyspark.sql import functions as F

        return self.frame.where(F.col("table_id").isin(sorted(table_ids)))

    def went_on_as(self, table_id: int) -> int:
        """The id the table of ``table_id`` has at the end of the range (:attr:`continued`, followed)."""
        for _ in range(64):
            if table_id not in self.continued:
                break
            table_id = self.continued[table_id]
        return table_id

    def carried_over(self) -> RunBatch:
        """This run with each table id that went on under a new id (:attr:`continued`) folded into
        the newest: one :class:`TableChanges` (the older ids' segments first, their end events left
        out) and the frame's records relabelled, for a sink that keeps one table across the ids (the
        lake). ``self`` when no id went on."""
        if not self.continued:
            return self
        moved = {old: self.went_on_as(old) for old in self.continued}
        tables: dict[int, TableChanges] = {}
        # the ids that go on first, then the older ones newest first (each goes before what it went on as)
        for tid in sorted(self.tables, key=lambda t: (t in moved, -t)):
            tc = self.tables[tid]
            into = moved.get(tid)
            if into is None or into not in tables:
                tables[tid] = tc
                continue
            kept = tables[into]
            tables[into] = replace(kept, segments=[*tc.segments, *kept.segments],
                                   events=sorted([*(e for e in tc.events if e.table is not None), *kept.events],
                                                 key=lambda e: e.commit_ts))
        frame = self.frame
        if frame is not None:
            frame = relabelled(frame, moved)
        return replace(self, tables=tables, frame=frame)

    def markers(self) -> dict[str, str]:
        """The ``binlake.*`` properties (:class:`RunMarkers`) every snapshot and file of this run carries."""
        return RunMarkers(self.from_ts, self.to_ts, self.batch_id, str(self.cluster_id)).summary()
