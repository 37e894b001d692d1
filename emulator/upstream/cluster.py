"""An emulated TiDB cluster: a PD-compatible TSO, a shared catalog and MVCC store, one or more TiDB
servers (each with its own PumpsClient) and the TiDB-compatible status HTTP API.

Python API for tests::

    with Cluster(registry="file:///tmp/reg.json") as c:   # TSO and status API on free ports
        c.server(0).execute("create table t (id int primary key, v varchar(8))")
        ts = c.server(1).execute("insert into t values (1, 'a')")[0].commit_ts
        c.snapshot(ts)          # {"test.t": [{"id": 1, "v": "a"}]}
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

from transform.codec import mysqltypes as mt
from transform.codec.model import HistoryInfo, Job
from upstream import ddl as ddlmod
from upstream import gojson, keys
from upstream.catalog import Catalog, DBInfo, InfoSchema, TableEntry
from upstream.errors import SQLError
from upstream.exprs import now_utc
from upstream.kv import MVCCStore
from upstream.server import TiDBServer
from upstream.sql import DDL
from upstream.tso import TimestampOracle, serve_tso
from upstream.txn import materialize

log = logging.getLogger(__name__)

DEFAULT_CLUSTER_ID = 6_000_000_000_000_000_001
JOB_STATE_SYNCED = 6


class Cluster:
    """The shared state of the emulated TiDB servers, plus their TSO and status API servers."""

    def __init__(self, *, registry: str | None = None, cluster_id: int = DEFAULT_CLUSTER_ID, servers: int = 1,
                 tso_addr: str | None = "127.0.0.1:0", status_addr: str | None = "127.0.0.1:0",
                 clustered_default: bool = False, ignore_error: bool = False,
                 pump_client_options: dict[str, Any] | None = None, first_id: int = 100,
                 drop_column_delete_only_binlog: bool = True, pump_client_process: bool = False,
                 pump_client_cpus: set[int] | None = None, mysql_addr: str | None = None) -> None:
        self.cluster_id = cluster_id
        self.clustered_default = clustered_default
        self.drop_column_delete_only_binlog = drop_column_delete_only_binlog
        self.oracle = TimestampOracle()
        self.catalog = Catalog(first_id)
        self.kv = MVCCStore()
        self.commit_mutex = threading.Lock()
        self.ddl_lock = threading.RLock()
        self._seq = 0
        self.tso_server = None
        self.tso_url = ""
        if tso_addr is not None:
            self.tso_server, port = serve_tso(tso_addr, cluster_id, self.oracle)
            self.tso_url = f"http://{tso_addr.rsplit(':', 1)[0]}:{port}"
        self._bootstrap()
        self.servers = [TiDBServer(self, i, registry, ignore_error, pump_client_options, pump_client_process,
                                   pump_client_cpus) for i in range(servers)]
        self.status = None
        self.status_url = ""
        if status_addr is not None:
            from upstream.status_api import StatusServer
            self.status = StatusServer(self, status_addr)
            self.status_url = self.status.url
        self.mysql = None
        self.mysql_dsn = ""
        if mysql_addr is not None:
            from upstream.mysql_port import MySQLPort
            try:
                self.mysql = MySQLPort(self, mysql_addr)
            except BaseException:
                self.close()
                raise
            self.mysql_dsn = self.mysql.dsn

    # ---- timestamps and schema ----------------------------------------------------------------

    def ts(self) -> int:
        """A fresh TSO."""
        return self.oracle.ts()

    def begin_ts(self) -> tuple[int, InfoSchema]:
        """A start ts and the schema in force at it (atomic with respect to commits and DDL)."""
        with self.commit_mutex:
            return self.oracle.ts(), self.catalog.current()

    def _bootstrap(self) -> None:
        """Create database ``test`` as TiDB's bootstrap does (a history job, no binlog)."""
        db = DBInfo(self.catalog.gen_ids(1)[0], "test")
        job_id = self.catalog.gen_ids(1)[0]
        ts = self.ts()
        schema = self.catalog.current()
        new = schema.derive(schema.version + 1, ts, dbs={"test": db})
        job = self._job(job_id, ddlmod.CREATE_SCHEMA, db.id, 0, "test", "", mt.STATE_PUBLIC,
                        "CREATE DATABASE IF NOT EXISTS test", new.version, db, None, ts, ts, ts)
        self.catalog.install(new, job)

    def _job(self, job_id: int, action: int, schema_id: int, table_id: int, schema_name: str, table_name: str,
             schema_state: int, query: str, version: int, db: DBInfo | None, table: Any, start_ts: int,
             real_start_ts: int, finished_ts: int) -> Job:
        self._seq += 1
        return Job(id=job_id, type=action, schema_id=schema_id, table_id=table_id, schema_name=schema_name,
                   table_name=table_name, state=JOB_STATE_SYNCED, query=query,
                   binlog=HistoryInfo(version, db.to_json() if db else None, table, finished_ts),
                   schema_state=schema_state, start_ts=start_ts, real_start_ts=real_start_ts,
                   extra={"seq_num": self._seq, "trace_info": {"connection_id": 0, "session_alias": ""}})

    # ---- DDL ---------------------------------------------------------------------------------

    def run_ddl(self, server: TiDBServer, stmt: DDL, db: str | None,
                clustered_default: bool) -> tuple[int, int, int] | None:
        """Run one DDL job on ``server`` (as the DDL owner); return (job id, txn start ts, commit ts).

        The job is recorded in the history and the DDL binlog written through ``server``'s pumps.
        """
        with self.ddl_lock:
            queued_ts = self.ts()
            schema = self.catalog.current()
            plan = ddlmod.plan(stmt, schema, self.catalog.gen_ids, db, clustered_default, now_utc)
            if plan is None:
                return None
            job_id = self.catalog.gen_ids(1)[0]
            real_start_ts = self.ts()
            update_ts = self.ts()
            info = plan.table_info
            tables = plan.tables
            if info is not None:
                info = dataclasses.replace(info, update_timestamp=update_ts)
                if tables is not None and info.id in tables:
                    tables = dict(tables)
                    tables[info.id] = TableEntry(tables[info.id].db, info)
            primary = keys.ddl_history_key(job_id)
            if plan.delete_only_binlog and self.drop_column_delete_only_binlog:
                start = self.ts()
                server.committer.commit_ddl(start, job_id, mt.STATE_DELETE_ONLY, stmt.text,
                                            keys.ddl_history_key(job_id) + b"\x00do", b"", None)
            start_ts = self.ts()
            version = schema.version + 1
            job = self._job(job_id, plan.action, plan.schema_id, plan.table_id, plan.schema_name, plan.table_name,
                            plan.schema_state, stmt.text, version, plan.db_info, info, queued_ts, real_start_ts,
                            start_ts)
            value = gojson.marshal_indent(gojson.job_json(job))

            def install(commit_ts: int) -> None:
                self.catalog.install(schema.derive(version, commit_ts, plan.dbs, tables), job)

            def check() -> None:
                if info is None or plan.table_id not in schema.tables:
                    return
                rows = (materialize(info, row) for _, _, row in self.kv.scan_table(info.id, self.ts()))
                ddlmod.check_existing_rows(schema.tables[plan.table_id].info, info, rows)

            commit_ts = server.committer.commit_ddl(start_ts, job_id, plan.schema_state, stmt.text, primary,
                                                    value, install, check)
            return job_id, start_ts, commit_ts

    # ---- reads -------------------------------------------------------------------------------

    def snapshot(self, ts: int | None = None) -> dict[str, list[dict[str, Any]]]:
        """Every table's rows as of ``ts`` (default: now), ``{"db.table": [{column: value}, …]}``.

        Rows are in handle (key) order; values are the Python column values of ``transform.codec.values``;
        tables keyed by ``_tidb_rowid`` also carry that handle. ``SQLError`` if ``ts`` is ahead of the TSO.
        """
        if ts is None:
            ts = self.ts()
        if ts > self.oracle.last():
            raise SQLError(f"ts {ts} is ahead of the TSO ({self.oracle.last()})")
        schema = self.catalog.at(ts)
        return {f"{e.db.name}.{e.info.name}": self.table_rows(e, ts)
                for e in sorted(schema.tables.values(), key=lambda e: (e.db.name, e.info.name))}

    def table_rows(self, entry: TableEntry, ts: int, with_handle: bool = True) -> list[dict[str, Any]]:
        """One table's rows as of ``ts`` in handle order, ``{column: value}``; a table keyed by
        ``_tidb_rowid`` also carries that handle when ``with_handle``. ``SQLError`` if ``ts`` is ahead
        of the TSO."""
        t = entry.info
        rows = []
        with self.commit_mutex:
            if ts > self.oracle.last():
                raise SQLError(f"ts {ts} is ahead of the TSO ({self.oracle.last()})")
            for _, handle, row in self.kv.scan_table(t.id, ts):
                full = materialize(t, row)
                obj = {c.name: full[c.id] for c in t.columns}
                if with_handle and t.has_extra_handle:
                    obj[mt.EXTRA_HANDLE_NAME] = handle
                rows.append(obj)
        return rows

    def table(self, db: str, name: str) -> Any:
        """The current TableInfo of ``db.name``."""
        return self.catalog.current().table(db, name).info

    # ---- servers and lifecycle ----------------------------------------------------------------

    def server(self, i: int = 0) -> TiDBServer:
        """The i-th emulated TiDB server."""
        return self.servers[i]

    def execute(self, script: str, server: int = 0, db: str | None = "test") -> list[Any]:
        """Run a script on one server in a fresh session."""
        return self.servers[server].execute(script, db)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until every server's commits under way (``Session.commit_async``) have finished and
        its asynchronous commit binlogs are written; False if ``timeout`` ran out first."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())
        return all(s.committer.flush(left()) and s.binlog.flush(left()) for s in self.servers)

    def close(self) -> None:
        """Stop the status API and TSO, close every server's pump client."""
        if self.status is not None:
            self.status.stop()
        if self.mysql is not None:
            self.mysql.stop()
        for s in self.servers:
            s.close()
        if self.tso_server is not None:
            self.tso_server.stop(grace=0.5).wait()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
