"""gRPC over HTTP/2 without grpcio: the pump's server and the Drainer's client transport, plain text
and TLS. Why these exist beside grpcio, and what they cost, is in docs/benchmarks.md.

The contract: code outside this package imports only the names of ``__all__``, from
``ingest.http2`` itself (``tests/test_architecture.py`` fails on an import of a submodule); the
submodules (``framing``, ``hpack_decoder``, ``calls``, ``server``, ``stream``) may change shape.
What each public name promises:

Client (``stream``):
- ``stream_call(addr, method, request, idle_timeout, max_message, gzip=False, tls=None)``: one
  server-streaming call on a connection of its own to ``host:port`` or ``unix:PATH``; yields each
  response message as a ``bytearray`` of its own, returns on status OK, raises ``WireRpcError``
  otherwise. ``tls``, a client ``ssl.SSLContext`` (``ingest.security.SecurityConfig
  .h2_client_context()``: ALPN ``h2``, the server's chain and host name checked), wraps the socket;
  the HTTP/2 above it is the same. Connecting is bounded by ``CONNECT_TIMEOUT`` and the TLS
  handshake by ``HANDSHAKE_TIMEOUT`` (each by ``idle_timeout`` if shorter); either failing (refused,
  wrong CA, a server without TLS, ALPN other than ``h2``) is ``UNAVAILABLE`` with the reason. After
  them ``idle_timeout`` is the longest silence of the server (``DEADLINE_EXCEEDED``), with TLS as
  without.
- ``unary_call(...)``: the same for a method answering one message; returns that message.
- ``WireRpcError``: a ``grpc.RpcError`` with ``code()`` (a ``grpc.StatusCode``) and ``details()``,
  raised as grpcio would raise it, so callers catch one type whichever transport failed.

Framing shared by clients (``framing``, ``hpack_decoder``):
- ``PREFACE``, the frame types (``DATA`` … ``CONTINUATION``), flags (``END_STREAM``, ``ACK``,
  ``END_HEADERS``, ``PADDED``, ``PRIORITY_FLAG``), SETTINGS ids (``S_*``), ``MAX_WINDOW``,
  ``MAX_STREAM_ID``: RFC 9113's numbers. ``frame(typ, flags, stream, payload)``: one frame's bytes.
- ``hpack_string`` (an HPACK literal without Huffman coding) and ``request_headers(authority, path,
  gzip, tls)``: a gRPC request's header block without dynamic-table state, safe to reuse.
- ``rst_error``, ``http_error``, ``trailers_error``: the ``WireRpcError`` an RST_STREAM code, an
  HTTP status without gRPC status, or trailers stand for (``trailers_error`` is None for OK).
- ``CONNECT_TIMEOUT``: the seconds a client gives a TCP connect.
- ``HpackDecoder`` (with ``HpackError``, ``HeaderListTooLarge``): one connection's HPACK decoding
  context, every RFC 7541 representation, the advertised header-list limit enforced.
- ``HTTP2_OPTIONS``: grpcio channel options for MiB-sized messages, for grpcio clients of a pump.

Server (``calls``, ``server``):
- ``Methods`` (path → ``Method``), ``Method`` (a unary or server-streaming handler), ``Call`` (what
  a handler knows: method, peer host, client certificate CN, deadline), ``Reply`` (what a unary
  handler returns), ``RpcAbort`` (raised by a handler: the call ends with that status).
- ``GrpcConnection``: one client connection on an asyncio loop, serving ``Methods`` (flow control,
  deadlines, gzip, limits: the promises of its module). TLS is not its concern: the front door
  (``ingest.frontdoor``) terminates it, offers ALPN ``http/1.1`` and ``h2`` (a gRPC client offering
  only ``h2`` gets it) and hands over the decrypted bytes; a plain-text door closes a TLS client's
  connection at once, so its handshake fails without waiting.
- ``RequestBudget``, ``PROCESS_PARTIAL_LIMIT``: the bytes of unfinished requests the connections
  sharing a budget (a front door's) may hold together; a request past it is ``RESOURCE_EXHAUSTED``.

Where grpcio is still used, and why:
- ``grpc.StatusCode`` and ``grpc.RpcError`` are the status vocabulary of both transports (a library
  import, no channel).
- PD's TSO (``ingest.tso``): ``/pdpb.PD/Tso`` is a bidirectional stream; ``stream_call`` sends one
  request and only reads after it.
- The pump's ``Cistern/Notify`` to drainers (``ingest.pump.node``): one unary call per online drainer
  when a pump rejoins, where grpcio's per-call cost does not matter; not moved to ``unary_call`` yet.
- The emulated TiDB's WriteBinlog channel under TLS (``upstream.pump_client.channel``; its HTTP/2
  channel is plain text only), and grpcio peers and baselines in tests and benchmarks.
The Drainer's reads (Scan, LookupPrewrites, Watermark, PullBinlogs with or without gzip) no longer
use grpcio, with TLS or without.
"""
from ingest.http2.calls import Call, Method, Methods, Reply, RpcAbort
from ingest.http2.framing import (
    ACK,
    CONNECT_TIMEOUT,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    HTTP2_OPTIONS,
    MAX_STREAM_ID,
    MAX_WINDOW,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PUSH_PROMISE,
    RST_STREAM,
    S_ENABLE_PUSH,
    S_INITIAL_WINDOW_SIZE,
    S_MAX_CONCURRENT_STREAMS,
    S_MAX_FRAME_SIZE,
    S_MAX_HEADER_LIST_SIZE,
    SETTINGS,
    WINDOW_UPDATE,
    WireRpcError,
    frame,
    hpack_string,
    http_error,
    request_headers,
    rst_error,
    trailers_error,
)
from ingest.http2.hpack_decoder import HeaderListTooLarge, HpackDecoder, HpackError
from ingest.http2.server import PROCESS_PARTIAL_LIMIT, GrpcConnection, RequestBudget
from ingest.http2.stream import HANDSHAKE_TIMEOUT, stream_call, unary_call

__all__ = [
    # client
    "stream_call", "unary_call", "WireRpcError", "HANDSHAKE_TIMEOUT",
    # framing
    "PREFACE", "DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS", "PUSH_PROMISE", "PING", "GOAWAY",
    "WINDOW_UPDATE", "CONTINUATION", "END_STREAM", "ACK", "END_HEADERS", "PADDED", "PRIORITY_FLAG",
    "S_ENABLE_PUSH", "S_MAX_CONCURRENT_STREAMS", "S_INITIAL_WINDOW_SIZE", "S_MAX_FRAME_SIZE",
    "S_MAX_HEADER_LIST_SIZE", "MAX_WINDOW", "MAX_STREAM_ID", "CONNECT_TIMEOUT", "HTTP2_OPTIONS",
    "frame", "hpack_string", "request_headers", "rst_error", "http_error", "trailers_error",
    "HpackDecoder", "HpackError", "HeaderListTooLarge",
    # server
    "Call", "Method", "Methods", "Reply", "RpcAbort", "GrpcConnection", "RequestBudget", "PROCESS_PARTIAL_LIMIT",
]
