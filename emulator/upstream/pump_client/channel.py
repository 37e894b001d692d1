"""Where a pump's WriteBinlog calls travel: grpcio, or the plain HTTP/2 wire client.

``open_write_channel`` picks the transport: ``h2`` (``ingest.http2.framing``, several times
cheaper per call in CPU) for plain-text pumps, ``grpc`` (grpcio) whenever TLS credentials are set.
``transport="grpc"`` forces grpcio. Both hand back a ``PendingWrite`` whose ``result()`` is the
``WriteBinlogResp`` or raises a ``grpc.RpcError`` with ``code()`` and ``details()``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from schemas import pump_pb2, pump_pb2_grpc
from upstream.pump_client.h2channel import H2Channel

MAX_MESSAGE = (1 << 31) - 1          # send/receive limit (2 GiB - 1), as TiDB's client sets it
WRITE_BINLOG = "/binlog.Pump/WriteBinlog"
TRANSPORTS = ("auto", "h2", "grpc")


class PendingWrite(Protocol):
    """A WriteBinlog in flight (a ``grpc.Future`` or an ``h2channel.UnaryCall``)."""

    def result(self, timeout: float | None = None) -> Any: ...

    def add_done_callback(self, fn: Callable[[Any], None]) -> None: ...


class WriteChannel(ABC):
    """WriteBinlog calls to one pump address; ``write`` never blocks on the pump's answer."""

    @abstractmethod
    def write(self, req: pump_pb2.WriteBinlogReq, timeout: float) -> PendingWrite:
        """Start one WriteBinlog with a per-call ``timeout`` in seconds."""

    @abstractmethod
    def close(self) -> None:
        """Drop the connection; calls in flight fail."""


class GrpcWriteChannel(WriteChannel):
    """grpcio's channel (TLS when ``credentials`` are given); calls are ``grpc.Future``s."""

    def __init__(self, addr: str, credentials: grpc.ChannelCredentials | None = None) -> None:
        opts = [("grpc.max_send_message_length", MAX_MESSAGE),
                ("grpc.max_receive_message_length", MAX_MESSAGE),
                ("grpc.enable_retries", 0)]   # the client runs TiDB's own retry rules
        self._channel = (grpc.secure_channel(addr, credentials, opts) if credentials
                         else grpc.insecure_channel(addr, opts))
        self._stub = pump_pb2_grpc.PumpStub(self._channel)

    def write(self, req: pump_pb2.WriteBinlogReq, timeout: float) -> PendingWrite:
        return self._stub.WriteBinlog.future(req, timeout=timeout)

    def close(self) -> None:
        self._channel.close()


class H2WriteChannel(WriteChannel):
    """The plain HTTP/2 wire client (``h2channel``); calls are ``UnaryCall``s."""

    def __init__(self, addr: str) -> None:
        self._channel = H2Channel(addr, MAX_MESSAGE)

    def write(self, req: pump_pb2.WriteBinlogReq, timeout: float) -> PendingWrite:
        return self._channel.unary(WRITE_BINLOG, req.SerializeToString(), timeout,
                                   pump_pb2.WriteBinlogResp.FromString)

    def close(self) -> None:
        self._channel.close()


def check_transport(transport: str, credentials: grpc.ChannelCredentials | None) -> None:
    """Raise ``ValueError`` for an unknown transport, or ``h2`` asked to use TLS."""
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown pump client transport {transport!r} (known: {', '.join(TRANSPORTS)})")
    if transport == "h2" and credentials is not None:
        raise ValueError("the h2 transport speaks plain text only; use transport 'grpc' (or 'auto') with TLS")


def open_write_channel(addr: str, credentials: grpc.ChannelCredentials | None = None,
                       transport: str = "auto") -> WriteChannel:
    """A channel to ``addr``: ``auto`` = h2 without TLS, grpcio with it; ``h2`` refuses TLS."""
    check_transport(transport, credentials)
    if transport == "grpc" or credentials is not None:
        return GrpcWriteChannel(addr, credentials)
    return H2WriteChannel(addr)
