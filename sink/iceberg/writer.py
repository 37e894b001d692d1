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
   DROP TABLE keeps the mirror as ``<table>__dropped_<commit_ts>`` and the changelog as
   ``<table>__changelog_dropped_<commit_ts>`` (the name is free for a table created or renamed into
   it later, even in the same run). Renames and drops are recorded in the ``_binlake`` namespace
   (``sink.iceberg.lineage``): ``verify --ts T`` finds a table by what it was called at T.

Each table records ``binlake.to-ts`` in its properties in the same transaction, and every snapshot
carries the run markers. A table already at the run's ``to_ts`` is skipped, so re-running a range
is a no-op; the checkpoint (namespace ``_binlake``) advances only after every table committed.
With ``tag_runs`` each table's snapshot at the end of a run is tagged ``tidb-ts-<to_ts>``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.transforms import BucketTransform, DayTransform
from pyiceberg.types import IcebergType
from pyspark.sql import DataFrame, SparkSession

from sink.base import Sink, TableReport
from sink.errors import IncompatibleSchemaChange, SinkError
from sink.iceberg import lineage, tasks
from sink.iceberg import schema as ks
from sink.iceberg.lineage import META_NAMESPACE as META_NAMESPACE
from transform import changes as ch
from transform import failpoints
from transform.codec.model import TableInfo
from transform.history import DROP_SCHEMA, DROP_TABLE, DROP_VIEW, RENAME_TABLE, TRUNCATE_TABLE

CHANGELOG_SUFFIX = "__changelog"
_ENDING = (DROP_SCHEMA, DROP_TABLE, DROP_VIEW, TRUNCATE_TABLE)


TAG_PREFIX = "tidb-ts-"
DROPPED_INFIX = "_dropped_"
DEFAULT_MIRROR_BUCKETS = 16   # a new mirror is partitioned by bucket(16, first key column)
T = TypeVar("T")


class CheckpointError(SinkError):
    """The stored checkpoint is unreadable or belongs to another cluster."""


class ConcurrentRunError(SinkError):
    """Another run committed to the table while this one wrote it; this run leaves the table alone
    (its files are never committed), and a re-run takes only what the other did not."""


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


@dataclass
class _Written:
    """What a table's write tasks returned: new files, paths of the files they replace, row changes
    per op."""

    files: list[DataFile] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class _Prepared:
    """A table's files written ahead by the run's one changelog or mirror job, and what they assume:
    the transaction's schema, spec and start ts, and the table's snapshot (for a mirror, the one whose
    ``files`` it merged)."""

    schema: Schema
    spec_id: int
    since: int
    snapshot: int | None = None
    files: list[DataFile] = field(default_factory=list)
    written: _Written = field(default_factory=_Written)

    def matches(self, tbl: Table, tx: Transaction, since: int) -> bool:
        """True when ``tx`` on ``tbl`` is the transaction these files were written for."""
        meta, snap = tx.table_metadata, tbl.current_snapshot()
        return ((self.schema, self.spec_id, self.since, self.snapshot)
                == (meta.schema(), meta.default_spec_id, since, snap.snapshot_id if snap else None))


class IcebergSink(Sink):
    """Writes runs into a pyiceberg catalog (see the module doc)."""

    kind = "iceberg"

    def __init__(self, catalog: Catalog, tag_runs: bool = False, mirror_buckets: int = DEFAULT_MIRROR_BUCKETS,
                 table_buckets: Mapping[str, int] | None = None) -> None:
        self.catalog = catalog
        self.tag_runs = tag_runs
        self.mirror_buckets = mirror_buckets
        self.table_buckets = dict(table_buckets or {})
        self._commits = 0
        self._prepared: dict[str, _Prepared] = {}

    def _namespace(self, name: str) -> None:
        """Create the namespace unless it exists. pyiceberg's SQL catalog checks, then inserts: a drain
        racing this one can insert first, and the loser's insert fails on the catalog's unique key
        (it exists then, which is all this asks)."""
        try:
            self.catalog.create_namespace_if_not_exists(name)
        except Exception:
            if not self.catalog.namespace_exists(name):
                raise

    # -- checkpoint --------------------------------------------------------------------------

    def _meta(self) -> dict[str, str]:
        self._namespace(META_NAMESPACE)
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
        """A new changelog (partitioned by day of ``_tidb_commit_time``) or mirror (by a bucket of its
        first key column: a run rewrites only the buckets its keys fall in)."""
        self._namespace(ident[0])
        props = ks.table_properties(info, version)
        props["format-version"] = "2"
        if changelog:
            schema = ks.changelog_schema(info)
            day = schema.find_field(ch.COMMIT_TIME).field_id
            spec = PartitionSpec(PartitionField(day, 1000, DayTransform(), "commit_day"))
        else:
            schema = ks.mirror_schema(info)
            buckets = self.table_buckets.get(".".join(ident), self.mirror_buckets)
            spec = _bucket_spec(schema, ks.key_columns(info)[0], buckets)
        return self.catalog.create_table_if_not_exists(ident, schema, partition_spec=spec, properties=props)

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
        self._prepared = {**self._prepare_changelogs(run, groups), **self._prepare_mirrors(run, groups)}
        try:
            return [self._write_group(run, g) for g in _vacated_first(groups)]
        finally:
            self._prepared = {}

    def _prepare_changelogs(self, run: ch.RunBatch, groups: dict[tuple[str, str], _Group]
                            ) -> dict[str, _Prepared]:
        """The changelog files of every table that is one table id in the range and is not renamed,
        truncated or dropped in it, written by one Spark job:
        one pass over the run's frame instead of one per table. Each is written against the table
        metadata its commit will produce (the schema evolution staged in a transaction that is
        never committed); :meth:`_append_changelog` takes them when its transaction is that one
        (``_Prepared.matches``), and writes the table itself otherwise."""
        jobs: dict[int, tasks.ChangelogJob] = {}
        prepared: dict[str, _Prepared] = {}
        for (db, name), g in sorted(groups.items()):
            live = _single(g)
            if live is None or live.final is None:
                continue    # a lineage of several ids, a rename, a drop: the table's own job
            log_id = (db, name + CHANGELOG_SUFFIX)
            log = self._load(log_id) or self._create(log_id, live.final, _version(g), changelog=True)
            skip, since = self._progress(log, run)
            if skip:
                continue
            tx = log.transaction()
            if not _staged(tx, log, live.final, ks.CHANGELOG, g.events):
                continue
            meta, snap = tx.table_metadata, log.current_snapshot()
            key = ".".join(log_id)
            jobs[live.table_id] = tasks.ChangelogJob(_segment_map(g, live.final), since,
                                                     tasks.FileWriter(meta, dict(log.io.properties)), key)
            prepared[key] = _Prepared(meta.schema(), meta.default_spec_id, since, snap.snapshot_id if snap else None)
        frame = run.rows_of(set(jobs)) if jobs else None
        if frame is None:
            return {}
        for key, written in _collect(frame.mapInArrow(partial(tasks.write_changelogs, jobs),
                                                      tasks.TABLE_FILES_DDL)).items():
            prepared[key].written = written
        return prepared

    def _prepare_mirrors(self, run: ch.RunBatch, groups: dict[tuple[str, str], _Group]) -> dict[str, _Prepared]:
        """The mirror merges of the same tables as :meth:`_prepare_changelogs` (and not truncated,
        re-keyed or re-bucketed in the range), run as one Spark job: one pass over the run's frame
        routes every table's rows, one shuffle merges every table's buckets. Each is merged against
        the table's current snapshot and the metadata its commit will produce; :meth:`_merge_mirror`
        takes the result when its transaction is that one (``_Prepared.matches``)."""
        jobs: dict[str, tasks.MirrorJob] = {}
        prepared: dict[str, _Prepared] = {}
        for (db, name), g in sorted(groups.items()):
            live = _single(g)
            if live is None or live.final is None:
                continue
            mirror = self._load((db, name)) or self._create((db, name), live.final, _version(g), changelog=False)
            skip, since = self._progress(mirror, run)
            if (skip or self._reset_ts(g, live, mirror) is not None or _moving_bucket(mirror, live.final)
                    or ks.retypes(g.events)):
                continue   # a rewritten column's conversion may fail: such a table fails alone
            tx = mirror.transaction()
            if not _staged(tx, mirror, live.final, ks.MIRROR, g.events):
                continue
            job, files = self._mirror_job(mirror, g, live, live.final, since, None, None, tx)
            meta, snap = tx.table_metadata, mirror.current_snapshot()
            jobs[job.table] = job
            prepared[job.table] = _Prepared(meta.schema(), meta.default_spec_id, since,
                                            snap.snapshot_id if snap else None, files)
        if not jobs:
            return {}
        for key, written in _run_mirrors(run, jobs).items():
            prepared[key].written = written
        return prepared

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
        self._record_renames(g)
        live = g.live
        drop_ts = max((t for t in map(_drop_ts, g.parts) if t is not None), default=None) if live is None else None
        aside = (g.db, f"{g.name}{CHANGELOG_SUFFIX}{DROPPED_INFIX}{drop_ts}") if drop_ts is not None else None
        last_info = live.final if live else _latest_info(g)
        if last_info is None:  # dropped in the range with no row changes: only catalog operations
            self._finish_drop(run, mirror_id, log_id, aside, drop_ts)
            return report
        version = _version(g)
        log = ((self._load(aside) if aside else None) or self._load(log_id)
               or self._create(log_id, last_info, version, changelog=True))
        skip_log, since = self._progress(log, run)
        report.rows = {"I": 0, "U": 0, "D": 0}
        if not skip_log:
            counts = self._commit(log, run, last_info, version, ks.CHANGELOG, events,
                                  partial(self._append_changelog, log, run, g, last_info, since))
            report.rows.update(counts)
        if live is None:
            self._finish_drop(run, mirror_id, log_id, aside, drop_ts)
            report.skipped = skip_log
            return report
        mirror = self._load(mirror_id)
        mirror = mirror or self._create(mirror_id, last_info, version, changelog=False)
        skip_mirror, since = self._progress(mirror, run)
        if not skip_mirror:
            reset = self._reset_ts(g, live, mirror)
            if reset is not None and reset <= since and since > run.from_ts:
                reset = None  # a crashed run already emptied the mirror at that truncate
            respec = _moving_bucket(mirror, last_info)
            self._commit(mirror, run, last_info, version, ks.MIRROR, events,
                         partial(self._merge_mirror, mirror, run, g, live, last_info, since, reset, respec),
                         prepare=partial(_drop_bucket, mirror) if respec else None)
        report.skipped = skip_log if skip_log and skip_mirror else ""
        return report

    def _finish_drop(self, run: ch.RunBatch, mirror_id: tuple[str, str], log_id: tuple[str, str],
                     aside: tuple[str, str] | None, drop_ts: int | None) -> None:
        """DROP TABLE: the mirror is kept as ``<table>__dropped_<ts>`` (its snapshots still answer
        ``verify --ts`` before the drop) and the changelog as ``<table>__changelog_dropped_<ts>``, so
        the name is free for a table created later; the move is recorded (each step idempotent)."""
        mirror = self._load(mirror_id)
        if drop_ts is not None:
            kept = (mirror_id[0], lineage.dropped_mirror(mirror_id[1], drop_ts))
            if mirror is not None and not self._progress(mirror, run)[0] and self._load(kept) is None:
                self.catalog.rename_table(mirror_id, kept)
            if self._load(kept) is not None:
                self._record(lineage.Move(drop_ts, ".".join(mirror_id), ".".join(kept), lineage.DROP))
        elif mirror is not None and not self._progress(mirror, run)[0]:
            self.catalog.drop_table(mirror_id)
        if aside is not None and self._load(log_id) is not None and self._load(aside) is None:
            self.catalog.rename_table(log_id, aside)

    def _record(self, move: lineage.Move) -> None:
        """Record a rename or drop of a table's mirror in the ``_binlake`` namespace."""
        key, value = move.to_property()
        if self._meta().get(key) != value:
            self.catalog.update_namespace_properties(META_NAMESPACE, updates={key: value})

    def _record_renames(self, g: _Group) -> None:
        """Record each RENAME TABLE of the group's table ids: the name before it and the one after
        (the name before the next DDL of that id, or the group's name)."""
        for part in g.parts:
            events = sorted(part.events, key=lambda e: e.commit_ts)
            for i, e in enumerate(events):
                if e.job.type != RENAME_TABLE or not e.before:
                    continue
                after = next((n.before for n in events[i + 1:] if n.before), (g.db, g.name))
                if after != e.before:
                    self._record(lineage.Move(e.commit_ts, ".".join(e.before), ".".join(after), lineage.RENAME))

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
            self._namespace(dst[0])
            self.catalog.rename_table(src, dst)

    @staticmethod
    def _needs_backfill(tbl: Table, info: TableInfo, retyped: tuple[ks.Retype, ...] = ()) -> bool:
        """True when ``info`` adds (by column id) a column whose origin default is not NULL, or one
        that a DDL rewrote from a column the mirror holds (its rows take the converted values)."""
        if tbl.properties.get(ks.PROP_TABLE_ID) != str(info.id):
            return False
        old = ks.stored_columns(tbl.properties)
        return (any(str(c.id) not in old and ks.default_value(c).is_valid for c in info.columns)
                or bool(ks.retype_chains(old, info, retyped)))

    @staticmethod
    def _reset_ts(g: _Group, live: ch.TableChanges, mirror: Table) -> int | None:
        """Commit ts of the last TRUNCATE (or DROP of another id) the mirror must be emptied at."""
        ends = [e.commit_ts for p in g.parts for e in p.events if e.job.type in _ENDING]
        stored = mirror.properties.get(ks.PROP_TABLE_ID)
        if not ends and stored not in (None, str(live.table_id)) and mirror.current_snapshot() is not None:
            return 0  # the mirror holds another (ended) table id: start over
        return max(ends) if ends else None

    def _commit(self, tbl: Table, run: ch.RunBatch, info: TableInfo, version: int, kind: str,
                events: list[ch.DDLEvent], body: Callable[[Transaction], T],
                prepare: Callable[[Transaction], None] | None = None) -> T:
        """One transaction: ``prepare`` (a partition spec change), the schema evolution to ``info``,
        ``body`` (the data), the table's properties with ``binlake.to-ts``. Refused by the catalog
        when another run committed to the table since it was loaded (:class:`ConcurrentRunError`)."""
        try:
            with tbl.transaction() as tx:
                if prepare is not None:
                    prepare(tx)
                _evolve(tx, tbl, info, kind, events)
                result = body(tx)
                props = ks.table_properties(info, version)
                props[ks.PROP_TO_TS] = str(run.to_ts)
                tx.set_properties(props)
                failpoints.inject("sink-before-commit", ".".join(tbl.name()))
        except CommitFailedException as e:
            raise ConcurrentRunError(f"table {'.'.join(tbl.name())}: another run committed to it while this run "
                                     f"wrote ({run.from_ts}, {run.to_ts}]: concurrent run; nothing of this run was "
                                     f"committed to it, a re-run takes what is left ({e})") from e
        self._commits += 1
        failpoints.inject("sink-commit", self._commits)
        if self.tag_runs:
            self._tag(tbl.name(), run.to_ts)
        return result

    def _tag(self, ident: tuple[str, ...], to_ts: int) -> None:
        """Tag the table's current snapshot ``tidb-ts-<to_ts>`` (time travel by upstream ts)."""
        tbl = self.catalog.load_table(ident)
        name = f"{TAG_PREFIX}{to_ts}"
        snap = tbl.current_snapshot()
        if snap is not None and name not in tbl.metadata.refs:
            tbl.manage_snapshots().create_tag(snap.snapshot_id, name).commit()

    def _append_changelog(self, tbl: Table, run: ch.RunBatch, g: _Group, final: TableInfo, since: int,
                          tx: Transaction) -> dict[str, int]:
        """Executors write the group's changes after ``since`` as data files; they are appended in
        ``tx``. Returns the row changes per op."""
        meta = tx.table_metadata
        key = ".".join(tbl.name())
        ready = self._prepared.get(key)
        if ready is not None and ready.matches(tbl, tx, since):
            written = ready.written
        else:
            frame = run.rows_of({tc.table_id for tc in g.parts})
            if frame is None:
                return {}
            job = tasks.ChangelogJob(_segment_map(g, final), since, tasks.FileWriter(meta, dict(tbl.io.properties)),
                                     key)
            jobs = {tc.table_id: job for tc in g.parts}
            written = _collect(frame.mapInArrow(partial(tasks.write_changelogs, jobs),
                                                tasks.TABLE_FILES_DDL)).get(key, _Written())
        files, counts = written.files, written.counts
        if files:
            with tx.update_snapshot(snapshot_properties=run.markers()).fast_append() as append:
                for f in files:
                    append.append_data_file(f)
        return counts

    def _merge_mirror(self, tbl: Table, run: ch.RunBatch, g: _Group, live: ch.TableChanges, final: TableInfo,
                      since: int, reset: int | None, respec: int | None, tx: Transaction) -> None:
        """The live table's changes after ``since`` (and after a TRUNCATE at ``reset``) merged per key
        into the mirror, on the executors (``tasks.route_mirrors``/``merge_mirrors``; prepared for
        several tables at once by :meth:`_prepare_mirrors`); the replaced files go and the new ones
        come in ``tx``."""
        ready = self._prepared.get(".".join(tbl.name()))
        if ready is not None and reset is None and not respec and ready.matches(tbl, tx, since):
            files, written = ready.files, ready.written
        else:
            job, files = self._mirror_job(tbl, g, live, final, since, reset, respec, tx)
            written = _run_alone(run, job)
        new, replaced = written.files, set(written.removed)
        gone = files if reset is not None else [f for f in files if f.file_path in replaced]
        if not gone and not new:
            return
        snapshot = tx.update_snapshot(snapshot_properties=run.markers())
        if gone:
            with snapshot.overwrite() as overwrite:
                for f in gone:
                    overwrite.delete_data_file(f)
                for f in new:
                    overwrite.append_data_file(f)
        else:
            with snapshot.fast_append() as append:
                for f in new:
                    append.append_data_file(f)

    def _mirror_job(self, tbl: Table, g: _Group, live: ch.TableChanges, final: TableInfo, since: int,
                    reset: int | None, respec: int | None, tx: Transaction) -> tuple[tasks.MirrorJob, list[DataFile]]:
        """The merge of ``live``'s changes after ``since`` into ``tbl`` as ``tx`` will leave it (a
        bucket spec moved to the new first key column when ``respec``), and the table's files now."""
        keys = ks.key_columns(final)
        files = [t.file for t in tbl.scan().plan_files()] if tbl.current_snapshot() is not None else []
        retyped = ks.retypes(g.events)
        for chain in ks.retype_chains({str(r.old.id) for r in retyped}, final, retyped).values():
            for step in chain:
                step.check()
        segments = _segment_map(g, final, retyped)
        epoch_keys = {(tid, v): ",".join(_final_names(ks.key_columns(info), info, final))
                      for (tid, v), info in segments.tables.items() if tid == live.table_id}
        epochs = any(k != ",".join(keys) for k in epoch_keys.values())
        if respec:   # the key's first column changed: bucket the new one, rewriting the whole table here
            source = tx.table_metadata.schema().find_field(keys[0])
            if BucketTransform(respec).can_transform(source.field_type):
                with tx.update_spec() as update:
                    update.add_field(keys[0], BucketTransform(respec), f"{keys[0]}_bucket")
        buckets, bucket_type = _mirror_buckets(tx, keys[0]) if not (epochs or respec) else (1, None)
        spec_id = tx.table_metadata.spec().spec_id
        existing: dict[int, list[DataFile]] = {}
        if reset is None:
            for f in files:
                b = 0 if buckets == 1 else f.partition[0] if f.spec_id == spec_id else None
                if b is None:   # a file of an older spec: this run merges in one bucket
                    buckets, bucket_type = 1, None
                    existing = {0: files}
                    break
                existing.setdefault(b, []).append(f)
        same_table = tbl.properties.get(ks.PROP_TABLE_ID) == str(final.id)
        backfill = bool(existing) and self._needs_backfill(tbl, final, retyped)
        job = tasks.MirrorJob(
            segments=segments, live_id=live.table_id, after=max(since, reset) if reset is not None else since,
            keys=keys, buckets=buckets, bucket_type=bucket_type, epochs=epochs, backfill=backfill,
            existing={b: tasks.pack_files(fs) for b, fs in existing.items()}, old_metadata=tbl.metadata,
            old_map=ks.stored_columns(tbl.properties) if same_table else {},
            writer=tasks.FileWriter(tx.table_metadata, dict(tbl.io.properties)), epoch_keys=epoch_keys,
            table=".".join(tbl.name()))
        return job, files


def _evolve(tx: Transaction, tbl: Table, info: TableInfo, kind: str, events: list[ch.DDLEvent]) -> None:
    """The schema evolution of ``tbl`` to ``info`` in ``tx``."""
    ddl = "; ".join(e.job.query for e in events) or "(schema as of the run)"
    with tx.update_schema(allow_incompatible_changes=True) as update:
        ks.evolve_remove(update, tbl.schema(), tbl.properties, info, kind)
    with tx.update_schema() as update:
        ks.evolve_add(update, tx.table_metadata.schema(), tbl.properties, info, kind, ddl)


def _final_names(names: list[str], old: TableInfo, new: TableInfo) -> list[str]:
    """Column names of ``old`` as ``new`` calls them (by column id); hidden columns and columns
    ``new`` dropped keep their ``old`` name."""
    ids = {c.name: c.id for c in old.columns}
    out = []
    for n in names:
        col = new.column_by_id(ids[n]) if n in ids else None
        out.append(col.name if col is not None else n)
    return out


def _vacated_first(groups: dict[tuple[str, str], _Group]) -> list[_Group]:
    """The groups in name order, except that a group renamed away from a name is written before the
    group that takes the name in the same run (``RENAME TABLE a TO b`` then ``CREATE TABLE a``):
    the Iceberg tables of ``a`` must move before the new ``a``'s are created."""
    vacated_by: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for key, g in sorted(groups.items()):
        for e in g.events:
            if e.job.type == RENAME_TABLE and e.before and e.before != key:
                vacated_by.setdefault(e.before, []).append(key)
    order: list[_Group] = []
    done: set[tuple[str, str]] = set()

    def visit(key: tuple[str, str], path: set[tuple[str, str]]) -> None:
        if key in done or key in path:   # a cycle is a swap of names: _rename refuses it
            return
        path.add(key)
        for other in vacated_by.get(key, ()):
            visit(other, path)
        done.add(key)
        order.append(groups[key])

    for key in sorted(groups):
        visit(key, set())
    return order


def _drop_ts(tc: ch.TableChanges) -> int | None:
    """Commit ts of the DROP TABLE / DROP DATABASE that ended this table id in the range, if any."""
    return max((e.commit_ts for e in tc.events if e.job.type in (DROP_TABLE, DROP_VIEW, DROP_SCHEMA)), default=None)


def _segment_map(g: _Group, final: TableInfo, retyped: tuple[ks.Retype, ...] = ()) -> tasks.SegmentMap:
    """The TableInfo of every segment of the group; ids renamed into ``final``: the live ones and
    ``final``'s own (a dropped table's rows keep their names); ``retyped``: the rewritten columns
    whose values rows written before the rewrite carry into ``final`` (the mirror's, not the
    changelog's: the changelog keeps each change as it was written)."""
    tables = {(tc.table_id, s.schema_version): s.table for tc in g.parts for s in tc.segments}
    renamed = frozenset(tc.table_id for tc in g.parts if tc.final is not None or tc.table_id == final.id)
    return tasks.SegmentMap(final, tables, renamed, retyped)


def _mirror_buckets(tx: Transaction, first_key: str) -> tuple[int, IcebergType | None]:
    """(buckets the merge routes to, the Iceberg type they hash) for the mirror as ``tx`` leaves it:
    its bucket count when it buckets ``first_key``, else one bucket."""
    meta = tx.table_metadata
    source = meta.schema().find_field(first_key)
    bucket = next((f for f in meta.spec().fields if isinstance(f.transform, BucketTransform)), None)
    if bucket is None or bucket.source_id != source.field_id:
        return 1, None
    assert isinstance(bucket.transform, BucketTransform)
    return bucket.transform.num_buckets, source.field_type


def _bucket_field(tbl: Table) -> PartitionField | None:
    return next((f for f in tbl.spec().fields if isinstance(f.transform, BucketTransform)), None)


def _moving_bucket(tbl: Table, final: TableInfo) -> int | None:
    """The mirror's bucket count when its bucket column will not be ``final``'s first key column
    (ADD/DROP PRIMARY KEY moved the key; its column may be dropped): the spec then moves in the
    run's transaction. None when the spec stays."""
    bucket = _bucket_field(tbl)
    if bucket is None or not isinstance(bucket.transform, BucketTransform):
        return None
    source = tbl.schema().find_column_name(bucket.source_id)
    first = ks.key_columns(final)[0]
    if first == ch.ROWID:
        keeps = source == ch.ROWID
    else:
        stored = ks.stored_columns(tbl.properties) if tbl.properties.get(ks.PROP_TABLE_ID) == str(final.id) else {}
        col = next(c for c in final.columns if c.name == first)
        keeps = stored.get(str(col.id), first) == source
    return None if keeps else bucket.transform.num_buckets


def _drop_bucket(tbl: Table, tx: Transaction) -> None:
    """Remove the mirror's bucket field before the schema evolution (which may drop its column)."""
    bucket = _bucket_field(tbl)
    if bucket is not None:
        with tx.update_spec() as update:
            update.remove_field(bucket.name)


def _bucket_spec(schema: Schema, column: str, buckets: int) -> PartitionSpec:
    """``bucket(buckets, column)``, or no partitioning for one bucket or a type Iceberg cannot bucket."""
    source = schema.find_field(column)
    if buckets <= 1 or not BucketTransform(buckets).can_transform(source.field_type):
        return UNPARTITIONED_PARTITION_SPEC
    return PartitionSpec(PartitionField(source.field_id, 1000, BucketTransform(buckets), f"{column}_bucket"))


def _collect(frame: DataFrame) -> dict[str, _Written]:
    """What write tasks returned (``TABLE_FILES_DDL``), per table they name."""
    out: dict[str, _Written] = {}
    for r in frame.toArrow().to_pylist():
        w = out.setdefault(r["table"], _Written())
        w.files.extend(tasks.unpack_files(r["files"]))
        w.removed.extend(tasks.unpack_paths(r["removed"]))
        if r["op"]:
            w.counts[r["op"]] = w.counts.get(r["op"], 0) + r["rows"]
    return out


def _run_mirrors(run: ch.RunBatch, jobs: Mapping[str, tasks.MirrorJob]) -> dict[str, _Written]:
    """Every job's merge in one Spark job (``jobs`` by mirror name): the run's rows routed per
    (mirror, key bucket), each bucket merged by one task (a task takes several when the cluster has
    fewer task slots than buckets)."""
    pieces: list[DataFrame] = []
    frame = run.rows_of({j.live_id for j in jobs.values()})
    if frame is not None:
        routes = {j.live_id: j for j in jobs.values()}
        pieces.append(frame.mapInArrow(partial(tasks.route_mirrors, routes), tasks.MIRROR_ROUTED_DDL))
    # buckets whose files are rewritten without a change in them
    idle = [(name, b, b"") for name, j in jobs.items() if j.backfill or (j.epochs and j.existing) for b in j.existing]
    if idle:
        pieces.append(_spark().createDataFrame(idle, tasks.MIRROR_ROUTED_DDL))
    if not pieces:
        return {}
    routed = pieces[0] if len(pieces) == 1 else pieces[0].unionByName(pieces[1])
    slots = max(1, min(sum(j.buckets for j in jobs.values()), _spark().sparkContext.defaultParallelism))
    merged = routed.repartition(slots, "table", "bucket").mapInArrow(partial(tasks.merge_mirrors, dict(jobs)),
                                                                     tasks.TABLE_FILES_DDL)
    return _collect(merged)


def _run_alone(run: ch.RunBatch, job: tasks.MirrorJob) -> _Written:
    """One mirror's merge (:func:`_run_mirrors`); a rewritten column's value the executors could not
    convert fails the table with the :class:`IncompatibleSchemaChange` they raised."""
    try:
        return _run_mirrors(run, {job.table: job}).get(job.table, _Written())
    except Exception as e:
        marker = f"{IncompatibleSchemaChange.__name__}: "
        text = str(e)
        if not job.segments.retypes or marker not in text:
            raise
        raise IncompatibleSchemaChange(f"table {job.table}: {text.split(marker, 1)[1].splitlines()[0]}") from e


def _staged(tx: Transaction, tbl: Table, info: TableInfo, kind: str, events: list[ch.DDLEvent]) -> bool:
    """``_evolve`` in a transaction that is never committed; False when the evolution fails (the
    table's own commit runs it again and reports the error in its turn, after the tables before it)."""
    try:
        _evolve(tx, tbl, info, kind, events)
    except Exception:  # noqa: BLE001 (any error: this table is simply not prepared)
        return False
    return True


def _single(g: _Group) -> ch.TableChanges | None:
    """The group's one table id when it has row changes and is not renamed, truncated or dropped in
    the range (what the run's one changelog job and one mirror job take), else None."""
    live = g.live
    if (len(g.parts) != 1 or live is None or live.final is None or not live.segments
            or any(e.job.type in (*_ENDING, RENAME_TABLE) for e in g.events)):
        return None
    return live


def _version(g: _Group) -> int:
    """The newest schema version of the group's rows and DDL."""
    versions = [s.schema_version for p in g.parts for s in p.segments] + [e.job.binlog.schema_version for e in g.events]
    return max(versions, default=0)


def _spark() -> SparkSession:
    spark = SparkSession.getActiveSession()
    if spark is None:
        raise SinkError("the Iceberg sink writes on Spark executors: no active Spark session")
    return spark


def _latest_info(g: _Group) -> TableInfo | None:
    for tc in sorted(g.parts, key=lambda p: -max([0] + [s.schema_version for s in p.segments])):
        if tc.segments:
            return tc.segments[-1].table
        for e in reversed(tc.events):
            if e.table is not None:
                return e.table
    return None
