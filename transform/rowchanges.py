"""Decode stage (runs in Spark tasks): committed transactions → row changes.

Input rows are paired transactions ``(start_ts, commit_ts, payload)`` in any order, where
``payload`` is the prewrite binlog; every row of one start_ts is in the same task (the pair stage
partitions by it), and a transaction that comes twice (its prewrite stored on two pumps) is decoded
once. Each record's rows come out in commit order. Each DML mutation is decoded with the TableInfo in force at
the transaction's commit position (the broadcast :class:`DecodeContext`: the schema history and where
the range's DDL jobs committed; ``SchemaHistory.version_in_force``): the one at its
``PrewriteValue.schema_version``, or a newer one whose DDL committed before it. Decoding goes through
the codec's vectorised batch path; rows of one (table id, schema version decoded with) are decoded
together and shipped to the driver as one Arrow IPC blob per group (see :data:`OUT_SCHEMA`), whose
``schema_version`` is the version of the TableInfo the rows were decoded with. DDL binlogs become
``ddl`` records naming the job id. Row order inside a transaction follows ``TableMutation`` order,
then ``sequence``; binlogs without a ``sequence`` (older TiDB) list deletes, then updates, then
inserts, so that within one commit a key's delete comes before its re-insert.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, TypedDict

import numpy as np
import pyarrow as pa
import requests

from ingest import binlog as bl
from ingest.mvcc import Fate, ask
from schemas import binlog_pb2
from transform import changes as ch
from transform.codec import mysqltypes as mt
from transform.codec.batch import BEFORE_COLUMN, HANDLE_COLUMN, INVALID_TIMES_KEY, OP_COLUMN, decode_batch
from transform.codec.datums import record_key
from transform.codec.model import TableInfo
from transform.codec.rows import DELETE, INSERT, UPDATE, iter_mutation, without_double_writes
from transform.errors import DrainError
from transform.event_filter import EventFilter
from transform.filters import TableFilter
from transform.history import EXCHANGE_PARTITION, CommitOrder, SchemaHistory, exchanged_partition
from transform.loopback import carries_mark, is_mark_table
from transform.partitions import Locator, PartitionError, Partitioning

OUT_SCHEMA = pa.schema([
    pa.field("kind", pa.string(), nullable=False),   # "rows", "ddl", "stale", "ignored", "written", "written_last",
                                                     # "loopback", "ambiguous"
    pa.field("table_id", pa.int64(), nullable=False),
    pa.field("schema_version", pa.int64(), nullable=False),
    pa.field("commit_ts", pa.int64(), nullable=False),    # ddl: the DDL's commit ts
    pa.field("job_id", pa.int64(), nullable=False),
    pa.field("rows", pa.int64(), nullable=False),
    pa.field("nulled", pa.int64(), nullable=False),
    pa.field("data", pa.binary()),                         # rows: Arrow IPC stream of the segment;
                                                           # ddl: the query the DDL binlog carries
])


class RowsRecord(TypedDict):
    """An ``OUT_SCHEMA`` record of the decoded rows of one (table id, schema version) group."""

    kind: Literal["rows"]
    table_id: int
    schema_version: int
    commit_ts: int          # commit_ts of the group's first row
    job_id: int             # 0
    rows: int
    nulled: int             # values held as NULL (zero/invalid dates)
    data: bytes             # Arrow IPC stream of the segment (``changes.read_segment``)


class DDLRecord(TypedDict):
    """An ``OUT_SCHEMA`` record of a DDL binlog (the job is looked up in the history; the binlog's
    own query kept: TiDB Binlog's outputs carry it)."""

    kind: Literal["ddl"]
    table_id: int           # 0
    schema_version: int     # 0
    commit_ts: int
    job_id: int
    rows: int               # 0
    nulled: int             # 0
    data: bytes             # the DDL binlog's ddl_query


class StaleRecord(TypedDict):
    """An ``OUT_SCHEMA`` record counting row changes: ``stale`` ones a task dropped, for writing a
    table id that had ended (truncated away or dropped) before they committed
    (``SchemaHistory.ended``) or a partition taken away before they committed; ``ignored`` ones are of
    a type the binlog event filter ignores on their table; ``ambiguous`` ones (kept) a partition job's
    removal cannot place (``transform.rowchanges._across``)."""

    kind: Literal["stale", "ignored", "ambiguous"]
    table_id: int
    schema_version: int     # stale: the version that ended the table; ignored: the one decoded with
    commit_ts: int          # the first such commit
    job_id: int             # 0; ambiguous: the partition job
    rows: int
    nulled: int             # 0
    data: None


class WrittenRecord(TypedDict):
    """An ``OUT_SCHEMA`` record saying which schema version transactions on a table were written
    under (the prewrite's own, before ``version_in_force``): where TiDB published a DDL's schema
    before its DDL binlog, the first transaction written under it tells (``transform.early``)."""

    kind: Literal["written", "written_last"]
    table_id: int
    schema_version: int     # the prewrite's schema version
    commit_ts: int          # the first commit written under it ("written_last": the last)
    job_id: int             # 0
    rows: int               # 0
    nulled: int             # 0
    data: None


class LoopbackRecord(TypedDict):
    """An ``OUT_SCHEMA`` record counting the transactions a task left out because they carry the
    drainer's loopback mark (``transform.loopback``)."""

    kind: Literal["loopback"]
    table_id: int           # 0
    schema_version: int     # 0
    commit_ts: int          # the first such commit
    job_id: int             # 0
    rows: int               # transactions
    nulled: int             # 0
    data: None


OutRecord = RowsRecord | DDLRecord | StaleRecord | WrittenRecord | LoopbackRecord   # told apart by ``kind``

_FLUSH_ROWS = 16384   # rows decoded together; their blobs leave the task as one Arrow batch (a few MB)
_OLD_ORDER = {DELETE: 0, UPDATE: 1, INSERT: 2}


@dataclass(frozen=True)
class DecodeContext:
    """What every decode task needs: the schema history, the table filter and where the range's DDL
    jobs committed (``order``); ``per_transaction``: one output record per transaction and table (for
    the ordered stream), else per decoded batch; ``loopback_channel``: leave out the transactions that
    carry this channel's loopback mark (``transform.loopback``); ``events``: leave out the row changes
    the binlog event filter ignores (by the table's name when the transaction committed)."""

    history: SchemaHistory
    filter: TableFilter
    per_transaction: bool = False
    order: CommitOrder = field(default_factory=CommitOrder)
    loopback_channel: int | None = None
    events: EventFilter = field(default_factory=EventFilter)
    # TiDB's status API: where a row a partition job ran across went is asked of its MVCC records
    # (``_across``; "": not asked, such a row is reported as ``ambiguous``)
    upstream: str = ""


@dataclass(frozen=True)
class Crossing:
    """A DROP or TRUNCATE PARTITION that DMLs written before it began and committed after it
    started ran across: its DDL's commit position, the job, the physical ids it took away, the table
    before it (by whose partitions such a DML was written, unless a statement ran after the job's
    first step) and after it."""

    at: int
    job_id: int
    gone: frozenset[int]
    before: TableInfo
    after: TableInfo
    began: int              # the job's first schema version: a row found written by ``after`` is decoded as of it
    moved_to: tuple[int, int] = (0, 0)   # EXCHANGE PARTITION: (table id, version) of the plain table, which
                                         # holds what went; else 0: the rows stay this table's
    now_id: int = 0                      # EXCHANGE PARTITION: the exchanged partition's id after it

    @property
    def exchange(self) -> bool:
        return self.moved_to[0] != 0


@dataclass
class _Group:
    table: TableInfo
    crossings: tuple[Crossing, ...] = ()   # partition jobs its DMLs ran across (rows placed into what went)
    kinds: list[str] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    commit: list[int] = field(default_factory=list)
    start: list[int] = field(default_factory=list)
    seq: list[int] = field(default_factory=list)


def _mutation_rows(m: binlog_pb2.TableMutation, table: TableInfo | None = None) -> list[tuple[str, bytes]]:
    """The mutation's row changes in transaction order; with ``table``, without the copies TiDB
    writes while it moves rows between partitions (``without_double_writes``)."""
    rows = list(iter_mutation(m))
    if not len(m.sequence):
        rows.sort(key=lambda r: _OLD_ORDER[r[0]])
    elif table is not None and len(rows) > 1:
        rows = without_double_writes(table, rows)
    return rows


def _kinds(m: binlog_pb2.TableMutation) -> set[str]:
    """The kinds of row change a mutation holds."""
    return {kind for kind, rows in ((INSERT, m.inserted_rows), (UPDATE, m.updated_rows), (DELETE, m.deleted_rows))
            if len(rows)}


def segment_table(table: TableInfo, decoded: pa.RecordBatch, commit: np.ndarray, start: np.ndarray,
                  seq: np.ndarray) -> pa.Table:
    """Assemble the :mod:`transform.changes` segment columns from a ``decode_batch`` result."""
    names = [c.name for c in table.columns]
    arrays = [decoded.column(OP_COLUMN), pa.array(commit, pa.int64()),
              pa.array((commit >> 18) * 1000, pa.int64()).cast(ch.COMMIT_TIME_TYPE),
              pa.array(start, pa.int64()), pa.array(seq, pa.int32())]
    fields = [pa.field(ch.OP, pa.string(), False), pa.field(ch.COMMIT_TS, pa.int64(), False),
              pa.field(ch.COMMIT_TIME, ch.COMMIT_TIME_TYPE, False), pa.field(ch.START_TS, pa.int64(), False),
              pa.field(ch.SEQ, pa.int32(), False)]
    if table.has_extra_handle:
        arrays.append(decoded.column(HANDLE_COLUMN))
        fields.append(pa.field(ch.ROWID, pa.int64()))
    schema = decoded.schema
    for name in names + [BEFORE_COLUMN]:
        i = schema.get_field_index(name)
        arrays.append(decoded.column(i))
        fields.append(schema.field(i).with_name(ch.BEFORE if name == BEFORE_COLUMN else name))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _rows_record(table_id: int, version: int, commit_ts: int, rows: pa.Table, nulled: int) -> RowsRecord:
    return {"kind": "rows", "table_id": table_id, "schema_version": version, "commit_ts": commit_ts, "job_id": 0,
            "rows": rows.num_rows, "nulled": nulled, "data": ch.write_segment(rows)}


class _Decoder:
    def __init__(self, ctx: DecodeContext) -> None:
        self.ctx = ctx
        # (table id, version decoded with, prewrite version when it crossed partition jobs, the jobs)
        self.groups: dict[tuple[int, int, int, tuple[Crossing, ...]], _Group] = {}
        self.allowed: dict[tuple[int, int], bool] = {}
        self.ended: dict[tuple[int, int], bool] = {}
        self.stale: dict[tuple[int, int], list[int]] = {}   # (table id, ending version) → [first commit, rows]
        self.written: dict[tuple[int, int], list[int]] = {}  # (table id, prewrite's version) → [first, last commit]
        self.pending = 0
        self.loopback: list[int] = []   # [first commit, transactions] left out for their loopback mark
        self.ignores: dict[tuple[int, int], frozenset[str]] = {}   # (table id, version) → row kinds ignored
        self.ignored: dict[tuple[int, int], list[int]] = {}   # (table id, version) → [first commit, rows]
        self.seen: set[int] = set()   # start_ts decoded by this task: a transaction stored twice comes once
        # (table id, prewrite schema version) → the commit positions of newer definitions and their versions
        self.steps: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
        # (table id, prewrite schema version) → the partition removals it was written before
        self.removals: dict[tuple[int, int], list[Crossing]] = {}
        self.session: requests.Session | None = None
        self.unsure: dict[tuple[int, int], list[int]] = {}   # (table id, job id) → [first commit, rows]

    def _version(self, table_id: int, version: int, commit_ts: int) -> int:
        """The schema version of the table's definition in force at ``commit_ts`` for a DML written
        at ``version`` (``SchemaHistory.version_in_force``)."""
        steps = self.steps.get((table_id, version))
        if steps is None:
            found = self.ctx.history.steps_after(table_id, version, self.ctx.order)
            steps = self.steps[(table_id, version)] = ([p for p, _ in found], [v for _, v in found])
        if not steps[0]:
            return version
        i = bisect.bisect_left(steps[0], commit_ts)
        return steps[1][i - 1] if i else version

    def _crossed(self, table_id: int, written: int, commit_ts: int) -> tuple[Crossing, ...]:
        """The DROP and TRUNCATE PARTITIONs of ``table_id`` that a DML written at schema version
        ``written`` and committed at ``commit_ts`` ran across: begun after that version, started
        before that commit, with a DDL binlog in or before the range."""
        key = (table_id, written)
        found = self.removals.get(key)
        if found is None:
            history = self.ctx.history
            found = []
            for job in history.partition_removals(table_id):
                at, was, after = self.ctx.order.position(job), history.before_job(job), job.binlog.table_info
                exchange = job.type == EXCHANGE_PARTITION
                # an exchange swaps the ids only at its last step: every version before it wrote the partition
                since = job.binlog.schema_version if exchange else history.began(job)
                if at is None or was is None or was.table is None or after is None or written >= since:
                    continue
                old, new = Partitioning.of(was.table), Partitioning.of(after)
                if exchange:
                    swapped = exchanged_partition(was.table, after, job.table_id)
                    if swapped is not None:
                        found.append(Crossing(at, job.id, frozenset({swapped}), was.table,
                                              after.without_virtual_columns(), since,
                                              (swapped, job.binlog.schema_version), job.table_id))
                    continue
                gone = frozenset(old.ids if old else ()) - frozenset(new.ids if new else ())
                if gone:
                    found.append(Crossing(at, job.id, gone, was.table, after.without_virtual_columns(), since))
            self.removals[key] = found
        return tuple(c for c in found if _started(self.ctx.history, c.job_id) < commit_ts)

    def mvcc(self) -> Callable[[bytes, int], Fate] | None:
        """What TiDB's MVCC records of a key say of a transaction (None: the upstream is not asked)."""
        if not self.ctx.upstream or self.ctx.per_transaction:
            return None
        if self.session is None:
            self.session = requests.Session()
        session, url = self.session, self.ctx.upstream
        return lambda key, start_ts: ask(session, url, key, start_ts).fate

    def _allowed(self, table_id: int, version: int, commit_ts: int) -> bool:
        """Decode a table's rows when any name it ever had passes the filter (the driver then
        keeps or drops the whole table by its name at the end of the range)."""
        key = (table_id, version)
        ok = self.allowed.get(key)
        if ok is None:
            if self.ctx.history.version_at(table_id, version) is None:
                raise DrainError(f"transaction committed at {commit_ts} changes table id {table_id}, which the "
                                 f"DDL history does not know at schema version {version}")
            ok = any(self.ctx.filter.allows(v.db, v.table.name)
                     for v in self.ctx.history.versions(table_id) if v.table is not None)
            self.allowed[key] = ok
        return ok

    def _ignores(self, table_id: int, version: int) -> frozenset[str]:
        """The row-change kinds the binlog event filter ignores on the table as named at ``version``."""
        key = (table_id, version)
        if key not in self.ignores:
            at = self.ctx.history.version_at(table_id, version)
            self.ignores[key] = (frozenset() if at is None or at.table is None
                                 else self.ctx.events.ignored_rows(at.db, at.table.name))
        return self.ignores[key]

    def _ignore(self, key: tuple[int, int], commit_ts: int, rows: int) -> None:
        count = self.ignored.setdefault(key, [commit_ts, 0])
        count[0] = min(count[0], commit_ts)
        count[1] += rows

    def txn(self, start_ts: int, commit_ts: int, payload: bytes) -> Iterator[OutRecord]:
        if start_ts in self.seen:
            return
        self.seen.add(start_ts)
        b = bl.parse(payload)   # MalformedBinlog when it does not decode
        if b.ddl_job_id:
            if b.ddl_schema_state != mt.STATE_DELETE_ONLY:
                yield {"kind": "ddl", "table_id": 0, "schema_version": 0, "commit_ts": commit_ts,
                       "job_id": b.ddl_job_id, "rows": 0, "nulled": 0, "data": b.ddl_query}
            return
        pv = binlog_pb2.PrewriteValue.FromString(b.prewrite_value)
        if self.ctx.loopback_channel is not None and self._marked(pv, commit_ts, self.ctx.loopback_channel):
            first = min(self.loopback[0], commit_ts) if self.loopback else commit_ts
            self.loopback = [first, (self.loopback[1] if self.loopback else 0) + 1]
            return
        seq = 0
        for m in pv.mutations:
            version = self._version(m.table_id, pv.schema_version, commit_ts)
            if not self._allowed(m.table_id, version, commit_ts):
                continue
            ignores = self._ignores(m.table_id, version) if self.ctx.events else frozenset()
            kinds = _kinds(m) if ignores else set()
            if kinds and ignores.issuperset(kinds):   # the table sees nothing of this transaction
                self._ignore((m.table_id, version), commit_ts, len(_mutation_rows(m)))
                continue
            span = self.written.setdefault((m.table_id, pv.schema_version), [commit_ts, commit_ts])
            span[0], span[1] = min(span[0], commit_ts), max(span[1], commit_ts)
            key = (m.table_id, version)
            ended = self.ended.get(key)
            if ended is None:
                ended = self.ended[key] = self.ctx.history.ended(m.table_id, version)
            end = self.ctx.history.version_at(m.table_id, version) if ended else None
            if ended and end is not None and end.job.type == EXCHANGE_PARTITION and end.job.binlog.table_info:
                # written under the plain table's old id, which the exchange gave the partition: the
                # statement wrote that id's keys, the partitioned table's now
                pt = end.job.binlog.table_info.id
                group: tuple[int, int, int, tuple[Crossing, ...]] = (pt, end.schema_version, -m.table_id, ())
                g = self.groups.get(group)
                if g is None:
                    g = self.groups[group] = _Group(self.ctx.history.table_at(m.table_id, pv.schema_version))
            elif ended:   # written to a table truncated away or dropped before this commit: nobody sees it
                count = self.stale.setdefault(key, [commit_ts, 0])
                count[0] = min(count[0], commit_ts)
                count[1] += len(_mutation_rows(m))
                continue
            else:
                crossings = self._crossed(m.table_id, pv.schema_version, commit_ts)
                group = (m.table_id, version, pv.schema_version if crossings else 0, crossings)
                g = self.groups.get(group)
                if g is None:
                    g = self.groups[group] = _Group(self.ctx.history.table_at(m.table_id, version), crossings)
            for kind, row in _mutation_rows(m, g.table):
                if kind in ignores:
                    self._ignore(key, commit_ts, 1)
                    continue
                g.kinds.append(kind)
                g.payloads.append(row)
                g.commit.append(commit_ts)
                g.start.append(start_ts)
                g.seq.append(seq)
                seq += 1
                self.pending += 1
        if self.pending >= _FLUSH_ROWS:
            yield from self.flush()

    def _marked(self, pv: binlog_pb2.PrewriteValue, commit_ts: int, channel_id: int) -> bool:
        """True when the transaction writes ``channel_id``'s row of the loopback mark table."""
        for m in pv.mutations:
            at = self.ctx.history.version_at(m.table_id, self._version(m.table_id, pv.schema_version, commit_ts))
            if at is None or at.table is None or not is_mark_table(at.db, at.table.name):
                continue
            rows = _mutation_rows(m)
            if carries_mark(at.table, [k for k, _ in rows], [r for _, r in rows], channel_id):
                return True
        return False

    def flush(self) -> Iterator[RowsRecord | StaleRecord | WrittenRecord | LoopbackRecord]:
        for (table_id, version), (first, count) in self.stale.items():
            yield {"kind": "stale", "table_id": table_id, "schema_version": version, "commit_ts": first,
                   "job_id": 0, "rows": count, "nulled": 0, "data": None}
        self.stale.clear()
        for (table_id, job_id), (first, count) in self.unsure.items():
            yield {"kind": "ambiguous", "table_id": table_id, "schema_version": 0, "commit_ts": first,
                   "job_id": job_id, "rows": count, "nulled": 0, "data": None}
        self.unsure.clear()
        for (table_id, version), (first, count) in self.ignored.items():
            yield {"kind": "ignored", "table_id": table_id, "schema_version": version, "commit_ts": first,
                   "job_id": 0, "rows": count, "nulled": 0, "data": None}
        self.ignored.clear()
        if self.loopback:
            yield {"kind": "loopback", "table_id": 0, "schema_version": 0, "commit_ts": self.loopback[0],
                   "job_id": 0, "rows": self.loopback[1], "nulled": 0, "data": None}
            self.loopback = []
        for (table_id, version), (first, last) in self.written.items():
            yield {"kind": "written", "table_id": table_id, "schema_version": version, "commit_ts": first,
                   "job_id": 0, "rows": 0, "nulled": 0, "data": None}
            yield {"kind": "written_last", "table_id": table_id, "schema_version": version, "commit_ts": last,
                   "job_id": 0, "rows": 0, "nulled": 0, "data": None}
        self.written.clear()
        for (table_id, version, _, _), g in self.groups.items():
            table = g.table
            decoded = decode_batch(table, g.kinds, g.payloads)
            commit = np.asarray(g.commit, np.int64)
            seg = segment_table(table, decoded, commit, np.asarray(g.start, np.int64), np.asarray(g.seq, np.int32))
            for crossing in g.crossings:
                seg, moved, dropped, unsure = _across(seg, table, crossing, self.mvcc())
                if moved is not None:   # placed by the job's partitions, or in the table an exchange gave them
                    to, as_of = crossing.moved_to if crossing.exchange else (table_id, crossing.began)
                    yield _rows_record(to, as_of, int(moved.column(ch.COMMIT_TS).to_numpy().min()), moved, 0)
                if dropped:
                    yield {"kind": "stale", "table_id": table_id, "schema_version": version,
                           "commit_ts": int(commit.min()), "job_id": 0, "rows": dropped, "nulled": 0, "data": None}
                if unsure:
                    yield {"kind": "ambiguous", "table_id": table_id, "schema_version": version,
                           "commit_ts": unsure[0], "job_id": crossing.job_id, "rows": unsure[1], "nulled": 0,
                           "data": None}
            if not seg.num_rows:
                continue
            commit = seg.column(ch.COMMIT_TS).to_numpy()
            if len(commit) > 1 and bool(np.any(commit[1:] < commit[:-1])):
                seg = seg.sort_by(ch.ORDER)   # the task's transactions came in another order (start_ts)
            nulled = int(decoded.schema.metadata[INVALID_TIMES_KEY])
            if not self.ctx.per_transaction:
                yield _rows_record(table_id, version, int(commit.min()), seg, nulled)
                continue
            commit = seg.column(ch.COMMIT_TS).to_numpy()
            for i, (a, b) in enumerate(ch.transaction_runs(commit)):   # a transaction's rows are all in one flush
                yield _rows_record(table_id, version, int(commit[a]), seg.slice(a, b - a), nulled if i == 0 else 0)
        self.groups.clear()
        self.pending = 0


def _started(history: SchemaHistory, job_id: int) -> int:
    job = history.jobs[job_id]
    return job.real_start_ts or job.start_ts


def _across(seg: pa.Table, table: TableInfo, c: Crossing, mvcc: Callable[[bytes, int], Fate] | None
            ) -> tuple[pa.Table, pa.Table | None, int, tuple[int, int] | None]:
    """``seg`` (rows of ``table`` written before ``c``'s job began, committed after it started) with
    the rows the partitions before the job place in the ids it took away sorted out. A row no
    partition after the job takes could only be written there: it stays (the job's deletes take it
    away) unless it committed after the job's DDL, when it is left out (TiDB shows it to nobody). One
    that a partition after the job takes went there or to the partition that went, by when its
    statement ran, which the binlog does not say: TiDB's MVCC records of the row's key in both
    partitions tell (``mvcc``, asked of an int handle's keys); one found in the job's partition is
    given back apart, to be decoded as of the job (placed by its partitions), one found in neither is
    uncertain. Returns the rows kept, the ones found in the job's partitions (None: none), how many
    were left out, and (first commit, count) of the uncertain ones (None: none)."""
    old, new = Partitioning.of(c.before), Partitioning.of(c.after)
    if old is None or not seg.num_rows:
        return seg, None, 0, None
    was = np.array(Locator(table, old).ids(seg), dtype=np.int64)
    placed = np.isin(was, list(c.gone))
    if not placed.any():
        return seg, None, 0, None
    commit = seg.column(ch.COMMIT_TS).to_numpy()
    handles = _int_handles(seg, table)
    if c.exchange:   # committed after the swap: in the plain table (the partition's old keys) or still here
        late = placed & (commit > c.at)
        away = np.zeros(seg.num_rows, dtype=bool)
        if mvcc is not None and handles is not None and late.any():
            start = seg.column(ch.START_TS).to_numpy()
            for i in np.flatnonzero(late):
                if mvcc(record_key(int(was[i]), handles[i]), int(start[i])) is Fate.COMMITTED:
                    away[i], late[i] = True, False
                elif mvcc(record_key(c.now_id, handles[i]), int(start[i])) is Fate.COMMITTED:
                    late[i] = False
        first = (int(commit[late].min()), int(late.sum())) if late.any() else None
        return seg.filter(pa.array(~away)), seg.filter(pa.array(away)) if away.any() else None, 0, first
    now = np.full(seg.num_rows, -1, dtype=np.int64)   # the partition after the job that takes the row (-1: none)
    if new is not None:
        locator = Locator(table, new)
        for i in np.flatnonzero(placed):
            try:
                now[i] = locator.ids(seg.slice(int(i), 1))[0]
            except PartitionError:
                continue
    takes = now >= 0
    moved = np.zeros(seg.num_rows, dtype=bool)
    unsure = placed & takes
    if mvcc is not None and handles is not None and unsure.any():
        start = seg.column(ch.START_TS).to_numpy()
        for i in np.flatnonzero(unsure):
            if mvcc(record_key(int(was[i]), handles[i]), int(start[i])) is Fate.COMMITTED:
                takes[i] = unsure[i] = False          # in the partition that went
            elif mvcc(record_key(int(now[i]), handles[i]), int(start[i])) is Fate.COMMITTED:
                moved[i], unsure[i] = True, False     # in the one that took its values
    drop = placed & ~takes & (commit > c.at)
    first = (int(commit[unsure].min()), int(unsure.sum())) if unsure.any() else None
    kept = seg.filter(pa.array(~drop & ~moved))
    return kept, seg.filter(pa.array(moved)) if moved.any() else None, int(drop.sum()), first


def _int_handles(seg: pa.Table, table: TableInfo) -> list[int] | None:
    """Each row's int handle (the int primary key, or ``_tidb_rowid``); None for a clustered table
    keyed by other columns."""
    handle = table.pk_handle_column
    if handle is not None:
        return [int(v) for v in seg.column(handle.name).to_pylist()]
    if table.has_extra_handle and ch.ROWID in seg.column_names:
        return [int(v) for v in seg.column(ch.ROWID).to_pylist()]
    return None


def decode_transactions(ctx: DecodeContext, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: paired transactions (any order) → ``OUT_SCHEMA`` records, each in commit order."""
    dec = _Decoder(ctx)
    out: list[OutRecord] = []
    for rb in batches:
        cols = rb.to_pydict()
        for start, commit, payload in zip(cols["start_ts"], cols["commit_ts"], cols["payload"]):
            out.extend(dec.txn(start, commit, payload))
            if dec.pending == 0 and out:   # a flush: its blobs leave now (an input batch may hold GBs)
                yield pa.RecordBatch.from_pylist(out, schema=OUT_SCHEMA)
                out = []
    out.extend(dec.flush())
    if out:
        yield pa.RecordBatch.from_pylist(out, schema=OUT_SCHEMA)
