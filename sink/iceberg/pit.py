"""A table's state at an upstream ts, as the lake holds it: which Iceberg files, read how.

The state of ``db.table`` at ``T`` is its mirror at the *base*, the newest snapshot on its main line
(or the snapshot of a ``tidb-ts-*`` tag) whose run ended at or before ``T`` (``binlake.to-ts`` ≤ T),
with the changelog's row changes in ``(base, T]`` applied in commit order. When the table id alive at
``T`` began after the base (a TRUNCATE, or a CREATE after a DROP), the state starts empty at that DDL.
The mirror read is the one the table had at ``T``: after a later RENAME or DROP TABLE, the Iceberg
table now holding it (``sink.iceberg.lineage``).

Everything here is metadata: file scan tasks, schemas, positions. The rows are read on Spark's
executors (``sink.iceberg.pit_tasks``) with a :class:`Projection` that names every column as it was
called at ``T`` (Iceberg field ids matched by TiDB column id through ``binlake.columns``, so a column
renamed or dropped after ``T`` is still found).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.expressions import And, GreaterThan, LessThanOrEqual
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import IcebergType, NestedField, StructType

from sink import changelog as fmt
from sink.errors import SinkError
from sink.iceberg import lineage
from sink.iceberg import schema as ks
from sink.iceberg.catalog import table_or_none
from sink.iceberg.checkpoint import MetaNamespace
from sink.iceberg.verify import marked_snapshots
from transform import changes as ch
from transform.codec.model import TableInfo
from transform.history import ColumnPast, SchemaHistory


class LakeRangeError(SinkError):
    """The asked ts is outside what the lake holds, or the lake holds nothing yet (terminal)."""


@dataclass(frozen=True)
class LakeRange:
    """The upstream ts the lake can restore: from the start of its first run to its checkpoint."""

    start: int
    end: int

    def check(self, ts: int) -> None:
        """:class:`LakeRangeError` unless ``start`` ≤ ``ts`` ≤ ``end``."""
        if not self.start <= ts <= self.end:
            raise LakeRangeError(f"ts {ts} is outside what the lake holds: it holds every ts from {self.start} "
                                 f"(the start of its first run) to {self.end} (its checkpoint)")


def _tables(catalog: Catalog) -> Iterator[tuple[str, ...]]:
    for ns in catalog.list_namespaces():
        if ns and ns[0] == lineage.META_NAMESPACE:
            continue
        try:
            yield from catalog.list_tables(ns)
        except NoSuchNamespaceError:
            continue


def lake_range(catalog: Catalog) -> LakeRange:
    """The lake's range: its checkpoint, and the smallest ``binlake.from-ts`` among the oldest marked
    snapshots of its changelogs (dropped ones included). :class:`LakeRangeError` before any run."""
    end = MetaNamespace(catalog, read_only=True).checkpoint()
    if end is None:
        raise LakeRangeError("the lake holds nothing yet: no drain has completed a run into this catalog")
    start = end
    for ident in _tables(catalog):
        if fmt.CHANGELOG_SUFFIX not in ident[-1]:
            continue
        marked = marked_snapshots(catalog.load_table(ident))
        if marked:
            start = min(start, marked[-1].run.from_ts)
    return LakeRange(start, end)


# ---------------------------------------------------------------------------------------------
# projection

@dataclass(frozen=True)
class Projection:
    """How one Iceberg table's files are read as the table at ``T``: the schema to read (field ids,
    each named as at ``T``) and the key columns."""

    schema: Schema
    keys: tuple[str, ...]

    def key_field(self) -> NestedField | None:
        """The field of the first key column (what a mirror's bucket partitioning hashes)."""
        return next((f for f in self.schema.fields if f.name == self.keys[0]), None)


def _field_by_column(tbl: Table) -> dict[int, NestedField]:
    """TiDB column id → the Iceberg field holding it now (``binlake.columns``)."""
    current = tbl.schema()
    out = {}
    for cid, name in ks.stored_columns(dict(tbl.properties)).items():
        try:
            out[int(cid)] = current.find_field(name)
        except ValueError:
            continue
    return out


def _field_named(schemas: list[Schema], name: str) -> NestedField | None:
    """The newest field called ``name`` in ``schemas`` (a column dropped since, when they are all the
    table ever had)."""
    for schema in sorted(schemas, key=lambda s: s.schema_id, reverse=True):
        for f in schema.fields:
            if f.name == name:
                return f
    return None


_KEPT = re.compile(r".+" + re.escape(fmt.DROPPED_INFIX) + r"c(\d+)\Z")


def kept_dropped(schema: Schema) -> dict[int, NestedField]:
    """TiDB column id → the changelog field keeping that dropped column (``dropped_column_name``)."""
    out = {}
    for f in schema.fields:
        m = _KEPT.match(f.name)
        if m:
            out[int(m.group(1))] = f
    return out


def carried_name(column_id: int) -> str:
    """The projection's name for the values of a column a MODIFY rewrote under a new id (the old id)."""
    return f"_tidb_was_c{column_id}"


def projection(tbl: Table, info: TableInfo, extra: tuple[str, ...], within: Schema | None = None,
               past: ColumnPast | None = None, then: TableInfo | None = None) -> Projection:
    """The columns of ``info`` (the table at ``T``) as fields of ``tbl`` named as at ``T``, plus the
    ``extra`` metadata columns the table has (``_tidb_rowid`` when ``info`` has one). Only fields of
    ``within`` (a snapshot's schema) count when it is given, else those of any schema the table had.
    A column the table did not hold is left out (read as its default). The old columns of a column
    ``past`` says was rewritten under a new id are read too, as :func:`carried_name` of their id
    (``within``'s: found by their names in ``then``, the table at that snapshot; else the changelog's
    kept fields)."""
    schemas = [within] if within is not None else list(tbl.metadata.schemas)
    ids = {f.field_id for s in schemas for f in s.fields}
    by_id = _field_by_column(tbl) if tbl.properties.get(ks.PROP_TABLE_ID) else {}
    kept = kept_dropped(tbl.schema()) if within is None else {}
    carried = past.carried if past is not None else {}

    def old_field(cid: int) -> NestedField | None:
        if within is None:
            return kept.get(cid)
        was = then.column_by_id(cid) if then is not None else None
        return _field_named(schemas, was.name) if was is not None else None

    fields: list[NestedField] = []
    for col in info.columns:
        f = by_id.get(col.id)
        if f is None or f.field_id not in ids:
            f = kept.get(col.id)
            if f is None and (col.name not in carried or within is None or then is None):
                f = _field_named(schemas, col.name)
            elif f is None:
                f = old_field(col.id)
        if f is not None:
            fields.append(NestedField(f.field_id, col.name, f.field_type, required=False))
        for old, _ in carried.get(col.name, ()):
            g = old_field(old.id)
            if g is not None and g.field_id not in {x.field_id for x in fields}:
                fields.append(NestedField(g.field_id, carried_name(old.id), g.field_type, required=False))
    names = ([ch.ROWID] if ks.has_rowid(info) else []) + list(extra)
    for name in names:
        f = _field_named(schemas, name)
        if f is not None:
            typ = f.field_type
            if name == ch.BEFORE and isinstance(typ, StructType):   # the before-image: the key columns only
                keys = set(ks.key_columns(info))
                typ = StructType(*[NestedField(s.field_id, s.name, s.field_type, required=False)
                                   for s in typ.fields if s.name in keys])
            fields.append(NestedField(f.field_id, name, typ, required=False))
    return Projection(Schema(*fields), tuple(ks.key_columns(info)))


# ---------------------------------------------------------------------------------------------
# a table at T

ANY_BUCKET = "*"   # a file not partitioned by a bucket of the first key column: any key may be in it


@dataclass(frozen=True)
class Source:
    """Files of one Iceberg table to read with ``projection`` (metadata for the executors). A mirror's
    files each have a *route*: ``"<N>:<b>"`` when the file holds only keys whose first column falls in
    bucket ``b`` of ``N`` (the mirror's ``bucket(N, key)`` partitioning), else :data:`ANY_BUCKET`."""

    metadata: TableMetadata
    io_properties: dict[str, str]
    projection: Projection
    tasks: tuple[FileScanTask, ...]
    low: int = 0          # changelog: rows with low < commit_ts ≤ high
    high: int = 0
    routes: tuple[str, ...] = ()

    def without_tasks(self) -> Source:
        """The same source without its file list (what every file's task needs besides its file)."""
        return Source(self.metadata, self.io_properties, self.projection, (), self.low, self.high)

    def key_type(self) -> IcebergType | None:
        """The Iceberg type of the first key column (what the bucket transform hashes)."""
        key = self.projection.key_field()
        return key.field_type if key is not None else None


def _route(metadata: TableMetadata, task: FileScanTask, key_field_id: int | None) -> str:
    spec = metadata.specs().get(task.file.spec_id)
    if spec is None or key_field_id is None or len(spec.fields) != 1:
        return ANY_BUCKET
    f = spec.fields[0]
    if f.source_id != key_field_id or not isinstance(f.transform, BucketTransform):
        return ANY_BUCKET
    return f"{f.transform.num_buckets}:{task.file.partition[0]}"


@dataclass(frozen=True)
class TableAt:
    """``name`` (``db.table`` at ``ts``) with the TableInfo in force then, and where its rows are: the
    mirror's base files and the changelog's tail, either absent when the table was empty."""

    name: str
    info: TableInfo
    ts: int
    base: Source | None = None
    tail: Source | None = None
    base_ts: int | None = None
    notes: list[str] = field(default_factory=list)
    past: ColumnPast = field(default_factory=ColumnPast)   # what rows written earlier hold for its columns
    tail_run_end: int | None = None   # the to-ts of the run whose changelog files hold the tail's last rows
    unkept: tuple[str, ...] = ()      # columns the changelog no longer has (dropped before it kept them)

    @property
    def tail_from(self) -> int | None:
        """The changelog tail's lower bound (None without a tail)."""
        return self.tail.low if self.tail is not None else None

    def origin(self) -> str:
        """``mirror at B + changelog (L, T]``, ``empty``, or the part of it there is."""
        base = f"mirror at {self.base_ts}" if self.base is not None else "empty"
        return base + (f" + changelog ({self.tail.low}, {self.ts}]" if self.tail is not None else "")


def lost_columns(history: SchemaHistory, t: TableAt) -> list[str]:
    """A warning when the run holding ``t``'s changelog tail dropped some of its columns after the ts
    and its changelog did not keep them (binlake before the changelog kept dropped columns wrote a
    run's changelog in the table's shape at its end): the lake lacks those columns' values for the
    rows changed in the tail (they are restored at their default)."""
    if t.tail is None or t.tail_run_end is None:
        return []
    end = history.last_table(t.info.id, t.tail_run_end)
    lost = [c.name for c in t.info.columns
            if end is not None and end.column_by_id(c.id) is None and c.name in t.unkept]
    if not lost:
        return []
    return [f"warning: column(s) {', '.join(lost)} were dropped by the run ending at {t.tail_run_end}, which "
            f"holds the changes after {t.tail.low}: the lake lacks their values for rows changed in "
            f"({t.tail.low}, {t.ts}], restored at their default; a ts at or before {t.tail.low} or at or after "
            f"{t.tail_run_end} is exact"]


def changelog_of(mirror: str) -> str:
    """The changelog beside the Iceberg table ``mirror`` (``<t>__dropped_<ts>`` →
    ``<t>__changelog_dropped_<ts>``)."""
    base, sep, drop_ts = mirror.rpartition(lineage.MIRROR_DROPPED_INFIX)
    if sep and drop_ts.isdigit():
        return fmt.dropped_changelog_name(base, int(drop_ts))
    return fmt.changelog_name(mirror)


def base_snapshot(tbl: Table, ts: int) -> tuple[Snapshot | None, int | None]:
    """The newest snapshot of the mirror whose run ended at or before ``ts`` (main line or a
    ``tidb-ts-*`` tag) and that run's ``to-ts``; (None, None) when none did."""
    best: tuple[Snapshot | None, int | None] = (None, None)
    for m in marked_snapshots(tbl):
        if m.run.to_ts <= ts:
            best = (m.snapshot, m.run.to_ts)
            break
    for ref_name, ref in tbl.metadata.refs.items():
        if not ref_name.startswith(fmt.TAG_PREFIX) or not ref_name[len(fmt.TAG_PREFIX):].isdigit():
            continue
        tag_ts = int(ref_name[len(fmt.TAG_PREFIX):])
        snap = tbl.metadata.snapshot_by_id(ref.snapshot_id)
        if snap is not None and tag_ts <= ts and (best[1] is None or tag_ts > best[1]):
            best = (snap, tag_ts)
    return best


def _io(tbl: Table) -> dict[str, str]:
    return dict(tbl.io.properties)


def table_at(catalog: Catalog, moves: list[lineage.Move], name: str, info: TableInfo, ts: int,
             began: int, history: SchemaHistory | None = None) -> TableAt:
    """Where the rows of ``name`` at ``ts`` are (see the module doc); ``began`` is the position of the
    DDL that created the table id alive at ``ts`` (0 when the lake's history has none), ``history``
    the upstream's (what rows written earlier hold: :class:`~transform.history.ColumnPast`)."""
    held, _ = lineage.name_at(moves, name, ts)
    mirror = table_or_none(catalog, held)
    log = table_or_none(catalog, changelog_of(held))
    past = history.column_past(info.id, ts) if history is not None else ColumnPast()
    if mirror is None and log is None:
        return TableAt(name, info, ts, notes=["no Iceberg table holds it: restored empty"], past=past)
    low, base, base_ts = began, None, None
    if mirror is not None:
        snap, snap_ts = base_snapshot(mirror, ts)
        if snap is not None and snap_ts is not None and snap_ts >= began:
            within = mirror.metadata.schema_by_id(snap.schema_id) if snap.schema_id is not None else None
            then = history.last_table(info.id, snap_ts) if history is not None else None
            proj = projection(mirror, info, (ch.COMMIT_TS, ch.COMMIT_TIME), within, past, then)
            tasks = tuple(mirror.scan(snapshot_id=snap.snapshot_id).plan_files())
            key = proj.key_field()
            routes = tuple(_route(mirror.metadata, t, key.field_id if key else None) for t in tasks)
            base, base_ts, low = Source(mirror.metadata, _io(mirror), proj, tasks, routes=routes), snap_ts, snap_ts
    tail = None
    if log is not None and low < ts:
        proj = projection(log, info, (ch.OP, ch.COMMIT_TS, ch.SEQ, ch.COMMIT_TIME, ch.BEFORE), past=past)
        row_filter = And(GreaterThan(term=ch.COMMIT_TS, value=low), LessThanOrEqual(term=ch.COMMIT_TS, value=ts))
        tasks = tuple(log.scan(row_filter=row_filter).plan_files())
        if tasks:
            tail = Source(log.metadata, _io(log), proj, tasks, low, ts)
            ends = [m.run.to_ts for m in marked_snapshots(log) if m.run.to_ts >= ts]
            current = {f.field_id for f in log.schema().fields}
            unkept = tuple(f.name for f in proj.schema.fields if f.field_id not in current)
            return TableAt(name, info, ts, base, tail, base_ts, past=past, tail_run_end=min(ends, default=None),
                           unkept=unkept)
    return TableAt(name, info, ts, base, tail, base_ts, past=past)
