"""Two-phase commit as TiDB runs it with binlog enabled (pingcap/tidb ``pkg/store/driver/txn/binlog.go``, called
from tikv/client-go ``txnkv/transaction/2pc.go``).

DML: the prewrite binlog (PrewriteValue with the txn's schema version; ``prewrite_key`` = primary
key) is written in parallel with the KV prewrite; only when both succeed is a commit ts taken from
the TSO and the KV commit applied; then the commit binlog is sent without waiting. Any failure after
a stored prewrite binlog sends a Rollback binlog. DDL: the job's transaction carries a DDL binlog
(``ddl_job_id``, ``ddl_schema_state``, ``ddl_query``); its primary key is the job's history meta key.
``commit_dml_async`` runs the same steps without blocking its caller: the part after the prewrites
runs when the prewrite binlog's answer arrives.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Protocol

from schemas import binlog_pb2
from upstream.binlogs import BinlogSink
from upstream.catalog import Catalog
from upstream.errors import BinlogWriteFailed, SchemaChanged, ServerCrashed, SQLError, TxnAborted, UpstreamError
from upstream.faults import Faults
from upstream.kv import Mutation, MVCCStore
from upstream.txn import Transaction

log = logging.getLogger(__name__)

# Closing a server waits this long for commits under way: longer than the pump client's own give-up
# time for a prewrite (its write timeout, 15 s by default, plus retries to other pumps).
CLOSE_TIMEOUT = 60.0


class ClusterCore(Protocol):
    """What the committer needs from the cluster."""

    kv: MVCCStore
    catalog: Catalog
    commit_mutex: threading.Lock

    def ts(self) -> int: ...


class _Prewritten:
    """A transaction between its prewrites and its commit: the KV prewrite's error, if any, and the
    prewrite binlog in flight (None when binlogs are off)."""

    __slots__ = ("start_ts", "primary", "muts", "binlog", "fut", "kv_err")

    def __init__(self, start_ts: int, primary: bytes, muts: list[Mutation], binlog: binlog_pb2.Binlog,
                 fut: Any, kv_err: UpstreamError | None) -> None:
        self.start_ts = start_ts
        self.primary = primary
        self.muts = muts
        self.binlog = binlog
        self.fut = fut
        self.kv_err = kv_err


class Committer:
    """Runs 2PC for one server (its binlog sink, faults and prewrite thread pool)."""

    def __init__(self, core: ClusterCore, sink: BinlogSink, faults: Faults, workers: int = 16) -> None:
        self.core = core
        self.sink = sink
        self.faults = faults
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="binlog-prewrite")
        self._lock = threading.Lock()
        self._under_way: set[Future[int | None]] = set()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every commit started by ``commit_dml_async`` so far has finished (committed or
        failed); False if ``timeout`` ran out first."""
        with self._lock:
            pending = list(self._under_way)
        return not wait(pending, timeout).not_done

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Let commits under way finish (up to ``timeout``), then stop the prewrite pool."""
        if not self.flush(timeout):
            with self._lock:
                left = len(self._under_way)
            log.warning("closing with %d commit(s) still waiting for their prewrite binlog's answer; "
                        "they will fail", left)
        self._pool.shutdown(wait=True)

    def _forget(self, fut: Future[int | None]) -> None:
        with self._lock:
            self._under_way.discard(fut)

    def _prewrite(self, start_ts: int, primary: bytes, muts: list[Mutation], binlog: binlog_pb2.Binlog) -> _Prewritten:
        """Send the prewrite binlog, then prewrite in KV while it is in flight."""
        fut: Any = None
        if self.sink.enabled:
            fut = self._pool.submit(self.sink.prewrite, binlog) if self.faults.pump_delay > 0 \
                else self.sink.start_prewrite(binlog)
        kv_err: UpstreamError | None = None
        try:
            self.core.kv.prewrite(start_ts, primary, muts)
        except UpstreamError as e:
            kv_err = e
        return _Prewritten(start_ts, primary, muts, binlog, fut, kv_err)

    def _commit(self, p: _Prewritten, check: Callable[[], None], install: Callable[[int], None] | None) -> int:
        """The rest of 2PC once the prewrite binlog's answer is in (or will not block): commit or roll back."""
        kv = self.core.kv
        start_ts, primary, binlog = p.start_ts, p.primary, p.binlog
        binlog_stored = False
        binlog_err: BaseException | None = None
        if p.fut is not None:
            try:
                binlog_stored = bool(p.fut.result())
            except BaseException as e:  # noqa: BLE001 - reported below
                binlog_err = e
        keys = [m.key for m in p.muts]

        def abort(err: BaseException) -> None:
            kv.rollback(start_ts, [] if p.kv_err is not None else keys, primary)
            if binlog_stored:
                self.sink.finish(_finish(binlog, binlog_pb2.Rollback, 0))
            raise err

        if p.kv_err is not None:
            abort(p.kv_err)
        if binlog_err is not None:
            abort(binlog_err if isinstance(binlog_err, UpstreamError)
                  else BinlogWriteFailed(f"write binlog failed: {binlog_err}", start_ts))
        if self.faults.take_abort():
            abort(TxnAborted(f"txn {start_ts} aborted after prewrite (injected fault)", start_ts))
        refused: UpstreamError | None = None
        with self.core.commit_mutex:
            try:
                check()                     # under the mutex: no other commit lands in between
            except (SchemaChanged, SQLError) as e:
                refused = e
            else:
                commit_ts = self.core.ts()
                kv.commit(start_ts, commit_ts, keys)
                if install is not None:
                    install(commit_ts)
        if refused is not None:
            abort(refused)
        if self.faults.take_crash():
            self.faults.crashed.append((start_ts, commit_ts))
            raise ServerCrashed(start_ts, commit_ts)
        if binlog_stored:
            self.sink.finish(_finish(binlog, binlog_pb2.Commit, commit_ts))
        return commit_ts

    def _dml(self, txn: Transaction) -> tuple[_Prewritten, Callable[[], None]]:
        """Prewrite a DML transaction; also the schema check its commit must pass."""
        assert txn.primary is not None
        binlog = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=txn.start_ts, prewrite_key=txn.primary)
        if self.sink.enabled:
            binlog.prewrite_value = txn.prewrite_value().SerializeToString()
        schema = txn.schema

        def check() -> None:
            current = self.core.catalog.current()
            for tid in txn.tables_written:
                if current.tables.get(tid) is not schema.tables.get(tid):
                    if current.tables.get(tid) is not None and self.faults.take_stale_commit():
                        return      # commits with the schema version it began at (Faults)
                    raise SchemaChanged(f"[domain:8028]Information schema is changed during the execution of "
                                        f"the statement (table {tid}, txn {txn.start_ts})", txn.start_ts)
        return self._prewrite(txn.start_ts, txn.primary, list(txn.writes.values()), binlog), check

    def commit_dml(self, txn: Transaction) -> int | None:
        """Commit a DML transaction; return its commit ts (None when it wrote nothing)."""
        if not txn.writes:
            return None
        p, check = self._dml(txn)
        return self._commit(p, check, None)

    def commit_dml_async(self, txn: Transaction) -> Future[int | None]:
        """Start committing a DML transaction; return once the KV prewrite is done and the prewrite
        binlog is on its way.

        The rest of the commit runs when the pump's answer is in: on the process pump client's answer
        thread, on a pool thread for the in-process client (or for a slow-pump delay), or before
        returning when the answer is already known or binlogs are off. Same steps, rules and errors
        as ``commit_dml``; the Future gives the commit ts (None when the transaction wrote nothing) or
        raises the commit's error, and cannot be cancelled. Its done-callbacks run on that same thread,
        so they must not block (nor commit, nor wait for another commit). Injected faults
        (``Faults``) hit commits in the order their answers arrive.
        """
        out: Future[int | None] = Future()
        out.set_running_or_notify_cancel()      # under way from here: cancel() answers False
        if not txn.writes:
            out.set_result(None)
            return out
        with self._lock:
            self._under_way.add(out)
        out.add_done_callback(self._forget)
        try:
            p, check = self._dml(txn)
        except BaseException as e:  # noqa: BLE001 - nothing was prewritten; handed to the Future's owner
            out.set_exception(e)
            return out

        def finish() -> None:
            try:
                out.set_result(self._commit(p, check, None))
            except BaseException as e:  # noqa: BLE001 - handed to the Future's owner
                out.set_exception(e)
        if p.fut is None:
            finish()
        elif isinstance(p.fut, Future):
            p.fut.add_done_callback(lambda _f: finish())
        else:
            p.fut.when_answered(finish, self._pool)
        return out

    def commit_ddl(self, start_ts: int, job_id: int, schema_state: int, query: str, primary: bytes,
                   value: bytes, install: Callable[[int], None] | None,
                   check: Callable[[], None] = lambda: None) -> int:
        """Commit a DDL job's transaction (meta key write + DDL binlog); ``install`` runs at commit.
        ``check`` runs just before the commit, under the commit mutex; an ``SQLError`` from it rolls
        the job back (its DDL binlog gets a Rollback)."""
        binlog = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts, prewrite_key=primary,
                                   ddl_job_id=job_id, ddl_schema_state=schema_state,
                                   ddl_query=query.encode("utf-8"))
        muts = [Mutation(primary, 0, None, None, value)]
        return self._commit(self._prewrite(start_ts, primary, muts, binlog), check, install)


def _finish(prewrite: binlog_pb2.Binlog, tp: binlog_pb2.BinlogType, commit_ts: int) -> binlog_pb2.Binlog:
    """The commit/rollback binlog: same object, ``prewrite_value`` cleared (key and DDL fields stay)."""
    b = binlog_pb2.Binlog()
    b.CopyFrom(prewrite)
    b.ClearField("prewrite_value")
    b.tp = tp
    b.commit_ts = commit_ts
    return b


def describe(binlog: Any) -> str:
    """A one-line description of a binlog (for logs)."""
    return f"{binlog_pb2.BinlogType.Name(binlog.tp)} start={binlog.start_ts} commit={binlog.commit_ts}"
