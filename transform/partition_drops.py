"""DROP and TRUNCATE PARTITION for the sinks that rebuild tables from row changes (the lake).

TiDB takes a dropped or truncated partition's rows away without a binlog. The lake learns which rows
they were from what it holds: the table's rows just before the job's DDL binlog (the sink's state,
:data:`STATE_VERSION` records, plus the run's changes up to then), each placed in the partition TiDB
wrote it to (``transform.partitions``). Each such row becomes a delete at the DDL's commit ts (its
``_tidb_start_ts`` equal to that commit ts: no transaction of TiDB's starts and commits at one ts),
added to the run's changes as the job's own rows, so the changelog says what went and replaying
it gives the mirror.

Where a row is depends on the schema its last change was written under: one written before the job
began is in the partition the definitions before the job give it; one written since (TiDB published
the job's first step; ``SchemaHistory.began``: the history gives the job's definitions from then on,
and the decoder decodes such rows under them) in the partition the definitions after it give it (a
DROP PARTITION of a RANGE partition sends its range to the next one). A change written before the job
began that commits after its DDL binlog wrote into a partition that is gone: TiDB shows it to nobody,
and the decoder leaves it out (counted as stale), as a change to a dropped table.
"""
from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transform import changes as ch
from transform.codec.batch import arrow_value
from transform.codec.model import Job, TableInfo, arrow_type
from transform.codec.values import missing_value
from transform.ddl import UnreplicableDDLError
from transform.partitions import Locator, Partitioning
from transform.reduce import net_change

BUCKETS = 16                 # key buckets a removal's rows meet in (fixed: the deletes' ``_tidb_seq`` follow them)
SEQ_SPAN = 1 << 26           # ``_tidb_seq`` values of one bucket's deletes; an exchange's inserts come after all
STATE_VERSION = -1           # a frame record of the sink's state (rows before the run), in ``before``'s layout
VERSION = "_tidb_version"    # internal column: the schema version a row change was written under
ROUTED_DDL = "bucket int, data binary"
_ROUTED = pa.schema([("bucket", pa.int32()), ("data", pa.binary())])
_RECORD = pa.schema([("table_id", pa.int64()), ("schema_version", pa.int64()), ("commit_ts", pa.int64()),
                     ("rows", pa.int64()), ("data", pa.binary())])


@dataclass(frozen=True)
class Removal:
    """A DROP or TRUNCATE PARTITION of ``table_id`` whose DDL binlog committed at ``commit_ts``: the
    rows of the partitions ``gone`` (physical ids) go. ``before``: the table before the job
    (``before_version``), ``after``: after it; changes written under ``began`` or later were placed
    by ``after``'s partitions."""

    table_id: int
    commit_ts: int
    job: Job
    before: TableInfo
    before_version: int
    after: TableInfo
    began: int
    gone: frozenset[int]
    lineage: tuple[int, ...] = ()      # the table's ids through PARTITION BY / REMOVE PARTITIONING, oldest first
    whole: bool = False                # every row goes (the plain table of an EXCHANGE PARTITION)
    into: int = 0                      # the table id the rows go to at the same ts (EXCHANGE PARTITION), 0: none
    into_table: TableInfo | None = None   # that table after the job (the rows are inserted in its layout)
    into_version: int = 0
    # RECOVER / FLASHBACK TABLE: the rows the table held when it was dropped (at ``state_ts``, by the
    # name ``source``) arrive again; none are deleted (the table did not exist just before the job)
    arrive_only: bool = False
    state_ts: int = 0                  # the ts the table's rows are taken at (0: ``commit_ts``)
    source: tuple[str, str] = ("", "")
    dropped_in_run: bool = False       # the drop is in the same run (the rows are where the run started)
    refused: str = ""                  # why the lake cannot make it ("" : it can)

    @property
    def taken_at(self) -> int:
        """The ts the rows that go (or arrive again) are taken at."""
        return self.state_ts or self.commit_ts

    @property
    def started(self) -> int:
        """The ts the job started running at (TiDB's ``real_start_ts``)."""
        return self.job.real_start_ts or self.job.start_ts

    def describe(self) -> str:
        """For messages: the job, its commit ts and query."""
        query = " ".join(self.job.query.split())
        return f"DDL job {self.job.id} (committed at ts {self.commit_ts}): `{query[:200]}`"


def removal_of(table_id: int, commit_ts: int, job: Job, before: TableInfo, before_version: int, after: TableInfo,
               began: int, lineage: Sequence[int] = ()) -> Removal | None:
    """The :class:`Removal` of a partition job on ``table_id`` (None when no partition went: every id
    of ``before`` is still in ``after``)."""
    old, new = Partitioning.of(before), Partitioning.of(after)
    if old is None:
        return None
    gone = frozenset(old.ids) - frozenset(new.ids if new is not None else ())
    if not gone:
        return None
    return Removal(table_id, commit_ts, job, before, before_version, after, began, gone, tuple(lineage))


# ---------------------------------------------------------------------------------------------
# rows as the removal sees them

def in_layout(rows: pa.Table, src: TableInfo, dst: TableInfo) -> pa.Table:
    """A segment's rows (written as ``src``) as ``dst`` names and types its columns, by column id:
    a column ``src`` lacks at its origin default, one ``dst`` lacks left out; the row metadata kept
    (``_tidb_before`` mapped the same way)."""
    if src is dst or src.columns == dst.columns:
        return rows
    by_id = {c.id: c for c in src.columns}
    meta = [n for n in rows.column_names if n.startswith("_tidb_") and n != ch.BEFORE]
    arrays: list[pa.ChunkedArray | pa.Array] = [rows.column(n) for n in meta]
    fields = [rows.schema.field(n) for n in meta]
    for col in dst.columns:
        typ = arrow_type(col)
        was = by_id.get(col.id)
        if was is not None and was.name in rows.column_names:
            arrays.append(rows.column(was.name).cast(typ))
        else:
            arrays.append(pa.array([arrow_value(col, typ, missing_value(col))] * rows.num_rows, typ))
        fields.append(pa.field(col.name, typ))
    if ch.BEFORE in rows.column_names:
        before = rows.column(ch.BEFORE).combine_chunks()
        parts, names = [], []
        for col in dst.columns:
            was = by_id.get(col.id)
            typ = arrow_type(col)
            if was is not None and before.type.get_field_index(was.name) >= 0:
                parts.append(before.field(was.name).cast(typ))
            else:
                parts.append(pa.nulls(len(before), typ))
            names.append(col.name)
        struct = pa.StructArray.from_arrays(parts, names=names, mask=before.is_null())
        arrays.append(struct)
        fields.append(pa.field(ch.BEFORE, struct.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def state_rows(table: TableInfo, rows: pa.Table) -> pa.Table:
    """Rows a sink holds (``table``'s columns, ``_tidb_rowid`` when it has one) as the segment rows of
    a :data:`STATE_VERSION` record: inserts at commit ts 0, before every change of the run."""
    n = rows.num_rows
    meta = {ch.OP: pa.array(["I"] * n, pa.string()), ch.COMMIT_TS: pa.array(np.zeros(n, np.int64)),
            ch.COMMIT_TIME: pa.array(np.zeros(n, np.int64)).cast(ch.COMMIT_TIME_TYPE),
            ch.START_TS: pa.array(np.zeros(n, np.int64)), ch.SEQ: pa.array(np.arange(n, dtype=np.int32))}
    out = pa.table(meta)
    if table.has_extra_handle:
        out = out.append_column(ch.ROWID, rows.column(ch.ROWID).cast(pa.int64()))
    for col in table.columns:
        out = out.append_column(pa.field(col.name, arrow_type(col)), rows.column(col.name).cast(arrow_type(col)))
    before = pa.struct([pa.field(c.name, arrow_type(c)) for c in table.columns])
    return out.append_column(ch.BEFORE, pa.nulls(n, before))


# ---------------------------------------------------------------------------------------------
# the removal's Spark job (or the same functions over a LocalFrame)

@dataclass(frozen=True)
class RemovalJob:
    """What the removal's tasks need: the removal, the TableInfo of each schema version the run's
    records of the table were written under, and the ts the sink's state is complete to (the run's
    changes at or before it are in the state already)."""

    removal: Removal
    tables: dict[int, TableInfo]
    since: int
    prefilter_state: bool = True     # state records hold one row per key (a mirror), not a changelog
    keys: tuple[str, ...] = field(default=())

    def key(self) -> list[str]:
        return list(self.keys) or ch.key_columns(self.removal.before)


def _placed_in_gone(job: RemovalJob, rows: pa.Table, versions: np.ndarray) -> np.ndarray:
    """For each row (``before``'s layout), whether TiDB wrote it to a partition the removal drops:
    placed by ``before``'s partitions when written before the job began (or by the sink's state),
    else by ``after``'s."""
    r = job.removal
    if r.whole:
        return np.ones(rows.num_rows, dtype=bool)
    out = np.zeros(rows.num_rows, dtype=bool)
    early = versions < r.began
    for mask, table in ((early, r.before), (~early, r.after)):
        if not mask.any():
            continue
        part = Partitioning.of(table)
        if part is None:
            continue
        ids = Locator(table, part).ids(rows.filter(pa.array(mask)))
        out[np.flatnonzero(mask)] = np.isin(np.array(ids, dtype=np.int64), list(r.gone))
    return out


def _bucket_of(job: RemovalJob, rows: pa.Table) -> np.ndarray:
    """A key bucket per row (every change of a key meets in one bucket): a hash of the key's text."""
    if not rows.num_rows:
        return np.zeros(0, dtype=np.int32)
    cols = [rows.column(k).cast(pa.string()) for k in job.key()]
    keys = cols[0] if len(cols) == 1 else pc.binary_join_element_wise(*cols, "\x00")
    hashed = np.array([zlib.crc32(str(k).encode()) for k in keys.to_pylist()], dtype=np.int64)
    return (hashed % BUCKETS).astype(np.int32)


def route(job: RemovalJob, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over frame records (the run's rows of the table and the sink's state):
    the rows that can decide what the removal deletes, in ``before``'s layout with the version they
    were written under, cut by key bucket (``ROUTED_DDL`` out). The run's changes after the sink's
    state and at or before the DDL count; of the state only rows placed in a dropped partition (a
    key's partition never changes: TiDB keeps partition columns in every unique key)."""
    r = job.removal
    out: list[dict[str, object]] = []
    for b in batches:
        cols = b.to_pydict()
        for tid, version, data in zip(cols["table_id"], cols["schema_version"], cols["data"]):
            if tid != r.table_id:
                continue
            rows = ch.read_segment(data)
            if version == STATE_VERSION:
                versions = np.full(rows.num_rows, STATE_VERSION, dtype=np.int64)
                if job.prefilter_state and rows.num_rows:
                    keep = _placed_in_gone(job, rows, versions)
                    rows, versions = rows.filter(pa.array(keep)), versions[keep]
            else:
                commit = rows.column(ch.COMMIT_TS).to_numpy()
                keep = (commit > job.since) & (commit <= r.taken_at)
                rows = in_layout(rows.filter(pa.array(keep)), job.tables[version], r.before)
                versions = np.full(rows.num_rows, version, dtype=np.int64)
            if not rows.num_rows:
                continue
            rows = rows.append_column(VERSION, pa.array(versions))
            buckets = _bucket_of(job, rows)
            for bucket in np.unique(buckets):
                out.append({"bucket": int(bucket), "data": ch.write_segment(rows.filter(pa.array(buckets == bucket)))})
    if out:
        yield pa.RecordBatch.from_pylist(out, schema=_ROUTED)


def deletes(job: RemovalJob, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over :func:`route`'s records: per key bucket, the rows alive just before
    the DDL (the last change per key wins) that are in a dropped partition, as deletes at the DDL's
    commit ts (frame records of the table at ``before``'s version)."""
    r = job.removal
    pieces: dict[int, list[pa.Table]] = defaultdict(list)
    for b in batches:
        cols = b.to_pydict()
        for bucket, data in zip(cols["bucket"], cols["data"]):
            pieces[bucket].append(ch.read_segment(data))
    out = []
    for bucket in sorted(pieces):
        rows = pa.concat_tables(pieces[bucket], promote_options="permissive").sort_by(
            [(ch.COMMIT_TS, "ascending"), (VERSION, "ascending"), (ch.SEQ, "ascending")])
        alive = net_change(rows, job.key()).upserts
        if not alive.num_rows:
            continue
        gone = _placed_in_gone(job, alive, alive.column(VERSION).to_numpy())
        if not gone.any():
            continue
        image = alive.filter(pa.array(gone)).drop_columns([VERSION])
        image = image.sort_by([(k, "ascending") for k in job.key()])   # the same numbering on every engine
        out.append(_as_deletes(image, r.commit_ts, bucket))
    for t in out:
        yield pa.RecordBatch.from_pylist([{"table_id": r.table_id, "schema_version": r.before_version,
                                           "commit_ts": r.commit_ts, "rows": t.num_rows,
                                           "data": ch.write_segment(t)}], schema=_RECORD)


def _as_deletes(image: pa.Table, commit_ts: int, bucket: int) -> pa.Table:
    """Rows as deletes at ``commit_ts`` (their image the before-image, as the decoder writes deletes);
    ``_tidb_seq`` numbers them within the job, buckets apart."""
    n = image.num_rows
    def put(t: pa.Table, name: str, values: pa.Array) -> pa.Table:
        return t.set_column(t.schema.get_field_index(name), pa.field(name, values.type, name != ch.BEFORE), values)
    image = put(image, ch.OP, pa.array(["D"] * n, pa.string()))
    image = put(image, ch.COMMIT_TS, pa.array(np.full(n, commit_ts, np.int64)))
    time_ms = pa.array(np.full(n, (commit_ts >> 18) * 1000, np.int64))
    image = put(image, ch.COMMIT_TIME, time_ms.cast(ch.COMMIT_TIME_TYPE))
    image = put(image, ch.START_TS, pa.array(np.full(n, commit_ts, np.int64)))
    image = put(image, ch.SEQ, pa.array(bucket * SEQ_SPAN + np.arange(n, dtype=np.int64), pa.int32()))
    if ch.BEFORE in image.column_names:
        image = put(image, ch.BEFORE, pa.nulls(n, image.schema.field(ch.BEFORE).type))
    return image


def arrivals(removal: Removal, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over a removal's deletes: the same rows as inserts into the table they went
    to (EXCHANGE PARTITION), in its layout (columns by name: the two tables have the same ones), after
    every delete at that ts."""
    into = removal.into_table
    assert into is not None
    for b in batches:
        cols = b.to_pydict()
        out = []
        for data in cols["data"]:
            rows = ch.read_segment(data)
            n = rows.num_rows
            fields = [pa.field(ch.OP, pa.string(), False), rows.schema.field(ch.COMMIT_TS),
                      rows.schema.field(ch.COMMIT_TIME), rows.schema.field(ch.START_TS), rows.schema.field(ch.SEQ)]
            arrays: list[Any] = [pa.array(["I"] * n, pa.string()), rows.column(ch.COMMIT_TS),
                                 rows.column(ch.COMMIT_TIME), rows.column(ch.START_TS),
                                 pc.add(rows.column(ch.SEQ), pa.scalar(BUCKETS * SEQ_SPAN, pa.int32()))]
            if into.has_extra_handle:
                fields.append(pa.field(ch.ROWID, pa.int64()))
                arrays.append(rows.column(ch.ROWID) if ch.ROWID in rows.column_names else pa.nulls(n, pa.int64()))
            for col in into.columns:
                typ = arrow_type(col)
                fields.append(pa.field(col.name, typ))
                arrays.append(rows.column(col.name).cast(typ) if col.name in rows.column_names
                              else pa.array([arrow_value(col, typ, missing_value(col))] * n, typ))
            before = pa.struct([pa.field(c.name, arrow_type(c)) for c in into.columns])
            fields.append(pa.field(ch.BEFORE, before))
            arrays.append(pa.nulls(n, before))
            table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
            out.append({"table_id": removal.into, "schema_version": removal.into_version,
                        "commit_ts": removal.commit_ts, "rows": n, "data": ch.write_segment(table)})
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=_RECORD)


# ---------------------------------------------------------------------------------------------
# the run with its removals

class RemovalRefused(UnreplicableDDLError):
    """A partition removal the lake cannot make exactly (the message says why and what to do)."""


@dataclass(frozen=True)
class SinkState:
    """What a sink holds of a removal's table: the ts its rows are complete to, and a frame of
    :data:`STATE_VERSION` records of them in ``removal.before``'s layout (None: none), holding one
    row per key (a mirror) or every change (a changelog)."""

    since: int
    frame: Any = None     # a Spark DataFrame or a transform.local_frame.LocalFrame (None: no rows)
    one_per_key: bool = True


def with_removals(run: ch.RunBatch, state: Callable[[Removal], SinkState],
                  tasks: int = 1) -> tuple[ch.RunBatch, Callable[[], None]]:
    """``run`` with each of its partition removals (``run.removals``) made row changes of the table
    (``state`` says what the sink holds of it; a removal the sink already made, its state past the
    DDL, adds nothing), and what frees the deletes kept on the executors once the sink wrote them.
    The key buckets are reduced by ``tasks`` tasks. The removals of one commit ts (an EXCHANGE
    PARTITION's two tables) see the tables as they were before it, then their rows arrive where
    they went."""
    if not run.removals:
        return run, lambda: None
    frame: Any = run.frame
    tables = dict(run.tables)
    releases: list[Callable[[], None]] = []
    for ts in sorted({r.commit_ts for r in run.removals}):
        made: list[tuple[Removal, Any, int]] = []
        for removal in [r for r in run.removals if r.commit_ts == ts]:
            tc = tables.get(removal.table_id)
            if tc is None:
                continue
            if removal.refused:
                raise RemovalRefused(removal.refused)
            _refuse_unsure(run, removal, tc)
            held = state(removal)
            if held.since >= removal.commit_ts:
                continue
            versions = {s.schema_version: s.table for s in tc.segments}
            versions.setdefault(removal.before_version, removal.before)
            job = RemovalJob(removal, versions, held.since, held.one_per_key)
            sources: list[Any] = [f for f in (frame, held.frame) if f is not None]
            if not sources:
                continue
            inputs = sources[0] if len(sources) == 1 else sources[0].unionByName(sources[1])
            routed = inputs.mapInArrow(partial(route, job), ROUTED_DDL)
            removed, release = _kept(routed.repartition(tasks, "bucket").mapInArrow(partial(deletes, job),
                                                                                    ch.FRAME_SCHEMA))
            releases.append(release)
            made.append((removal, removed, _rows(removed)))
        for removal, removed, count in made:
            if not count:
                continue
            if not removal.arrive_only:
                frame = removed if frame is None else frame.unionByName(removed)
                tc = tables[removal.table_id]
                tables[removal.table_id] = replace(tc, segments=[*tc.segments, ch.Segment(
                    removal.before_version, removal.before, count, tc.db)])
            into = tables.get(removal.into)
            if into is not None and removal.into_table is not None:
                arrived = removed.mapInArrow(partial(arrivals, removal), ch.FRAME_SCHEMA)
                frame = arrived if frame is None else frame.unionByName(arrived)
                tables[removal.into] = replace(into, segments=[*into.segments, ch.Segment(
                    removal.into_version, removal.into_table, count, into.db)])

    def release_all() -> None:
        for r in releases:
            r()
    return replace(run, frame=frame, tables=tables), release_all


def _refuse_unsure(run: ch.RunBatch, removal: Removal, tc: ch.TableChanges) -> None:
    """:class:`RemovalRefused` when the run holds row changes the job ran across that nobody can place
    (``run.ambiguous``)."""
    unsure = run.ambiguous.get(removal.job.id)
    if unsure is None:
        return
    raise RemovalRefused(
        f"{removal.describe()}: the transaction committed at {unsure} began before the job and wrote rows of "
        f"{tc.db}.{tc.name} while it ran where the job moved or took away what the table held: each of its "
        f"statements ran with the schema of its moment, and the binlog does not say which partition or table "
        f"took its rows (TiDB's MVCC records did not tell either). The run stopped before writing anything; the "
        f"checkpoint stays where it was. To go on: leave {tc.db}.{tc.name} out of this drainer "
        f"([[syncer.ignore-table]])")


def removal_tasks(run: ch.RunBatch) -> int:
    """How many tasks reduce a removal's key buckets: one per task slot of the run's session, at most
    one per bucket."""
    slots = getattr(getattr(run.spark, "sparkContext", None), "defaultParallelism", 1)
    return max(1, min(BUCKETS, int(slots or 1)))


def _kept(frame: Any) -> tuple[Any, Callable[[], None]]:
    """A Spark frame computed now and kept on the executors (a local frame is computed already)."""
    if hasattr(frame, "localCheckpoint"):
        from transform.spark import kept_on_disk

        return kept_on_disk(frame)
    return frame, lambda: None


def _rows(frame: Any) -> int:
    """The row changes a frame's records hold."""
    if hasattr(frame, "localCheckpoint"):
        from pyspark.sql import functions as F

        total = frame.agg(F.sum("rows")).collect()[0][0]
        return int(total or 0)
    table = frame.toArrow()
    return int(pc.sum(table.column("rows")).as_py() or 0) if table.num_rows else 0
