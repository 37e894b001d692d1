"""The Parquet sink: the changelog of every upstream table as plain Parquet files, for users
without an Iceberg catalog (issue 5 item 6; the same rows as the Iceberg ``__changelog`` tables).

Layout under ``root``::

    _binlake_checkpoint.json                  last complete run: to_ts, from_ts, batch id, cluster id
    <db>/<table>/_binlake_runs.json           manifest: the runs committed to this directory
    <db>/<table>/v<N>/_schema.json            TableInfo JSON + Arrow schema text of schema version N
    <db>/<table>/v<N>/commit_date=YYYY-MM-DD/<batch-id>-<uuid>.parquet

Spark tasks write the files (each task its share of the run's rows, through the file sinks' one
changelog writer ``sink.files.write_changelogs``, a frame record at a time); the driver writes the
manifest. Rows of one schema version are split by the UTC date of ``_tidb_commit_time`` into hive
partitions; ``commit_date`` is not a column of the files. The files hold the changelog's Arrow schema
(``sink.changelog.changelog_arrow_schema``: the metadata columns first, as the rows are decoded).
Each file keeps its rows in commit order and carries the run's ``binlake.*`` markers plus
``binlake.schema-version`` and ``binlake.table-id`` in its key-value metadata. Names that are unsafe
as a path component are escaped (``/`` → ``%2F``, ``\\`` → ``%5C``, ``%`` → ``%25``, a leading ``.``
→ ``%2E``).

Exactly once, crash safety. A table is committed atomically per run: its files are written (by the
tasks) as ``<name>.parquet.inprogress``, fsynced, renamed into place, and then the manifest (written as
``_binlake_runs.json.inprogress``, fsynced, renamed) gains one entry listing the run's range, batch
id, table id and files. The manifest rename is the commit point. Files not listed in a manifest
(``*.inprogress`` files, or ``*.parquet`` files a crash left between the renames and the manifest)
belong to no committed run: :func:`read_changelog` and :func:`committed_files` ignore them, and the
next run that touches the table deletes them before writing. Rows whose commit_ts lies in a range
already committed for the same table id are never written again: a table whose committed ranges
cover ``(from_ts, to_ts]`` is skipped, and a partly covered table gets only the rest. A glob over the
directory (``v*/commit_date=*/*.parquet``, e.g. DuckDB with ``hive_partitioning``) sees exactly the
committed files except between a crash in the rename window and the next run; readers that must be
exact use the manifest (:func:`committed_files`). One writer at a time per root (an ``flock`` on
``_binlake.lock``); the checkpoint is written atomically the same way.

DDL. Segments carry the TableInfo of their version, so a new version simply gets a new ``v<N>``
directory; versions reached by a DDL of the run get their ``_schema.json`` even without rows.
RENAME TABLE: a run writes a table under its name at the end of the run's range; files written
under older names stay where they are (each ``_schema.json`` names the table id, so the history of
one table id can be followed across directories). Should two table ids ever write the same schema
version into one directory (a rename swapping names), the second uses ``v<N>-t<table id>``.
TRUNCATE TABLE and DROP TABLE only appear in the changelog's DDL list of the run: this sink is an
append-only changelog, nothing is deleted. The report lists each DDL's query.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sink.base import Sink, TableReport
from sink.changelog import SCHEMA_VERSION_KEY, TABLE_ID_KEY, ConformError, changelog_arrow_schema, conform
from sink.errors import SinkError
from sink.files import TABLE_FILES_DDL, ChangelogFiles, unpack, write_changelogs
from transform.changes import COMMIT_TIME, COMMIT_TIME_TYPE, COMMIT_TS, OP, SEQ, RunBatch, TableChanges, read_segment
from transform.codec.model import TableInfo
from transform.partition_drops import removal_tasks, with_removals

CHECKPOINT_FILE = "_binlake_checkpoint.json"
MANIFEST_FILE = "_binlake_runs.json"
SCHEMA_FILE = "_schema.json"
LOCK_FILE = "_binlake.lock"
INPROGRESS = ".inprogress"
PARTITION_KEY = "commit_date"
FORMAT_VERSION = 1


class ParquetSinkError(SinkError):
    """The Parquet sink could not take a run (the message names the path or table and the cause)."""


class CorruptStateError(ParquetSinkError):
    """A checkpoint, manifest or schema file of the sink is unreadable (the message names the path)."""


class ClusterMismatchError(ParquetSinkError):
    """A run comes from another upstream cluster than the one the sink's root was written from."""


class SinkBusyError(ParquetSinkError):
    """Another process is writing to the same root (it finishes: transient)."""

    transient = True


class CheckpointDoc(TypedDict):
    """The JSON of ``_binlake_checkpoint.json`` (``to_ts``, ``cluster_id``, ``batch_id`` checked on read)."""

    to_ts: int
    cluster_id: int
    batch_id: str
    format: NotRequired[int]
    from_ts: NotRequired[int]


# ---------------------------------------------------------------------------------------------
# durable file primitives

def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _mkdirs(path: Path) -> None:
    """Create ``path`` and missing parents, fsyncing each parent that gained an entry."""
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue
        _fsync_dir(d.parent)


def _write_json_atomic(path: Path, obj: object) -> None:
    """Replace ``path`` with ``obj`` as JSON: write ``<path>.inprogress``, fsync, rename, fsync dir."""
    tmp = path.with_name(path.name + INPROGRESS)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _read_json(path: Path, what: str) -> Any | None:
    """The JSON in ``path``; None when it does not exist; :class:`CorruptStateError` when unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CorruptStateError(f"cannot read the {what} {path}: {e}") from e
    try:
        return json.loads(text)
    except ValueError as e:
        raise CorruptStateError(f"the {what} {path} is not valid JSON ({e}); fix or remove it") from e


def safe_name(name: str) -> str:
    """``name`` (a database or table name) as one path component; distinct names stay distinct."""
    if not name:
        raise ParquetSinkError("empty database or table name")
    out = name.replace("%", "%25").replace("/", "%2F").replace("\\", "%5C").replace("\x00", "%00")
    if out.startswith("."):
        out = "%2E" + out[1:]
    return out


def table_dir(root: str | Path, db: str, table: str) -> Path:
    """The directory holding the changelog of ``db.table`` under ``root``."""
    return Path(root) / safe_name(db) / safe_name(table)


# ---------------------------------------------------------------------------------------------
# manifest

@dataclass(frozen=True)
class CommittedRun:
    """One manifest entry: a run committed for one table id into one table directory."""

    table_id: int
    cluster_id: int
    from_ts: int
    to_ts: int
    batch_id: str
    files: tuple[dict[str, Any], ...]      # {"path", "rows", "schema_version", "commit_date"}
    versions: tuple[dict[str, Any], ...]   # {"schema_version", "dir"}
    rows: dict[str, int]
    ddl: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The manifest JSON of this entry."""
        return {"table_id": self.table_id, "cluster_id": self.cluster_id, "from_ts": self.from_ts,
                "to_ts": self.to_ts, "batch_id": self.batch_id, "files": list(self.files),
                "versions": list(self.versions), "rows": dict(self.rows), "ddl": list(self.ddl)}

    @classmethod
    def from_json(cls, obj: Any, path: Path) -> CommittedRun:
        """Parse one manifest entry (``path`` names the manifest in errors)."""
        try:
            return cls(table_id=int(obj["table_id"]), cluster_id=int(obj["cluster_id"]),
                       from_ts=int(obj["from_ts"]), to_ts=int(obj["to_ts"]), batch_id=str(obj["batch_id"]),
                       files=tuple(dict(f, path=str(f["path"])) for f in obj["files"]),
                       versions=tuple(dict(v, dir=str(v["dir"]), schema_version=int(v["schema_version"]))
                                      for v in obj["versions"]),
                       rows={str(k): int(v) for k, v in obj["rows"].items()},
                       ddl=tuple(str(q) for q in obj["ddl"]))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CorruptStateError(f"the manifest {path} has a malformed run entry {obj!r}: {e!r}") from e


def load_manifest(tdir: Path) -> list[CommittedRun]:
    """The runs committed into table directory ``tdir`` (empty when it has no manifest)."""
    path = tdir / MANIFEST_FILE
    doc = _read_json(path, "run manifest")
    if doc is None:
        return []
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise CorruptStateError(f"the manifest {path} has no 'runs' list")
    if doc.get("format") != FORMAT_VERSION:
        raise CorruptStateError(f"the manifest {path} has format {doc.get('format')!r}, expected {FORMAT_VERSION}")
    return [CommittedRun.from_json(r, path) for r in doc["runs"]]


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for f, t in sorted(intervals):
        if out and f <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], t))
        else:
            out.append((f, t))
    return out


# ---------------------------------------------------------------------------------------------
# schemas

def _schema_doc(table_id: int, db: str, name: str, version: int, info: TableInfo,
                schema: pa.Schema) -> dict[str, Any]:
    return {"format": FORMAT_VERSION, "table_id": table_id, "db": db, "table": name, "schema_version": version,
            "table_info": info.to_json(),
            "arrow_schema": schema.remove_metadata().to_string(show_schema_metadata=False)}


# ---------------------------------------------------------------------------------------------
# readers

def version_table(tdir: Path, folder: str) -> TableInfo:
    """The TableInfo a version directory's ``_schema.json`` holds (:class:`CorruptStateError` when it
    holds none)."""
    path = tdir / folder / SCHEMA_FILE
    doc = _read_json(path, "schema file")
    if not isinstance(doc, dict) or "table_info" not in doc:
        raise CorruptStateError(f"the schema file {path} is missing or has no 'table_info'")
    try:
        return TableInfo.from_json(doc["table_info"])
    except Exception as e:  # SchemaError and friends: name the file
        raise CorruptStateError(f"the schema file {path} holds no valid TableInfo: {e}") from e


def committed_files(root: str | Path, db: str, table: str) -> list[str]:
    """Absolute paths of the committed Parquet files of ``db.table``, in commit order (manifest order)."""
    tdir = table_dir(root, db, table)
    return [str(tdir / f["path"]) for run in load_manifest(tdir) for f in run.files]


def _newest_schema(tdir: Path, runs: list[CommittedRun]) -> pa.Schema | None:
    best: tuple[int, str] | None = None
    for run in runs:
        for v in run.versions:
            key = (v["schema_version"], v["dir"])
            if best is None or key > best:
                best = key
    if best is None:
        return None
    return changelog_arrow_schema(version_table(tdir, best[1]))


def read_changelog(root: str | Path, db: str, table: str) -> pa.Table:
    """The committed changelog rows of ``db.table`` (only files listed in its manifest) across all
    schema versions, ordered by (``_tidb_commit_ts``, ``_tidb_seq``), every version projected onto
    the newest version's columns by name (columns an older version lacks are null; columns the
    newest lacks are dropped). Raises :class:`ParquetSinkError` when the table has no manifest."""
    tdir = table_dir(root, db, table)
    if not (tdir / MANIFEST_FILE).exists():
        raise ParquetSinkError(f"no committed changelog for {db}.{table} (no {tdir / MANIFEST_FILE})")
    runs = load_manifest(tdir)
    target = _newest_schema(tdir, runs)
    parts = []
    for run in runs:
        for f in run.files:
            path = tdir / f["path"]
            try:
                parts.append(pq.ParquetFile(path).read())
            except (OSError, pa.ArrowException) as e:
                raise CorruptStateError(f"committed file {path} of {db}.{table} is unreadable: {e}") from e
    if target is None:
        if not parts:
            return pa.table({OP: pa.array([], pa.string())})
        target = parts[-1].schema
    target = target.remove_metadata()
    if not parts:
        return target.empty_table()
    try:
        out = pa.concat_tables([conform(p, target) for p in parts], promote_options="permissive")
    except ConformError as e:
        raise ParquetSinkError(str(e)) from e
    return out.sort_by([(COMMIT_TS, "ascending"), (SEQ, "ascending")])


# ---------------------------------------------------------------------------------------------
# the sink

class ParquetSink(Sink):
    """Writes each run's changelog as Parquet files under a local directory (see the module doc)."""


    def __init__(self, root: str) -> None:
        """Use the directory ``root`` (created by the first :meth:`write`: reading creates nothing)."""
        self.root = Path(root).resolve()
        self._lock_fd: int | None = None

    # -- checkpoint ----------------------------------------------------------------------------

    @property
    def checkpoint_path(self) -> Path:
        """Where the checkpoint lives."""
        return self.root / CHECKPOINT_FILE

    def _checkpoint_doc(self) -> CheckpointDoc | None:
        path = self.checkpoint_path
        doc = _read_json(path, "checkpoint")
        if doc is None:
            return None
        ok = (isinstance(doc, dict) and all(isinstance(doc.get(k), int) and not isinstance(doc.get(k), bool)
                                            for k in ("to_ts", "cluster_id"))
              and isinstance(doc.get("batch_id"), str))
        if not ok:
            raise CorruptStateError(f"the checkpoint {path} lacks integer 'to_ts'/'cluster_id' "
                                    f"or a 'batch_id': {doc!r}")
        return cast(CheckpointDoc, doc)  # JSON (Any) whose keys were checked just above

    def checkpoint(self) -> int | None:
        """The ``to_ts`` of the last complete run; None before the first; :class:`CorruptStateError`
        naming the file when it is unreadable."""
        doc = self._checkpoint_doc()
        return None if doc is None else int(doc["to_ts"])

    def check_cluster(self, cluster_id: int) -> None:
        """:class:`ClusterMismatchError` when the root's checkpoint names another cluster."""
        doc = self._checkpoint_doc()
        if doc is not None and doc["cluster_id"] != cluster_id:
            raise ClusterMismatchError(
                f"cluster {cluster_id} is read but {self.root} holds cluster {doc['cluster_id']} "
                f"(checkpoint {self.checkpoint_path}); use another root")

    def save_checkpoint(self, run: RunBatch) -> None:
        """Atomically record ``run.to_ts`` (with batch and cluster id) as complete."""
        self.check_cluster(run.cluster_id)
        self._ensure_root()
        _write_json_atomic(self.checkpoint_path, {
            "format": FORMAT_VERSION, "to_ts": run.to_ts, "from_ts": run.from_ts,
            "batch_id": run.batch_id, "cluster_id": run.cluster_id})

    # -- writing -------------------------------------------------------------------------------

    def _ensure_root(self) -> None:
        try:
            _mkdirs(self.root)
        except OSError as e:
            raise ParquetSinkError(f"cannot create the Parquet sink root {self.root}: {e}") from e

    def _lock(self) -> None:
        fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise SinkBusyError(f"another process is writing to {self.root} (lock {self.root / LOCK_FILE})") from e
            raise
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def write(self, run: RunBatch) -> list[TableReport]:
        """Commit every table of ``run`` atomically (tables in table-id order); tables whose
        committed ranges already cover the run are skipped. Raises :class:`ClusterMismatchError`
        for a run of another cluster, before writing anything. The whole write is one item to
        ``observer`` (the run is the lake's commit batch)."""
        started = time.perf_counter()
        self.check_cluster(run.cluster_id)
        run = run.carried_over()   # a table that went on under a new id stays one table
        self._ensure_root()
        self._lock()
        try:
            from sink.parquet.removals import changelog_state  # it reads this module's files

            run, release = with_removals(run, partial(changelog_state, run, self.root), removal_tasks(run))
            try:
                reports = [self._write_table(run, tc) for _, tc in sorted(run.tables.items())]
            finally:
                release()
        finally:
            self._unlock()
        self.observer.executed(time.perf_counter() - started)
        return reports

    def _write_table(self, run: RunBatch, tc: TableChanges) -> TableReport:
        label = f"{tc.db}.{tc.name}"
        tdir = table_dir(self.root, tc.db, tc.name)
        try:
            return _TableWriter(run, tc, tdir, label).commit()
        except SinkError:
            raise
        except (OSError, pa.ArrowException) as e:
            raise ParquetSinkError(f"table {label} (id {tc.table_id}) in {tdir}: {e}") from e

    def close(self) -> None:
        """Release the writer lock if a write was interrupted."""
        self._unlock()


class _TableWriter:
    """Writes one table of one run into its directory and commits it with a manifest entry."""

    def __init__(self, run: RunBatch, tc: TableChanges, tdir: Path, label: str) -> None:
        self.run, self.tc, self.tdir, self.label = run, tc, tdir, label
        self.runs: list[CommittedRun] = []
        self.taken: set[str] = set()

    def commit(self) -> TableReport:
        """Clean leftovers, skip or write the rows not yet committed, then commit via the manifest."""
        run, tc = self.run, self.tc
        report = TableReport(table=self.label)
        self.runs = load_manifest(self.tdir)
        for r in self.runs:
            if r.cluster_id != run.cluster_id:
                raise ClusterMismatchError(
                    f"table {self.label}: {self.tdir / MANIFEST_FILE} holds runs of cluster {r.cluster_id}, "
                    f"run {run.batch_id} comes from cluster {run.cluster_id}")
        self.taken = {f["path"] for r in self.runs for f in r.files}
        self._clean_orphans()
        done = _merged([(r.from_ts, r.to_ts) for r in self.runs if r.table_id == tc.table_id])
        if any(f <= run.from_ts and run.to_ts <= t for f, t in done):
            report.skipped = f"already at to_ts={max(t for _, t in done)}"
            return report
        overlap = [(f, t) for f, t in done if f < run.to_ts and t > run.from_ts]

        versions: dict[int, str] = {}
        for seg in tc.segments:
            if seg.schema_version not in versions:
                versions[seg.schema_version] = self._version_dir(seg.schema_version, seg.table)
        files: list[dict[str, Any]] = []
        counts: dict[str, int] = {}
        frame = run.rows_of({tc.table_id})
        if frame is not None:
            job = _ChangelogDir(str(self.tdir), tc.table_id, run.batch_id, run.markers(), versions, overlap)
            written = frame.mapInArrow(partial(write_changelogs, {tc.table_id: job}), TABLE_FILES_DDL)
            for r in written.toArrow().to_pylist():
                files.extend(unpack(r["files"]))
                if r["op"]:
                    counts[r["op"]] = counts.get(r["op"], 0) + r["rows"]
            files.sort(key=lambda f: (f["schema_version"], f[PARTITION_KEY], f["path"]))
        ddl = []
        for ev in tc.events:
            if any(f < ev.commit_ts <= t for f, t in overlap):
                continue
            ddl.append(ev.job.query)
            ver = ev.job.binlog.schema_version
            if ev.table is not None and ver > 0 and ver not in versions:
                versions[ver] = self._version_dir(ver, ev.table)

        entry = CommittedRun(table_id=tc.table_id, cluster_id=run.cluster_id, from_ts=run.from_ts,
                             to_ts=run.to_ts, batch_id=run.batch_id, files=tuple(files),
                             versions=tuple({"schema_version": v, "dir": d} for v, d in sorted(versions.items())),
                             rows=counts, ddl=tuple(ddl))
        _mkdirs(self.tdir)
        _write_json_atomic(self.tdir / MANIFEST_FILE, {
            "format": FORMAT_VERSION, "db": tc.db, "table": tc.name,
            "runs": [r.to_json() for r in self.runs] + [entry.to_json()]})
        report.rows = counts
        report.ddl = ddl
        return report

    def _clean_orphans(self) -> None:
        """Delete files a crashed run left: ``*.inprogress`` and Parquet files in no manifest."""
        if not self.tdir.is_dir():
            return
        touched: set[Path] = set()
        for path in _walk_files(self.tdir):
            rel = path.relative_to(self.tdir).as_posix()
            if path.name.endswith(INPROGRESS) or (path.name.endswith(".parquet") and rel not in self.taken):
                path.unlink()
                touched.add(path.parent)
        for d in touched:
            _fsync_dir(d)

    def _version_dir(self, version: int, info: TableInfo) -> str:
        """The directory (relative) of ``version`` for this table id; writes its ``_schema.json``."""
        tc = self.tc
        name = f"v{version}"
        path = self.tdir / name / SCHEMA_FILE
        doc = _read_json(path, "schema file")
        if isinstance(doc, dict) and doc.get("table_id") not in (None, tc.table_id):
            name = f"v{version}-t{tc.table_id}"
            path = self.tdir / name / SCHEMA_FILE
        _mkdirs(path.parent)
        _write_json_atomic(path, _schema_doc(tc.table_id, tc.db, tc.name, version, info,
                                             changelog_arrow_schema(info)))
        return name



@dataclass(frozen=True)
class _ChangelogDir(ChangelogFiles[dict[str, Any]]):
    """One table's files of one run, as the Spark tasks write them (``sink.files.write_changelogs``):
    each record's rows not yet committed, split by commit date, as durable Parquet files under unique
    names (written as ``*.inprogress``, fsynced, renamed), a record at a time; each file is described
    by its manifest entry. The files belong to no run until the driver lists them in the manifest."""

    tdir: str
    table_id: int
    batch_id: str
    markers: dict[str, str]
    versions: dict[int, str]                # schema version → its directory (relative to ``tdir``)
    overlap: list[tuple[int, int]]          # ranges already committed for this table id
    table: str = ""

    def rows(self, table_id: int, version: int, data: bytes) -> pa.Table:
        """The record's rows whose commit_ts no committed run of the table id covers."""
        return _drop_committed(read_segment(data), self.overlap)

    def batch(self, version: int) -> int:
        """A schema version's rows go to its own directory."""
        return version

    def write(self, batch: int, rows: pa.Table) -> list[dict[str, Any]]:
        """``rows`` of schema version ``batch`` as one file per commit date."""
        out = []
        for day, part in _split_by_day(rows):
            rel = f"{self.versions[batch]}/{PARTITION_KEY}={day}/{self.batch_id}-{uuid.uuid4().hex}.parquet"
            final = Path(self.tdir) / rel
            tmp = final.with_name(final.name + INPROGRESS)
            _mkdirs(final.parent)
            meta = dict(part.schema.metadata or {})
            meta.update({k.encode(): v.encode() for k, v in self.markers.items()})
            meta[SCHEMA_VERSION_KEY.encode()] = str(batch).encode()
            meta[TABLE_ID_KEY.encode()] = str(self.table_id).encode()
            with open(tmp, "wb") as f:
                pq.write_table(part.replace_schema_metadata(meta), f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
            out.append({"path": rel, "rows": part.num_rows, "schema_version": batch, PARTITION_KEY: day})
        return out

    def finish(self, files: list[dict[str, Any]]) -> None:
        """Make the renames durable: fsync each directory the task wrote into."""
        for d in {(Path(self.tdir) / f["path"]).parent for f in files}:
            _fsync_dir(d)


def _walk_files(top: Path) -> Iterator[Path]:
    for dirpath, _, names in os.walk(top):
        for n in names:
            yield Path(dirpath) / n


def _drop_committed(rows: pa.Table, overlap: list[tuple[int, int]]) -> pa.Table:
    """``rows`` without those whose commit_ts lies in an already committed range ``(f, t]``."""
    if not overlap or rows.num_rows == 0:
        return rows
    ts = rows.column(COMMIT_TS)
    done = None
    for f, t in overlap:
        m = pc.and_(pc.greater(ts, f), pc.less_equal(ts, t))
        done = m if done is None else pc.or_(done, m)
    return rows.filter(pc.invert(done))


def _split_by_day(rows: pa.Table) -> list[tuple[str, pa.Table]]:
    """(UTC date ``YYYY-MM-DD`` of ``_tidb_commit_time``, the rows of that date in their order)."""
    if rows.num_rows == 0:
        return []
    days = pc.cast(pc.cast(rows.column(COMMIT_TIME), COMMIT_TIME_TYPE), pa.date32())
    out = []
    for day in sorted(pc.unique(days).to_pylist()):
        out.append((day.isoformat(), rows.filter(pc.equal(days, pa.scalar(day, pa.date32())))))
    return out
