"""The shared catalog of an emulated cluster: databases and tables per schema version, the global id
allocator, per-table row-id allocators and the DDL history.

Promises:
- ``InfoSchema`` objects are immutable snapshots; a DDL installs a new one with version + 1.
- ``at(ts)`` gives the schema in force at a TSO (the newest one committed at or before ``ts``).
- Ids come from one global allocator (databases, tables and DDL jobs share it, as in TiDB).
"""
from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

from transform.codec import mysqltypes as mt
from transform.codec.model import Job, TableInfo
from upstream.errors import SQLError


@dataclass(frozen=True)
class DBInfo:
    """A database (TiDB ``model.DBInfo``)."""

    id: int
    name: str
    charset: str = "utf8mb4"
    collate: str = "utf8mb4_bin"
    state: int = mt.STATE_PUBLIC

    def to_json(self) -> dict:
        """TiDB's DBInfo JSON."""
        return {"id": self.id, "db_name": {"O": self.name, "L": self.name.lower()}, "charset": self.charset,
                "collate": self.collate, "state": self.state, "policy_ref_info": None}


@dataclass(frozen=True)
class TableEntry:
    """A table and the database it belongs to."""

    db: DBInfo
    info: TableInfo


@dataclass(frozen=True)
class InfoSchema:
    """One schema version: every database and table, immutable."""

    version: int
    commit_ts: int
    dbs: dict[str, DBInfo] = field(default_factory=dict)            # lower-case name -> db
    tables: dict[int, TableEntry] = field(default_factory=dict)     # table id -> entry

    def db(self, name: str) -> DBInfo:
        """The database, or ``SQLError`` Unknown database."""
        db = self.dbs.get(name.lower())
        if db is None:
            raise SQLError(f"[schema:1049]Unknown database '{name}'")
        return db

    def find(self, db: str, table: str) -> TableEntry | None:
        """The table ``db.table`` (case-insensitive), or None."""
        d = self.dbs.get(db.lower())
        if d is None:
            return None
        low = table.lower()
        for e in self.tables.values():
            if e.db.id == d.id and e.info.name.lower() == low:
                return e
        return None

    def table(self, db: str, table: str) -> TableEntry:
        """The table, or ``SQLError`` ``[schema:1146]Table 'db.table' doesn't exist``."""
        e = self.find(db, table)
        if e is None:
            raise SQLError(f"[schema:1146]Table '{db}.{table}' doesn't exist")
        return e

    def tables_of(self, db_id: int) -> list[TableEntry]:
        """Tables of one database, by id."""
        return sorted((e for e in self.tables.values() if e.db.id == db_id), key=lambda e: e.info.id)

    def derive(self, version: int, commit_ts: int, dbs: dict[str, DBInfo] | None = None,
               tables: dict[int, TableEntry] | None = None) -> InfoSchema:
        """A new snapshot sharing unchanged maps."""
        return InfoSchema(version, commit_ts, self.dbs if dbs is None else dbs,
                          self.tables if tables is None else tables)


class Catalog:
    """Schema versions, ids, auto ids and DDL history of one cluster; thread-safe."""

    def __init__(self, first_id: int = 100) -> None:
        self._lock = threading.Lock()
        self._next_id = first_id
        self._versions: list[InfoSchema] = [InfoSchema(0, 0)]
        self._version_ts: list[int] = [0]
        self._jobs: list[Job] = []
        self._auto: dict[int, int] = {}

    # ---- ids ---------------------------------------------------------------------------------

    def gen_ids(self, n: int = 1) -> list[int]:
        """Allocate ``n`` global ids (TiDB's ``GenGlobalIDs``)."""
        with self._lock:
            first = self._next_id
            self._next_id += n
            return list(range(first, first + n))

    def alloc_auto_ids(self, table_id: int, n: int = 1) -> int:
        """Reserve ``n`` consecutive auto ids (``_tidb_rowid`` / AUTO_INCREMENT) of a table; return the first."""
        with self._lock:
            base = self._auto.get(table_id, 0)
            self._auto[table_id] = base + n
            return base + 1

    def rebase_auto_id(self, table_id: int, used: int) -> None:
        """Make later auto ids larger than an explicitly inserted ``used`` value."""
        with self._lock:
            if used > self._auto.get(table_id, 0):
                self._auto[table_id] = used

    # ---- versions ----------------------------------------------------------------------------

    def current(self) -> InfoSchema:
        """The newest schema."""
        return self._versions[-1]

    def at(self, ts: int) -> InfoSchema:
        """The schema in force at ``ts`` (newest committed at or before it)."""
        with self._lock:
            i = bisect.bisect_right(self._version_ts, ts) - 1
            return self._versions[max(i, 0)]

    def install(self, schema: InfoSchema, job: Job | None) -> None:
        """Make ``schema`` current (its version must be the next one) and record the finished job."""
        with self._lock:
            if schema.version != self._versions[-1].version + 1:
                raise RuntimeError(f"schema version {schema.version} does not follow {self._versions[-1].version}")
            self._versions.append(schema)
            self._version_ts.append(schema.commit_ts)
            if job is not None:
                self._jobs.append(job)
            if schema.tables is not self._versions[-2].tables:
                for tid in schema.tables:
                    self._auto.setdefault(tid, 0)

    def jobs(self) -> list[Job]:
        """Every finished DDL job, ascending id."""
        with self._lock:
            return sorted(self._jobs, key=lambda j: j.id)

