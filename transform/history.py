"""DDL-versioned schema history: which TableInfo was in force at a schema version (TiDB semantics).

Built from the upstream's ``GET /ddl/history`` (every DDL job with its ``binlog.SchemaVersion`` and
the TableInfo after the job). :meth:`SchemaHistory.table_at` gives the TableInfo of the newest done
job on a table id whose schema version is not above a given one. Drops and truncates end a table id;
TRUNCATE starts a new id.

A DML is decoded against the definition in force at its *commit position*
(:meth:`SchemaHistory.version_in_force`): the newer of the one at its ``PrewriteValue.schema_version``
and the newest one whose DDL committed before it. TiDB lets a transaction begun under an older
schema version commit after a DDL job's last DDL binlog (one begun while a DROP COLUMN was in its
delete-only state); TiDB Binlog's drainer, whose schema only moves forward in commit order, decodes
such a row with the newer table (datums matched by column id, dropped columns ignored, columns the
row lacks filled with their original default), and so does binlake.

Views are not tables: TiDB keeps them as TableInfos (``view`` set, columns of type code 0) and
writes no rows for them, so the history keeps their ids apart (:meth:`SchemaHistory.is_view`) and
gives no definition for them; their jobs stay in :attr:`SchemaHistory.jobs`, for the sinks that
replay statements and for the lake's record of the history.

Every TableInfo the history gives is the table as the lake holds it
(:meth:`~transform.codec.model.TableInfo.without_virtual_columns`): TiDB never writes a virtual
generated column to a row, so no sink gets one, and adding or dropping one changes no sink's schema.
"""
from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import requests

from transform.codec.errors import SchemaError
from transform.codec.model import ColumnInfo, Job, TableInfo
from transform.errors import TransformError
from transform.partitions import Partitioning

# JobState values that mean the job took effect (TiDB: done, synced).
JOB_DONE = 4
JOB_SYNCED = 6

# ActionType codes the history treats specially (pingcap/tidb pkg/meta/model/job.go; pkg/parser/model/ddl.go in
# older releases).
CREATE_SCHEMA, DROP_SCHEMA, CREATE_TABLE, DROP_TABLE = 1, 2, 3, 4
TRUNCATE_TABLE, RENAME_TABLE, DROP_VIEW, CREATE_TABLES = 11, 14, 24, 60
MODIFY_COLUMN, MULTI_SCHEMA_CHANGE = 12, 61
DROP_PARTITION, TRUNCATE_PARTITION, EXCHANGE_PARTITION, RECOVER_TABLE = 20, 23, 42, 25
ALTER_PARTITIONING, REMOVE_PARTITIONING = 71, 72
# the table goes on under a new table id with its rows (TiDB copies them; later rows carry the new id)
CONTINUING = frozenset({ALTER_PARTITIONING, REMOVE_PARTITIONING})
# some partitions' rows go without binlogs (``transform.partition_drops``)
PARTITION_REMOVALS = frozenset({DROP_PARTITION, TRUNCATE_PARTITION})


class HistoryError(TransformError, SchemaError):
    """The DDL history could not be read, or it has no schema for a table a binlog names (transient:
    mostly the upstream's status API not answering)."""

    transient = True


class JobNotInHistory(HistoryError):
    """A DDL binlog names a job the upstream's history does not hold (yet): TiDB commits a job's DDL
    binlog, then moves the job to its history in a later transaction, so a TiDB that dies between the
    two leaves the job out until the DDL owner that follows finishes it (transient)."""


@dataclass(frozen=True)
class TableVersion:
    """A table id's definition from one schema version on (``table`` None: dropped)."""

    schema_version: int
    db: str
    table: TableInfo | None
    job: Job


@dataclass(frozen=True)
class CommitOrder:
    """Where a run's DDL jobs committed: ``ddl_commits`` maps the job id of each DDL binlog committed
    in the run's range ``(from_ts, to_ts]`` to its commit ts (the delete-only state's extra binlog of
    a DROP COLUMN does not count). A done job not among them committed before the range when its
    ``FinishedTS`` is set and not above ``from_ts`` (its DDL binlog is not in the range), else after it."""

    from_ts: int = 0
    ddl_commits: Mapping[int, int] = field(default_factory=dict)

    def position(self, job: Job) -> int | None:
        """The commit ts before which ``job``'s schema is not in force for a DML of the range
        (``from_ts`` for a job committed before the range); None when it is in force for none of them."""
        ts = self.ddl_commits.get(job.id)
        if ts is not None:
            return ts
        if 0 < job.binlog.finished_ts <= self.from_ts:
            return self.from_ts
        return None


def exchanged_partition(before: TableInfo | None, after: TableInfo, plain_id: int) -> int | None:
    """The physical id of the partition an EXCHANGE PARTITION gave the plain table (``plain_id``)'s
    id: the one whose name holds ``plain_id`` in ``after`` (None when none does)."""
    old, new = Partitioning.of(before) if before is not None else None, Partitioning.of(after)
    if old is None or new is None:
        return None
    ids = {d.name.lower(): d.id for d in old.definitions}
    return next((ids[d.name.lower()] for d in new.definitions if d.id == plain_id and d.name.lower() in ids), None)


def replaced_columns(before: TableInfo | None, job: Job, after: TableInfo | None
                     ) -> list[tuple[ColumnInfo, ColumnInfo]]:
    """The columns ``job`` rewrote under a new column id, as (old column, new column).

    A MODIFY/CHANGE COLUMN whose type change needs a reorg (``ModifyColumn``) makes TiDB add a
    hidden ``_Col$_<name>`` column with a new id, backfill it from the old one without binlogs, and
    swap it in under the column's name (or the CHANGE's new name): the done job's TableInfo lacks
    the old id and has exactly one new one. Inside a multi-statement ALTER
    (``MultiSchemaChange``) the old and new columns are paired by name (MODIFY keeps it).
    """
    if before is None or after is None or before.id != after.id:
        return []
    gone = [c for c in before.columns if after.column_by_id(c.id) is None]
    new = [c for c in after.columns if before.column_by_id(c.id) is None]
    if job.type == MODIFY_COLUMN:
        return [(gone[0], new[0])] if len(gone) == 1 and len(new) == 1 else []
    if job.type == MULTI_SCHEMA_CHANGE:
        by_name = {c.name.lower(): c for c in new}
        return [(c, by_name[c.name.lower()]) for c in gone if c.name.lower() in by_name]
    return []


@dataclass(frozen=True)
class ColumnPast:
    """What a table's rows written earlier hold for the columns it has at a ts, by column name then:
    ``born``, the columns a DDL added after the table id began → that job's ``FinishedTS`` (a row
    last written before it holds the column's origin default; for a column rewritten since, the
    origin default of the column it was added as, converted by each rewrite); ``carried``, the columns a MODIFY
    rewrote under a new id (:func:`replaced_columns`) → the rewrites leading to them, oldest first (a
    row last written before a rewrite holds the old column's value, which TiDB's backfill converted)."""

    born: dict[str, int] = field(default_factory=dict)
    carried: dict[str, tuple[tuple[ColumnInfo, ColumnInfo], ...]] = field(default_factory=dict)


class SchemaHistory:
    """Every table's TableInfo by schema version, and the DDL jobs by id.

    ``commit_ts`` places jobs in time: job id → the commit ts of its DDL binlog, the ts from which
    TiDB's snapshot reads see the job (its transaction starts at the job's ``FinishedTS`` and commits
    there); a job it lacks is placed at its ``FinishedTS``. ``raw``: job id → the job's JSON as the
    upstream gave it (what the lake records)."""

    def __init__(self, jobs: Iterable[Job], commit_ts: Mapping[int, int] | None = None,
                 raw: Mapping[int, str] | None = None) -> None:
        self._commit_ts = dict(commit_ts or {})
        self._raw = dict(raw or {})
        done = [j for j in jobs if j.state in (JOB_DONE, JOB_SYNCED) and j.binlog.schema_version > 0]
        done.sort(key=lambda j: (j.binlog.schema_version, j.id))
        self.jobs: dict[int, Job] = {j.id: j for j in done}
        self._dbs: dict[int, str] = {}
        self._versions: dict[int, list[TableVersion]] = {}
        self._views: set[int] = set()
        self._continues: dict[int, int] = {}   # a table id → the id its table had before (CONTINUING)
        self._went_on: dict[int, Job] = {}     # a table id → the CONTINUING job after which its table has another
        for job in done:
            self._apply(job)
        self._keys = {tid: [v.schema_version for v in vs] for tid, vs in self._versions.items()}

    @classmethod
    def from_json(cls, doc: object) -> SchemaHistory:
        """Parse the JSON array ``/ddl/history`` answers."""
        if not isinstance(doc, list):
            raise HistoryError(f"/ddl/history must be a JSON array, got {type(doc).__name__}")
        jobs = [Job.from_json(j) for j in doc]
        return cls(jobs, raw={job.id: json.dumps(j, separators=(",", ":")) for job, j in zip(jobs, doc)})

    @classmethod
    def fetch(cls, status_url: str, timeout: float = 30.0) -> SchemaHistory:
        """Read ``{status_url}/ddl/history`` from the upstream (TiDB's status port or the emulator)."""
        url = status_url.rstrip("/") + "/ddl/history"
        try:
            resp = requests.get(url, timeout=timeout)
        except requests.RequestException as e:
            raise HistoryError(f"cannot read the DDL history from {url}: {e}") from e
        if resp.status_code != 200:
            raise HistoryError(f"{url} answered HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            return cls.from_json(json.loads(resp.content))
        except ValueError as e:
            raise HistoryError(f"{url} did not answer JSON: {e}") from e

    # -- building ----------------------------------------------------------------------------

    def _db_name(self, job: Job) -> str:
        db = job.binlog.db_info
        if isinstance(db, dict) and isinstance(db.get("db_name"), dict):
            self._dbs[job.schema_id] = db["db_name"].get("O", "")
        return self._dbs.get(job.schema_id) or job.schema_name

    def _put(self, table_id: int, version: int, db: str, table: TableInfo | None, job: Job) -> None:
        if table is not None:
            try:
                table = table.without_virtual_columns()
            except SchemaError as e:
                raise HistoryError(f"DDL job {job.id} ({job.query[:200]}): {e}") from None
        self._versions.setdefault(table_id, []).append(TableVersion(version, db, table, job))

    def _apply(self, job: Job) -> None:
        version = job.binlog.schema_version
        db = self._db_name(job)
        if job.type in (CREATE_SCHEMA, DROP_SCHEMA):
            if job.type == DROP_SCHEMA:
                for tid, vs in self._versions.items():
                    if vs[-1].table is not None and vs[-1].db == db:
                        self._put(tid, version, db, None, job)
            return
        if job.type == CREATE_TABLES or job.binlog.multiple_table_infos:
            for each in job.binlog.multiple_table_infos:
                if each.is_view:
                    self._views.add(each.id)
                else:
                    self._put(each.id, version, db, each, job)
            return
        info = job.binlog.table_info
        if info is not None and info.is_view:   # CREATE [OR REPLACE] VIEW, ALTER VIEW, RENAME of a view
            self._views.add(info.id)
            return
        if job.type == DROP_VIEW or job.table_id in self._views:
            self._views.add(job.table_id)
            return
        if job.type == DROP_TABLE:
            self._put(job.table_id, version, db, None, job)
            return
        if job.type == EXCHANGE_PARTITION and info is not None:
            self._exchange(job, info.without_virtual_columns())
            return
        if job.type in PARTITION_REMOVALS and info is not None:
            began, known = self.began(job), self._versions.get(info.id)
            if known and known[-1].schema_version < began < version:
                # the job's first step published its partitions from ``began`` on: rows written since
                # are placed by them (a dropped RANGE partition's values go to the next one)
                self._put(info.id, began, db, info, job)
        if job.type == TRUNCATE_TABLE:
            self._put(job.table_id, version, db, None, job)
        if job.type in CONTINUING and info is not None and info.id != job.table_id:
            # the old id does not end: a transaction begun before the job's last step can still commit
            # rows under it, and they are the table's (TiDB wrote them to the new partitions too)
            self._continues[info.id] = job.table_id
            self._went_on[job.table_id] = job
        if info is not None:
            self._put(info.id, version, db, info, job)

    def _exchange(self, job: Job, pt: TableInfo) -> None:
        """EXCHANGE PARTITION: the partitioned table (``pt``, the job's TableInfo) takes the exchanged
        partition under the plain table's id (the job's table id); the plain table goes on under the
        partition's old id, with its columns."""
        version = job.binlog.schema_version
        was, plain = self._latest(pt.id), self._latest(job.table_id)   # (the jobs apply in version order)
        self._put(pt.id, version, was.db if was is not None else self._db_name(job), pt, job)
        swapped = exchanged_partition(was.table if was is not None else None, pt, job.table_id)
        if swapped is None or plain is None or plain.table is None:
            return
        self._put(job.table_id, version, plain.db, None, job)
        self._put(swapped, version, plain.db, replace(plain.table, id=swapped), job)
        self._continues[swapped] = job.table_id

    def _latest(self, table_id: int) -> TableVersion | None:
        """While the history is built: the newest definition of ``table_id`` so far."""
        vs = self._versions.get(table_id)
        return vs[-1] if vs else None

    # -- queries -----------------------------------------------------------------------------

    def is_view(self, table_id: int) -> bool:
        """True when ``table_id`` is a view's (no rows, no definition in this history)."""
        return table_id in self._views

    def placed_ts(self, job: Job) -> int:
        """The upstream ts from which ``job`` is in effect: its DDL binlog's commit ts when known,
        else its ``FinishedTS`` (0: not placed)."""
        return self._commit_ts.get(job.id, job.binlog.finished_ts)

    def commit_ts_known(self, job_id: int) -> bool:
        """Whether the job is placed at its DDL binlog's commit ts (not at its ``FinishedTS``)."""
        return job_id in self._commit_ts

    def raw_job(self, job_id: int) -> str:
        """The job's JSON as the upstream gave it (rebuilt from the parsed job when not kept)."""
        raw = self._raw.get(job_id)
        return raw if raw is not None else json.dumps(self.job(job_id).to_json(), separators=(",", ":"))

    def version_at(self, table_id: int, schema_version: int) -> TableVersion | None:
        """The table id's definition in force at ``schema_version`` (None: not created yet)."""
        keys = self._keys.get(table_id)
        if not keys:
            return None
        i = bisect.bisect_right(keys, schema_version) - 1
        return self._versions[table_id][i] if i >= 0 else None

    def version_in_force(self, table_id: int, schema_version: int, commit_ts: int,
                         order: CommitOrder) -> TableVersion | None:
        """The table id's definition a DML written at ``schema_version`` and committed at ``commit_ts``
        is decoded with: the newer of the one at ``schema_version`` and the newest one whose DDL
        committed before ``commit_ts`` (``order``). None: not created at ``schema_version`` nor by a
        DDL committed before ``commit_ts``. A version without a table: the table had ended (see
        :meth:`ended`)."""
        steps = self.steps_after(table_id, schema_version, order)
        i = bisect.bisect_left([pos for pos, _ in steps], commit_ts)   # the positions before commit_ts
        return self.version_at(table_id, steps[i - 1][1] if i else schema_version)

    def steps_after(self, table_id: int, schema_version: int, order: CommitOrder) -> list[tuple[int, int]]:
        """The definitions newer than the one at ``schema_version`` that are in force for some DML of
        ``order``'s range, as (commit position, schema version) in position order, each schema
        version above the previous ones: a DML committed after a position takes the latest such
        version (:meth:`version_in_force`, precomputed for a decoder's many rows). The table's end
        (TRUNCATE's old id, DROP TABLE) is a step too: a DML committed after it finds no table."""
        # a table id the DML's own version does not know yet may still be in force for it: TiDB runs
        # each statement of a pessimistic transaction with the newest schema, so a transaction begun
        # before a TRUNCATE (or a CREATE) can write the new table id and commit after its DDL binlog
        base = self.version_at(table_id, schema_version)
        floor = base.schema_version if base is not None else schema_version
        found = []
        for v in self._versions.get(table_id, []):
            pos = order.position(v.job)
            if v.schema_version > floor and pos is not None and (v.table is not None or base is not None):
                found.append((pos, v.schema_version))
        found.sort()
        steps: list[tuple[int, int]] = []
        for pos, version in found:
            if not steps or version > steps[-1][1]:
                steps.append((pos, version))
        return steps

    def ended(self, table_id: int, schema_version: int) -> bool:
        """True when ``table_id`` existed and no longer does at ``schema_version`` (truncated away or
        dropped). A DML that writes such a table id and commits after that DDL (TiDB lets one whose
        statement saw the older schema do so) changed nothing anybody can read: TiDB shows the
        truncated or dropped table to no one, and TiDB Binlog drops these mutations too."""
        tv = self.version_at(table_id, schema_version)
        return tv is not None and tv.table is None

    def table_at(self, table_id: int, schema_version: int) -> TableInfo:
        """The TableInfo to decode a DML on ``table_id`` written at ``schema_version`` with.

        Raises :class:`HistoryError` when the history has no live definition for it.
        """
        v = self.version_at(table_id, schema_version)
        if v is None or v.table is None:
            state = "was dropped" if v is not None else "is unknown"
            raise HistoryError(f"table id {table_id} {state} at schema version {schema_version} "
                               f"(the DDL history has {len(self.jobs)} jobs)")
        return v.table

    def done_by(self, ts: int) -> list[Job]:
        """The jobs in effect at upstream ``ts`` (:meth:`placed_ts`), in schema-version order."""
        return [j for j in self.jobs.values() if 0 < self.placed_ts(j) <= ts]

    def tables_at(self, ts: int) -> list[tuple[TableVersion, int]]:
        """Every table alive once the jobs done by ``ts`` took effect: its definition then, and the
        ts (:meth:`placed_ts`) of the job that began its table id (CREATE, TRUNCATE's new id)."""
        out = []
        for tid, vs in self._versions.items():
            done = [v for v in vs if 0 < self.placed_ts(v.job) <= ts]
            gone_on = self._went_on.get(tid)
            if gone_on is not None and 0 < self.placed_ts(gone_on) <= ts:
                continue   # its table goes on under another id
            if done and done[-1].table is not None:
                first = self._lineage(tid)[0]
                out.append((done[-1], self.placed_ts(first.job)))
        return sorted(out, key=lambda p: (p[0].db, p[0].table.name if p[0].table else ""))

    def began(self, job: Job) -> int:
        """The first schema version ``job`` can have published: one above every job done before it
        started (``real_start_ts``; exact while no other DDL runs at the same time)."""
        started = job.real_start_ts or job.start_ts
        return 1 + max((k.binlog.schema_version for k in self.jobs.values()
                        if k.id != job.id and 0 < k.binlog.finished_ts < started), default=0)

    def before_job(self, job: Job) -> TableVersion | None:
        """The definition of ``job``'s table just before the job began (:meth:`began`)."""
        info = job.binlog.table_info
        tid = info.id if info is not None and job.type not in (DROP_TABLE, DROP_VIEW) else job.table_id
        return self.version_at(tid, min(self.began(job), job.binlog.schema_version) - 1)

    def partition_removals(self, table_id: int) -> list[Job]:
        """The DROP, TRUNCATE and EXCHANGE PARTITION jobs of the partitioned table ``table_id``, in
        schema-version order."""
        seen: dict[int, Job] = {}
        for v in self._versions.get(table_id, []):
            info = v.job.binlog.table_info
            if v.job.type in PARTITION_REMOVALS or (v.job.type == EXCHANGE_PARTITION and info is not None
                                                    and info.id == table_id):
                seen.setdefault(v.job.id, v.job)
        return list(seen.values())

    def lineage_ids(self, table_id: int) -> list[int]:
        """``table_id`` and every id its table had before (:meth:`continued_from`), oldest first."""
        ids = [table_id]
        while ids[-1] in self._continues and len(ids) < 64:
            ids.append(self._continues[ids[-1]])
        return ids[::-1]

    def continued_from(self, table_id: int) -> int | None:
        """The table id whose table ``table_id`` goes on with, rows and all (ALTER TABLE … PARTITION BY,
        REMOVE PARTITIONING), None when its table began with it."""
        return self._continues.get(table_id)

    def _lineage(self, table_id: int) -> list[TableVersion]:
        """The definitions of the table ``table_id`` is now, through every id it had before
        (:meth:`continued_from`), oldest first."""
        out: list[TableVersion] = []
        for tid in self.lineage_ids(table_id):
            out.extend(self._versions.get(tid, []))
        return out

    def last_table(self, table_id: int, ts: int) -> TableInfo | None:
        """The newest definition of ``table_id`` done by ``ts`` (before its drop, if it was dropped)."""
        live = [v.table for v in self._lineage(table_id) if 0 < self.placed_ts(v.job) <= ts and v.table]
        return live[-1] if live else None

    def column_past(self, table_id: int, ts: int) -> ColumnPast:
        """What rows of ``table_id`` written before ``ts`` hold for the columns it has at ``ts``
        (:class:`ColumnPast`)."""
        done = [v for v in self._lineage(table_id) if 0 < self.placed_ts(v.job) <= ts]
        if not done or done[-1].table is None:
            return ColumnPast()
        seen = {c.id for c in done[0].table.columns} if done[0].table is not None else set()
        born: dict[int, int] = {}
        came_from: dict[int, tuple[tuple[ColumnInfo, ColumnInfo], ...]] = {}
        for prev, v in zip(done, done[1:]):
            if v.table is None:
                continue
            for old, new in replaced_columns(prev.table, v.job, v.table):
                came_from[new.id] = (*came_from.pop(old.id, ()), (old, new))
            for c in v.table.columns:
                if c.id not in seen and c.id not in came_from:
                    born[c.id] = self.placed_ts(v.job)
                seen.add(c.id)
        final = done[-1].table.columns
        # a rewritten column was born with the column its rewrites began from (an ADD, then a MODIFY)
        born.update({c.id: born[came_from[c.id][0][0].id] for c in final
                     if c.id in came_from and came_from[c.id][0][0].id in born})
        return ColumnPast({c.name: born[c.id] for c in final if c.id in born},
                          {c.name: came_from[c.id] for c in final if c.id in came_from})

    def names_of(self, job: Job) -> tuple[str, str]:
        """The (schema, table) names TiDB Binlog's drainer gives a DDL job, as they were created (not
        lower-cased): the schema's; the table's after the job (the new name of a rename), the dropped
        one's for a drop, "" for a job on the schema itself."""
        db = self._dbs.get(job.schema_id) or job.schema_name
        info = job.binlog.table_info
        if info is not None and job.type not in (DROP_TABLE, DROP_VIEW):
            return db, info.name
        if not job.table_id:
            return db, ""
        before = self.version_at(job.table_id, job.binlog.schema_version - 1)
        return db, before.table.name if before is not None and before.table is not None else job.table_name

    def versions(self, table_id: int) -> list[TableVersion]:
        """Every definition of ``table_id`` in schema-version order."""
        return list(self._versions.get(table_id, []))

    def job(self, job_id: int) -> Job:
        """The done job with this id; :class:`JobNotInHistory` when the history lacks it."""
        job = self.jobs.get(job_id)
        if job is None:
            raise JobNotInHistory(f"DDL job {job_id} is not in the upstream's DDL history (or not done)")
        return job

    def ended_by(self, job_id: int) -> list[TableVersion]:
        """The definitions each table ended by job ``job_id`` had just before it (DROP DATABASE)."""
        out = []
        for vs in self._versions.values():
            for i, v in enumerate(vs):
                if v.job.id == job_id and v.table is None and i and vs[i - 1].table is not None:
                    out.append(vs[i - 1])
        return out
