"""The gate of every gRPC method a pump serves: who may call, and requests that are not protobuf.

Each method's handler is registered with a pass-through deserializer and wrapped here, so that

- a client whose certificate's Common Name is not in ``cert-allowed-cn`` gets ``PERMISSION_DENIED``;
- a request envelope that does not parse (``WriteBinlogReq`` … that is not valid protobuf) gets
  ``INVALID_ARGUMENT`` naming the message type, instead of grpcio's ``UNKNOWN`` and a traceback.

Either is logged as one line per client address per minute (:class:`ingest.peerlog.PeerLog`):
hostile traffic cannot fill the log disk. The wrapper costs one coroutine frame per call.
"""
from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from ingest.peerlog import PeerLog
from ingest.security import SecurityConfig, grpc_peer_cn

log = logging.getLogger(__name__)


Unary = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]
Stream = Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]]


def client_of(peer: str) -> str:
    """A gRPC peer string (``ipv4:127.0.0.1:53412``) without its port: one client per host."""
    head, _, _port = peer.rpartition(":")
    return head or peer


class CallGuard:
    """Wraps a service's method behaviours (see the module doc)."""

    def __init__(self, security: SecurityConfig, peer_log: PeerLog | None = None) -> None:
        self.security = security
        self.peer_log = peer_log or PeerLog(log)
        self._check_cn = bool(security.enabled and security.ssl_ca and security.cert_allowed_cn)

    async def _admit(self, method: str, context: grpc.aio.ServicerContext) -> None:
        cn = grpc_peer_cn(context.auth_context())
        if not self.security.allows(cn):
            self.peer_log.warn(client_of(context.peer()), f"{method} refused: certificate CN {cn!r} is not in "
                                                          f"cert-allowed-cn")
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"client certificate CN {cn!r} is not in the pump's cert-allowed-cn")

    async def _request(self, method: str, parse: Callable[[bytes], Message], raw: bytes,
                       context: grpc.aio.ServicerContext) -> Any:
        """The admitted call's request, parsed; a malformed one is answered ``INVALID_ARGUMENT``."""
        if self._check_cn:
            await self._admit(method, context)
        try:
            return parse(raw)
        except (DecodeError, ValueError) as e:   # ValueError: invalid UTF-8 in a string field
            name = getattr(parse, "__qualname__", "request").split(".")[0]
            self.peer_log.warn(client_of(context.peer()), f"{method}: malformed {name} ({len(raw)} bytes): {e}")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed {name}: not valid protobuf ({e})")

    def unary(self, method: str, parse: Callable[[bytes], Message], behaviour: Unary,
              serialize: Callable[[Any], bytes]) -> grpc.RpcMethodHandler:
        """A unary-unary handler: admitted, decoded, then ``behaviour``."""
        async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            return await behaviour(await self._request(method, parse, raw, context), context)
        return grpc.unary_unary_rpc_method_handler(handle, response_serializer=serialize)

    def stream(self, method: str, parse: Callable[[bytes], Message], behaviour: Stream,
               serialize: Callable[[Any], bytes]) -> grpc.RpcMethodHandler:
        """A unary-stream handler: admitted, decoded, then the messages of ``behaviour``."""
        async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async for message in behaviour(await self._request(method, parse, raw, context), context):
                yield message
        return grpc.unary_stream_rpc_method_handler(handle, response_serializer=serialize)
