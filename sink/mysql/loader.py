"""Apply DMLs to the downstream in parallel without reordering what conflicts (TiDB Binlog's
``pkg/loader``).

:class:`Causality` gives every DML a group: DMLs sharing a causality key (a unique key's values) are in
one group, and a DML whose keys already belong to two different groups is a conflict — the loader
then flushes everything dispatched so far before taking it. A group goes to worker
``crc32(group) % worker_count``, so the changes of one row stay in order on one worker. Each worker
owns a connection and executes its DMLs in downstream transactions of at most ``txn_batch`` DMLs,
consecutive INSERTs into a table as one multi-row INSERT and consecutive DELETEs by key as one
``DELETE … IN`` (``statements.batched``). In merge mode (TiDB Binlog's ``[syncer.to] merge``) a
worker applies the net change per primary key of its share of a flush instead (``statements.merged``),
in one downstream transaction: there a flush takes ``MERGE_FACTOR`` times TiDB Binlog's batch and a
statement ``MERGE_FACTOR`` times ``txn_batch`` rows — the net change of a bigger flush is smaller, and
a flush's cost is mostly its round trips and the commits' fsyncs, not its rows.
Transient errors (lost connection, deadlock, lock wait timeout, a new connection refused while the
downstream restarts) are retried with backoff on a new connection; any other error stops the load
with :class:`ApplyError` naming the statement and the commit_ts. A :class:`~sink.base.SinkObserver`
hears each statement's and commit's time and each flush's DMLs per worker (TiDB Binlog's loader reports the same).
"""
from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import pymysql

from schemas.retry import retry
from sink.base import SinkObserver
from sink.errors import SinkError
from sink.mysql.loopback import mark_statement
from sink.mysql.progress import UnkeyedProgress, not_applied
from sink.mysql.statements import DML, batched, merged
from sink.mysql.target import MySQLTargetError, connection_lost
from transform import failpoints

log = logging.getLogger(__name__)

# lost connection, server gone, lock wait timeout, deadlock, too many connections, TiDB write conflicts
TRANSIENT_ERRORS = frozenset({1040, 1205, 1213, 2003, 2006, 2013, 8002, 8022, 8027, 9007})
# merge mode: flushes of txn_batch × worker_count × 3 × 10 DMLs, statements of txn_batch × 10 rows. Measured
# with bench/mysql_apply.py --merge (docs/benchmarks.md): × 10 cut the sink stage by a fifth; × 33 no further.
MERGE_FACTOR = 10
RETRIES, BACKOFF = 10, 0.5     # a transient error: retried 10 times, after 0.5 × 2^n s (n capped at 5): ~95 s


class ApplyError(SinkError):
    """A statement failed for good (the message names it and the upstream commit_ts)."""


class Causality:
    """Union of DMLs that touch the same keys (TiDB's ``causality.go``)."""

    def __init__(self) -> None:
        self.group: dict[str, str] = {}

    def conflicts(self, keys: list[str]) -> bool:
        """True when ``keys`` already belong to more than one group."""
        return len({self.group[k] for k in keys if k in self.group}) > 1

    def add(self, keys: list[str]) -> str:
        """Put ``keys`` in one group (an existing one if any key has one) and return it."""
        found = next((self.group[k] for k in keys if k in self.group), keys[0])
        for k in keys:
            self.group[k] = found
        return found

    def reset(self) -> None:
        """Forget every group (after a flush)."""
        self.group.clear()


def _is_transient(e: BaseException) -> bool:
    code = e.args[0] if e.args and isinstance(e.args[0], int) else None
    return code in TRANSIENT_ERRORS


class Worker:
    """One connection that executes DML lists in transactions of ``txn_batch``."""

    def __init__(self, connect: Callable[[], Any], txn_batch: int, retries: int, backoff: float,
                 merge: bool = False, progress: UnkeyedProgress | None = None, mark: str = "",
                 observer: SinkObserver | None = None) -> None:
        self.connect = connect
        self.observer = observer or SinkObserver()
        self.progress = progress
        self.mark = mark   # loopback control: the statement that opens each transaction (sink.mysql.loopback)
        self.conn: Any = None
        self.txn_batch = txn_batch
        self.retries = retries
        self.backoff = backoff
        self.merge = merge

    def execute(self, dmls: list[DML], safe_mode: bool) -> None:
        """Apply ``dmls`` in order, ``txn_batch`` per downstream transaction; in merge mode the tables
        with a primary key as their net change (``statements.merged``) first, in one transaction.
        A transaction with unkeyed DMLs also records their progress (``sink.mysql.progress``)."""
        if self.merge:
            statements, dmls = merged(dmls, self.txn_batch * MERGE_FACTOR)
            if statements:
                self._run(lambda _: statements)
        for i in range(0, len(dmls), self.txn_batch):
            chunk = dmls[i:i + self.txn_batch]
            self._run(partial(self._statements, chunk, safe_mode))

    def _statements(self, chunk: list[DML], safe_mode: bool, again: bool) -> list[tuple[str, DML]]:
        """One downstream transaction's statements for ``chunk``. ``again``: the connection was lost at
        a point where the transaction may have committed (a COMMIT cut off): in safe mode (the keyed
        DMLs idempotent), without the unkeyed DMLs the progress table records as applied."""
        safe_mode = safe_mode or again
        if again and self.progress is not None and any(d.seq for d in chunk):
            assert self.conn is not None
            chunk = not_applied(chunk, self.progress.load(self.conn))
        statements = list(batched(chunk, safe_mode))
        if self.progress is not None:
            statements += self.progress.record(chunk)
        return statements

    def _run(self, build: Callable[[bool], list[tuple[str, DML]]]) -> None:
        """Execute ``build(again)``'s statements as one downstream transaction (opened by the loopback
        mark when there is one), retrying transient errors (``retries`` times, after ``backoff`` ×
        2^n seconds, n capped at 5) on a new connection; ``again`` is true once a connection was lost
        (the transaction's outcome unknown: the statements must be safe to apply twice)."""
        at: list[Any] = ["", None]   # the statement executing and its DML: named on error
        lost = False

        def attempt() -> None:
            if self.conn is None:
                self.conn = self.connect()
            statements = build(lost)
            if not statements:
                return   # everything was applied before the connection was lost
            if self.mark:
                statements = [(self.mark, statements[0][1]), *statements]
            at[:] = "", statements[0][1]
            with self.conn.cursor() as cur:
                for sql, dml in statements:
                    at[:] = sql, dml
                    began = time.perf_counter()
                    cur.execute(sql)
                    self.observer.queried("update_mark_table" if self.mark and sql is self.mark else "exec",
                                          time.perf_counter() - began)
            began = time.perf_counter()
            self.conn.commit()
            self.observer.queried("commit", time.perf_counter() - began)

        def transient(e: BaseException) -> bool:
            nonlocal lost
            self.close(rollback=True)
            lost = lost or connection_lost(e)
            return _is_transient(e) or connection_lost(e)

        def warn(e: BaseException, n: int, wait: float) -> None:
            where = f"at commit_ts {at[1].commit_ts}" if at[1] is not None else "before the first statement"
            log.warning("transient error %s (%s); retry %d in %.1f s", where, e, n, wait)

        try:
            retry(attempt, attempts=self.retries + 1, wait=lambda n: self.backoff * 2 ** min(n, 5),
                  on=(pymysql.Error, MySQLTargetError), retry_if=transient, before_sleep=warn)
        except pymysql.Error as e:
            sql, dml = at
            if dml is None:
                raise
            raise ApplyError(f"statement of the transaction committed at {dml.commit_ts} failed on "
                             f"{dml.table.qualified}: {e}; statement: {sql[:300]}") from None

    def close(self, rollback: bool = False) -> None:
        """Drop the connection (rolling back an open transaction)."""
        if self.conn is None:
            return
        try:
            if rollback:
                self.conn.rollback()
            self.conn.close()
        except (pymysql.Error, OSError):  # the connection may already be gone
            pass
        self.conn = None


class Loader:
    """Dispatches DMLs to ``worker_count`` workers by causality group. :meth:`flush` hands everything
    dispatched to the workers; with ``wait=False`` it returns at once, so the caller builds the next
    batch while this one is applied. A batch is only handed over once the previous one is committed
    downstream (causality groups restart at each flush), so conflicting changes never overtake."""

    def __init__(self, connect: Callable[[], Any], worker_count: int = 16, txn_batch: int = 20,
                 safe_mode: bool = False, retries: int = RETRIES, backoff: float = BACKOFF,
                 before_flush: Callable[[], None] | None = None, merge: bool = False,
                 progress: UnkeyedProgress | None = None, channel_id: int | None = None,
                 observer: SinkObserver | None = None) -> None:
        self.observer = observer or SinkObserver()
        self.workers = [Worker(connect, txn_batch, retries, backoff, merge, progress,
                               mark_statement(i, channel_id) if channel_id is not None else "", self.observer)
                        for i in range(worker_count)]
        self.pool = ThreadPoolExecutor(max_workers=worker_count, thread_name_prefix="binlake-mysql")
        self.causality = Causality()
        self.pending: list[list[DML]] = [[] for _ in self.workers]
        self.pending_count = 0
        self.batch_limit = txn_batch * worker_count * 3 * (MERGE_FACTOR if merge else 1)
        self.idle_batch = txn_batch * worker_count
        self.safe_mode = safe_mode
        self.flushes = 0
        self.before_flush = before_flush   # e.g. sync the relay log: nothing is applied before it is durable
        self.dispatched_ts = 0             # the last transaction whose DMLs were all added (``end_txn``)
        self.applied_ts = 0                # every transaction up to it is committed downstream
        self._inflight: list[Future[None]] = []
        self._inflight_ts = 0

    def end_txn(self, commit_ts: int) -> None:
        """Every DML of the transaction committed at ``commit_ts`` has been added."""
        self.dispatched_ts = commit_ts

    def add(self, dml: DML) -> None:
        """Dispatch one DML (a conflict with what is pending flushes first)."""
        keys = dml.causality_keys()
        if self.causality.conflicts(keys):
            self.flush(wait=False)
        group = self.causality.add(keys)
        self.pending[zlib.crc32(group.encode()) % len(self.workers)].append(dml)
        self.pending_count += 1

    @property
    def ready(self) -> bool:
        """True when the pending DMLs should be flushed: ``txn_batch × worker_count × 3`` of them
        (``MERGE_FACTOR`` times that in merge mode), or a transaction per worker while the workers
        are idle (TiDB Binlog flushes when its input runs dry; here, when its output does)."""
        if self.pending_count >= self.batch_limit:
            return True
        return self.pending_count >= self.idle_batch and all(f.done() for f in self._inflight)

    def flush(self, wait: bool = True) -> None:
        """Hand every pending DML to the workers once the batch in flight is committed (``applied_ts``
        then moves to the ``dispatched_ts`` of this hand-over). ``wait``: return only when this batch
        is committed too. Raises :class:`ApplyError` (after the other workers finish)."""
        self._wait()
        if self.pending_count:
            if self.before_flush is not None:
                self.before_flush()
            self.observer.dispatched([len(dmls) for dmls in self.pending])
            self._inflight = [self.pool.submit(w.execute, dmls, self.safe_mode)
                              for w, dmls in zip(self.workers, self.pending) if dmls]
            self.pending = [[] for _ in self.workers]
            self.pending_count = 0
            self.causality.reset()
        self._inflight_ts = self.dispatched_ts
        if wait:
            self._wait()

    def _wait(self) -> None:
        """Wait for the batch in flight; raise the first :class:`ApplyError` of its workers."""
        futures, self._inflight = self._inflight, []
        errors = []
        for f in futures:
            try:
                f.result()
            except ApplyError as e:
                errors.append(e)
        if errors:
            raise errors[0]
        if futures:
            self.flushes += 1
            failpoints.inject("mysql-flush", self.flushes)
        self.applied_ts = max(self.applied_ts, self._inflight_ts)

    def close(self) -> None:
        """Close every worker's connection and the thread pool (pending DMLs are dropped; a batch in
        flight finishes first)."""
        self.pool.shutdown(wait=True)
        for w in self.workers:
            w.close(rollback=True)
