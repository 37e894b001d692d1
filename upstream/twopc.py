"""Two-phase commit as TiDB runs it with binlog enabled (tidb-binlog.md §1.5).

DML: the prewrite binlog (PrewriteValue with the txn's schema version; ``prewrite_key`` = primary
key) is written in parallel with the KV prewrite; only when both succeed is a commit ts taken from
the TSO and the KV commit applied; then the commit binlog is sent without waiting. Any failure after
a stored prewrite binlog sends a Rollback binlog. DDL: the job's transaction carries a DDL binlog
(``ddl_job_id``, ``ddl_schema_state``, ``ddl_query``); its primary key is the job's history meta key.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Protocol

from schemas import binlog_pb2
from upstream.binlogs import BinlogSink
from upstream.catalog import Catalog
from upstream.errors import BinlogWriteFailed, SchemaChanged, ServerCrashed, SQLError, TxnAborted, UpstreamError
from upstream.faults import Faults
from upstream.kv import MVCCStore, Mutation
from upstream.txn import Transaction

log = logging.getLogger(__name__)


class ClusterCore(Protocol):
    """What the committer needs from the cluster."""

    kv: MVCCStore
    catalog: Catalog
    commit_mutex: threading.Lock

    def ts(self) -> int: ...


class Committer:
    """Runs 2PC for one server (its binlog sink, faults and prewrite thread pool)."""

    def __init__(self, core: ClusterCore, sink: BinlogSink, faults: Faults, workers: int = 16) -> None:
        self.core = core
        self.sink = sink
        self.faults = faults
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="binlog-prewrite")

    def close(self) -> None:
        """Stop the prewrite pool."""
        self._pool.shutdown(wait=True)

    def _two_phase(self, start_ts: int, primary: bytes, muts: list[Mutation], binlog: binlog_pb2.Binlog,
                   check: Callable[[], None], install: Callable[[int], None] | None = None) -> int:
        kv = self.core.kv
        fut: Any = None
        if self.sink.enabled:
            fut = self._pool.submit(self.sink.prewrite, binlog) if self.faults.pump_delay > 0 \
                else self.sink.start_prewrite(binlog)
        kv_err: UpstreamError | None = None
        try:
            kv.prewrite(start_ts, primary, muts)
        except UpstreamError as e:
            kv_err = e
        binlog_stored = False
        binlog_err: BaseException | None = None
        if fut is not None:
            try:
                binlog_stored = bool(fut.result())
            except BaseException as e:  # noqa: BLE001 - reported below
                binlog_err = e
        keys = [m.key for m in muts]

        def abort(err: BaseException) -> None:
            kv.rollback(start_ts, [] if kv_err is not None else keys, primary)
            if binlog_stored:
                self.sink.finish(_finish(binlog, binlog_pb2.Rollback, 0))
            raise err

        if kv_err is not None:
            abort(kv_err)
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

    def commit_dml(self, txn: Transaction) -> int | None:
        """Commit a DML transaction; return its commit ts (None when it wrote nothing)."""
        if not txn.writes:
            return None
        assert txn.primary is not None
        binlog = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=txn.start_ts, prewrite_key=txn.primary)
        if self.sink.enabled:
            binlog.prewrite_value = txn.prewrite_value().SerializeToString()
        muts = list(txn.writes.values())
        schema = txn.schema

        def check() -> None:
            current = self.core.catalog.current()
            for tid in txn.tables_written:
                if current.tables.get(tid) is not schema.tables.get(tid):
                    raise SchemaChanged(f"[domain:8028]Information schema is changed during the execution of "
                                        f"the statement (table {tid}, txn {txn.start_ts})", txn.start_ts)
        return self._two_phase(txn.start_ts, txn.primary, muts, binlog, check)

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
        return self._two_phase(start_ts, primary, muts, binlog, check, install)


def _finish(prewrite: binlog_pb2.Binlog, tp: int, commit_ts: int) -> binlog_pb2.Binlog:
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
