"""The MySQL sink: a run's transactions applied to MySQL, MariaDB or TiDB in commit order.

The run's rows come as a bounded ordered stream (:func:`transform.ordered.ordered_transactions`):
the driver holds one sorted Spark partition at a time. DML goes through the :class:`Loader`
(causality groups on parallel workers, ``txn_batch`` statements per downstream transaction); a DDL is
a barrier: everything before it is flushed, then it runs alone. The checkpoint row
(:mod:`sink.mysql.checkpoint`) is written with ``consistent = false`` and the last fully applied
commit_ts as the run goes (after a DDL, and after a flush at most once a second), and with
``consistent = true`` and the run's ``to_ts`` at the end. A run that finds ``consistent = false``
(the last one stopped uncleanly: some transactions after ``commitTS`` may be partly applied) runs
in safe mode, which makes re-applying them idempotent for rows with a primary or non-NULL unique key;
rows without one are made idempotent by their recorded progress (:mod:`sink.mysql.progress`: skipped
when already applied, where TiDB Binlog's safe mode applies them twice). It also skips transactions
at or below the checkpoint.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import pymysql

from schemas import secondary_binlog_pb2 as sb
from schemas.retry import retry
from sink.base import Sink, TableReport
from sink.errors import SinkError
from sink.mysql.checkpoint import Checkpoint, CheckpointTable
from sink.mysql.config import MySQLSettings
from sink.mysql.ddl import IGNORED_ERRORS, plan_ddl, split_statements, without_ignored
from sink.mysql.early import Reshape
from sink.mysql.loader import BACKOFF, RETRIES, ApplyError, Loader
from sink.mysql.loopback import ensure_marks
from sink.mysql.progress import Position, UnkeyedProgress, not_applied
from sink.mysql.relay import RelayLog, decode_dml
from sink.mysql.statements import DML, TargetTable, literal_sql_mode, number_unkeyed, quote, row_changes
from sink.mysql.target import MySQLTarget, MySQLTargetError, connection_lost
from sink.secondary import encode_ddl, encode_dml, python_rows
from transform import changes as ch
from transform import ddl as ddl_kinds
from transform.codec.model import TableInfo
from transform.ddl import UnreplicableDDLError
from transform.event_filter import EventFilter
from transform.filters import TableFilter
from transform.history import EXCHANGE_PARTITION
from transform.ordered import PerBundle, ordered_transactions

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class MySQLOptions:
    """How a run uses the MySQL sink: its drainer.toml settings and the run's own choices."""

    settings: MySQLSettings = field(default_factory=MySQLSettings)
    tidb: bool = False                  # db-type = "tidb": DDL goes unchanged
    table_filter: TableFilter = field(default_factory=TableFilter)
    ddl_retries: int = 5
    dry_run: bool = False               # reads only: nothing written to the downstream or the relay log
    checkpoint_target: MySQLTarget | None = None   # [syncer.to.checkpoint] type mysql/tidb: the row's database
    event_filter: EventFilter = field(default_factory=EventFilter)   # a run's DDL it ignores is not run


class MySQLSink(Sink):
    """Replicates into a MySQL-protocol database; the checkpoint lives there too, or in the database
    ``checkpoint_target`` names."""

    def __init__(self, target: MySQLTarget, options: MySQLOptions | None = None) -> None:
        self.target = target
        self.options = options or MySQLOptions()
        self.conn: Any = target.connect()
        cp = self.options.checkpoint_target
        try:
            self.checkpoint_conn: Any = cp.connect() if cp is not None else self.conn
        except BaseException:
            self.conn.close()
            raise
        self.table: CheckpointTable | None = None
        self.loaded: Checkpoint | None = None
        self.progress: UnkeyedProgress | None = None
        self.unkeyed_applied: dict[str, Position] = {}
        self.safe_mode_reason = ""
        self.relay: RelayLog | None = None
        self.ddl_ahead: tuple[int, ...] = ()   # jobs applied before their DDL binlog, which is still to come

    def load_checkpoint(self, cluster_id: int) -> None:
        """Open this cluster's checkpoint row (creating the table, except in a dry run, which reads a
        missing table as no checkpoint); other clusters' rows are theirs."""
        where = self.options.settings.to.checkpoint
        self.table = CheckpointTable(self.checkpoint_conn, cluster_id, where.schema_, where.table)
        self.progress = UnkeyedProgress(cluster_id, where.schema_, f"{where.table}_unkeyed")
        if self.options.dry_run:
            self.loaded = self.table.load() if self.table.exists() else None
            return
        self.table.ensure()
        self.loaded = self.table.load()
        self.ddl_ahead = self.loaded.ddl_ahead if self.loaded else ()
        self.progress.ensure(self.conn)
        self.unkeyed_applied = self.progress.load(self.conn)

    def checkpoint(self) -> int | None:
        """The checkpoint row's commitTS (also when ``consistent`` is false: the run resumes there)."""
        return self.loaded.commit_ts if self.loaded else None

    def _checkpoints(self) -> CheckpointTable:
        if self.table is None:
            raise SinkError("the MySQL sink needs load_checkpoint() before it writes")
        if self.options.dry_run:
            raise SinkError("a dry run writes nothing to the downstream")
        return self.table

    def _relay(self) -> RelayLog | None:
        relay = self.options.settings.relay
        if not relay.log_dir:
            return None
        if self.relay is None:
            self.relay = RelayLog(relay.log_dir, relay.max_file_size)
        return self.relay

    def _worker_connection(self) -> Any:
        """A loader worker's connection. On MySQL/MariaDB its transactions run at READ COMMITTED: the
        workers of a flush touch disjoint keys (causality), and REPEATABLE READ's gap locks made
        parallel multi-row REPLACE/DELETE … IN wait on each other and deadlock (retried, but slow).
        TiDB keeps its own default (READ COMMITTED needs its pessimistic mode), and so does a server
        that writes a statement-based binary log (InnoDB refuses READ COMMITTED there). Its session
        runs without ``NO_BACKSLASH_ESCAPES``, as the statements' literals expect, and without foreign
        key checks: TiDB enforced them, its binlog carries the rows a cascade changed, and a cascade
        downstream would act again, on rows the parallel workers may not have ordered as TiDB did."""
        conn = self.target.connect()
        with conn.cursor() as cur:
            cur.execute("SET SESSION foreign_key_checks = 0")
            if self.options.tidb:
                cur.execute("SELECT @@SESSION.sql_mode")
                sql_mode, read_committed = cur.fetchone()[0], False
            else:
                cur.execute("SELECT @@SESSION.sql_mode, @@log_bin, @@binlog_format")
                sql_mode, log_bin, binlog_format = cur.fetchone()
                read_committed = not log_bin or str(binlog_format).upper() != "STATEMENT"
            literal_sql_mode(cur, str(sql_mode))
            if read_committed:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        return conn

    def _loader(self, safe: bool, relay: RelayLog | None) -> Loader:
        """The workers of one apply; with ``loopback-control``, the mark rows they bump are written first."""
        s = self.options.settings
        if s.loopback_control:
            ensure_marks(self.conn, s.channel_id, s.worker_count)
        return Loader(self._worker_connection, s.worker_count, s.txn_batch, safe,
                      before_flush=relay.sync if relay is not None else None, merge=s.to.merge,
                      progress=self.progress, channel_id=s.channel_id if s.loopback_control else None,
                      observer=self.observer)

    def write(self, run: ch.RunBatch) -> list[TableReport]:
        """Apply every transaction and DDL of ``run`` in commit order; the checkpoint moves as it goes
        (and each transaction is in the relay log, synced, before any of it is applied)."""
        cps = self._checkpoints()
        start = self.checkpoint()
        if start is not None and run.from_ts > start:
            raise SinkError(f"the run ({run.from_ts}, {run.to_ts}] does not continue the downstream checkpoint "
                            f"{start}: transactions in ({start}, {run.from_ts}] would be missing")
        safe = self.options.settings.safe_mode
        if self.loaded is not None and not self.loaded.consistent:
            safe, self.safe_mode_reason = True, "the last run stopped before its range was applied"
        elif safe:
            self.safe_mode_reason = "safe-mode = true"
        floor = start if start is not None else run.from_ts
        if run.to_ts <= floor:
            return []   # the downstream is past this range already
        version = self.loaded.schema_version if self.loaded else 0
        ahead = set(self.loaded.ddl_ahead) if self.loaded else set()   # applied before their DDL binlog
        self.ddl_ahead = tuple(sorted(ahead))
        first = Checkpoint(floor, False, schema_version=version, ddl_ahead=tuple(sorted(ahead)))
        self._on_control(lambda: cps.save(first))
        relay = self._relay()
        if relay is not None:
            relay.reset()   # this run re-reads everything after the checkpoint from the pumps
        targets = {(tid, s.schema_version): TargetTable.of(s.db or tc.db, s.table)
                   for tid, tc in run.tables.items() for s in tc.segments}
        by_job = {d.job.id: d for d in run.ddl}
        skipped = set(self.options.settings.ignore_txn_commit_ts)   # a DDL skipped there is not run early either
        early = sorted((ts, job_id) for job_id, ts in run.ddl_needed.items()
                       if job_id not in ahead and by_job[job_id].commit_ts not in skipped)
        # table id → (version, TableInfo, db) of a DDL applied ahead: older rows take its shape
        shapes: dict[int, tuple[int, TableInfo, str]] = {}
        reshapes: dict[tuple[int, int], Reshape] = {}
        reports: dict[str, TableReport] = {}
        loader = self._loader(safe, relay)
        saved_at = time.monotonic()

        def shaped(tid: int, version: int) -> Reshape | None:
            shape = shapes.get(tid)
            if shape is None or version >= shape[0]:
                return None
            if (tid, version) not in reshapes:
                old = next(s for s in run.tables[tid].segments if s.schema_version == version)
                reshapes[(tid, version)] = Reshape.of(shape[2], old.table, shape[1])
            return reshapes[(tid, version)]

        def target_of(tid: int, version: int) -> TargetTable:
            r = shaped(tid, version)
            return targets[(tid, version)] if r is None else r.target

        def dml_rows(tid: int, version: int, rows: pa.Table) -> tuple[TargetTable, pa.Table]:
            r = shaped(tid, version)
            return (targets[(tid, version)], rows) if r is None else (r.target, r.rows(rows))

        # per bundle, the rows as written and as reshaped (a bundle may hold rows of both)
        dmls_of, shaped_dmls_of = (PerBundle(lambda tid, v, rows: list(row_changes(*dml_rows(tid, v, rows))))
                                   for _ in range(2))
        relay_rows_of, shaped_relay_rows_of = (PerBundle(lambda tid, v, rows: python_rows(*dml_rows(tid, v, rows)))
                                               for _ in range(2))

        def save(applied: int) -> None:
            nonlocal saved_at
            cp = Checkpoint(applied, False, schema_version=version, ddl_ahead=tuple(sorted(ahead)))
            self._on_control(lambda: cps.save(cp))
            saved_at = time.monotonic()
            if relay is not None:
                relay.purge(applied)

        def take_shape(ddl: ch.DDLJob) -> None:
            info = ddl.job.binlog.table_info
            if info is not None:
                for tid in {ddl.job.table_id, info.id}:
                    shapes[tid] = (ddl.job.binlog.schema_version, info, ddl.job.schema_name)

        for job_id in ahead:
            if job_id in by_job:
                take_shape(by_job[job_id])
        try:
            for txn in ordered_transactions(run):
                if txn.commit_ts <= floor or txn.commit_ts in self.options.settings.ignore_txn_commit_ts:
                    continue
                began = time.perf_counter()   # the item's hand-over time (SinkObserver.executed)
                if txn.ddl is not None:
                    loader.flush()
                    _refuse_late(run, txn.ddl)
                    if txn.ddl.job.id in ahead:   # applied before the transactions written under it
                        ahead.discard(txn.ddl.job.id)
                        for tid in [t for t, s in shapes.items() if s[0] == txn.ddl.job.binlog.schema_version]:
                            del shapes[tid]
                    else:
                        self._apply_ddl(txn.ddl, reports, relay)
                    self.observer.executed(time.perf_counter() - began)
                    version = max(version, txn.ddl.job.binlog.schema_version)
                    loader.end_txn(txn.commit_ts)
                    save(txn.commit_ts)
                    continue
                while early and early[0][0] <= txn.commit_ts:
                    ddl = by_job[early.pop(0)[1]]
                    loader.flush()
                    _refuse_late(run, ddl)
                    log.info("DDL job %d applied before its DDL binlog (%d): the transaction committed at %d was "
                             "written under its schema", ddl.job.id, ddl.commit_ts, txn.commit_ts)
                    if self._apply_ddl(ddl, reports, relay, relay_ts=txn.commit_ts - 1):
                        ahead.add(ddl.job.id)
                        take_shape(ddl)
                        version = max(version, ddl.job.binlog.schema_version)
                        save(max(loader.dispatched_ts, floor))
                parts = [(p, shaped(p.table_id, p.schema_version) is not None) for p in txn.tables]
                if relay is not None:
                    relay.append(encode_dml(txn.commit_ts, [
                        (target_of(p.table_id, p.schema_version), (shaped_relay_rows_of if s else relay_rows_of)(p))
                        for p, s in parts]))
                for dml in self._fresh(d for p, s in parts for d in (shaped_dmls_of if s else dmls_of)(p)):
                    name = f"{dml.table.db}.{dml.table.name}"
                    rows = (reports.get(name) or reports.setdefault(name, TableReport(table=name))).rows
                    loader.add(dml)
                    rows[dml.op] = rows.get(dml.op, 0) + 1
                loader.end_txn(txn.commit_ts)
                if loader.ready:   # applied while the next batch is built; the checkpoint follows what is done
                    loader.flush(wait=False)
                    if time.monotonic() - saved_at >= 1.0 and loader.applied_ts > floor:
                        save(loader.applied_ts)
                self.observer.executed(time.perf_counter() - began)
            loader.flush()
        finally:
            loader.close()
        save(max(loader.dispatched_ts, floor))
        self.ddl_ahead = tuple(sorted(ahead))
        return [reports[k] for k in sorted(reports)]

    def recover(self) -> tuple[int, int] | None:
        """TiDB's relay-log recovery, for when the upstream cannot be reached: if the checkpoint says
        ``consistent = false``, apply every relay-log record after ``commitTS`` in safe mode, then
        record the last one's commit_ts with ``consistent = true``. Returns (records applied, that
        commit_ts), or None when there was nothing to recover. A dry run only counts the records it
        would apply and the commit_ts it would reach."""
        relay = self._relay()
        if relay is None or self.loaded is None or self.loaded.consistent:
            return None
        floor = last = self.loaded.commit_ts
        applied = 0
        if self.options.dry_run:
            for binlog in relay.read():
                if binlog.commit_ts > floor:
                    last, applied = max(last, binlog.commit_ts), applied + 1
            return applied, last
        cps = self._checkpoints()
        loader = self._loader(True, None)
        try:
            for binlog in relay.read():
                if binlog.commit_ts <= floor:
                    continue
                if binlog.type == sb.DDL:
                    loader.flush()
                    d = binlog.ddl_data
                    self._run_ddl(d.schema_name or None, d.ddl_query.decode(), None, binlog.commit_ts)
                else:
                    for dml in self._fresh(decode_dml(binlog)):
                        loader.add(dml)
                last = max(last, binlog.commit_ts)
                applied += 1
            loader.flush()
        finally:
            loader.close()
        self.loaded = Checkpoint(last, True, schema_version=self.loaded.schema_version,
                                 ddl_ahead=self.loaded.ddl_ahead)
        cps.save(self.loaded)
        return applied, last

    def _fresh(self, dmls: Iterable[DML]) -> list[DML]:
        """One transaction's DMLs, numbered (``number_unkeyed``), without the unkeyed ones the
        downstream already has."""
        return not_applied(number_unkeyed(dmls), self.unkeyed_applied)

    def apply_ddl(self, ddl: ch.DDLJob) -> bool:
        """Run one DDL job as a run would (filtered, rewritten for MySQL, "already done" errors
        ignored), outside any run and whatever ``sync-ddl`` says (restore builds tables with it);
        False when it is skipped."""
        return self._apply_ddl(ddl, {}, None, in_run=False)

    def _apply_ddl(self, ddl: ch.DDLJob, reports: dict[str, TableReport], relay: RelayLog | None,
                   relay_ts: int = 0, in_run: bool = True) -> bool:
        """Run one DDL job (filtered, rewritten for MySQL); False when it is skipped, or when a run's
        ``sync-ddl`` is false or its binlog-filter-rule ignores the job. ``relay_ts``: the ts its
        relay-log record carries when that is not its own commit ts (a DDL run before the transaction
        at ``relay_ts + 1`` that needed it: relay recovery must not move the checkpoint past what it
        applied)."""
        job = ddl.job
        stmt = plan_ddl(job, self.options.table_filter, self.options.tidb, ddl.commit_ts)
        name = f"{job.schema_name}.{job.table_name}" if job.table_name else job.schema_name
        if in_run and not stmt.skip and not self.options.settings.sync_ddl:
            log.info("DDL at %d not run on the downstream (sync-ddl = false): %s", ddl.commit_ts, job.query)
            return False
        if in_run:
            stmt = without_ignored(stmt, ddl, self.options.event_filter)
        if stmt.skip:
            log.info("DDL at %d skipped (%s): %s", ddl.commit_ts, stmt.skip, job.query)
            return False
        if relay is not None:
            relay.append(encode_ddl(relay_ts or ddl.commit_ts, stmt.use, job.table_name, stmt.sql))
            relay.sync()
        self._run_ddl(stmt.use, stmt.sql, stmt.create_db, ddl.commit_ts)
        reports.setdefault(name, TableReport(table=name)).ddl.append(job.query)
        return True

    def _run_ddl(self, use: str | None, sql: str, create_db: str | None, commit_ts: int) -> None:
        """Execute one DDL; ``ddl_retries`` attempts a second apart while it fails with an
        OperationalError; an error saying it is already applied counts as done."""

        def attempt() -> None:
            # in autocommit mode: a DDL commits anyway, and MariaDB's EXCHANGE PARTITION waits forever
            # on a row lock of its own when the session's autocommit is off
            self.conn.commit()
            self.conn.autocommit(True)
            try:
                with self.conn.cursor() as cur:
                    if create_db:
                        cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote(create_db)} CHARACTER SET utf8mb4")
                    if use:
                        cur.execute(f"USE {quote(use)}")
                    for statement in split_statements(sql):   # a CREATE TABLES batch is several
                        cur.execute(statement)
            except pymysql.Error as e:
                code = e.args[0] if e.args and isinstance(e.args[0], int) else None
                if code not in IGNORED_ERRORS:
                    raise
                log.info("DDL at %d already applied (%s): %s", commit_ts, e, sql)
            finally:
                self.conn.autocommit(False)

        try:   # a dropped connection is retried on a new one; other errors a second apart on this one
            self._on_control(lambda: retry(attempt, attempts=self.options.ddl_retries, wait=1.0,
                                           on=pymysql.OperationalError, retry_if=lambda e: not connection_lost(e)))
        except pymysql.Error as e:
            raise ApplyError(f"DDL committed at {commit_ts} failed: {e}; statement: {sql[:300]} "
                             f"(add {commit_ts} to [syncer] ignore-txn-commit-ts to skip it)") from None

    def save_checkpoint(self, run: ch.RunBatch) -> None:
        """The run's range is applied: ``consistent = true`` at ``run.to_ts``."""
        version = max((d.job.binlog.schema_version for d in run.ddl),
                      default=self.loaded.schema_version if self.loaded else 0)
        self.loaded = Checkpoint(run.to_ts, True, schema_version=version, ddl_ahead=self.ddl_ahead)
        cps = self._checkpoints()
        loaded = self.loaded
        self._on_control(lambda: cps.save(loaded))
        if self.relay is not None:
            self.relay.purge(run.to_ts)

    def _reconnect(self) -> None:
        """New control and checkpoint connections in place of ones the downstream dropped (a restart)."""
        shared = self.checkpoint_conn is self.conn
        for conn in {id(c): c for c in (self.conn, self.checkpoint_conn)}.values():
            try:
                conn.close()
            except (pymysql.Error, OSError):   # already broken
                pass
        self.conn = self.target.connect()
        cp = self.options.checkpoint_target
        self.checkpoint_conn = self.conn if shared or cp is None else cp.connect()
        if self.table is not None:
            self.table.conn = self.checkpoint_conn

    def _on_control(self, call: Callable[[], T]) -> T:
        """``call()`` (on the control or checkpoint connection), retried on new connections while the
        downstream drops or refuses them, with the loader's retries and backoff."""
        lost = False

        def attempt() -> T:
            nonlocal lost
            if lost:
                self._reconnect()
                lost = False
            return call()

        def dropped(e: BaseException) -> bool:
            nonlocal lost
            lost = lost or connection_lost(e)
            return connection_lost(e)

        return retry(attempt, attempts=RETRIES + 1, wait=lambda n: BACKOFF * 2 ** min(n, 5),
                     on=(pymysql.Error, MySQLTargetError), retry_if=dropped,
                     before_sleep=lambda e, n, wait: log.warning("lost the downstream (%s); retry %d in %.1f s on a "
                                                                 "new connection", e, n, wait))

    def notes(self) -> list[str]:
        """Says when the run applied in safe mode, and why."""
        return [f"safe mode: {self.safe_mode_reason}"] if self.safe_mode_reason else []

    def close(self) -> None:
        """Close the relay log, the control connection and the checkpoint database's."""
        if self.relay is not None:
            self.relay.close()
        for conn in {id(c): c for c in (self.conn, self.checkpoint_conn)}.values():
            try:
                conn.close()
            except (pymysql.Error, OSError):  # already closed or broken
                pass


def _refuse_late(run: ch.RunBatch, ddl: ch.DDLJob) -> None:
    """Raise :class:`UnreplicableDDLError` for a partition drop that a transaction begun before it
    committed during (``RunBatch.ddl_late``), and for an EXCHANGE PARTITION that one wrote across
    (``RunBatch.ambiguous``: its rows are in the other table, and the binlog does not say so)."""
    unsure = run.ambiguous.get(ddl.job.id) if ddl.job.type == EXCHANGE_PARTITION else None
    if unsure is not None:
        raise UnreplicableDDLError(
            f"{ddl_kinds.describe(ddl.job, ddl.commit_ts)}: the transaction committed at {unsure} began before the "
            f"exchange and wrote the exchanged partition or table after it: TiDB put those rows in the other table, "
            f"while its binlog names the one it wrote. The run stopped at the job; the checkpoint is the last "
            f"transaction before it. To go on: load the two tables into the downstream from a snapshot of the "
            f"upstream taken after ts {unsure} (Dumpling and Lightning), then add the ts of every transaction up to "
            f"it to [syncer] ignore-txn-commit-ts, or start the drainer from that snapshot's ts")
    late = run.ddl_late.get(ddl.job.id)
    if late is not None:
        raise UnreplicableDDLError(
            f"{ddl_kinds.describe(ddl.job, ddl.commit_ts)}: the transaction committed at {late} began before it "
            f"and committed while it ran; its rows in the partition's range went with the partition or stayed, by "
            f"when each of its statements ran, and the binlog does not say which. The run stopped at the job; "
            f"the checkpoint "
            f"is the last transaction before it. To go on: load the downstream from a snapshot of the upstream "
            f"taken after ts {late} (Dumpling and Lightning) and start the drainer from that snapshot's ts "
            f"(initial-commit-ts, with the checkpoint row removed)")
