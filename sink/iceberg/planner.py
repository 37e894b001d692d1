"""Makes the Iceberg sink's :class:`~sink.iceberg.write_plan.WritePlan` of a run: reads the catalog
(tables, properties, specs, schemas, files) and decides everything, writing nothing.

The run's :class:`~sink.iceberg.plan.TablePlan`s (from its metadata alone) come first; then, in their
order, each plan's catalog moves are decided against a view of the catalog that the earlier moves
already changed (the executor does every move before it writes any table), and then each table's
changelog and mirror against that view: a table that does not exist yet is planned against the
table its creation would make. Each table's schema and spec updates are made on a transaction that
is never committed, and kept as data (``sink.iceberg.steps``).
"""
from __future__ import annotations

from collections.abc import Callable

from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.exceptions import ValidationError
from pyiceberg.io import load_file_io
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.transforms import BucketTransform

from sink import changelog as fmt
from sink.errors import IncompatibleSchemaChange
from sink.iceberg import lineage, tasks
from sink.iceberg import plan as pl
from sink.iceberg import position_deletes as deletes_mod
from sink.iceberg import schema as ks
from sink.iceberg.steps import Planned, SpecUpdate
from sink.iceberg.tables import Layout
from sink.iceberg.write_plan import (
    CatalogStep,
    ChangelogWrite,
    DropTable,
    MirrorWrite,
    RecordMove,
    RefuseRename,
    RenameTable,
    TableMovedError,
    TableWrite,
    WritePlan,
)
from transform import changes as ch
from transform.codec.model import TableInfo

# what a refused schema evolution raises: ours (naming the DDL), pyiceberg's update checks
REFUSED = (IncompatibleSchemaChange, ValueError, ValidationError)

Loader = Callable[[pl.Ident], Table | None]


def plan_write(run: ch.RunBatch, load: Loader, layout: Layout) -> WritePlan:
    """The run's finished plan (see the module doc); ``load`` reads a table (None when absent),
    ``layout`` says what creating one would make."""
    plans = pl.plan_run(run)
    view = _View(load)
    moves = [_moves(view, p, run) for p in plans]
    tables = tuple(_table_write(view, layout, p, m, run) for p, m in zip(plans, moves, strict=True))
    return WritePlan(run.from_ts, run.to_ts, tables)


class _View:
    """The catalog as the run's moves leave it: each table loaded once, renamed and dropped in memory."""

    def __init__(self, load: Loader) -> None:
        self._load = load
        self._tables: dict[pl.Ident, Table | None] = {}

    def get(self, ident: pl.Ident) -> Table | None:
        if ident not in self._tables:
            self._tables[ident] = self._load(ident)
        return self._tables[ident]

    def rename(self, src: pl.Ident, dst: pl.Ident) -> RenameTable:
        tbl = self.get(src)
        assert tbl is not None
        self._tables[dst], self._tables[src] = tbl, None
        return RenameTable(src, dst, tbl.metadata_location)

    def drop(self, ident: pl.Ident) -> DropTable:
        tbl = self.get(ident)
        assert tbl is not None
        self._tables[ident] = None
        return DropTable(ident, tbl.metadata_location)


# ---------------------------------------------------------------------------------------------
# catalog moves

def _moves(view: _View, plan: pl.TablePlan, run: ch.RunBatch) -> tuple[CatalogStep, ...]:
    """The RENAME TABLEs into the plan's name (both Iceberg tables; a step done by a crashed attempt
    is not planned again), their lineage records, and what a DROP sets aside."""
    steps: list[CatalogStep] = []
    for r in plan.renames:
        for suffix in ("", fmt.CHANGELOG_SUFFIX):
            src, dst = (r.old[0], r.old[1] + suffix), (r.new[0], r.new[1] + suffix)
            if view.get(src) is None:
                continue
            found, there = view.get(src), view.get(dst)
            if there is not None:
                assert found is not None
                if found.metadata.table_uuid == there.metadata.table_uuid:
                    # one table under both names: the view (each name loaded when first asked) saw
                    # another run's rename half-way, the source before it and the target after
                    raise TableMovedError(
                        f"table {'.'.join(src)}: another writer renamed it to {'.'.join(dst)} while this run "
                        f"planned it: concurrent run; nothing of this run was written, a re-run plans again")
                steps.append(RefuseRename(src, found.metadata_location, dst, there.metadata_location,
                    f"RENAME TABLE {'.'.join(r.old)} TO {'.'.join(r.new)}: the Iceberg table {'.'.join(dst)} still "
                    f"holds another table (names swapped within one run?); drain up to the commit before this rename "
                    f"first (--to-ts), or rename {'.'.join(dst)} out of the way"))
                continue
            steps.append(view.rename(src, dst))
    steps.extend(RecordMove(m) for m in plan.moves)
    if plan.drop is not None:
        steps.extend(_set_aside(view, plan, run))
    return tuple(steps)


def _set_aside(view: _View, plan: pl.TablePlan, run: ch.RunBatch) -> list[CatalogStep]:
    """DROP TABLE: the mirror to ``kept`` (recorded), the changelog to ``aside``; an end without a
    DROP drops the mirror. A table already at the run's ``to_ts``, or recording an id that takes the
    name later in the run, is the name's next table (a crashed attempt got that far) and stays."""
    drop = plan.drop
    assert drop is not None
    steps: list[CatalogStep] = []
    mirror = view.get(plan.mirror)
    ours = mirror is not None and not pl.progress(mirror.properties, run)[0] and drop.moves(mirror.properties)
    if drop.kept is not None and drop.drop_ts is not None:
        if ours and view.get(drop.kept) is None:
            steps.append(view.rename(plan.mirror, drop.kept))
        if view.get(drop.kept) is not None:
            steps.append(RecordMove(lineage.Move(drop.drop_ts, ".".join(plan.mirror), ".".join(drop.kept),
                                                 lineage.DROP)))
    elif ours:
        steps.append(view.drop(plan.mirror))
    if drop.aside is not None:
        live_log = (plan.group.db, fmt.changelog_name(plan.group.name))
        log = view.get(live_log)
        if log is not None and drop.moves(log.properties) and view.get(drop.aside) is None:
            steps.append(view.rename(live_log, drop.aside))
    return steps


# ---------------------------------------------------------------------------------------------
# the tables

def _table_write(view: _View, layout: Layout, plan: pl.TablePlan, moves: tuple[CatalogStep, ...],
                 run: ch.RunBatch) -> TableWrite:
    info = plan.info
    if info is None:   # dropped in the range with no row changes: only catalog operations
        return TableWrite(plan, moves)
    log, expect = _existing_or_new(view, layout, plan.changelog, info, plan.version, changelog=True)
    log = _as_gone_on(log, info, run)
    skip_log, since = pl.progress(log.properties, run)
    changelog = None if skip_log else _changelog(log, expect, plan, info, since)
    live = plan.live
    if live is None:
        return TableWrite(plan, moves, changelog, None, skip_log)
    mirror, expect = _existing_or_new(view, layout, plan.mirror, info, plan.version, changelog=False)
    mirror = _as_gone_on(mirror, info, run)
    skip_mirror, since = pl.progress(mirror.properties, run)
    merge = None if skip_mirror else _mirror(mirror, expect, plan, live, info, since, run)
    return TableWrite(plan, moves, changelog, merge, skip_log, skip_mirror)


def _as_gone_on(tbl: Table, info: TableInfo, run: ch.RunBatch) -> Table:
    """``tbl`` as the planning sees it: a table recording an id that went on as ``info``'s in the run
    (:func:`~sink.iceberg.plan.went_on`) is planned as recording ``info``'s id (its columns keep their
    ids); the commit records the new id."""
    stored = tbl.properties.get(fmt.TABLE_ID_KEY)
    if not pl.went_on(stored, info.id, run):
        return tbl
    metadata = tbl.metadata.model_copy(update={"properties": {**tbl.properties, fmt.TABLE_ID_KEY: str(info.id)}})
    return Table(tbl.name(), metadata, tbl.metadata_location, tbl.io, tbl.catalog)


def _existing_or_new(view: _View, layout: Layout, ident: pl.Ident, info: TableInfo, version: int,
                     changelog: bool) -> tuple[Table, str | None]:
    """The table at ``ident`` and its metadata location, or the table creating it would make and None."""
    tbl = view.get(ident)
    if tbl is not None:
        return tbl, tbl.metadata_location
    new = layout.new_table(ident, info, version, changelog)
    location = f"planned://{'/'.join(ident)}"
    metadata = new_table_metadata(new.schema, new.spec, UNSORTED_SORT_ORDER, location, new.properties)
    return Table(ident, metadata, "", load_file_io({}), NoopCatalog("planned")), None


def _evolve(planned: Planned, tbl: Table, info: TableInfo, kind: str, events: list[ch.DDLEvent]) -> None:
    """The schema evolution of ``tbl`` to ``info``: removals first (a name they free can be taken by an
    added column), then additions and promotions."""
    ddl = "; ".join(e.job.query for e in events) or "(schema as of the run)"
    with planned.schema(allow_incompatible=True) as update:
        ks.evolve_remove(update, tbl.schema(), tbl.properties, info, kind)
    with planned.schema() as update:
        ks.evolve_add(update, planned.tx.table_metadata.schema(), tbl.properties, info, kind, ddl)


def _changelog(log: Table, expect: str | None, plan: pl.TablePlan, info: TableInfo, since: int) -> ChangelogWrite:
    segments = segment_map(plan.group, info)
    sources = frozenset(plan.source_ids)
    planned = Planned(log.transaction())
    try:
        _evolve(planned, log, info, ks.CHANGELOG, plan.events)
    except REFUSED as e:
        return ChangelogWrite(plan.changelog, expect, since, segments, sources, refused=e)
    shapes = [t for (tid, _), t in segments.tables.items() if tid in segments.renamed]
    with planned.schema() as update:
        ks.add_kept_columns(update, planned.tx.table_metadata.schema(), info, shapes)
    return ChangelogWrite(plan.changelog, expect, since, segments, sources, tuple(planned.updates))


def _mirror(mirror: Table, expect: str | None, plan: pl.TablePlan, live: ch.TableChanges, final: TableInfo,
            since: int, run: ch.RunBatch) -> MirrorWrite:
    """The merge of the live id's changes after ``since`` (and after a TRUNCATE) into the mirror's
    files as its transaction leaves the table (a bucket spec moved to the new first key column when
    the key moved). A rewritten column binlake cannot convert at all is refused here."""
    has_rows = mirror.current_snapshot() is not None
    scan = tuple(mirror.scan().plan_files()) if has_rows else ()
    files = tuple(t.file for t in scan)
    deletes = {t.file.file_path: tuple(t.delete_files) for t in scan if t.delete_files}
    reset = pl.reset_ts(plan, mirror.properties, has_rows, since, run)
    respec = pl.moving_bucket(mirror.spec(), mirror.schema(), mirror.properties, final)
    base = MirrorWrite(plan.mirror, expect, since, live.table_id, reset, respec, files=files, deletes=deletes)
    planned = Planned(mirror.transaction())
    try:
        if respec:   # the bucket field goes before the evolution (which may drop its column)
            bucket = pl.bucket_field(mirror.spec())
            assert bucket is not None
            planned.spec(SpecUpdate(remove=bucket.name))
        _evolve(planned, mirror, final, ks.MIRROR, plan.events)
        return _merge(mirror, planned, plan, base, final)
    except REFUSED as e:
        return MirrorWrite(plan.mirror, expect, since, live.table_id, reset, respec, files=files, deletes=deletes,
                           refused=e)


def _merge(mirror: Table, planned: Planned, plan: pl.TablePlan, base: MirrorWrite, final: TableInfo) -> MirrorWrite:
    keys = ks.key_columns(final)
    retyped = ks.retypes(plan.events)
    for chain in ks.retype_chains({str(r.old.id) for r in retyped}, final, retyped).values():
        for step in chain:
            step.check()
    segments = segment_map(plan.group, final, retyped)
    epoch_keys = {(tid, v): ",".join(final_names(ks.key_columns(info), info, final))
                  for (tid, v), info in segments.tables.items() if tid == base.live_id}
    epochs = any(k != ",".join(keys) for k in epoch_keys.values())
    tx = planned.tx
    if base.respec:   # the key's first column changed: bucket the new one, rewriting the whole table here
        source = tx.table_metadata.schema().find_field(keys[0])
        if BucketTransform(base.respec).can_transform(source.field_type):
            planned.spec(SpecUpdate(add=(keys[0], base.respec, f"{keys[0]}_bucket")))
    buckets, bucket_type = pl.merge_buckets(tx.table_metadata, keys[0]) if not (epochs or base.respec) else (1, None)
    spec_id = tx.table_metadata.spec().spec_id
    existing: dict[int, list[DataFile]] = {}
    if base.reset is None:
        for f in base.files:
            b = 0 if buckets == 1 else f.partition[0] if f.spec_id == spec_id else None
            if b is None:   # a file of an older spec: this run merges in one bucket
                buckets, bucket_type = 1, None
                existing = {0: list(base.files)}
                break
            existing.setdefault(b, []).append(f)
    same_table = mirror.properties.get(fmt.TABLE_ID_KEY) == str(final.id)
    on_read = not (epochs or base.respec) and deletes_mod.merge_on_read(mirror.properties,
                                                                        tx.table_metadata.format_version)
    return MirrorWrite(
        base.ident, base.expect, base.since, base.live_id, base.reset, base.respec, keys=tuple(keys),
        segments=segments, buckets=buckets, bucket_type=bucket_type, epochs=epochs, epoch_keys=epoch_keys,
        backfill=bool(existing) and pl.needs_backfill(mirror.properties, final, retyped), files=base.files,
        existing={b: tuple(fs) for b, fs in existing.items()}, deletes=base.deletes,
        merge_on_read=on_read, fold=on_read and deletes_mod.folds(mirror.properties),
        old_map=ks.stored_columns(mirror.properties) if same_table else {}, updates=tuple(planned.updates))


def segment_map(g: pl.Group, final: TableInfo, retyped: tuple[ks.Retype, ...] = ()) -> tasks.SegmentMap:
    """The TableInfo of every segment of the group; ids renamed into ``final``: the live ones and
    ``final``'s own (a dropped table's rows keep their names); ``retyped``: the rewritten columns
    whose values rows written before the rewrite carry into ``final`` (the mirror's, not the
    changelog's: the changelog keeps each change as it was written)."""
    tables = {(tc.table_id, s.schema_version): s.table for tc in g.parts for s in tc.segments}
    renamed = frozenset(tc.table_id for tc in g.parts if tc.final is not None or tc.table_id == final.id)
    return tasks.SegmentMap(final, tables, renamed, retyped)


def final_names(names: list[str], old: TableInfo, new: TableInfo) -> list[str]:
    """Column names of ``old`` as ``new`` calls them (by column id); hidden columns and columns
    ``new`` dropped keep their ``old`` name."""
    ids = {c.name: c.id for c in old.columns}
    out = []
    for n in names:
        col = new.column_by_id(ids[n]) if n in ids else None
        out.append(col.name if col is not None else n)
    return out
