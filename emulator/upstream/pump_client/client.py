"""``PumpsClient``: TiDB's pump client — discovery, watching, probing, selection and the write algorithm.

Promises:
- A prewrite is acknowledged only after a pump stored it; otherwise ``write_binlog`` raises
  (``BinlogTooLarge`` at once, ``WriteBinlogFailed`` after the retry and backoff paths).
- A commit/rollback goes to the pump that took its prewrite and never raises for a write failure:
  it retries that pump until ``commit_timeout`` and then gives up (logged, counted, returns None);
  the pump resolves such a transaction through the upstream.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import grpc

from ingest import binlog as bl
from ingest.errors import RegistryError
from ingest.registry import PUMP, NodeStatus, Registry, kind_prefix, load_registry
from schemas import binlog_pb2, pump_pb2
from upstream.pump_client.channel import PendingWrite, check_transport
from upstream.pump_client.errors import (
    BinlogTooLarge,
    NoAvailablePump,
    NoPumpFound,
    PumpClientClosed,
    WriteBinlogFailed,
)
from upstream.pump_client.node import DEFAULT_MAX_ERR_NUMS, PumpNode, PumpWriteError
from upstream.pump_client.selector import Selector, new_selector

log = logging.getLogger(__name__)

# TiDB's constants (tidb-tools pump_client).
DEFAULT_BINLOG_WRITE_TIMEOUT = 15.0   # DefaultBinlogWriteTimeout (TiDB passes its [binlog] write-timeout)
CHECK_INTERVAL = 30.0                 # CheckInterval: probe of unavailable online pumps
COMMIT_BINLOG_TIMEOUT = 600.0         # CommitBinlogTimeout: how long a commit keeps retrying its pump
RETRY_INTERVAL = 0.1                  # RetryInterval between prewrite tries
COMMIT_RETRY_INTERVAL = 1.0           # RetryInterval * 10 between commit tries
WATCH_INTERVAL = 1.0                  # registry poll (TiDB uses an etcd watch instead)
DEFAULT_COMMIT_WORKERS = 32           # threads for write_commit_async

NO_PUMP_FOUND = "no pump found in pd"
NO_AVAILABLE_PUMP = "no avaliable pump to write binlog"  # TiDB's spelling


class PumpsClient:
    """Writes TiDB binlogs to the pumps listed in a registry, as TiDB's embedded client does.

    ``registry`` is a ``Registry`` or a URI for ``load_registry`` (then the client owns and closes
    it). Construction reads the registry once and raises ``NoPumpFound`` when it lists no pump;
    a background thread then polls it every ``watch_interval`` seconds and another probes
    unavailable online pumps every ``check_interval`` seconds. Defaults are TiDB's; tests shrink them.
    ``transport`` (``auto``/``h2``/``grpc``) is how WriteBinlog travels (``upstream.pump_client.channel``).
    """

    def __init__(self, registry: Registry | str, cluster_id: int, strategy: str = "range",
                 write_timeout: float = DEFAULT_BINLOG_WRITE_TIMEOUT, *,
                 credentials: grpc.ChannelCredentials | None = None,
                 check_interval: float = CHECK_INTERVAL, watch_interval: float = WATCH_INTERVAL,
                 commit_timeout: float = COMMIT_BINLOG_TIMEOUT, retry_interval: float = RETRY_INTERVAL,
                 commit_retry_interval: float = COMMIT_RETRY_INTERVAL,
                 max_err_nums: int = DEFAULT_MAX_ERR_NUMS,
                 commit_workers: int = DEFAULT_COMMIT_WORKERS, transport: str = "auto") -> None:
        self._owns_registry = isinstance(registry, str)
        self.registry: Registry = load_registry(registry) if isinstance(registry, str) else registry
        self.cluster_id = cluster_id
        self.write_timeout = write_timeout
        self.check_interval = check_interval
        self.watch_interval = watch_interval
        self.commit_timeout = commit_timeout
        self.retry_interval = retry_interval
        self.commit_retry_interval = commit_retry_interval
        self._credentials = credentials
        check_transport(transport, credentials)
        self._transport = transport
        self._max_err_nums = max_err_nums
        self._selector: Selector[PumpNode] = new_selector(strategy)
        self.strategy = self._selector.name

        self._lock = threading.RLock()                 # guards the three pump maps and the selector's list
        self._pumps: dict[str, PumpNode] = {}
        self._available: dict[str, PumpNode] = {}
        self._unavailable: dict[str, PumpNode] = {}
        self._ts_lock = threading.Lock()
        self._ts_map: dict[int, PumpNode] = {}         # start_ts -> pump that took the prewrite
        self._pending: set[Future[str | None]] = set()
        self._stats_lock = threading.Lock()
        self._commit_give_ups = 0
        self._stop = threading.Event()
        self._closed = False

        try:
            statuses = self._read_registry()
        except BaseException:
            self._close_registry()
            raise
        if not statuses:
            self._close_registry()
            raise NoPumpFound(f"{NO_PUMP_FOUND} (registry {self._registry_name()})")
        for status in statuses.values():
            self._add(status)
        self._publish()

        self._pool = ThreadPoolExecutor(max_workers=commit_workers, thread_name_prefix="pump-commit")
        self._threads = [
            threading.Thread(target=self._loop, args=(self.watch_interval, self.refresh),
                             name="pumps-client-watch", daemon=True),
            threading.Thread(target=self._loop, args=(self.check_interval, self.probe),
                             name="pumps-client-probe", daemon=True),
        ]
        for t in self._threads:
            t.start()

    # ---- views -------------------------------------------------------------------------------

    def available_pumps(self) -> list[str]:
        """Node ids the selector chooses from, in selection order (sorted by node id)."""
        return [p.node_id for p in self._selector.pumps()]

    def unavailable_pumps(self) -> list[str]:
        """Node ids known but not available, sorted."""
        with self._lock:
            return sorted(self._unavailable)

    def pump(self, node_id: str) -> PumpNode | None:
        """The known pump with that id, or None."""
        with self._lock:
            return self._pumps.get(node_id)

    @property
    def commit_give_ups(self) -> int:
        """How many commit/rollback binlogs were given up (timed out, no matching prewrite, or closed)."""
        with self._stats_lock:
            return self._commit_give_ups

    def pending_prewrites(self) -> int:
        """Prewrites acknowledged whose commit/rollback has not been written or given up yet."""
        with self._ts_lock:
            return len(self._ts_map)

    # ---- writing -----------------------------------------------------------------------------

    def write_binlog(self, binlog: binlog_pb2.Binlog) -> str | None:
        """Write one binlog; return the node id of the pump that stored it.

        Prewrite: raise ``BinlogTooLarge`` (no retry), ``WriteBinlogFailed`` (all pumps failed) or
        ``PumpClientClosed``. Commit/Rollback: never raises for write failures; returns None when
        it gave up after ``commit_timeout`` (or found no pump holding the prewrite).
        """
        if self._closed:
            raise PumpClientClosed("pumps client is closed")
        req = pump_pb2.WriteBinlogReq(clusterID=self.cluster_id, payload=bl.marshal_gogo(binlog))
        if binlog.tp == bl.PREWRITE:
            return self._write_prewrite(binlog.start_ts, req)
        return self._write_commit(binlog.start_ts, binlog.tp, req, time.monotonic())

    def write_commit_async(self, binlog: binlog_pb2.Binlog) -> Future[str | None]:
        """Send a commit/rollback binlog without waiting, as TiDB does; the Future gives ``write_binlog``'s result.

        The first attempt is an asynchronous gRPC call (no thread handoff); only when it fails does
        a worker thread take over with the retry rules. The ``commit_timeout`` counts from this call,
        so commits queued behind others do not wait longer.
        """
        if binlog.tp == bl.PREWRITE:
            raise ValueError("write_commit_async takes commit or rollback binlogs, not prewrites")
        if self._closed:
            raise PumpClientClosed("pumps client is closed")
        req = pump_pb2.WriteBinlogReq(clusterID=self.cluster_id, payload=bl.marshal_gogo(binlog))
        submitted = time.monotonic()
        out: Future[str | None] = Future()
        start_ts, tp = binlog.start_ts, binlog.tp
        with self._ts_lock:
            pump = self._ts_map.get(start_ts)
            self._pending.add(out)
        out.add_done_callback(self._forget)
        if pump is None:
            self._settle(out, self._write_commit, start_ts, tp, req, submitted)
            return out
        pending = pump.start_write(req, self.write_timeout)
        pending.add_done_callback(lambda _: self._commit_sent(pending, pump, start_ts, tp, req, submitted, out))
        return out

    def _commit_sent(self, pending: PendingWrite, pump: PumpNode, start_ts: int, tp: int,
                     req: pump_pb2.WriteBinlogReq, submitted: float, out: Future[str | None]) -> None:
        """Completion of a commit's first attempt (on a gRPC thread): done, or hand over to the retry loop."""
        try:
            pump.finish_write(pending)
        except PumpWriteError as exc:
            log.warning("[pumps client] write binlog to pump failed: %s (%s, start ts %d)",
                        exc, binlog_pb2.BinlogType.Name(tp), start_ts)
            if exc.unavailable:
                pump.reset_connection()
            try:
                self._pool.submit(self._settle, out, self._retry_commit, start_ts, tp, req, submitted)
            except RuntimeError:  # the pool is shut down: the client is closing
                self._settle(out, self._write_commit, start_ts, tp, req, submitted)
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the Future's owner
            out.set_exception(exc)
            return
        with self._ts_lock:
            if self._ts_map.get(start_ts) is pump:
                del self._ts_map[start_ts]
        out.set_result(pump.node_id)

    def _retry_commit(self, start_ts: int, tp: int, req: pump_pb2.WriteBinlogReq, submitted: float) -> str | None:
        """After a failed first attempt: the availability check, one retry interval, then ``_write_commit``."""
        self._check_available()
        if not self._closed:
            self._stop.wait(self.commit_retry_interval)
        return self._write_commit(start_ts, tp, req, submitted)

    @staticmethod
    def _settle(out: Future[str | None], fn: Callable[..., str | None], *args: object) -> None:
        try:
            out.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the Future's owner
            out.set_exception(exc)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every ``write_commit_async`` so far has finished; False if ``timeout`` ran out first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._ts_lock:
                pending = list(self._pending)
            if not pending:
                return True
            for fut in pending:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                try:
                    fut.result(left)
                except TimeoutError:
                    return False
                except Exception:  # noqa: BLE001 - the caller of write_commit_async sees it
                    pass

    def _forget(self, fut: Future[str | None]) -> None:
        with self._ts_lock:
            self._pending.discard(fut)

    def start_prewrite(self, binlog: binlog_pb2.Binlog) -> PendingPrewrite:
        """Send a prewrite binlog without waiting (TiDB writes it in parallel with the KV prewrite).

        The first attempt is in flight when this returns, without any thread handoff; the returned
        object's ``result()`` waits for it and, if it failed, runs ``write_binlog``'s retry and
        backoff rules in the caller's thread. Same results and errors as ``write_binlog``.
        """
        if binlog.tp != bl.PREWRITE:
            raise ValueError("start_prewrite takes prewrite binlogs")
        if self._closed:
            raise PumpClientClosed("pumps client is closed")
        req = pump_pb2.WriteBinlogReq(clusterID=self.cluster_id, payload=bl.marshal_gogo(binlog))
        started = time.monotonic()
        pump = self._selector.select(binlog.start_ts, 0)
        first = None if pump is None else (pump, pump.start_write(req, self.write_timeout))
        return PendingPrewrite(self, binlog.start_ts, req, started, first)

    def _write_prewrite(self, start_ts: int, req: pump_pb2.WriteBinlogReq, started: float | None = None,
                        first: tuple[PumpNode, PendingWrite] | None = None) -> str:
        with self._lock:
            pump_num = len(self._available)
        started = time.monotonic() if started is None else started
        retry = 0
        last_err: Exception = NoAvailablePump(NO_AVAILABLE_PUMP)
        met_error = False
        try:
            while True:
                if self._closed:
                    raise PumpClientClosed(f"pumps client closed while writing prewrite {start_ts}")
                pending: PendingWrite | None = None
                chosen: PumpNode | None
                if first is not None:
                    (chosen, pending), first = first, None
                else:
                    chosen = self._selector.select(start_ts, retry)
                if chosen is None:
                    last_err = NoAvailablePump(NO_AVAILABLE_PUMP)
                    break
                pump = chosen
                try:
                    if pending is None:
                        pump.write(req, self.write_timeout)
                    else:
                        pump.finish_write(pending)
                    self._remember(start_ts, pump)
                    return pump.node_id
                except PumpWriteError as exc:
                    met_error = True
                    last_err = exc
                    log.warning("[pumps client] write binlog to pump failed: %s (prewrite, start ts %d, %d bytes)",
                                exc, start_ts, len(req.payload))
                    if exc.too_large:
                        raise BinlogTooLarge(f"binlog data is too large (start ts {start_ts}, "
                                             f"{len(req.payload)} bytes): {exc}") from exc
                    if time.monotonic() - started > self.write_timeout and retry > pump_num:
                        break
                    if exc.unavailable:
                        pump.reset_connection()
                    retry += 1
                self._stop.wait(self.retry_interval)
        finally:
            if met_error:
                self._check_available()

        log.info("[pumps client] write binlog to available pumps all failed, will try unavailable pumps")
        fallback = self._backoff_write(req)
        if fallback is not None:
            self._remember(start_ts, fallback)
            return fallback.node_id
        raise WriteBinlogFailed(f"write binlog failed, the last error {last_err}") from last_err

    def _backoff_write(self, req: pump_pb2.WriteBinlogReq) -> PumpNode | None:
        """Try every pump the registry says is online once, on a fresh connection; first success becomes available."""
        with self._lock:
            candidates = [self._pumps[k] for k in sorted(self._pumps)]
        for pump in candidates:
            if not pump.should_be_usable() or self._closed:
                continue
            pump.reset_connection()
            try:
                pump.write(req, self.write_timeout)
            except PumpWriteError as exc:
                log.warning("[pumps client] try write binlog failed: %s", exc)
                continue
            log.info("[pumps client] write binlog to pump %s success, set this pump to available", pump.node_id)
            self._set_available(pump, True)
            return pump
        return None

    def _write_commit(self, start_ts: int, tp: int, req: pump_pb2.WriteBinlogReq, submitted: float) -> str | None:
        kind = binlog_pb2.BinlogType.Name(tp)
        with self._ts_lock:
            pump = self._ts_map.get(start_ts)
        if pump is None:
            log.error("[pumps client] %s binlog with start ts %d doesn't have a matched prewrite binlog; "
                      "not written", kind, start_ts)
            self._gave_up()
            return None
        met_error = False
        try:
            while True:
                try:
                    pump.write(req, self.write_timeout)
                    return pump.node_id
                except PumpWriteError as exc:
                    met_error = True
                    log.warning("[pumps client] write binlog to pump failed: %s (%s, start ts %d)", exc, kind, start_ts)
                    if time.monotonic() - submitted > self.commit_timeout or self._closed:
                        why = "client closed" if self._closed else f"retried for {self.commit_timeout:g}s"
                        log.error("[pumps client] give up writing %s binlog (start ts %d) to pump %s, %s; "
                                  "the pump will resolve it through the upstream. last error: %s",
                                  kind, start_ts, pump.node_id, why, exc)
                        self._gave_up()
                        return None
                    if exc.unavailable:
                        pump.reset_connection()
                self._stop.wait(self.commit_retry_interval)
        finally:
            with self._ts_lock:
                if self._ts_map.get(start_ts) is pump:
                    del self._ts_map[start_ts]
            if met_error:
                self._check_available()

    def _remember(self, start_ts: int, pump: PumpNode) -> None:
        with self._ts_lock:
            self._ts_map[start_ts] = pump

    def _gave_up(self) -> None:
        with self._stats_lock:
            self._commit_give_ups += 1

    # ---- availability ------------------------------------------------------------------------

    def _add(self, status: NodeStatus) -> None:
        pump = PumpNode(status, self._credentials, self._max_err_nums, self._transport)
        with self._lock:
            self._pumps[pump.node_id] = pump
            (self._available if pump.should_be_usable() else self._unavailable)[pump.node_id] = pump

    def _publish(self) -> None:
        """Hand the available list to the selector if it changed (which resets the range offset)."""
        with self._lock:
            wanted = [self._available[k] for k in sorted(self._available)]
            current = self._selector.pumps()
            if len(current) != len(wanted) or any(a is not b for a, b in zip(current, wanted)):
                self._selector.set_pumps(wanted)

    def _set_available(self, pump: PumpNode, available: bool) -> None:
        """Move ``pump`` between the available and unavailable sets, resetting its errors and connection."""
        log.info("[pumps client] set pump %s available: %s", pump.node_id, available)
        pump.reset()
        with self._lock:
            if self._pumps.get(pump.node_id) is not pump:
                return
            if available:
                self._unavailable.pop(pump.node_id, None)
                self._available[pump.node_id] = pump
            else:
                self._available.pop(pump.node_id, None)
                self._unavailable[pump.node_id] = pump
            self._publish()

    def _check_available(self) -> None:
        """After a write error: move every pump that is not usable any more to unavailable."""
        with self._lock:
            retire = [p for p in self._available.values() if not p.is_usable()]
        for pump in retire:
            self._set_available(pump, False)

    def refresh(self) -> None:
        """Read the registry once and apply it: add new pumps, follow state changes, drop removed ones."""
        statuses = self._read_registry()
        for node_id, status in statuses.items():
            with self._lock:
                pump = self._pumps.get(node_id)
            if pump is None:
                log.info("[pumps client] find a new pump %s (%s, %s)", node_id, status.host, status.state)
                self._add(status)
                self._publish()
                continue
            old_state = pump.state
            pump.update_status(status)
            if status.state == old_state:
                continue
            log.info("[pumps client] pump %s state changed %s -> %s", node_id, old_state, status.state)
            with self._lock:
                was_available = node_id in self._available
            if status.state == "online":
                self._set_available(pump, True)
            elif was_available:
                self._set_available(pump, False)
        with self._lock:
            gone = [k for k in self._pumps if k not in statuses]
        for node_id in gone:
            log.info("[pumps client] remove pump %s", node_id)
            with self._lock:
                pump = self._pumps.pop(node_id)
                self._available.pop(node_id, None)
                self._unavailable.pop(node_id, None)
                self._publish()
            pump.reset()  # a commit still bound to it re-dials on its next try

    def probe(self) -> list[str]:
        """Send an empty WriteBinlog to each unavailable pump the registry says is online; return those made
        available."""
        req = pump_pb2.WriteBinlogReq(clusterID=self.cluster_id, payload=b"")
        with self._lock:
            candidates = [p for p in self._unavailable.values() if p.should_be_usable()]
        passed = []
        for pump in candidates:
            try:
                pump.write(req, self.write_timeout)
            except PumpWriteError as exc:
                log.warning("[pumps client] write detect binlog to pump %s failed: %s", pump.node_id, exc)
                continue
            log.info("[pumps client] write detect binlog to unavailable pump %s success", pump.node_id)
            passed.append(pump)
        for pump in passed:
            self._set_available(pump, True)
        return [p.node_id for p in passed]

    def _read_registry(self) -> dict[str, NodeStatus]:
        """Every parseable pump status in the registry by node id; bad entries are logged and skipped."""
        out: dict[str, NodeStatus] = {}
        for key, raw in self.registry.get_prefix(kind_prefix(PUMP)).items():
            try:
                status = NodeStatus.from_json(raw)
            except RegistryError as exc:
                log.error("[pumps client] unmarshal pump status at %s failed: %s", key, exc)
                continue
            out[status.node_id] = status
        return out

    def _loop(self, interval: float, step: Callable[[], object]) -> None:
        while not self._stop.wait(interval):
            try:
                step()
            except Exception:
                log.exception("[pumps client] %s failed", getattr(step, "__name__", step))

    # ---- lifecycle ---------------------------------------------------------------------------

    def _registry_name(self) -> str:
        return str(getattr(self.registry, "uri", None) or self.registry)

    def _close_registry(self) -> None:
        if self._owns_registry:
            self.registry.close()

    def close(self) -> None:
        """Stop the watcher and prober, give up commits still retrying, close channels; idempotent.

        Call ``flush`` first to let asynchronous commits finish.
        """
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        for t in self._threads:
            t.join()
        # Commits whose first attempt is still in flight finish (or, on failure, give up now that
        # the client is closed) before the channels go.
        self.flush(self.write_timeout + 1.0)
        self._pool.shutdown(wait=True)
        with self._lock:
            pumps = list(self._pumps.values())
        for pump in pumps:
            pump.close()
        self._close_registry()

    def __enter__(self) -> PumpsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PendingPrewrite:
    """A prewrite binlog in flight (``PumpsClient.start_prewrite``)."""

    def __init__(self, client: PumpsClient, start_ts: int, req: pump_pb2.WriteBinlogReq, started: float,
                 first: tuple[PumpNode, PendingWrite] | None) -> None:
        self._client = client
        self._start_ts = start_ts
        self._req = req
        self._started = started
        self._first = first

    def result(self) -> str:
        """Wait; the node id of the pump that stored the prewrite, or ``write_binlog``'s errors. Call once."""
        return self._client._write_prewrite(self._start_ts, self._req, self._started, self._first)
