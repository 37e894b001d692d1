"""What a gRPC call is to binlake's HTTP/2 server (``ingest.http2.server``) and its handlers: the
method table (``Method``: unary or server-streaming), what a handler knows of its call (``Call``),
how it ends one with a status (``RpcAbort``), and the request and response pieces that are not
HTTP/2 framing: the request head a header block gives (path, deadline, compression), the response
header blocks and status trailers, ``grpc-timeout`` and gzip messages.
"""
from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Final, NamedTuple, Union
from urllib.parse import quote

import grpc

from ingest.http2.framing import hpack_string

RESPONSE_HEADERS: Final = b"\x88" + b"\x0f\x10" + hpack_string(b"application/grpc")   # :status 200, content-type
GZIP_HEADERS: Final = RESPONSE_HEADERS + b"\x00" + hpack_string(b"grpc-encoding") + hpack_string(b"gzip")
TRAILERS_OK: Final = b"\x00" + hpack_string(b"grpc-status") + hpack_string(b"0")
TIMEOUT_UNITS: Final = {ord("H"): 3600.0, ord("M"): 60.0, ord("S"): 1.0, ord("m"): 1e-3, ord("u"): 1e-6,
                         ord("n"): 1e-9}

Reply = Union[bytes, Awaitable[bytes], Awaitable[None]]  # noqa: UP007 - a runtime alias
Unary = Callable[[bytes, "Call"], Reply]
Streaming = Callable[[bytes, "Call"], AsyncIterator[bytes]]


class RpcAbort(Exception):
    """Raised by a handler: the call ends with ``code`` and ``message``."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Method:
    """One RPC: ``streaming`` tells which kind of handler it has; ``errors`` turns an exception an
    awaited reply ends with into the call's status (others end it ``UNKNOWN``); ``observe`` learns
    how long each unary call took."""

    handler: Unary | Streaming
    streaming: bool = False
    errors: Callable[[BaseException], BaseException] | None = None
    observe: Callable[[float, bool], None] | None = None   # seconds a unary call took, and whether it succeeded


Methods = dict[str, Method]   # keyed by path, "/binlog.Pump/WriteBinlog"


class Call:
    """What a handler knows about its call."""

    __slots__ = ("method", "peer", "cn", "deadline")

    def __init__(self, method: str, peer: str, cn: str | None, deadline: float | None) -> None:
        self.method = method
        self.peer = peer           # the client's host, for logs
        self.cn = cn               # the client certificate's Common Name under mutual TLS
        self.deadline = deadline   # loop time, or None


def status_block(code: grpc.StatusCode, message: str, with_headers: bool) -> bytes:
    """A trailers block (with the response headers first for a trailers-only response)."""
    block = RESPONSE_HEADERS if with_headers else b""
    block += b"\x00" + hpack_string(b"grpc-status") + hpack_string(str(code.value[0]).encode())
    if message:
        encoded = quote(message[:2048], safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~").encode("ascii")
        block += b"\x00" + hpack_string(b"grpc-message") + hpack_string(encoded)
    return block


def parse_timeout(value: bytes) -> float | None:
    """Seconds of a ``grpc-timeout`` value (``"15S"``, ``"14999937u"``); None when malformed."""
    if len(value) < 2 or len(value) > 9 or not value[:-1].isdigit():
        return None
    unit = TIMEOUT_UNITS.get(value[-1])
    return None if unit is None else int(value[:-1]) * unit


OK, RESET, UNSUPPORTED_MEDIA, ABORT = "ok", "reset", "415", "abort"


class Head(NamedTuple):
    """What a request's header block says, checked: ``kind`` is ``OK`` or how to refuse it."""

    kind: str
    path: str
    timeout: float | None
    gzip_in: bool
    gzip_out: bool
    error: tuple[grpc.StatusCode, str] | None = None
    length: int | None = None     # content-length, when the request gives one (gRPC clients do not)


def request_head(headers: list[tuple[bytes, bytes]]) -> Head:
    path = method = content_type = b""
    timeout = encoding = accept = length = None
    for name, value in headers:
        if name == b":path":
            path = value
        elif name == b":method":
            method = value
        elif name == b"content-type":
            content_type = value
        elif name == b"grpc-timeout":
            timeout = value
        elif name == b"grpc-encoding":
            encoding = value
        elif name == b"grpc-accept-encoding":
            accept = value
        elif name == b"content-length":
            length = value
    if method != b"POST" or not path or (length is not None and not length.isdigit()):
        return Head(RESET, "", None, False, False)
    if not content_type.startswith(b"application/grpc"):
        return Head(UNSUPPORTED_MEDIA, "", None, False, False)
    seconds = None
    if timeout is not None:
        seconds = parse_timeout(timeout)
        if seconds is None:
            return Head(ABORT, "", None, False, False,
                         (grpc.StatusCode.INTERNAL, f"malformed grpc-timeout {timeout!r}"))
    gzip_in = False
    if encoding is not None and encoding != b"identity":
        if encoding != b"gzip":
            return Head(ABORT, "", None, False, False,
                         (grpc.StatusCode.UNIMPLEMENTED, f"grpc-encoding {encoding!r} is not supported"))
        gzip_in = True
    gzip_out = gzip_in and accept is not None and b"gzip" in accept
    return Head(OK, path.decode("utf-8", "replace"), seconds, gzip_in, gzip_out,
                length=int(length) if length is not None else None)


def gunzip(data: bytes, limit: int) -> bytes:
    """A gzip message inflated, at most ``limit`` bytes; ValueError when it is not gzip or larger."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"compressed message is not gzip: {exc}") from None
    if len(out) > limit:
        raise ValueError(f"received message larger than max after decompression (over {limit})")
    if not inflater.eof or inflater.unused_data:
        raise ValueError("compressed message is not one whole gzip member (truncated, or bytes after it)")
    return out

