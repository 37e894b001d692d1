"""The gRPC-over-HTTP/2 wire pieces binlake's own clients and server share (without grpcio): frame
layout (RFC 9113), the request header block, and how an HTTP/2 or gRPC ending maps to a
``grpc.StatusCode``.

Clients build on it: the Drainer's call reader (``ingest.http2.stream``, plain text and TLS) and the
emulated TiDB's WriteBinlog channel (``upstream.pump_client.h2channel``, plain text only).
``HTTP2_OPTIONS`` are the grpcio channel options for MiB-sized messages, for the grpcio clients that
remain (the scan benchmark's grpcio baseline).
"""
from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import unquote

import grpc

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
S_ENABLE_PUSH, S_MAX_CONCURRENT_STREAMS, S_INITIAL_WINDOW_SIZE, S_MAX_FRAME_SIZE = 2, 3, 4, 5  # SETTINGS ids
S_MAX_HEADER_LIST_SIZE = 6

MAX_WINDOW = (1 << 31) - 1
MAX_STREAM_ID = (1 << 31) - 1
CONNECT_TIMEOUT = 3.0
# Larger HTTP/2 frames and stream windows for MiB-sized scan batches (a bare grpc stream of 4 MiB
# messages went from ~0.4-0.6 to ~0.6-0.8 GiB/s on the 2-core VM); the grpcio channel of the scan
# benchmark's baseline uses them.
HTTP2_OPTIONS = [("grpc.http2.max_frame_size", 1 << 20), ("grpc.http2.lookahead_bytes", 64 << 20)]

# RST_STREAM / GOAWAY error codes -> gRPC status, as gRPC's HTTP/2 transport maps them.
_RST_STATUS = {0x0: grpc.StatusCode.INTERNAL, 0x7: grpc.StatusCode.UNAVAILABLE, 0x8: grpc.StatusCode.CANCELLED,
               0xb: grpc.StatusCode.RESOURCE_EXHAUSTED, 0xc: grpc.StatusCode.PERMISSION_DENIED}
_STATUS_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}
# HTTP status -> gRPC status when a response carries no grpc-status (gRPC's http-grpc-status-mapping).
_HTTP_STATUS = {400: grpc.StatusCode.INTERNAL, 401: grpc.StatusCode.UNAUTHENTICATED,
                403: grpc.StatusCode.PERMISSION_DENIED, 404: grpc.StatusCode.UNIMPLEMENTED,
                429: grpc.StatusCode.UNAVAILABLE, 502: grpc.StatusCode.UNAVAILABLE,
                503: grpc.StatusCode.UNAVAILABLE, 504: grpc.StatusCode.UNAVAILABLE}


class WireRpcError(grpc.RpcError):  # type: ignore[misc]  # grpc has no type information: RpcError is Any
    """A failed call, shaped like grpcio's errors (``code()`` and ``details()``)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def frame(typ: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((typ, flags)) + stream.to_bytes(4, "big") + payload


def rst_error(code: int) -> WireRpcError:
    """The error of a stream the server reset with HTTP/2 error ``code``."""
    return WireRpcError(_RST_STATUS.get(code, grpc.StatusCode.INTERNAL),
                        f"stream reset by the server (HTTP/2 error 0x{code:x})")


def http_error(http_status: bytes | None) -> WireRpcError:
    """The error of a response that carries HTTP status ``http_status`` and no gRPC status."""
    http = int(http_status) if http_status and http_status.isdigit() else 0
    return WireRpcError(_HTTP_STATUS.get(http, grpc.StatusCode.UNKNOWN), f"HTTP status {http} without a gRPC status")


def trailers_error(headers: Sequence[tuple[bytes, bytes]], http_status: bytes | None) -> WireRpcError | None:
    """None when the trailers (or a trailers-only response) carry ``grpc-status: 0``; the call's error
    otherwise (from ``http_status`` when there is no grpc-status)."""
    status = message = None
    for name, value in headers:
        if name == b"grpc-status":
            status = value
        elif name == b"grpc-message":
            message = value
    if status is None:
        return http_error(http_status)
    if not status.isdigit():
        return WireRpcError(grpc.StatusCode.INTERNAL, f"malformed grpc-status {status!r}")
    code = _STATUS_BY_NUMBER.get(int(status), grpc.StatusCode.UNKNOWN)
    if code is grpc.StatusCode.OK:
        return None
    return WireRpcError(code, unquote(message.decode("utf-8", "replace")) if message else "")


def hpack_string(value: bytes) -> bytes:
    """An HPACK string literal without Huffman coding (7-bit prefix length)."""
    n = len(value)
    if n < 0x7f:
        return bytes((n,)) + value
    out = bytearray((0x7f,))
    n -= 0x7f
    while n >= 0x80:
        out.append((n & 0x7f) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + value


def request_headers(authority: str, path: str, gzip: bool = False, tls: bool = False) -> bytes:
    """The HPACK block of a gRPC unary request: static-table indexes and literals, never indexed;
    ``gzip``: the request is gzip-compressed and gzip responses are accepted; ``tls``: ``:scheme https``."""
    block = (b"\x83"                                          # :method POST (static 3)
             + (b"\x87" if tls else b"\x86")                 # :scheme https (static 7) or http (6)
             + b"\x04" + hpack_string(path.encode())         # :path, name = static 4
             + b"\x01" + hpack_string(authority.encode())    # :authority, name = static 1
             + b"\x0f\x10" + hpack_string(b"application/grpc")  # content-type, name = static 31
             + b"\x00" + hpack_string(b"te") + hpack_string(b"trailers"))
    if gzip:
        for name in (b"grpc-encoding", b"grpc-accept-encoding"):
            block += b"\x00" + hpack_string(name) + hpack_string(b"gzip")
    return block
