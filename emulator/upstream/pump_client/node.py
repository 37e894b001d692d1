"""One pump as the client sees it: registry status, consecutive error count and a write channel."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc

from ingest.registry.base import ONLINE, NodeStatus
from schemas import pump_pb2
from upstream.pump_client.channel import PendingWrite, WriteChannel, open_write_channel
from upstream.pump_client.errors import PumpClientError

DEFAULT_MAX_ERR_NUMS = 10            # TiDB's defaultMaxErrNums


class _Refused:
    """A write that could not even be started (the channel was closed)."""

    def __init__(self, exc: ValueError) -> None:
        self._exc = exc

    def result(self, timeout: float | None = None) -> Any:
        raise self._exc

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        fn(self)


class PumpWriteError(PumpClientError):
    """One WriteBinlog call failed: a gRPC error (``code`` set) or a non-empty ``errmsg`` (``code`` None)."""

    def __init__(self, node_id: str, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(f"pump {node_id}: {message}")
        self.node_id = node_id
        self.code = code

    @property
    def unavailable(self) -> bool:
        """True for gRPC ``UNAVAILABLE``: the connection should be re-created."""
        return self.code == grpc.StatusCode.UNAVAILABLE

    @property
    def too_large(self) -> bool:
        """True when the pump refused the message as too big (``RESOURCE_EXHAUSTED``)."""
        text = str(self)
        return (self.code == grpc.StatusCode.RESOURCE_EXHAUSTED or "ResourceExhausted" in text
                or "RESOURCE_EXHAUSTED" in text)


class PumpNode:
    """A pump: its last registry status, error count and lazily opened write channel; thread-safe.

    The channel is created on first use and re-created after ``reset_connection``; ``write`` counts
    consecutive failures (reset by a success) so ``is_usable`` can retire a failing pump.
    """

    def __init__(self, status: NodeStatus, credentials: grpc.ChannelCredentials | None = None,
                 max_err_nums: int = DEFAULT_MAX_ERR_NUMS, transport: str = "auto") -> None:
        self._lock = threading.Lock()
        self._status = status
        self._credentials = credentials
        self._transport = transport
        self._max_err_nums = max_err_nums
        self._channel: WriteChannel | None = None
        self._err_num = 0

    @property
    def node_id(self) -> str:
        """The pump's node id."""
        return self._status.node_id

    @property
    def addr(self) -> str:
        """The advertised ``host:port`` the client dials."""
        return self._status.host

    @property
    def state(self) -> str:
        """The pump's state as last read from the registry."""
        return self._status.state

    @property
    def status(self) -> NodeStatus:
        """The last registry status."""
        return self._status

    @property
    def err_num(self) -> int:
        """Consecutive failed writes since the last success or reset."""
        return self._err_num

    def update_status(self, status: NodeStatus) -> None:
        """Take a newer registry status; a changed address drops the old connection."""
        with self._lock:
            moved = status.host != self._status.host
            self._status = status
            old = self._take_channel() if moved else None
        _close(old)

    def should_be_usable(self) -> bool:
        """True while the registry says online (TiDB's ``ShouldBeUsable``)."""
        return self._status.state == ONLINE

    def is_usable(self) -> bool:
        """Online and at most ``max_err_nums`` consecutive errors (TiDB's ``IsUsable``)."""
        return self.should_be_usable() and self._err_num <= self._max_err_nums

    def reset(self) -> None:
        """Forget the error count and drop the connection (TiDB's ``Reset``)."""
        with self._lock:
            self._err_num = 0
            old = self._take_channel()
        _close(old)

    def reset_connection(self) -> None:
        """Drop the connection; the next write dials again."""
        with self._lock:
            old = self._take_channel()
        _close(old)

    def write(self, req: pump_pb2.WriteBinlogReq, timeout: float) -> None:
        """Send one WriteBinlog with a per-RPC ``timeout``; raise ``PumpWriteError`` on any failure."""
        self.finish_write(self.start_write(req, timeout))

    def start_write(self, req: pump_pb2.WriteBinlogReq, timeout: float) -> PendingWrite:
        """Send one WriteBinlog without waiting (no thread is used); hand the result to ``finish_write``."""
        try:
            return self._get_channel().write(req, timeout)
        except ValueError as exc:  # the channel was closed under us by a concurrent reset
            return _Refused(exc)

    def finish_write(self, pending: PendingWrite) -> None:
        """Wait for a write started by ``start_write``; raise ``PumpWriteError`` on any failure."""
        try:
            resp = pending.result()
        except grpc.RpcError as exc:
            self._failed()
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
            raise PumpWriteError(self.node_id, f"{code}: {details}", code) from exc
        except (ValueError, grpc.FutureCancelledError) as exc:  # channel closed by a concurrent reset
            self._failed()
            raise PumpWriteError(self.node_id, f"connection closed: {exc!r}", grpc.StatusCode.UNAVAILABLE) from exc
        if resp.errmsg:
            self._failed()
            raise PumpWriteError(self.node_id, resp.errmsg)
        if self._err_num:
            with self._lock:
                self._err_num = 0

    def close(self) -> None:
        """Close the channel (a later write would dial again)."""
        with self._lock:
            old = self._take_channel()
        _close(old)

    def _failed(self) -> None:
        with self._lock:
            self._err_num += 1

    def _get_channel(self) -> WriteChannel:
        channel = self._channel
        if channel is not None:
            return channel
        with self._lock:
            if self._channel is None:
                self._channel = open_write_channel(self.addr, self._credentials, self._transport)
            return self._channel

    def _take_channel(self) -> WriteChannel | None:
        """Detach the channel (lock held); the caller closes it after releasing the lock, because
        closing fails the calls in flight and their callbacks take this lock again."""
        old, self._channel = self._channel, None
        return old

    def __repr__(self) -> str:
        return f"PumpNode({self.node_id!r}, {self.addr!r}, {self.state!r}, err_num={self._err_num})"


def _close(channel: WriteChannel | None) -> None:
    if channel is not None:
        channel.close()
