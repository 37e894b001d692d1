"""The binlog side of a TiDB server: its own ``PumpsClient`` (created on first use), the slow-pump
delay hook, and TiDB's ``[binlog] ignore-error`` behaviour.

Promises: ``prewrite`` returns only after a pump stored the binlog, else raises
``BinlogWriteFailed`` (or, with ``ignore_error``, logs, stops writing binlogs for good, and returns
False); ``finish`` sends a Commit/Rollback binlog without waiting (``write_commit_async``).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, Protocol

from ingest.errors import IngestError
from schemas import binlog_pb2
from upstream.errors import BinlogWriteFailed
from upstream.faults import Faults
from upstream.pump_client import PumpsClient
from upstream.pump_client.errors import PumpClientClosed, PumpClientError
from upstream.pump_client.process import ProcessPumpsClient

log = logging.getLogger(__name__)


class _Pending(Protocol):
    """A prewrite in flight in either pump client (the process client's also has ``when_answered``)."""

    def result(self) -> str | None: ...


class PendingCommit(Protocol):
    """A commit/rollback binlog in flight (either pump client's answer): the node id, or None."""

    def result(self, timeout: float | None = None) -> str | None: ...


class BinlogSink:
    """Writes one server's binlogs; disabled when ``registry`` is None."""

    def __init__(self, registry: str | None, cluster_id: int, faults: Faults, ignore_error: bool = False,
                 client_options: dict[str, Any] | None = None,
                 factory: Callable[[], PumpsClient | ProcessPumpsClient] | None = None) -> None:
        self.registry = registry
        self.cluster_id = cluster_id
        self.faults = faults
        self.ignore_error = ignore_error
        self.skipped = False
        self._options = dict(client_options or {})
        self._factory = factory
        self._client: PumpsClient | ProcessPumpsClient | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._delayed: set[Future[str | None]] = set()

    @property
    def enabled(self) -> bool:
        """True when binlogs are written (a registry is configured and not skipped after an error)."""
        return self.registry is not None and not self.skipped

    def client(self) -> PumpsClient | ProcessPumpsClient:
        """The pump client, created on first use (by ``factory`` when one was given);
        ``PumpClientClosed`` after ``close``."""
        with self._lock:
            if self._closed:
                raise PumpClientClosed("the server's binlog writer is closed")
            if self._client is None:
                if self._factory is not None:
                    self._client = self._factory()
                else:
                    assert self.registry is not None
                    self._client = PumpsClient(self.registry, self.cluster_id, **self._options)
            return self._client

    def _delay(self) -> None:
        if self.faults.pump_delay > 0:
            time.sleep(self.faults.pump_delay)

    def prewrite(self, binlog: binlog_pb2.Binlog) -> bool:
        """Store a prewrite binlog on some pump; True when stored."""
        if not self.enabled:
            return False
        self._delay()
        try:
            self.client().write_binlog(binlog)
            return True
        except (PumpClientError, IngestError) as e:
            return self._failed(binlog, e)

    def start_prewrite(self, binlog: binlog_pb2.Binlog) -> PendingPrewrite | None:
        """Send a prewrite binlog without waiting; ``result()`` of the answer is ``prewrite``'s.

        None when binlogs are disabled. With a slow-pump delay configured, use ``prewrite`` in a
        thread instead (the delay must not block the caller).
        """
        if not self.enabled:
            return None
        try:
            return PendingPrewrite(self, binlog, self.client().start_prewrite(binlog))
        except (PumpClientError, IngestError) as e:
            return PendingPrewrite(self, binlog, None, e)

    def _failed(self, binlog: binlog_pb2.Binlog, e: PumpClientError | IngestError) -> bool:
        if self.ignore_error:
            log.error("write prewrite binlog failed, binlog is skipped from now on (ignore-error): %s", e)
            self.skipped = True
            return False
        raise BinlogWriteFailed(f"[global:2]write binlog failed: {e}", binlog.start_ts) from e

    def finish(self, binlog: binlog_pb2.Binlog) -> PendingCommit | None:
        """Send a commit/rollback binlog asynchronously (to the pump holding its prewrite). Never
        raises for a binlog it cannot send: after ``close`` it logs and returns None, and the pump
        resolves the transaction from the upstream's MVCC answer, as after a TiDB crash."""
        if not self.enabled:
            return None
        try:
            client = self.client()
        except PumpClientClosed as e:
            log.warning("%s binlog of txn %d not sent: %s", binlog_pb2.BinlogType.Name(binlog.tp),
                        binlog.start_ts, e)
            return None
        if self.faults.pump_delay > 0:
            fut: Future[str | None] = Future()

            def later() -> None:
                try:
                    self._delay()
                    fut.set_result(client.write_commit_async(binlog).result())
                except BaseException as e:  # noqa: BLE001 - handed to the Future's owner
                    fut.set_exception(e)
                finally:
                    with self._lock:
                        self._delayed.discard(fut)
            with self._lock:
                self._delayed.add(fut)
            threading.Thread(target=later, daemon=True).start()
            return fut
        return client.write_commit_async(binlog)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for every commit binlog sent so far."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            client = self._client
            delayed = list(self._delayed)
        for fut in delayed:
            try:
                fut.result(None if deadline is None else max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - only waiting here
                pass
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return True if client is None else client.flush(left)

    def close(self) -> None:
        """Flush briefly and close the client."""
        self.flush(5.0)
        with self._lock:
            client, self._client = self._client, None
            self._closed = True
        if client is not None:
            client.close()


class PendingPrewrite:
    """A prewrite binlog in flight from ``BinlogSink.start_prewrite``."""

    def __init__(self, sink: BinlogSink, binlog: binlog_pb2.Binlog, pending: _Pending | None,
                 error: PumpClientError | IngestError | None = None) -> None:
        self._sink = sink
        self._binlog = binlog
        self._pending = pending
        self._error = error
        self._lock = threading.Lock()
        self._outcome: tuple[bool, BaseException | None] | None = None

    def result(self) -> bool:
        """Wait: True when a pump stored it; ``BinlogWriteFailed`` (or False with ignore-error) otherwise,
        or whatever else the pump client raised. May be called again: later calls give the same outcome
        without asking the client again."""
        with self._lock:
            if self._outcome is None:
                self._outcome = self._wait()
            stored, err = self._outcome
        if err is not None:
            raise err
        return stored

    def _wait(self) -> tuple[bool, BaseException | None]:
        try:
            if self._error is not None:
                raise self._error
            assert self._pending is not None
            self._pending.result()
            return True, None
        except (PumpClientError, IngestError) as e:
            try:
                return self._sink._failed(self._binlog, e), None
            except BinlogWriteFailed as failed:
                return False, failed
        except BaseException as e:  # noqa: BLE001 - kept as the outcome; result() raises it
            return False, e

    def when_answered(self, fn: Callable[[], None], pool: Executor) -> None:
        """Call ``fn()`` once ``result()`` no longer blocks, whatever the outcome: at once when it is
        known, on the pump client's answer thread when the client has one (the process client's
        ``when_answered``), else after ``result()`` has run in ``pool`` (the in-process client waits
        and retries in the thread that asks)."""
        if self._error is not None:
            fn()
            return
        when_answered = getattr(self._pending, "when_answered", None)
        if when_answered is not None:
            when_answered(fn)
            return

        def wait_then_call() -> None:
            try:
                self.result()
            except BaseException:  # noqa: BLE001 - fn() sees it through result()
                pass
            finally:
                fn()
        pool.submit(wait_then_call)
