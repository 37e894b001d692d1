"""What one Drainer run hands to the sinks: row-level changes per upstream table, in commit order.

A run covers the commit_ts range ``(from_ts, to_ts]``. For every upstream table it touched, the
run produces a :class:`TableChanges`: its DDL events and its row changes split into
:class:`Segment`s, one per schema version the rows were written under (TiDB semantics: the
``PrewriteValue.schema_version`` of the transaction). Segments are in commit order, and so are
the rows inside each segment: ``(_tidb_commit_ts, _tidb_seq)`` ascending.

Columns of ``Segment.rows`` (an Arrow table):

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
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from transform.codec import mysqltypes as mt
from transform.codec.model import Job, TableInfo

OP = "_tidb_op"
COMMIT_TS = "_tidb_commit_ts"
COMMIT_TIME = "_tidb_commit_time"
START_TS = "_tidb_start_ts"
SEQ = "_tidb_seq"
ROWID = mt.EXTRA_HANDLE_NAME
BEFORE = "_tidb_before"
COMMIT_TIME_TYPE = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class Segment:
    """Row changes of one table written under one schema version (``table`` is that version's TableInfo)."""

    schema_version: int
    table: TableInfo
    rows: pa.Table


@dataclass(frozen=True)
class DDLEvent:
    """A DDL job committed inside the run's range, with the TableInfo after it (None for drops)
    and the table's ``(db, name)`` before it (None when it did not exist)."""

    commit_ts: int
    job: Job
    table: TableInfo | None
    before: tuple[str, str] | None = None


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
        return sum(s.rows.num_rows for s in self.segments)


@dataclass
class RunBatch:
    """One run's output: the range, its identity markers, and the changes per table id."""

    cluster_id: int
    from_ts: int
    to_ts: int
    batch_id: str
    tables: dict[int, TableChanges] = field(default_factory=dict)
    nulled_values: int = 0

    def markers(self) -> dict[str, str]:
        """The ``binlake.*`` snapshot summary properties every snapshot of this run carries."""
        return {"binlake.from-ts": str(self.from_ts), "binlake.to-ts": str(self.to_ts),
                "binlake.batch-id": self.batch_id, "binlake.cluster-id": str(self.cluster_id)}
