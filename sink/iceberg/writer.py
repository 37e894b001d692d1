"""The Iceberg sink: per upstream table, an append-only changelog and a current-state mirror.

Per run and per upstream table name (TRUNCATE and DROP + CREATE give one name several table ids):

1. RENAME TABLE in the range renames both Iceberg tables (catalog operations, idempotent).
2. Missing tables are created: mirror ``<db>.<table>`` (identifier fields = primary key or
   ``_tidb_rowid``) and changelog ``<db>.<table>__changelog`` (partitioned by day of
   ``_tidb_commit_time``).
3. Changelog, one transaction: schema evolution to the table's final TableInfo, append of every
   row change of the range in commit order.
4. Mirror, one transaction: schema evolution, delete of every row when the range truncated the
   table, delete of every key the range touched, append of the surviving after-images.
   DROP TABLE drops the mirror and keeps the changelog as ``<table>__changelog_dropped_<commit_ts>``
   (the name is free for a table created or renamed into it later, even in the same run).

Each table records ``binlake.to-ts`` in its properties in the same transaction, and every snapshot
carries the run markers. A table already at the run's ``to_ts`` is skipped, so re-running a range
is a no-op; the checkpoint (namespace ``_binlake``) advances only after every table committed.
With ``tag_runs`` each table's snapshot at the end of a run is tagged ``tidb-ts-<to_ts>``.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, In
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.transforms import DayTransform

from sink.base import Sink, TableReport
from sink.errors import SinkError
from sink.iceberg import schema as ks
from transform import changes as ch
from transform import failpoints
from transform.codec.model import TableInfo
from transform.history import DROP_SCHEMA, DROP_TABLE, DROP_VIEW, RENAME_TABLE, TRUNCATE_TABLE
from transform.reduce import net_change

CHANGELOG_SUFFIX = "__changelog"
META_NAMESPACE = "_binlake"
_ENDING = (DROP_SCHEMA, DROP_TABLE, DROP_VIEW, TRUNCATE_TABLE)


TAG_PREFIX = "tidb-ts-"
DROPPED_INFIX = "_dropped_"
KEY_EPOCH = "_binlake_key"  # internal column: the key a mirror row change was written under

# what a table's commit does inside its transaction, given the schema after the evolution
CommitBody = Callable[[Transaction, Schema], None]


class CheckpointError(SinkError):
    """The stored checkpoint is unreadable or belongs to another cluster."""


@dataclass
class _Group:
    db: str
    name: str
    parts: list[ch.TableChanges] = field(default_factory=list)

    @property
    def live(self) -> ch.TableChanges | None:
        alive = [p for p in self.parts if p.final is not None]
        return max(alive, key=lambda p: max((e.commit_ts for e in p.events), default=0)) if alive else None

    @property
    def events(self) -> list[ch.DDLEvent]:
        return sorted((e for p in self.parts for e in p.events), key=lambda e: e.commit_ts)


class IcebergSink(Sink):
    """Writes runs into a pyiceberg catalog (see the module doc)."""

    kind = "iceberg"

    def __init__(self, catalog: Catalog, tag_runs: bool = False) -> None:
        self.catalog = catalog
        self.tag_runs = tag_runs
        self._commits = 0

    # -- checkpoint --------------------------------------------------------------------------

    def _meta(self) -> dict[str, str]:
        self.catalog.create_namespace_if_not_exists(META_NAMESPACE)
        return dict(self.catalog.load_namespace_properties(META_NAMESPACE))

    def checkpoint(self) -> int | None:
        raw = self._meta().get("checkpoint.to-ts")
        if raw is None:
            return None
        try:
            return int(raw)
        except ValueError:
            raise CheckpointError(f"namespace {META_NAMESPACE} property checkpoint.to-ts = {raw!r} "
                                  f"is not a ts") from None

    def check_cluster(self, cluster_id: int) -> None:
        """Refuse to mix clusters in one catalog."""
        have = self._meta().get("checkpoint.cluster-id")
        if have is not None and int(have) != cluster_id:
            raise CheckpointError(f"the catalog's checkpoint belongs to cluster {have}, this run reads cluster "
                                  f"{cluster_id}; use another warehouse/catalog")

    def save_checkpoint(self, run: ch.RunBatch) -> None:
        self.catalog.update_namespace_properties(META_NAMESPACE, updates={
            "checkpoint.to-ts": str(run.to_ts), "checkpoint.batch-id": run.batch_id,
            "checkpoint.cluster-id": str(run.cluster_id)})

    # -- tables ------------------------------------------------------------------------------

    def _load(self, ident: tuple[str, str]) -> Table | None:
        try:
            return self.catalog.load_table(ident)
        except NoSuchTableError:
            return None

    def _create(self, ident: tuple[str, str], info: TableInfo, version: int, changelog: bool) -> Table:
        self.catalog.create_namespace_if_not_exists(ident[0])
        schema = ks.changelog_schema(info) if changelog else ks.mirror_schema(info)
        props = ks.table_properties(info, version)
        props["format-version"] = "2"
        tbl = self.catalog.create_table_if_not_exists(ident, schema, properties=props)
        if changelog and not tbl.spec().fields:
            with tbl.update_spec() as spec:
                spec.add_field(ch.COMMIT_TIME, DayTransform(), "commit_day")
            tbl = self.catalog.load_table(ident)
        return tbl

    @staticmethod
    def _progress(tbl: Table, run: ch.RunBatch) -> tuple[str, int]:
        """(why to skip the table or "", the ts the table is complete up to within the run).

        A table a crashed run already committed (its ``binlake.to-ts`` inside the range) only
        takes the changes after that ts.
        """
        raw = tbl.properties.get(ks.PROP_TO_TS)
        done = int(raw) if raw is not None else 0
        if done >= run.to_ts:
            return f"already at to_ts={done}", run.to_ts
        return "", max(done, run.from_ts)

    def write(self, run: ch.RunBatch) -> list[TableReport]:
        # TRUNCATE gives a table a new id: both ids are one lineage and go to the same Iceberg tables
        parent: dict[int, int] = {}

        def root(tid: int) -> int:
            while tid in parent:
                tid = parent[tid]
            return tid

        for tc in run.tables.values():
            for e in tc.events:
                if e.job.type == TRUNCATE_TABLE and e.table is not None and e.table.id != e.job.table_id:
                    parent[e.job.table_id] = e.table.id
        lineages: dict[int, list[ch.TableChanges]] = {}
        for tc in run.tables.values():
            lineages.setdefault(root(tc.table_id), []).append(tc)
        groups: dict[tuple[str, str], _Group] = {}
        for head, parts in lineages.items():
            named = next((p for p in parts if p.table_id == head), parts[0])
            groups.setdefault((named.db, named.name), _Group(named.db, named.name)).parts.extend(parts)
        return [self._write_group(run, g) for _, g in sorted(groups.items())]

    def _write_group(self, run: ch.RunBatch, g: _Group) -> TableReport:
        dropped = [p for p in g.parts if p.final is None and _drop_ts(p) is not None]
        if dropped and len(dropped) < len(g.parts):
            # the name was dropped and taken again (CREATE, or RENAME … TO it) in this range:
            # finish the dropped table first, then the new one starts from a free name
            first = self._write_group(run, _Group(g.db, g.name, dropped))
            second = self._write_group(run, _Group(g.db, g.name, [p for p in g.parts if p not in dropped]))
            for op, n in first.rows.items():
                second.rows[op] = second.rows.get(op, 0) + n
            second.ddl = first.ddl + second.ddl
            return second
        report = TableReport(f"{g.db}.{g.name}")
        mirror_id, log_id = (g.db, g.name), (g.db, g.name + CHANGELOG_SUFFIX)
        events = g.events
        report.ddl = [e.job.query for e in events]
        for e in events:
            if e.job.type == RENAME_TABLE and e.before and e.before != (g.db, g.name):
                self._rename(e.before, (g.db, g.name))
        live = g.live
        drop_ts = max((t for t in map(_drop_ts, g.parts) if t is not None), default=None) if live is None else None
        aside = (g.db, f"{g.name}{CHANGELOG_SUFFIX}{DROPPED_INFIX}{drop_ts}") if drop_ts is not None else None
        last_info = live.final if live else _latest_info(g)
        if last_info is None:  # dropped in the range with no row changes: only catalog operations
            self._finish_drop(run, mirror_id, log_id, aside)
            return report
        version = max((s.schema_version for p in g.parts for s in p.segments), default=0)
        version = max([version] + [e.job.binlog.schema_version for e in events])
        all_rows = self._changelog_rows(g, last_info)
        log = ((self._load(aside) if aside else None) or self._load(log_id)
               or self._create(log_id, last_info, version, changelog=True))
        skip_log, since = self._progress(log, run)
        rows = _after(all_rows, since)
        for op in ("I", "U", "D"):
            report.rows[op] = int(pc.sum(pc.equal(rows.column(ch.OP), op)).as_py() or 0) if rows.num_rows else 0
        if not skip_log:
            def append_log(tx: Transaction, schema: Schema) -> None:
                if rows.num_rows:
                    tx.append(ks.conform(rows, schema), snapshot_properties=run.markers())

            self._commit(log, run, last_info, version, ks.CHANGELOG, events, append_log)
        if live is None:
            self._finish_drop(run, mirror_id, log_id, aside)
            report.skipped = skip_log
            return report
        mirror = self._load(mirror_id)
        mirror = mirror or self._create(mirror_id, last_info, version, changelog=False)
        skip_mirror, since = self._progress(mirror, run)
        if not skip_mirror:
            reset = self._reset_ts(g, live, mirror)
            if reset is not None and reset <= since and since > run.from_ts:
                reset = None  # a crashed run already emptied the mirror at that truncate
            mrows = _after(self._mirror_rows(g, last_info, reset), since)
            self._commit(mirror, run, last_info, version, ks.MIRROR, events,
                         lambda tx, schema: self._merge(tx, mirror, schema, mrows, last_info, reset is not None, run))
        report.skipped = skip_log if skip_log and skip_mirror else ""
        return report

    def _finish_drop(self, run: ch.RunBatch, mirror_id: tuple[str, str], log_id: tuple[str, str],
                     aside: tuple[str, str] | None) -> None:
        """DROP TABLE: the mirror goes; the changelog is kept as ``<table>__changelog_dropped_<ts>``
        so the name is free for a table created later (each step idempotent)."""
        mirror = self._load(mirror_id)
        if mirror is not None and not self._progress(mirror, run)[0]:
            self.catalog.drop_table(mirror_id)
        if aside is not None and self._load(log_id) is not None and self._load(aside) is None:
            self.catalog.rename_table(log_id, aside)

    def _rename(self, old: tuple[str, str], new: tuple[str, str]) -> None:
        for suffix in ("", CHANGELOG_SUFFIX):
            src, dst = (old[0], old[1] + suffix), (new[0], new[1] + suffix)
            if self._load(src) is None:
                continue  # done by an earlier (crashed) attempt, or never written
            if self._load(dst) is not None:
                raise SinkError(f"RENAME TABLE {'.'.join(old)} TO {'.'.join(new)}: the Iceberg table "
                                f"{'.'.join(dst)} still holds another table (names swapped within one run?); "
                                f"drain up to the commit before this rename first (--to-ts), or rename "
                                f"{'.'.join(dst)} out of the way")
            self.catalog.create_namespace_if_not_exists(dst[0])
            self.catalog.rename_table(src, dst)

    @staticmethod
    def _existing(tbl: Table, info: TableInfo, column: str | None = None,
                  values: list[Any] | None = None) -> pa.Table:
        """The table's rows before this transaction (all, or where ``column`` is in ``values``),
        with ``info``'s column names (renames by column id) and added columns filled by default."""
        old_map = ks.stored_columns(tbl.properties)
        if tbl.properties.get(ks.PROP_TABLE_ID) != str(info.id):
            old_map = {}
        if column is not None:
            col = next((c for c in info.columns if c.name == column), None)
            old_name = old_map.get(str(col.id), column) if col is not None else column
            rows = tbl.scan(row_filter=_in(old_name, values or [])).to_arrow()
        else:
            rows = tbl.scan().to_arrow()
        return ks.fill_missing(ks.rename_columns(rows, old_map, info), info)

    @staticmethod
    def _needs_backfill(tbl: Table, info: TableInfo) -> bool:
        """True when ``info`` adds (by column id) a column whose origin default is not NULL."""
        if tbl.properties.get(ks.PROP_TABLE_ID) != str(info.id):
            return False
        old = ks.stored_columns(tbl.properties)
        return any(str(c.id) not in old and ks.default_value(c).is_valid for c in info.columns)

    @staticmethod
    def _reset_ts(g: _Group, live: ch.TableChanges, mirror: Table) -> int | None:
        """Commit ts of the last TRUNCATE (or DROP of another id) the mirror must be emptied at."""
        ends = [e.commit_ts for p in g.parts for e in p.events if e.job.type in _ENDING]
        stored = mirror.properties.get(ks.PROP_TABLE_ID)
        if not ends and stored not in (None, str(live.table_id)) and mirror.current_snapshot() is not None:
            return 0  # the mirror holds another (ended) table id: start over
        return max(ends) if ends else None

    def _mirror_rows(self, g: _Group, final: TableInfo, reset: int | None) -> pa.Table:
        """The live table's changes (after the last reset) with columns added since filled by default."""
        parts = []
        schema = ks.changelog_schema(final)
        for tc in g.parts:
            if tc.final is None or tc.table_id != final.id:
                continue
            for seg in tc.segments:
                rows = ks.conform(ks.fill_missing(ks.rename_columns(seg.rows, ks.column_map(seg.table), final), final),
                                  schema)
                keys = ",".join(_final_names(ks.key_columns(seg.table), seg.table, final))
                parts.append(rows.append_column(KEY_EPOCH, pa.array([keys] * rows.num_rows, pa.string())))
        if not parts:
            return schema.as_arrow().empty_table()
        rows = pa.concat_tables(parts)
        if reset is not None:
            rows = rows.filter(pc.greater(rows.column(ch.COMMIT_TS), reset))
        return rows.sort_by([(ch.COMMIT_TS, "ascending"), (ch.SEQ, "ascending")])

    def _changelog_rows(self, g: _Group, final: TableInfo) -> pa.Table:
        parts = []
        for tc in g.parts:
            for seg in tc.segments:
                renamed = tc.final is not None or seg.table.id == final.id
                parts.append(ks.rename_columns(seg.rows, ks.column_map(seg.table), final) if renamed else seg.rows)
        if not parts:
            return ks.changelog_schema(final).as_arrow().empty_table()
        schema = ks.changelog_schema(final)
        rows = pa.concat_tables([ks.conform(p, schema) for p in parts])
        return rows.sort_by([(ch.COMMIT_TS, "ascending"), (ch.SEQ, "ascending")])

    def _commit(self, tbl: Table, run: ch.RunBatch, info: TableInfo, version: int, kind: str,
                events: list[ch.DDLEvent], body: CommitBody) -> None:
        ddl = "; ".join(e.job.query for e in events) or "(schema as of the run)"
        with tbl.transaction() as tx:
            with tx.update_schema(allow_incompatible_changes=True) as update:
                ks.evolve_remove(update, tbl.schema(), tbl.properties, info, kind)
            with tx.update_schema() as update:
                ks.evolve_add(update, tx.table_metadata.schema(), tbl.properties, info, kind, ddl)
            body(tx, tx.table_metadata.schema())
            props = ks.table_properties(info, version)
            props[ks.PROP_TO_TS] = str(run.to_ts)
            tx.set_properties(props)
        self._commits += 1
        failpoints.inject("sink-commit", self._commits)
        if self.tag_runs:
            self._tag(tbl.name(), run.to_ts)

    def _tag(self, ident: tuple[str, ...], to_ts: int) -> None:
        """Tag the table's current snapshot ``tidb-ts-<to_ts>`` (time travel by upstream ts)."""
        tbl = self.catalog.load_table(ident)
        name = f"{TAG_PREFIX}{to_ts}"
        snap = tbl.current_snapshot()
        if snap is not None and name not in tbl.metadata.refs:
            tbl.manage_snapshots().create_tag(snap.snapshot_id, name).commit()

    def _merge(self, tx: Transaction, tbl: Table, schema: Schema, rows: pa.Table, info: TableInfo, reset: bool,
               run: ch.RunBatch) -> None:
        markers = run.markers()
        keys = ks.key_columns(info)
        has_data = tbl.current_snapshot() is not None
        if reset and has_data:
            tx.delete(AlwaysTrue(), snapshot_properties=markers)
            has_data = False
        if has_data and self._needs_backfill(tbl, info):
            # columns added with a default: every stored row must read it, so rewrite the mirror
            existing = self._existing(tbl, info)
            net = net_change(rows, keys) if rows.num_rows else None
            if net is not None:
                existing = existing.join(net.touched_keys, keys, join_type="left anti")
            tx.delete(AlwaysTrue(), snapshot_properties=markers)
            parts = [ks.conform(existing, schema)] + ([ks.conform(net.upserts, schema)] if net else [])
            tx.append(pa.concat_tables(parts), snapshot_properties=markers)
            return
        if not rows.num_rows:
            return
        for epoch_keys, part in _key_epochs(rows, keys):
            self._merge_keys(tx, tbl, schema, part, info, epoch_keys, has_data, markers)
            has_data = True

    def _merge_keys(self, tx: Transaction, tbl: Table, schema: Schema, rows: pa.Table, info: TableInfo, keys: list[str],
                    has_data: bool, markers: dict[str, str]) -> None:
        """Delete the keys ``rows`` touched and append their net after-images (one key epoch)."""
        net = net_change(rows, keys)
        upserts = net.upserts
        if has_data and net.touched_keys.num_rows:
            first = keys[0]
            values = net.touched_keys.column(first).unique().to_pylist()
            keep = None
            if len(keys) > 1:  # other keys sharing the first column's values: re-append them
                keep = self._existing(tbl, info, first, values).join(net.touched_keys, keys, join_type="left anti")
            with warnings.catch_warnings():  # keys first inserted in this run match nothing: expected
                warnings.filterwarnings("ignore", "Delete operation did not match any records")
                tx.delete(_in(first, values), snapshot_properties=markers)
            if keep is not None and keep.num_rows:
                upserts = pa.concat_tables([ks.conform(keep, schema), ks.conform(upserts, schema)])
        mirror_rows = ks.conform(upserts, schema)
        if mirror_rows.num_rows:
            tx.append(mirror_rows, snapshot_properties=markers)


def _in(column: str, values: list[Any]) -> BooleanExpression:
    """``column IN values``: pyiceberg's ``In(column, values)`` with keywords, the form the pydantic
    mypy plugin types; an empty list matches nothing and one value gives ``EqualTo``."""
    return In(term=column, literals=values)


def _final_names(names: list[str], old: TableInfo, new: TableInfo) -> list[str]:
    """Column names of ``old`` as ``new`` calls them (by column id); hidden columns and columns
    ``new`` dropped keep their ``old`` name."""
    ids = {c.name: c.id for c in old.columns}
    out = []
    for n in names:
        col = new.column_by_id(ids[n]) if n in ids else None
        out.append(col.name if col is not None else n)
    return out


def _key_epochs(rows: pa.Table, final_keys: list[str]) -> list[tuple[list[str], pa.Table]]:
    """``rows`` (ordered) cut where the key in force changes (ADD/DROP PRIMARY KEY inside the run),
    each part with the key its rows were written under."""
    if KEY_EPOCH not in rows.column_names:
        return [(final_keys, rows)]
    epoch = rows.column(KEY_EPOCH).to_pylist()
    rows = rows.drop_columns([KEY_EPOCH])
    out, start = [], 0
    for i in range(1, len(epoch) + 1):
        if i == len(epoch) or epoch[i] != epoch[start]:
            out.append((epoch[start].split(","), rows.slice(start, i - start)))
            start = i
    return out


def _drop_ts(tc: ch.TableChanges) -> int | None:
    """Commit ts of the DROP TABLE / DROP DATABASE that ended this table id in the range, if any."""
    return max((e.commit_ts for e in tc.events if e.job.type in (DROP_TABLE, DROP_VIEW, DROP_SCHEMA)), default=None)


def _after(rows: pa.Table, ts: int) -> pa.Table:
    """The rows committed after ``ts``."""
    return rows.filter(pc.greater(rows.column(ch.COMMIT_TS), ts)) if rows.num_rows else rows


def _latest_info(g: _Group) -> TableInfo | None:
    for tc in sorted(g.parts, key=lambda p: -max([0] + [s.schema_version for s in p.segments])):
        if tc.segments:
            return tc.segments[-1].table
        for e in reversed(tc.events):
            if e.table is not None:
                return e.table
    return None
