"""The gate of every gRPC method a pump serves: who may call, and requests that are not protobuf.

Each method's handler gets the raw request bytes and is wrapped here, so that

- a client whose certificate's Common Name is not in ``cert-allowed-cn`` gets ``PERMISSION_DENIED``;
- a request envelope that does not parse (``WriteBinlogReq`` … that is not valid protobuf) gets
  ``INVALID_ARGUMENT`` naming the message type.

Either is logged as one line per client address per minute (:class:`ingest.peerlog.PeerLog`):
hostile traffic cannot fill the log disk. The wrapper costs one function call per call.
"""
from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from ingest.http2 import Call, Method, Reply, RpcAbort
from ingest.peerlog import PeerLog
from ingest.security import SecurityConfig

log = logging.getLogger(__name__)


class CallGuard:
    """Wraps a service's method behaviours (see the module doc)."""

    def __init__(self, security: SecurityConfig, peer_log: PeerLog | None = None) -> None:
        self.security = security
        self.peer_log = peer_log or PeerLog(log)
        self._check_cn = bool(security.enabled and security.ssl_ca and security.cert_allowed_cn)

    def _request(self, method: str, parse: Callable[[bytes], Message], raw: bytes, call: Call) -> Any:
        """The admitted call's request, parsed; ``RpcAbort`` for a refused client or a malformed request."""
        if self._check_cn and not self.security.allows(call.cn):
            self.peer_log.warn(call.peer, f"{method} refused: certificate CN {call.cn!r} is not in cert-allowed-cn")
            raise RpcAbort(grpc.StatusCode.PERMISSION_DENIED,
                           f"client certificate CN {call.cn!r} is not in the pump's cert-allowed-cn")
        try:
            return parse(raw)
        except (DecodeError, ValueError) as e:   # ValueError: invalid UTF-8 in a string field
            name = getattr(parse, "__qualname__", "request").split(".")[0]
            self.peer_log.warn(call.peer, f"{method}: malformed {name} ({len(raw)} bytes): {e}")
            raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed {name}: not valid protobuf ({e})") from None

    def unary(self, method: str, parse: Callable[[bytes], Message], behaviour: Callable[[Any, Call], Reply],
              errors: Callable[[BaseException], BaseException] | None = None,
              observe: Callable[[float, bool], None] | None = None) -> Method:
        """A unary method: admitted, decoded, then ``behaviour``."""
        request = self._request

        def handle(raw: bytes, call: Call) -> Reply:
            return behaviour(request(method, parse, raw, call), call)
        return Method(handle, errors=errors, observe=observe)

    def stream(self, method: str, parse: Callable[[bytes], Message],
               behaviour: Callable[[Any, Call], AsyncGenerator[bytes, None]]) -> Method:
        """A server-streaming method: admitted, decoded, then the messages of ``behaviour``."""
        async def handle(raw: bytes, call: Call) -> AsyncIterator[bytes]:
            async with aclosing(behaviour(self._request(method, parse, raw, call), call)) as messages:
                async for message in messages:
                    yield message
        return Method(handle, streaming=True)
