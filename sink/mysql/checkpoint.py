"""The downstream checkpoint, kept exactly as TiDB Binlog's drainer keeps it, so that either can
continue what the other left:

``<schema>.checkpoint(clusterID bigint unsigned primary key, checkPoint MEDIUMTEXT)``, one row per
upstream cluster, ``checkPoint`` a JSON object ``{"consistent": bool, "commitTS": ts, "ts-map": {},
"schema-version": n}``. ``consistent`` is false while a run applies (the downstream may hold part
of a transaction batch beyond ``commitTS``) and true once a run's range is completely applied.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pymysql

from sink.mysql.statements import quote
from sink.mysql.target import MySQLTargetError

DDL_AHEAD_KEY = "binlake-ddl-ahead"


class CheckpointFormatError(MySQLTargetError):
    """The checkpoint row exists but is not TiDB Binlog's JSON."""

    transient = False


@dataclass(frozen=True)
class Checkpoint:
    """One cluster's checkpoint row."""

    commit_ts: int
    consistent: bool
    ts_map: dict[str, int] = field(default_factory=dict)
    schema_version: int = 0
    ddl_ahead: tuple[int, ...] = ()   # DDL jobs applied before their DDL binlog, which is after commitTS

    def to_json(self) -> str:
        """The ``checkPoint`` column text (TiDB Binlog's key names; binlake's ``binlake-ddl-ahead``
        only while it lists a job: TiDB Binlog ignores a key it does not know)."""
        doc: dict[str, Any] = {"consistent": self.consistent, "commitTS": self.commit_ts, "ts-map": self.ts_map,
                               "schema-version": self.schema_version}
        if self.ddl_ahead:
            doc[DDL_AHEAD_KEY] = list(self.ddl_ahead)
        return json.dumps(doc)

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """Read a ``checkPoint`` column; :class:`CheckpointFormatError` when it is not the JSON above."""
        try:
            obj: Any = json.loads(text)
            if not isinstance(obj, dict):
                raise TypeError("not an object")
            ts = obj.get("commitTS", 0)
            consistent = obj.get("consistent", False)
            if not isinstance(ts, int) or isinstance(ts, bool) or not isinstance(consistent, bool):
                raise TypeError("commitTS must be a number and consistent a boolean")
            version = obj.get("schema-version", 0)
            ahead = tuple(int(j) for j in obj.get(DDL_AHEAD_KEY) or ())
            return cls(ts, consistent, dict(obj.get("ts-map") or {}), int(version or 0), ahead)
        except (ValueError, TypeError) as e:
            raise CheckpointFormatError(f"checkpoint row is not TiDB Binlog's JSON ({e}): {text[:200]!r}") from None


class CheckpointTable:
    """``<schema>.<table>`` on the downstream, read and written through ``conn`` (autocommit off:
    :meth:`save` commits)."""

    def __init__(self, conn: Any, cluster_id: int, schema: str = "tidb_binlog", table: str = "checkpoint") -> None:
        self.conn = conn
        self.cluster_id = cluster_id
        self.name = f"{quote(schema)}.{quote(table)}"
        self.schema = schema
        self.table = table

    def exists(self) -> bool:
        """True when the table is there (a read: a dry run must not create it)."""
        try:
            with self.conn.cursor() as cur:
                cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                            (self.schema, self.table))
                row = cur.fetchone()
            self.conn.commit()
        except pymysql.Error as e:
            raise MySQLTargetError(f"cannot look for the checkpoint table {self.name}: {e}") from None
        return row is not None

    @staticmethod
    def sole_cluster(conn: Any, schema: str = "tidb_binlog", table: str = "checkpoint") -> int | None:
        """The cluster id of the table's only row (TiDB's recovery without PD); None unless exactly one."""
        name = f"{quote(schema)}.{quote(table)}"
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT clusterID FROM {name} LIMIT 2")
                rows = cur.fetchall()
        except pymysql.Error:
            return None
        finally:
            conn.commit()
        return int(rows[0][0]) if len(rows) == 1 else None

    def ensure(self) -> None:
        """Create the schema and table when missing (TiDB Binlog's DDL)."""
        try:
            with self.conn.cursor() as cur:
                cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(self.schema)}")
                cur.execute(f"CREATE TABLE IF NOT EXISTS {self.name}"
                            "(clusterID bigint unsigned primary key, checkPoint MEDIUMTEXT)")
            self.conn.commit()
        except pymysql.Error as e:
            raise MySQLTargetError(f"cannot create the checkpoint table {self.name}: {e}") from None

    def load(self) -> Checkpoint | None:
        """This cluster's checkpoint; None when there is none (or its commitTS is 0, as TiDB reads it)."""
        try:
            with self.conn.cursor() as cur:
                cur.execute(f"SELECT checkPoint FROM {self.name} WHERE clusterID = %s", (self.cluster_id,))
                row = cur.fetchone()
            self.conn.commit()
        except pymysql.Error as e:
            raise MySQLTargetError(f"cannot read the checkpoint table {self.name}: {e}") from None
        if row is None:
            return None
        cp = Checkpoint.parse(row[0])
        return cp if cp.commit_ts else None

    def save(self, cp: Checkpoint) -> None:
        """Replace this cluster's row with ``cp`` and commit."""
        try:
            with self.conn.cursor() as cur:
                cur.execute(f"REPLACE INTO {self.name} (clusterID, checkPoint) VALUES (%s, %s)",
                            (self.cluster_id, cp.to_json()))
            self.conn.commit()
        except pymysql.Error as e:
            raise MySQLTargetError(f"cannot save the checkpoint {cp.to_json()} in {self.name}: {e}") from e
