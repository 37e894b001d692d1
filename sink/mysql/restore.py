"""``binlake restore --into mysql://…`` (or ``tidb://…``): the upstream's tables at a ts, rebuilt in a
MySQL-protocol database.

- Tables: every DDL job done by the ts is replayed as the MySQL sink applies it (``MySQLSink.apply_ddl``:
  the table filter, TiDB-only syntax removed, the upstream's charset), so each table has the columns,
  types, keys and indexes the MySQL sink would have given it, renames, truncates and drops included.
  A job the target cannot take stops the restore naming it; ``[syncer] ignore-txn-commit-ts`` skips
  jobs by their ``FinishedTS``, as a drain skips them by commit ts. The checkpoint row goes where
  ``[syncer.to.checkpoint]`` says.
  The databases the jobs create must not exist in the target (``--replace`` drops them first): a
  replayed CREATE TABLE over an existing table would be ignored as "already done". Each restored
  table is then checked to have the columns the upstream had at the ts.
- Rows: Spark tasks load them with multi-row INSERTs (``statements.insert_statements``, the MySQL
  sink's literals), a commit per statement, foreign-key checks off, in parallel.
- Checkpoint: TiDB Binlog's checkpoint row at the ts (``consistent = true``), so ``binlake drain
  --sink mysql`` continues from there while the pumps still hold what follows.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa

from sink.mysql.checkpoint import Checkpoint, CheckpointTable
from sink.mysql.config import MySQLSettings
from sink.mysql.ddl import plan_ddl
from sink.mysql.loader import ApplyError
from sink.mysql.sink import MySQLOptions, MySQLSink
from sink.mysql.statements import TargetTable, insert_statements, literal_sql_mode, quote
from sink.mysql.target import MySQLTarget, TLSFiles
from sink.restore import RestoreError, RestorePlan, RestoreTarget, RowWriter, WriterSession
from transform.changes import DDLJob
from transform.history import DROP_TABLE, RECOVER_TABLE, RENAME_TABLE

ROWS_PER_INSERT = 1_000


class _Session(WriterSession):
    def __init__(self, writer: MySQLRowWriter) -> None:
        self.writer = writer
        self.conn = writer.target.connect()
        with self.conn.cursor() as cur:
            cur.execute("SELECT @@SESSION.sql_mode")
            literal_sql_mode(cur, str(cur.fetchone()[0]))
            cur.execute("SET SESSION foreign_key_checks = 0")

    def write(self, table: int, rows: pa.Table) -> None:
        target = self.writer.tables[table]
        with self.conn.cursor() as cur:
            for sql in insert_statements(target, rows, ROWS_PER_INSERT):
                cur.execute(sql)
                self.conn.commit()

    def close(self) -> bytes:
        self.conn.close()
        return b""


@dataclass(frozen=True)
class MySQLRowWriter(RowWriter):
    """Loads rows into the restored tables (by the plan's table index)."""

    target: MySQLTarget
    tables: dict[int, TargetTable]

    def open(self) -> WriterSession:
        return _Session(self)


def brought_back(jobs: Sequence[DDLJob]) -> list[DDLJob]:
    """``jobs`` (in commit order) as a restore replays them: a DROP TABLE that a RECOVER or FLASHBACK
    TABLE undid later is left out, and the RECOVER becomes a RENAME TABLE when it gave the table a new
    name, else is left out too (a downstream cannot bring rows back; a restore loads them from the lake)."""
    skipped: set[int] = set()
    instead: dict[int, DDLJob] = {}
    for i, ddl in enumerate(jobs):
        info = ddl.job.binlog.table_info
        if ddl.job.type != RECOVER_TABLE or info is None:
            continue
        drop = next((k for k in range(i - 1, -1, -1) if k not in skipped and jobs[k].job.type == DROP_TABLE
                     and jobs[k].job.table_id == info.id), None)
        if drop is None:
            continue
        old = jobs[drop].job
        skipped.add(drop)
        if old.table_name.lower() == info.name.lower() and old.schema_name.lower() == ddl.job.schema_name.lower():
            skipped.add(i)
            continue
        rename = (f"RENAME TABLE {quote(old.schema_name)}.{quote(old.table_name)} "
                  f"TO {quote(ddl.job.schema_name)}.{quote(info.name)}")
        instead[i] = dataclasses.replace(ddl, job=dataclasses.replace(ddl.job, type=RENAME_TABLE, query=rename))
    return [instead.get(i, ddl) for i, ddl in enumerate(jobs) if i not in skipped]


class MySQLRestore(RestoreTarget):
    """A MySQL, MariaDB or TiDB server (``tidb://``: DDL goes unchanged)."""

    def __init__(self, target: MySQLTarget, tidb: bool, settings: MySQLSettings | None = None) -> None:
        self.target = target
        self.tidb = tidb
        self.settings = settings or MySQLSettings()
        self.conn: Any = None

    @classmethod
    def from_uri(cls, uri: str, settings: MySQLSettings) -> MySQLRestore:
        """The server ``uri`` names, over the TLS of the MySQL sink's ``[syncer.to.security]``."""
        from sink.mysql.plugin import TO_SECURITY

        tls = TLSFiles.of(settings.to.security, TO_SECURITY)   # the restore target is the MySQL sink's kind
        return cls(MySQLTarget.from_dsn(uri, tls=tls), urlsplit(uri).scheme == "tidb", settings)

    def describe(self) -> str:
        return f"{'tidb' if self.tidb else 'mysql'}://{self.target.describe()}"

    def _connection(self) -> Any:
        if self.conn is None:
            self.conn = self.target.connect()
        return self.conn

    def _databases(self, plan: RestorePlan) -> list[str]:
        """The databases the replayed jobs create or write."""
        names: dict[str, None] = {}
        for job in (d.job for d in brought_back(plan.jobs)):
            if job.schema_name and not plan_ddl(job, plan.table_filter, self.tidb).skip:
                names.setdefault(job.schema_name)
        for t in plan.tables:
            names.setdefault(t.db)
        return list(names)

    def prepare(self, plan: RestorePlan, replace: bool) -> RowWriter:
        conn = self._connection()
        dbs = self._databases(plan)
        with conn.cursor() as cur:
            cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
            have = {str(r[0]).lower() for r in cur.fetchall()}
            present = [d for d in dbs if d.lower() in have]
            if present and not replace:
                raise RestoreError(f"{self.describe()} already has the database(s) {', '.join(present)} this "
                                   f"restore creates: restore into a server without them, or give --replace "
                                   f"to drop them first")
            for d in present:
                cur.execute(f"DROP DATABASE {quote(d)}")
        conn.commit()
        sink = MySQLSink(self.target, MySQLOptions(settings=self.settings, tidb=self.tidb,
                                                   table_filter=plan.table_filter))
        skip = set(self.settings.ignore_txn_commit_ts)
        try:
            for ddl in brought_back(plan.jobs):
                if ddl.commit_ts in skip:
                    continue
                try:
                    sink.apply_ddl(ddl)
                except ApplyError as e:
                    raise RestoreError(f"replaying the upstream's DDL job {ddl.job.id} on {self.describe()}: {e} "
                                       f"(at ts {ddl.commit_ts})") from None
        finally:
            sink.close()
        tables = {i: TargetTable.of(t.db, t.info) for i, t in enumerate(plan.tables)}
        self._check_columns(tables)
        return MySQLRowWriter(self.target, tables)

    def _check_columns(self, tables: dict[int, TargetTable]) -> None:
        """:class:`RestoreError` naming a table the replayed DDL left without the upstream's columns."""
        with self._connection().cursor() as cur:
            for t in tables.values():
                cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                            "AND TABLE_NAME = %s", (t.db, t.name))
                have = {str(r[0]).lower() for r in cur.fetchall()}
                missing = [c for c in t.columns if c.lower() not in have]
                if not have or missing:
                    what = "does not exist" if not have else f"lacks the column(s) {', '.join(missing)}"
                    raise RestoreError(f"after replaying the DDL history, {t.db}.{t.name} {what} in "
                                       f"{self.describe()}: the upstream's DDL did not apply there as it did upstream")

    def finish(self, plan: RestorePlan, results: Sequence[bytes]) -> list[str]:
        where = self.settings.to.checkpoint
        table = CheckpointTable(self._connection(), plan.cluster_id, where.schema_, where.table)
        table.ensure()
        table.save(Checkpoint(plan.ts, True, schema_version=plan.schema_version))
        return [f"checkpoint {where.schema_}.{where.table} of cluster {plan.cluster_id} at {plan.ts} "
                f"(consistent): binlake drain --sink mysql continues from it"]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
