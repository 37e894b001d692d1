"""Maintenance of the Iceberg tables a drain writes (``binlake maintain``), table by table, in three steps:

1. **Expire snapshots.** Tags ``tidb-ts-<ts>`` (``--tag-runs``) whose upstream time (a TSO's physical
   part, ``ts >> 18`` ms since the epoch) is older than the tag retention are removed; then every
   snapshot older than the retention goes, except the current one and those a remaining ref (a kept
   tag, a branch) points at. One transaction per table, refused when a drain committed meanwhile.
2. **Compact small files** of the current snapshot on Spark executors. Per partition of the table's
   current spec, data files below 3/4 of the target size (the table's ``write.target-file-size-
   bytes``, else :data:`DEFAULT_TARGET_FILE_BYTES`) are packed in snapshot order into groups of at
   most the target size; every group of two files or more is read and rewritten as one file by one
   Spark task (changelog rows sorted by ``(_tidb_commit_ts, _tidb_seq)``). A data file whose
   position deletes (a merge-on-read mirror's) remove :data:`DELETED_FRACTION` of its rows or more
   joins the groups whatever its size and spec, and is read through its deletes; a delete file that
   applied only to rewritten files (or to no live file) goes, and a partition's remaining delete
   files become one. The driver commits one overwrite per table whose snapshot carries the replaced
   snapshot's ``binlake.*`` markers (so ``verify`` and time travel by upstream ts find it as the
   state at the same ``to-ts``) plus ``binlake.maintenance = compact``; the table's properties are
   not touched. A drain that committed to the table since it was read wins: the table is reported
   skipped and the files written for it are deleted.
3. **Remove orphan files**: files under the table's location older than the orphan age that no
   snapshot, manifest list, manifest, metadata file of the log or statistics file of any table whose
   location overlaps it references (a changelog kept as ``…__changelog_dropped_<ts>`` shares its
   directory with the new ``…__changelog``).

The steps run on every table of the upstream's namespaces and on ``_binlake.ddl_history`` (the
DDL history a drain appends to, a small file per run with DDL, which every drain and restore reads
whole); with ``--tables``, only on those tables' mirrors and changelogs.

A dry run computes the same plan against the tables as they are and changes nothing.
"""
from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
from pyarrow.fs import FileSelector, FileSystem, FileType
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import ArrowScan, PyArrowFileIO
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent, ManifestEntry
from pyiceberg.table import FileScanTask, Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import (
    AssertRefSnapshotId,
    RemoveSnapshotRefUpdate,
    RemoveSnapshotsUpdate,
    TableRequirement,
    TableUpdate,
    UpdatesAndRequirements,
    UpdateTableMetadata,
)
from pyspark.sql import SparkSession

from sink.changelog import CHANGELOG_SUFFIX, DROPPED_INFIX, TAG_PREFIX
from sink.errors import SinkError
from sink.iceberg import position_deletes, tasks
from sink.iceberg import schema as ks
from sink.iceberg.catalog import table_or_none
from sink.iceberg.ddl_history import TABLE as DDL_HISTORY
from sink.iceberg.lineage import META_NAMESPACE, MIRROR_DROPPED_INFIX
from sink.iceberg.pyiceberg_adapter import commit_files
from sink.lake import MaintainOptions
from transform import changes as ch
from transform import failpoints

DEFAULT_TARGET_FILE_BYTES = 128 << 20    # compaction target when the table sets no write.target-file-size-bytes
SMALL_FRACTION = 0.75                    # a data file below this share of the target is small
DELETED_FRACTION = 0.2                   # a data file whose deletes remove this share of its rows is rewritten
MAINTENANCE = "binlake.maintenance"      # snapshot summary key of a compaction snapshot
MARKER_PREFIX = "binlake."
TSO_PHYSICAL_SHIFT = 18


class MaintainError(SinkError):
    """Maintenance could not run: an unknown table was asked for, or a rewrite lost rows (a bug)."""


@dataclass
class TableMaintenance:
    """What maintenance did (or, in a dry run, would do) to one table."""

    table: str
    snapshots_before: int = 0
    snapshots_expired: int = 0
    tags_removed: list[str] = field(default_factory=list)
    files_before: int = 0          # data files of the current snapshot before compaction
    files_after: int = 0           # … and after it (planned: one file per rewritten group)
    files_rewritten: int = 0
    files_written: int = 0
    bytes_rewritten: int = 0
    bytes_written: int = 0
    groups: int = 0                # partition groups rewritten (one Spark task each)
    delete_files_folded: int = 0   # position delete files gone with the data files rewritten through them
    delete_files_merged: int = 0   # position delete files merged into one per data file
    orphans_removed: int = 0
    orphan_bytes: int = 0
    orphans_young: int = 0         # unreferenced files kept: younger than the orphan age
    orphan_paths: list[str] = field(default_factory=list)
    skipped: str = ""              # why a step left the table alone ("" when every step ran)
    notes: list[str] = field(default_factory=list)

    def skip(self, why: str) -> None:
        """Record why a step left the table alone."""
        self.skipped = f"{self.skipped}; {why}" if self.skipped else why

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {"table": self.table, "skipped": self.skipped, "notes": list(self.notes),
                "expire": {"snapshots_before": self.snapshots_before, "snapshots_expired": self.snapshots_expired,
                           "tags_removed": list(self.tags_removed)},
                "compact": {"files_before": self.files_before, "files_after": self.files_after,
                            "files_rewritten": self.files_rewritten, "files_written": self.files_written,
                            "bytes_rewritten": self.bytes_rewritten, "bytes_written": self.bytes_written,
                            "groups": self.groups, "delete_files_folded": self.delete_files_folded,
                            "delete_files_merged": self.delete_files_merged},
                "orphans": {"removed": self.orphans_removed, "bytes": self.orphan_bytes,
                            "kept_young": self.orphans_young, "paths": list(self.orphan_paths)}}

    def format(self, dry_run: bool = False) -> str:
        """One line per table (plus its notes), as the command prints it."""
        verb = "would " if dry_run else ""
        tags = f", {verb}remove {len(self.tags_removed)} tag(s)" if self.tags_removed else ""
        line = (f"  {self.table}: {verb}expire {self.snapshots_expired} of {self.snapshots_before} snapshot(s)"
                f"{tags}; data files {self.files_before} -> {self.files_after} ({self.files_rewritten} in "
                f"{self.groups} group(s), {self.bytes_rewritten} bytes rewritten, {self.delete_files_folded} "
                f"delete file(s) folded, {self.delete_files_merged} merged); {verb}remove "
                f"{self.orphans_removed} orphan file(s) ({self.orphan_bytes} bytes, {self.orphans_young} younger "
                f"kept)")
        extra = [f"    skipped: {self.skipped}"] if self.skipped else []
        return "\n".join([line, *extra, *(f"    - {n}" for n in self.notes)])


@dataclass
class MaintainReport:
    """Every maintained table; ``dry_run`` when nothing was changed."""

    options: MaintainOptions
    now_ms: int
    tables: list[TableMaintenance] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        o = self.options
        return {"dry_run": o.dry_run, "now_ms": self.now_ms, "retention_ms": o.retention_ms,
                "tag_retention_ms": o.tag_retention_ms, "orphan_age_ms": o.orphan_age_ms,
                "tables": [t.to_json() for t in self.tables]}


# ---------------------------------------------------------------------------------------------
# which tables

def _is_binlake_name(name: str, table: str) -> bool:
    """True when Iceberg table ``name`` belongs to upstream table ``table``:
    its mirror, its changelog or a dropped mirror or changelog kept under ``…__dropped_<ts>`` or
    ``…__changelog_dropped_<ts>``."""
    n, t = name.lower(), table.lower()
    log = t + CHANGELOG_SUFFIX
    return n in (t, log) or n.startswith(log + DROPPED_INFIX) or n.startswith(t + MIRROR_DROPPED_INFIX)


def binlake_tables(catalog: Catalog, wanted: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    """Every table of the catalog outside the ``_binlake`` namespace (sorted), or only the mirrors and
    changelogs of the ``wanted`` upstream tables; :class:`MaintainError` for a wanted one absent."""
    found: list[tuple[str, str]] = []
    for ns in catalog.list_namespaces():
        if len(ns) != 1 or ns[0] == META_NAMESPACE:
            continue
        found.extend((ns[0], ident[-1]) for ident in catalog.list_tables(ns))
    found.sort()
    if not wanted:
        return found
    out = [t for t in found if any(t[0].lower() == d.lower() and _is_binlake_name(t[1], n) for d, n in wanted)]
    missing = [f"{d}.{n}" for d, n in wanted
               if not any(t[0].lower() == d.lower() and _is_binlake_name(t[1], n) for t in out)]
    if missing:
        raise MaintainError(f"--tables: no Iceberg table of {', '.join(missing)} in the catalog")
    return out


# ---------------------------------------------------------------------------------------------
# 1. expire snapshots

def tag_time_ms(name: str) -> int | None:
    """The upstream time (ms since the epoch) of a ``tidb-ts-<ts>`` tag; None for another name."""
    if not name.startswith(TAG_PREFIX):
        return None
    digits = name[len(TAG_PREFIX):]
    return int(digits) >> TSO_PHYSICAL_SHIFT if digits.isdigit() else None


class _Expiry(UpdateTableMetadata["_Expiry"]):
    """Removes refs and snapshots in one update, only while ``main`` is still at ``current``."""

    def __init__(self, transaction: Transaction, tags: list[str], snapshot_ids: list[int], current: int) -> None:
        super().__init__(transaction)
        self.tags, self.snapshot_ids, self.current = tags, snapshot_ids, current

    def _commit(self) -> UpdatesAndRequirements:
        updates: tuple[TableUpdate, ...] = tuple(RemoveSnapshotRefUpdate(ref_name=t) for t in self.tags)
        if self.snapshot_ids:
            updates += (RemoveSnapshotsUpdate(snapshot_ids=self.snapshot_ids),)
        requirements: tuple[TableRequirement, ...] = (AssertRefSnapshotId(snapshot_id=self.current, ref=MAIN_BRANCH),)
        return updates, requirements


def expire_snapshots(tbl: Table, options: MaintainOptions, now_ms: int, result: TableMaintenance) -> Table:
    """Step 1 on ``tbl`` (see the module doc); returns the table as it is afterwards."""
    meta = tbl.metadata
    result.snapshots_before = len(meta.snapshots)
    current = meta.current_snapshot_id
    if current is None:
        return tbl
    tag_cutoff = now_ms - options.tag_retention_ms
    old_tags = sorted(name for name, ref in meta.refs.items()
                      if ref.snapshot_ref_type == SnapshotRefType.TAG
                      and (t := tag_time_ms(name)) is not None and t < tag_cutoff)
    protected = {ref.snapshot_id for name, ref in meta.refs.items() if name not in old_tags} | {current}
    cutoff = now_ms - options.retention_ms
    expire = sorted(s.snapshot_id for s in meta.snapshots if s.timestamp_ms < cutoff and s.snapshot_id not in protected)
    result.tags_removed, result.snapshots_expired = old_tags, len(expire)
    if options.dry_run or not (old_tags or expire):
        return tbl
    try:
        with tbl.transaction() as tx:
            _Expiry(tx, old_tags, expire, current).commit()
    except (CommitFailedException, ValueError) as e:   # ValueError: a snapshot another process removed
        result.tags_removed, result.snapshots_expired = [], 0
        result.skip(f"expiry: a drain committed to the table meanwhile; nothing expired ({e})")
    return tbl.refresh()


# ---------------------------------------------------------------------------------------------
# 2. compaction

def target_file_bytes(tbl: Table) -> int:
    """The compaction target: the table's ``write.target-file-size-bytes``, else the default."""
    raw = tbl.properties.get(TableProperties.WRITE_TARGET_FILE_SIZE_BYTES)
    try:
        value = int(raw) if raw is not None else DEFAULT_TARGET_FILE_BYTES
    except ValueError:
        value = DEFAULT_TARGET_FILE_BYTES
    return value if value > 0 else DEFAULT_TARGET_FILE_BYTES


@dataclass(frozen=True)
class Live:
    """A snapshot's live files: data file entries, delete files, and which delete files apply to which
    data file (as readers match them)."""

    entries: list[ManifestEntry]
    deletes: list[DataFile]
    applied: dict[str, list[DataFile]]   # data file path → its delete files

    def applies_to(self) -> dict[str, set[str]]:
        """Delete file path → the data file paths it applies to (none: it deletes nothing live)."""
        out: dict[str, set[str]] = {d.file_path: set() for d in self.deletes}
        for path, ds in self.applied.items():
            for d in ds:
                out.setdefault(d.file_path, set()).add(path)
        return out


def _live(tbl: Table, snapshot: Snapshot) -> Live:
    """The live files of ``snapshot``."""
    entries: list[ManifestEntry] = []
    deletes: list[DataFile] = []
    for manifest in snapshot.manifests(tbl.io):
        live = manifest.fetch_manifest_entry(tbl.io, discard_deleted=True)
        if manifest.content == ManifestContent.DATA:
            entries.extend(live)
        else:
            deletes.extend(e.data_file for e in live)
    applied = {t.file.file_path: list(t.delete_files)
               for t in tbl.scan(snapshot_id=snapshot.snapshot_id).plan_files() if t.delete_files} if deletes else {}
    return Live(entries, deletes, applied)


@dataclass(frozen=True)
class CompactionPlan:
    """One table's compaction: the groups of its current snapshot's data files to rewrite, one file
    per group (small files, and files whose position deletes passed the threshold, read through
    them); the delete files that go (they applied to rewritten files only, or to none); and per
    partition the delete files that remain, to be merged into one where there are several."""

    snapshot: Snapshot | None
    files: int                                   # data files of the snapshot
    groups: list[tuple[str, list[DataFile]]]     # (partition path, the group's files)
    live: Live | None = None
    gone_deletes: list[DataFile] = field(default_factory=list)
    merges: list[list[DataFile]] = field(default_factory=list)   # per partition: delete files that become one
    positions: dict[str, pa.Array] = field(default_factory=dict)  # data file path → its deleted positions
    note: str = ""

    def deletes_of(self, files: Iterable[DataFile]) -> list[DataFile]:
        """The distinct delete files that apply to ``files``."""
        applied = self.live.applied if self.live is not None else {}
        out = {d.file_path: d for f in files for d in applied.get(f.file_path, ())}
        return list(out.values())


def plan_compaction(tbl: Table) -> CompactionPlan:
    """The compaction of ``tbl`` (step 2 of the module doc), without writing anything but reading the
    position delete files."""
    snapshot = tbl.current_snapshot()
    if snapshot is None:
        return CompactionPlan(None, 0, [])
    live = _live(tbl, snapshot)
    entries = live.entries
    if any(d.content != DataFileContent.POSITION_DELETES for d in live.deletes):
        return CompactionPlan(snapshot, len(entries), [], note="not compacted: the table has equality deletes "
                                                               "(binlake writes none; compaction does not apply them)")
    positions = position_deletes.read(tbl.io, live.deletes)
    target = target_file_bytes(tbl)
    small = int(target * SMALL_FRACTION)
    spec = tbl.spec()
    by_partition: dict[Any, list[ManifestEntry]] = {}
    older_spec = 0
    for e in entries:
        f = e.data_file
        folded = len(positions.get(f.file_path, ())) >= max(1, f.record_count * DELETED_FRACTION)
        if f.spec_id != spec.spec_id and not folded:
            older_spec += 1
        elif f.file_size_in_bytes < small or folded:
            by_partition.setdefault((f.spec_id, f.partition), []).append(e)
    groups: list[tuple[str, list[DataFile]]] = []
    for (spec_id, partition), members in by_partition.items():
        members.sort(key=lambda e: (e.sequence_number or 0, e.data_file.file_path))   # the order runs wrote them
        where = spec.partition_to_path(partition, tbl.schema()) if spec.fields and spec_id == spec.spec_id else ""
        current: list[DataFile] = []
        size = 0
        for e in members:
            f = e.data_file
            if current and size + f.file_size_in_bytes > target:
                groups.append((where, current))
                current, size = [], 0
            current.append(f)
            size += f.file_size_in_bytes
        groups.append((where, current))
    groups = [(w, g) for w, g in groups if len(g) >= 2 or any(f.file_path in positions for f in g)]
    rewritten = {f.file_path for _, g in groups for f in g}
    applies = live.applies_to()
    by_path = {d.file_path: d for d in live.deletes}
    gone = [by_path[p] for p, targets in applies.items() if targets <= rewritten]
    kept: dict[tuple[int, Any], list[DataFile]] = {}
    for p, targets in applies.items():
        if not targets <= rewritten:
            d = by_path[p]
            kept.setdefault((d.spec_id, d.partition), []).append(d)
    note = f"{older_spec} file(s) of an older partition spec left as they are" if older_spec else ""
    return CompactionPlan(snapshot, len(entries), groups, live, gone, [g for g in kept.values() if len(g) > 1],
                          positions, note)


@dataclass(frozen=True)
class CompactJob:
    """What a compaction task needs: the table's metadata (schema, spec, location), its FileIO
    properties and the sort order of its rows (the changelog's commit order; none for a mirror)."""

    metadata: TableMetadata
    io_properties: dict[str, str]
    order: tuple[tuple[str, str], ...] = ()

    def one_file_writer(self, rows: pa.Table) -> tasks.FileWriter:
        """A writer that writes ``rows`` as one file (a group is at most the target size on disk)."""
        props = dict(self.metadata.properties)
        props[TableProperties.WRITE_TARGET_FILE_SIZE_BYTES] = str(max(rows.nbytes, 1) * 2)
        return tasks.FileWriter(self.metadata.model_copy(update={"properties": props}), self.io_properties)


def compact_groups(job: CompactJob, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: each group (``bucket`` = its number, ``data`` = its packed data and delete
    files) read through its deletes and written again as one file (``FILES_SCHEMA`` out: the new
    files, the replaced paths, the row count)."""
    io = load_file_io(job.io_properties, job.metadata.location)
    schema = job.metadata.schema()
    scan = ArrowScan(job.metadata, io, schema, AlwaysTrue())
    for rb in batches:
        for data in rb.column("data").to_pylist():
            packed = tasks.unpack_files(data)
            files = [f for f in packed if not position_deletes.is_delete(f)]
            gone = {d for d in packed if position_deletes.is_delete(d)}
            rows = ks.conform(scan.to_table([FileScanTask(f, delete_files=gone) for f in files]), schema)
            if job.order:
                rows = rows.sort_by(list(job.order))
            new = job.one_file_writer(rows).write(rows)
            yield pa.RecordBatch.from_pylist(
                [{"files": tasks.pack_files(new), "removed": pickle.dumps([f.file_path for f in files]),
                  "op": "", "rows": rows.num_rows}], schema=tasks.FILES_SCHEMA)


def _sort_order(tbl: Table) -> tuple[tuple[str, str], ...]:
    names = {f.name for f in tbl.schema().fields}
    return tuple(ch.ORDER) if {ch.COMMIT_TS, ch.SEQ} <= names else ()


def _markers(snapshot: Snapshot) -> dict[str, str]:
    """The ``binlake.*`` summary properties of ``snapshot``, and the compaction marker."""
    props = snapshot.summary.additional_properties if snapshot.summary is not None else {}
    out = {k: str(v) for k, v in props.items() if k.startswith(MARKER_PREFIX) and k != MAINTENANCE}
    out[MAINTENANCE] = "compact"
    return out


def _delete_quietly(tbl: Table, files: Iterable[DataFile]) -> None:
    for f in files:
        try:
            tbl.io.delete(f.file_path)
        except OSError:
            pass   # left for orphan removal


def compact(tbl: Table, spark: Callable[[], SparkSession], options: MaintainOptions,
            result: TableMaintenance) -> Table:
    """Step 2 on ``tbl`` (see the module doc); returns the table as it is afterwards."""
    plan = plan_compaction(tbl)
    result.files_before = result.files_after = plan.files
    if plan.note:
        result.notes.append(plan.note)
    if plan.snapshot is None or not (plan.groups or plan.gone_deletes or plan.merges):
        return tbl
    old = [f for _, g in plan.groups for f in g]
    result.groups, result.files_rewritten = len(plan.groups), len(old)
    result.bytes_rewritten = sum(f.file_size_in_bytes for f in old)
    result.delete_files_folded = len(plan.gone_deletes)
    result.delete_files_merged = sum(len(g) for g in plan.merges)
    if options.dry_run:
        result.files_after = plan.files - len(old) + len(plan.groups)
        return tbl
    new: list[DataFile] = []
    try:
        if plan.groups:
            new.extend(_rewrite_groups(tbl, spark, plan, old))
        rewritten = {f.file_path for f in old}
        applies = plan.live.applies_to() if plan.live is not None else {}
        for group in plan.merges:
            named = {p for d in group for p in applies.get(d.file_path, ())} - rewritten
            kept = {p: plan.positions[p] for p in named if p in plan.positions}
            if kept:
                new.append(position_deletes.write(tbl.io, kept, group[0]))
        removed = old + plan.gone_deletes + [d for g in plan.merges for d in g]
        with tbl.transaction() as tx:
            commit_files(tx, _markers(plan.snapshot), new, removed)
            failpoints.inject("maintain-before-commit", ".".join(tbl.name()))
    except CommitFailedException as e:
        _delete_quietly(tbl, new)
        result.groups = result.files_rewritten = result.bytes_rewritten = 0
        result.delete_files_folded = result.delete_files_merged = 0
        result.skip(f"compaction: a drain committed to the table while it was rewritten; nothing of the "
                    f"compaction was committed, run maintain again ({e})")
        return tbl.refresh()
    except Exception:
        _delete_quietly(tbl, new)   # not committed: its files go now rather than as orphans later
        raise
    written = [f for f in new if not position_deletes.is_delete(f)]
    result.files_written, result.bytes_written = len(written), sum(f.file_size_in_bytes for f in written)
    tbl = tbl.refresh()
    snapshot = tbl.current_snapshot()
    result.files_after = len(_live(tbl, snapshot).entries) if snapshot is not None else 0
    return tbl


def _rewrite_groups(tbl: Table, spark: Callable[[], SparkSession], plan: CompactionPlan, old: list[DataFile]
                    ) -> list[DataFile]:
    """The plan's groups rewritten on Spark executors, one file each; MaintainError (its files
    deleted) when the rewrite did not give every row the group's files hold through their deletes."""
    session = spark()
    rows = [(i, tasks.pack_files(g + plan.deletes_of(g))) for i, (_, g) in enumerate(plan.groups)]
    job = CompactJob(tbl.metadata, dict(tbl.io.properties), _sort_order(tbl))
    frame = session.createDataFrame(session.sparkContext.parallelize(rows, len(rows)), tasks.ROUTED_DDL)
    new: list[DataFile] = []
    removed: set[str] = set()
    rewritten_rows = 0
    for r in frame.mapInArrow(partial(compact_groups, job), tasks.FILES_DDL).toArrow().to_pylist():
        new.extend(tasks.unpack_files(r["files"]))
        removed.update(tasks.unpack_paths(r["removed"]))
        rewritten_rows += r["rows"]
    expected = sum(f.record_count - len(plan.positions.get(f.file_path, ())) for f in old)
    if removed != {f.file_path for f in old} or sum(f.record_count for f in new) != rewritten_rows \
            or rewritten_rows != expected:
        _delete_quietly(tbl, new)
        raise MaintainError(f"table {'.'.join(tbl.name())}: the compaction rewrote {rewritten_rows} of {expected} "
                            f"rows; nothing was committed")
    return new


# ---------------------------------------------------------------------------------------------
# 3. orphan files

def _fs_path(location: str) -> str:
    """A location as its pyarrow filesystem sees it (``file:///a/b`` → ``/a/b``, ``s3://b/k`` → ``b/k``)."""
    return PyArrowFileIO.parse_location(location)[2].rstrip("/")


def referenced_files(tbl: Table) -> set[str]:
    """Every file ``tbl``'s metadata references (filesystem paths): metadata files of the log,
    statistics files, and per snapshot its manifest list, manifests and their live data/delete files."""
    meta = tbl.metadata
    out = {tbl.metadata_location, *(e.metadata_file for e in meta.metadata_log)}
    out.update(s.statistics_path for s in meta.statistics)
    out.update(s.statistics_path for s in meta.partition_statistics)
    seen: set[str] = set()
    for snapshot in meta.snapshots:
        out.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(tbl.io):
            out.add(manifest.manifest_path)
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            out.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True))
    return {_fs_path(p) for p in out}


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def remove_orphans(tbl: Table, neighbours: Sequence[Table], options: MaintainOptions, now_ms: int,
                   result: TableMaintenance) -> None:
    """Step 3 on ``tbl``: unreferenced files under its location older than the orphan age go.
    ``neighbours``, other tables whose location overlaps ``tbl``'s, reference files too."""
    root = _fs_path(tbl.location())
    referenced = referenced_files(tbl)
    for other in neighbours:
        referenced |= referenced_files(other)
    io = PyArrowFileIO(dict(tbl.io.properties))
    scheme, netloc, _ = PyArrowFileIO.parse_location(tbl.location())
    fs: FileSystem = io.fs_by_scheme(scheme, netloc)
    listed = [i for i in fs.get_file_info(FileSelector(root, recursive=True, allow_not_found=True))
              if i.type == FileType.File]
    if _fs_path(tbl.metadata_location) not in {i.path.rstrip("/") for i in listed}:
        # the listing and the metadata do not spell paths alike (or the metadata lives elsewhere):
        # every file would look unreferenced, so nothing is removed
        result.notes.append(f"orphan files not looked for: the current metadata file is not among the files "
                            f"listed under {tbl.location()}")
        return
    cutoff_ns = (now_ms - options.orphan_age_ms) * 1_000_000
    for info in listed:
        if info.path.rstrip("/") in referenced:
            continue
        if info.mtime_ns is None or info.mtime_ns >= cutoff_ns:
            result.orphans_young += 1
            continue
        if not options.dry_run:
            fs.delete_file(info.path)
        result.orphans_removed += 1
        result.orphan_bytes += info.size or 0
        result.orphan_paths.append(info.path)


# ---------------------------------------------------------------------------------------------
# all steps

def maintain(catalog: Catalog, spark: Callable[[], SparkSession], options: MaintainOptions,
             tables: Sequence[tuple[str, str]] = (),
             progress: Callable[[TableMaintenance], None] | None = None) -> MaintainReport:
    """The three steps on every binlake table of ``catalog`` (or the mirrors and changelogs of the
    upstream ``tables``); ``spark()`` gives the session compaction runs on (asked only when there is
    something to rewrite); ``progress`` receives each table's result when it is done."""
    now_ms = options.now_ms if options.now_ms is not None else int(time.time() * 1000)
    report = MaintainReport(options, now_ms)
    names: list[tuple[str, ...]] = list(binlake_tables(catalog, tables))
    if not tables:
        names.append(DDL_HISTORY)
    locations = _locations(catalog)
    for ident in names:
        tbl = table_or_none(catalog, ident)
        if tbl is None:
            continue   # dropped by a drain since the listing
        result = TableMaintenance(".".join(ident))
        tbl = expire_snapshots(tbl, options, now_ms, result)
        tbl = compact(tbl, spark, options, result)
        root = _fs_path(tbl.location())
        neighbours = [table_or_none(catalog, other) for other, where in locations.items()
                      if other != ident and _overlaps(where, root)]
        remove_orphans(tbl, [t for t in neighbours if t is not None], options, now_ms, result)
        report.tables.append(result)
        if progress is not None:
            progress(result)
    return report


def _locations(catalog: Catalog) -> dict[tuple[str, ...], str]:
    """The location (filesystem path) of every table of the catalog's namespaces (binlake's are one level)."""
    out: dict[tuple[str, ...], str] = {}
    for ns in catalog.list_namespaces():
        for ident in catalog.list_tables(ns):
            tbl = table_or_none(catalog, ident)
            if tbl is not None:
                out[tuple(ident)] = _fs_path(tbl.location())
    return out
