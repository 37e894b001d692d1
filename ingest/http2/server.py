"""The server side of gRPC over HTTP/2 (RFC 9113, gRPC's PROTOCOL-HTTP2), without grpcio.

One ``GrpcConnection`` per client connection, on an asyncio (uvloop) event loop: frames are parsed
from the connection's buffer, header blocks decoded by ``HpackDecoder``, and every method of the
``Methods`` table (``ingest.http2.calls``) is either

- *unary*: ``handler(raw_request, call)`` returns the response bytes, or an awaitable of them (a
  WriteBinlog returns the storage's future, so waiting for the group commit costs no coroutine), or
- *server-streaming*: ``handler(raw_request, call)`` is an async iterator of response messages,
  sent as the client's flow-control windows allow.

A handler raises ``RpcAbort`` to end the call with a status. What the connection promises:
many streams at once (``MAX_STREAMS``, more are refused with REFUSED_STREAM, which clients retry),
flow control both ways, ``grpc-timeout`` honoured (``DEADLINE_EXCEEDED`` at the deadline, a stream's
iterator cancelled), gzip request and response messages (``grpc-encoding``), messages over the
limit answered ``RESOURCE_EXHAUSTED``, at most ``PARTIAL_LIMIT`` bytes of unfinished requests held
per connection and ``PROCESS_PARTIAL_LIMIT`` over all connections sharing a :class:`RequestBudget`
(each at least one message of the largest size allowed; a request past either is answered
``RESOURCE_EXHAUSTED``, so many clients cannot make the process run out of memory), a client that does
not read its answers not read from either, and every protocol violation answered with the RFC's
error code (a stream's with RST_STREAM, the connection's with GOAWAY and a close). Responses of one
loop iteration leave in one write.
"""
from __future__ import annotations

import asyncio
import gzip
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import grpc

from ingest.http2.calls import (
    ABORT,
    GZIP_HEADERS,
    OK,
    RESET,
    RESPONSE_HEADERS,
    TRAILERS_OK,
    UNSUPPORTED_MEDIA,
    Call,
    Head,
    Method,
    Methods,
    RpcAbort,
    gunzip,
    request_head,
    status_block,
)
from ingest.http2.framing import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    MAX_WINDOW,
    PADDED,
    PING,
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
    hpack_string,
)
from ingest.http2.hpack_decoder import HeaderListTooLarge, HpackDecoder, HpackError
from ingest.peerlog import PeerLog

log = logging.getLogger(__name__)
# connections ended for a protocol error: one line per client per minute, however many it opens
protocol_errors = PeerLog(log)

# HTTP/2 error codes (RFC 9113 §7)
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 0x5, 0x6, 0x7, 0x8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x9, 0xb

MAX_STREAMS: Final = 4096              # concurrent streams per connection
STREAM_WINDOW: Final = 1 << 20         # our initial stream receive window
CONN_WINDOW: Final = 16 << 20          # our connection receive window
MAX_FRAME: Final = 1 << 20             # largest frame we accept
MAX_HEADER_LIST: Final = 64 << 10      # decoded header list limit we advertise
MAX_HEADER_BLOCK: Final = 256 << 10    # encoded header block (HEADERS + CONTINUATION) we buffer at most
PARTIAL_LIMIT: Final = 256 << 20       # bytes of unfinished request messages one connection may hold
PROCESS_PARTIAL_LIMIT: Final = 1 << 30  # ... and all connections of one front door (a process) together
DEFAULT_WINDOW: Final = 65535
DEFAULT_FRAME: Final = 16384

_PLAIN_HEAD: Final = len(RESPONSE_HEADERS).to_bytes(3, "big") + bytes((HEADERS, END_HEADERS))
_GZIP_HEAD: Final = len(GZIP_HEADERS).to_bytes(3, "big") + bytes((HEADERS, END_HEADERS))
_DATA_TYPE: Final = bytes((DATA, 0))
_TRAILERS_HEAD: Final = len(TRAILERS_OK).to_bytes(3, "big") + bytes((HEADERS, END_HEADERS | END_STREAM))
HEAD_MEMO: Final = 512                 # decoded request heads remembered per connection
HEAD_MEMO_BLOCK: Final = 1024          # of header blocks up to this size
_PSEUDO: Final = frozenset((b":method", b":scheme", b":path", b":authority"))   # a request's (RFC 9113 §8.3.1)
_REQUIRED: Final = frozenset((b":method", b":scheme", b":path"))
_CONNECTION_FIELDS: Final = frozenset((b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
                                       b"upgrade"))
_MALFORMED: Final = Head(RESET, "", None, False, False)


def malformed(headers: list[tuple[bytes, bytes]]) -> bool:
    """A request header list RFC 9113 calls malformed (a stream error PROTOCOL_ERROR, §8.1.1): a field
    name with uppercase letters (§8.2.1), a connection-specific field or ``te`` other than ``trailers``
    (§8.2.2), a pseudo-header unknown, repeated or after a regular field, or ``:method``, ``:scheme``
    or ``:path`` missing (§8.3)."""
    seen: set[bytes] = set()
    regular = False
    for name, value in headers:
        if name[:1] == b":":
            if regular or name not in _PSEUDO or name in seen:
                return True
            seen.add(name)
        else:
            regular = True
            if name.lower() != name or name in _CONNECTION_FIELDS or (name == b"te" and value != b"trailers"):
                return True
    return not _REQUIRED <= seen


class ConnectionError_(Exception):
    """A connection-level protocol error: GOAWAY with ``code``, then close."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def frame_header(length: int, typ: int, flags: int, sid: int) -> bytes:
    return length.to_bytes(3, "big") + bytes((typ, flags)) + sid.to_bytes(4, "big")


class _Stream:
    __slots__ = ("sid", "method", "call", "data", "closed_remote", "answered", "send_window", "task", "timer",
                 "gzip_in", "gzip_out", "unacked", "waiter", "headers_sent", "ready", "started", "length")

    def __init__(self, sid: int, send_window: int) -> None:
        self.sid = sid
        self.method: Method | None = None
        self.call: Call | None = None
        self.data = bytearray()          # request bytes received (gRPC length-prefixed)
        self.closed_remote = False       # END_STREAM received
        self.answered = False            # our END_STREAM sent (or the stream was reset)
        self.send_window = send_window
        self.task: asyncio.Task[Any] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.gzip_in = False
        self.gzip_out = False
        self.unacked = 0                 # request bytes received since our last stream WINDOW_UPDATE
        self.waiter: asyncio.Future[None] | None = None
        self.headers_sent = False
        self.ready = False               # the request message was handed to the handler
        self.started = 0.0               # time.monotonic() at the handler's start (when the method observes)
        self.length: int | None = None   # request bytes still due by its content-length (None: none given)


class RequestBudget:
    """Bytes of unfinished request messages the connections sharing it may hold together (one front
    door's, on its one event loop thread: no lock)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0


class GrpcConnection(asyncio.Protocol):
    """One HTTP/2 connection serving ``methods`` (see the module doc); ``start`` is called with the
    bytes the front door already read (the client preface included)."""

    def __init__(self, methods: Methods, max_message: int, peer: str, cn: str | None,
                 on_close: Callable[[GrpcConnection], None] | None = None, budget: RequestBudget | None = None) -> None:
        self.methods = methods
        self.max_message = max_message
        self.peer = peer
        self.cn = cn
        self.on_close = on_close
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.buf = bytearray()
        self.decoder = HpackDecoder(max_header_list=MAX_HEADER_LIST)
        self.heads: dict[bytes, Head] = {}      # request heads by header block, while the table stays
        self.heads_at = 0                        # the decoder's ``changes`` the memo holds for
        self.streams: dict[int, _Stream] = {}
        self.last_sid = 0
        self.send_window = DEFAULT_WINDOW        # connection send window
        self.peer_window = DEFAULT_WINDOW        # peer's SETTINGS_INITIAL_WINDOW_SIZE
        self.peer_frame = DEFAULT_FRAME          # peer's SETTINGS_MAX_FRAME_SIZE
        self.recv_window = CONN_WINDOW           # what the peer may still send us
        self.partial = 0                         # bytes of unfinished request messages
        self.partial_limit = max(PARTIAL_LIMIT, max_message + 5)
        self.budget = budget if budget is not None else RequestBudget(max(PROCESS_PARTIAL_LIMIT, max_message + 5))
        self.out: list[bytes | memoryview] = []
        self.views = False                       # ``out`` holds views of large messages
        self.flush_pending = False
        self.going_away = False
        self.closed = False
        self.paused = False
        self.drained: asyncio.Future[None] | None = None
        self.headers_sid = 0                     # a HEADERS awaiting CONTINUATION
        self.headers_block = bytearray()
        self.headers_end_stream = False
        self.idle: asyncio.Future[None] | None = None   # set by ``shutdown`` to learn when streams end

    # ---- asyncio.Protocol ---------------------------------------------------------------------

    def start(self, transport: asyncio.Transport, received: bytes) -> None:
        """Take over ``transport``: send our SETTINGS and process ``received`` (preface first)."""
        self.transport = transport
        settings = b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in (
            (S_MAX_CONCURRENT_STREAMS, MAX_STREAMS), (S_INITIAL_WINDOW_SIZE, STREAM_WINDOW),
            (S_MAX_FRAME_SIZE, MAX_FRAME), (S_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST)))
        self.out.append(frame_header(len(settings), SETTINGS, 0, 0) + settings)
        self.out.append(frame_header(4, WINDOW_UPDATE, 0, 0) + (CONN_WINDOW - DEFAULT_WINDOW).to_bytes(4, "big"))
        self.data_received(received[24:])

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        buf = self.buf
        buf += data
        pos = 0
        end = len(buf)
        try:
            while end - pos >= 9:
                length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]
                if length > MAX_FRAME:
                    raise ConnectionError_(FRAME_SIZE_ERROR, f"frame of {length} bytes over our {MAX_FRAME}")
                if end - pos - 9 < length:
                    break
                typ = buf[pos + 3]
                flags = buf[pos + 4]
                sid = int.from_bytes(buf[pos + 5:pos + 9], "big") & 0x7fffffff
                payload = bytes(buf[pos + 9:pos + 9 + length])
                pos += 9 + length
                if self.headers_sid and typ != CONTINUATION:
                    raise ConnectionError_(PROTOCOL_ERROR, "a header block was interrupted by another frame")
                if typ == DATA:
                    self._data(sid, flags, payload)
                elif typ == HEADERS:
                    self._headers(sid, flags, payload)
                elif typ == CONTINUATION:
                    self._continuation(sid, flags, payload)
                elif typ == WINDOW_UPDATE:
                    self._window_update(sid, payload)
                elif typ == SETTINGS:
                    self._settings(sid, flags, payload)
                elif typ == PING:
                    if sid or length != 8:
                        raise ConnectionError_(PROTOCOL_ERROR if sid else FRAME_SIZE_ERROR, "malformed PING")
                    if not flags & ACK:
                        self.out.append(frame_header(8, PING, ACK, 0) + payload)
                elif typ == RST_STREAM:
                    self._rst(sid, payload)
                elif typ == PRIORITY:
                    if not sid:
                        raise ConnectionError_(PROTOCOL_ERROR, "PRIORITY on stream 0")
                    if length != 5:
                        self._reset(sid, FRAME_SIZE_ERROR)
                elif typ == GOAWAY:
                    if sid:
                        raise ConnectionError_(PROTOCOL_ERROR, "GOAWAY on a stream")
                    self.going_away = True
                elif typ == PUSH_PROMISE:
                    raise ConnectionError_(PROTOCOL_ERROR, "a client sent PUSH_PROMISE")
                # other frame types are ignored (RFC 9113 §5.5)
        except ConnectionError_ as exc:
            self._fail(exc.code, str(exc))
            return
        except Exception:  # a bug of ours: this connection ends, the others go on
            log.exception("HTTP/2 connection of %s failed", self.peer)
            self._fail(INTERNAL_ERROR, "internal error")
            return
        del buf[:pos]
        if self.out:
            self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for st in list(self.streams.values()):
            self._forget(st)
        self.streams.clear()
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        if self.idle is not None and not self.idle.done():
            self.idle.set_result(None)
        if self.on_close is not None:
            self.on_close(self)

    def pause_writing(self) -> None:
        """The client reads slower than we answer: read nothing more until it catches up (what we
        answer without flow control, PING and SETTINGS ACKs, resets, cannot pile up then)."""
        self.paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        self.drained = None

    # ---- output -------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write what is queued, in one write."""
        self.flush_pending = False
        if self.out and not self.closed and self.transport is not None:
            out = self.out
            if self.views:                     # large messages: no join, the transport gathers them
                self.transport.writelines(out)
                self.views = False
            else:
                self.transport.write(out[0] if len(out) == 1 else b"".join(out))
            self.out = []

    def _later(self) -> None:
        if not self.flush_pending:
            self.flush_pending = True
            self.loop.call_soon(self.flush)

    def _fail(self, code: int, message: str) -> None:
        protocol_errors.warn(self.peer, f"closed an HTTP/2 connection: {message}")
        debug = message.encode()[:256]
        self.out.append(frame_header(8 + len(debug), GOAWAY, 0, 0) + self.last_sid.to_bytes(4, "big")
                        + code.to_bytes(4, "big") + debug)
        self.flush()
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def goaway(self) -> None:
        """Tell the client no new stream will be served (graceful stop)."""
        if not self.closed and not self.going_away:
            self.going_away = True
            self.out.append(frame_header(8, GOAWAY, 0, 0) + self.last_sid.to_bytes(4, "big") + bytes(4))
            self.flush()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.flush()
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection now, whatever is unsent (the end of a stop's grace)."""
        if self.transport is not None:
            self.transport.abort()

    # ---- frames -------------------------------------------------------------------------------

    def _headers(self, sid: int, flags: int, payload: bytes) -> None:
        if not sid:
            raise ConnectionError_(PROTOCOL_ERROR, "HEADERS on stream 0")
        start, stop = 0, len(payload)
        if flags & PADDED:
            if not payload:
                raise ConnectionError_(FRAME_SIZE_ERROR, "padded HEADERS without a pad length")
            start = 1
            stop -= payload[0]
        if flags & PRIORITY_FLAG:
            start += 5
        if stop < start:
            raise ConnectionError_(PROTOCOL_ERROR, "HEADERS padding longer than the frame")
        block = payload[start:stop]
        if len(block) > MAX_HEADER_BLOCK:
            raise ConnectionError_(ENHANCE_YOUR_CALM, f"header block over {MAX_HEADER_BLOCK} bytes")
        end_stream = bool(flags & END_STREAM)
        if not flags & END_HEADERS:
            self.headers_sid = sid
            self.headers_block = bytearray(block)
            self.headers_end_stream = end_stream
            return
        self._header_block(sid, block, end_stream)

    def _continuation(self, sid: int, flags: int, payload: bytes) -> None:
        if not self.headers_sid or sid != self.headers_sid:
            raise ConnectionError_(PROTOCOL_ERROR, "CONTINUATION without a HEADERS before it")
        self.headers_block += payload
        if len(self.headers_block) > MAX_HEADER_BLOCK:
            raise ConnectionError_(ENHANCE_YOUR_CALM, f"header block over {MAX_HEADER_BLOCK} bytes")
        if flags & END_HEADERS:
            self.headers_sid = 0
            block, self.headers_block = bytes(self.headers_block), bytearray()
            self._header_block(sid, block, self.headers_end_stream)

    def _header_block(self, sid: int, block: bytes, end_stream: bool) -> None:
        decoder = self.decoder
        if decoder.changes != self.heads_at:
            self.heads.clear()
            self.heads_at = decoder.changes
        head = self.heads.get(block)
        if head is None:
            try:
                headers = decoder.decode(block)
                head = _MALFORMED if malformed(headers) else request_head(headers)
            except HpackError as exc:
                raise ConnectionError_(COMPRESSION_ERROR, f"header block: {exc}") from None
            except HeaderListTooLarge as exc:
                head = Head(ABORT, "", None, False, False, (grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)))
            if decoder.changes == self.heads_at:   # the block left the table as it was: it decodes alike
                if len(self.heads) < HEAD_MEMO and len(block) <= HEAD_MEMO_BLOCK:
                    self.heads[block] = head
            else:
                self.heads.clear()
                self.heads_at = decoder.changes
        st = self.streams.get(sid)
        if st is not None:                          # trailers from the client
            if not end_stream:
                raise ConnectionError_(PROTOCOL_ERROR, "a second HEADERS without END_STREAM")
            self._remote_end(st)
            return
        if sid % 2 and sid <= self.last_sid and end_stream:
            self._reset(sid, STREAM_CLOSED)         # trailers on a stream already closed: a stream error
            return
        if sid % 2 == 0 or sid <= self.last_sid:
            raise ConnectionError_(PROTOCOL_ERROR, f"HEADERS on stream {sid}, which cannot open now")
        self.last_sid = sid
        if self.going_away or len(self.streams) >= MAX_STREAMS:
            self._reset(sid, REFUSED_STREAM)
            return
        st = _Stream(sid, self.peer_window)
        st.closed_remote = end_stream
        self.streams[sid] = st
        if head.length is not None:
            if end_stream and head.length:
                self._reset(sid, PROTOCOL_ERROR)    # a content-length but no DATA: malformed
                return
            st.length = head.length
        kind = head.kind
        if kind is not OK:
            if kind is RESET:
                self._reset(sid, PROTOCOL_ERROR)
            elif kind is UNSUPPORTED_MEDIA:
                self._http_status(st, 415)
            else:
                assert head.error is not None
                self._abort(st, *head.error)
            return
        call = st.call = Call(head.path, self.peer, self.cn, None)
        if head.timeout is not None:
            call.deadline = self.loop.time() + head.timeout
            st.timer = self.loop.call_at(call.deadline, self._expire, st)
        st.gzip_in = head.gzip_in
        st.gzip_out = head.gzip_out
        st.method = self.methods.get(head.path)
        if st.method is None:
            service = head.path.rpartition("/")[0].lstrip("/")
            known = any(p.startswith(f"/{service}/") for p in self.methods)
            self._abort(st, grpc.StatusCode.UNIMPLEMENTED,
                        f"unknown method {head.path}" if known else f"unknown service {service}")
            return
        if end_stream:
            self._remote_end(st)

    def _data(self, sid: int, flags: int, payload: bytes) -> None:
        n = len(payload)
        self.recv_window -= n
        if self.recv_window < 0:
            raise ConnectionError_(FLOW_CONTROL_ERROR, "DATA beyond the connection window")
        if self.recv_window < CONN_WINDOW // 2:
            self.out.append(frame_header(4, WINDOW_UPDATE, 0, 0) + (CONN_WINDOW - self.recv_window).to_bytes(4, "big"))
            self.recv_window = CONN_WINDOW
        if not sid:
            raise ConnectionError_(PROTOCOL_ERROR, "DATA on stream 0")
        st = self.streams.get(sid)
        if st is None:
            if sid > self.last_sid:
                raise ConnectionError_(PROTOCOL_ERROR, f"DATA on idle stream {sid}")
            return                           # a stream we already answered or reset
        if st.closed_remote:
            self._reset(sid, STREAM_CLOSED)
            return
        if flags & PADDED:
            if not payload or payload[0] >= n:
                raise ConnectionError_(PROTOCOL_ERROR, "DATA padding longer than the frame")
            payload = payload[1:n - payload[0]]
        if st.length is not None:
            st.length -= len(payload)
            if st.length < 0 or (flags & END_STREAM and st.length):
                self._reset(sid, PROTOCOL_ERROR)    # DATA other than the content-length: malformed
                return
        if st.answered or st.ready:
            if flags & END_STREAM:
                self._remote_end(st)
            return
        data = st.data
        if not data and flags & END_STREAM:        # the whole request in one frame: no copy
            st.closed_remote = True
            st.ready = True
            self._dispatch(st, payload)
            return
        data += payload
        self.partial += len(payload)
        self.budget.held += len(payload)
        if len(data) >= 5:
            size = int.from_bytes(data[1:5], "big")
            if size > self.max_message:
                self._abort(st, grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"received message larger than max ({size} vs. {self.max_message})")
                return
            if len(data) > size + 5:
                self._abort(st, grpc.StatusCode.INVALID_ARGUMENT, "more than one request message on a unary call")
                return
            if self.partial > self.partial_limit:
                self._abort(st, grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"the connection holds more than {self.partial_limit} bytes of unfinished requests")
                return
            if self.budget.held > self.budget.limit:
                self._abort(st, grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"the server holds more than {self.budget.limit} bytes of unfinished requests over all "
                            f"its connections")
                return
        st.unacked += n
        if st.unacked >= STREAM_WINDOW // 2 and not flags & END_STREAM:
            self.out.append(frame_header(4, WINDOW_UPDATE, 0, sid) + st.unacked.to_bytes(4, "big"))
            st.unacked = 0
        if flags & END_STREAM:
            self._remote_end(st)

    def _remote_end(self, st: _Stream) -> None:
        """The client finished sending: hand the request to its handler."""
        st.closed_remote = True
        if st.answered or st.ready or st.method is None:
            if st.answered:
                self._forget(st)
            return
        data = st.data
        st.data = bytearray()
        self.partial -= len(data)
        self.budget.held -= len(data)
        st.ready = True
        self._dispatch(st, data)

    def _dispatch(self, st: _Stream, data: bytes | bytearray) -> None:
        """Check the request's one gRPC message and start its handler."""
        n = len(data)
        if n < 5:
            self._abort(st, grpc.StatusCode.INVALID_ARGUMENT if not data else grpc.StatusCode.INTERNAL,
                        "no request message" if not data else "truncated gRPC message prefix")
            return
        size = int.from_bytes(data[1:5], "big")
        if n != size + 5:
            self._abort(st, grpc.StatusCode.RESOURCE_EXHAUSTED if size > self.max_message
                        else grpc.StatusCode.INVALID_ARGUMENT,
                        f"received message larger than max ({size} vs. {self.max_message})" if size > self.max_message
                        else f"a unary request carries {n} bytes, its message prefix says {size + 5}")
            return
        raw = bytes(data[5:])
        if data[0]:
            if not st.gzip_in:
                self._abort(st, grpc.StatusCode.INTERNAL, "compressed message without grpc-encoding")
                return
            try:
                raw = gunzip(raw, self.max_message)
            except ValueError as exc:
                self._abort(st, grpc.StatusCode.RESOURCE_EXHAUSTED if "larger" in str(exc)
                            else grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                return
        elif size > self.max_message:
            self._abort(st, grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"received message larger than max ({size} vs. {self.max_message})")
            return
        method = st.method
        call = st.call
        assert method is not None and call is not None
        if method.streaming:
            st.task = self.loop.create_task(self._stream(st, method.handler(raw, call)))  # type: ignore[arg-type]
            return
        if method.observe is not None:
            st.started = time.monotonic()
        try:
            reply = method.handler(raw, call)
        except Exception as exc:  # noqa: BLE001 - a failed call must not end the connection
            self._failed(st, exc)
            return
        if isinstance(reply, bytes):
            self._reply(st, reply)
            return
        future: asyncio.Future[Any] = asyncio.ensure_future(reply)  # type: ignore[arg-type]
        if isinstance(future, asyncio.Task):   # a coroutine: cancelled with its stream
            st.task = future
        future.add_done_callback(lambda f: self._replied(st, f))

    def _replied(self, st: _Stream, future: asyncio.Future[bytes | None]) -> None:
        st.task = None
        if st.answered or self.closed:
            return
        if future.cancelled():
            self._abort(st, grpc.StatusCode.CANCELLED, "the call was cancelled")
        elif (exc := future.exception()) is None:
            self._reply(st, future.result() or b"")
        else:
            self._failed(st, exc)
        self._later()

    def _failed(self, st: _Stream, exc: BaseException) -> None:
        """End the call with the status ``exc`` stands for."""
        method = st.method
        if method is not None and method.observe is not None and st.started:
            method.observe(time.monotonic() - st.started, False)
        if not isinstance(exc, RpcAbort) and method is not None and method.errors is not None:
            exc = method.errors(exc) or exc
        if isinstance(exc, RpcAbort):
            self._abort(st, exc.code, exc.message)
            return
        log.error("%s failed: %s: %s", st.call.method if st.call else "?", type(exc).__name__, exc)
        self._abort(st, grpc.StatusCode.UNKNOWN, f"{type(exc).__name__}: {exc}")

    def _reply(self, st: _Stream, message: bytes) -> None:
        """A unary response: headers, the message, trailers."""
        if st.answered or self.closed:
            return
        method = st.method
        if method is not None and method.observe is not None and st.started:
            method.observe(time.monotonic() - st.started, True)
        body = self._message(st, message)
        n = len(body)
        if n <= st.send_window and n <= self.send_window and n <= self.peer_frame:
            st.send_window -= n
            self.send_window -= n
            st.answered = True
            sid = st.sid.to_bytes(4, "big")
            self.out.append(b"".join((
                _GZIP_HEAD if st.gzip_out else _PLAIN_HEAD, sid, GZIP_HEADERS if st.gzip_out else RESPONSE_HEADERS,
                n.to_bytes(3, "big"), _DATA_TYPE, sid, body, _TRAILERS_HEAD, sid, TRAILERS_OK)))
            self._finish(st)
            self._later()
            return
        st.task = self.loop.create_task(self._stream(st, _one(message)))

    def _message(self, st: _Stream, message: bytes) -> bytes:
        if st.gzip_out:
            message = gzip.compress(message, compresslevel=1, mtime=0)
            return b"\x01" + len(message).to_bytes(4, "big") + message
        return b"\x00" + len(message).to_bytes(4, "big") + message

    async def _stream(self, st: _Stream, messages: AsyncIterator[bytes]) -> None:
        """Send a server-streaming call's messages as the windows allow, then its status."""
        try:
            async for message in messages:
                if st.answered or self.closed:
                    return
                self._send_headers(st)
                await self._send_data(st, message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - ends this call, not the connection
            if not st.answered and not self.closed:
                self._failed(st, exc)
                self._later()
            return
        finally:
            aclose = getattr(messages, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:  # noqa: BLE001
                    pass
        st.task = None       # it ends here: not cancelled by its own stream's end
        if st.answered or self.closed:
            return
        if not st.headers_sent:
            self._abort(st, grpc.StatusCode.OK, "")
        else:
            st.answered = True
            self.out.append(frame_header(len(TRAILERS_OK), HEADERS, END_HEADERS | END_STREAM, st.sid) + TRAILERS_OK)
            self._finish(st)
        self._later()

    def _send_headers(self, st: _Stream) -> None:
        if not st.headers_sent:
            st.headers_sent = True
            block = GZIP_HEADERS if st.gzip_out else RESPONSE_HEADERS
            self.out.append(frame_header(len(block), HEADERS, END_HEADERS, st.sid) + block)

    async def _send_data(self, st: _Stream, message: bytes) -> None:
        """One message as DATA frames within the windows; its bytes are not copied on the way to
        the transport (frames of a large message are written as views, ``flush`` uses writelines)."""
        if st.gzip_out:
            message = gzip.compress(message, compresslevel=1, mtime=0)
        prefix = (b"\x01" if st.gzip_out else b"\x00") + len(message).to_bytes(4, "big")
        view = memoryview(message)
        while prefix or view:
            if st.answered or self.closed:
                return
            n = min(len(prefix) + len(view), st.send_window, self.send_window, self.peer_frame)
            if n < len(prefix) + (1 if view else 0):   # wait for room for the prefix and some of the message
                self.flush()
                st.waiter = self.loop.create_future()
                await st.waiter
                continue
            st.send_window -= n
            self.send_window -= n
            self.out.append(frame_header(n, DATA, 0, st.sid) + prefix)
            n -= len(prefix)
            prefix = b""
            if n:
                self.out.append(view[:n])
                self.views = True
                view = view[n:]
            if self.paused:
                self.flush()
                self.drained = self.drained or self.loop.create_future()
                await self.drained
        self._later()

    def _window_update(self, sid: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionError_(FRAME_SIZE_ERROR, "WINDOW_UPDATE of the wrong length")
        inc = int.from_bytes(payload, "big") & 0x7fffffff
        if sid == 0:
            if inc == 0:
                raise ConnectionError_(PROTOCOL_ERROR, "WINDOW_UPDATE of 0 on the connection")
            self.send_window += inc
            if self.send_window > MAX_WINDOW:
                raise ConnectionError_(FLOW_CONTROL_ERROR, "connection window over 2^31-1")
            for each in self.streams.values():
                self._wake(each)
            return
        st = self.streams.get(sid)
        if st is None:
            if sid > self.last_sid:
                raise ConnectionError_(PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {sid}")
            return                           # a stream we already answered or reset
        if inc == 0:
            self._reset(sid, PROTOCOL_ERROR)
            return
        st.send_window += inc
        if st.send_window > MAX_WINDOW:
            self._reset(sid, FLOW_CONTROL_ERROR)
            return
        self._wake(st)

    @staticmethod
    def _wake(st: _Stream) -> None:
        if st.waiter is not None and not st.waiter.done():
            st.waiter.set_result(None)

    def _settings(self, sid: int, flags: int, payload: bytes) -> None:
        if sid:
            raise ConnectionError_(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise ConnectionError_(FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise ConnectionError_(FRAME_SIZE_ERROR, "SETTINGS of a length not a multiple of 6")
        for i in range(0, len(payload), 6):
            key = int.from_bytes(payload[i:i + 2], "big")
            value = int.from_bytes(payload[i + 2:i + 6], "big")
            if key == S_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ConnectionError_(FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1")
                delta = value - self.peer_window
                self.peer_window = value
                for st in self.streams.values():
                    st.send_window += delta
                    if st.send_window > MAX_WINDOW:
                        raise ConnectionError_(FLOW_CONTROL_ERROR, "a stream window over 2^31-1 after SETTINGS")
                    self._wake(st)
            elif key == S_MAX_FRAME_SIZE:
                if not 16384 <= value <= 16777215:
                    raise ConnectionError_(PROTOCOL_ERROR, f"SETTINGS_MAX_FRAME_SIZE {value} out of range")
                self.peer_frame = value
            elif key == S_ENABLE_PUSH and value > 1:
                raise ConnectionError_(PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH other than 0 or 1")
        self.out.append(frame_header(0, SETTINGS, ACK, 0))

    def _rst(self, sid: int, payload: bytes) -> None:
        if not sid:
            raise ConnectionError_(PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if len(payload) != 4:
            raise ConnectionError_(FRAME_SIZE_ERROR, "RST_STREAM of the wrong length")
        if sid > self.last_sid:
            raise ConnectionError_(PROTOCOL_ERROR, f"RST_STREAM on idle stream {sid}")
        st = self.streams.get(sid)
        if st is not None:
            st.answered = True
            self._forget(st)

    # ---- ending streams -----------------------------------------------------------------------

    def _abort(self, st: _Stream, code: grpc.StatusCode, message: str) -> None:
        """End the call with a status (trailers-only when nothing was sent yet)."""
        if st.answered:
            return
        st.answered = True
        block = status_block(code, message, not st.headers_sent)
        self.out.append(frame_header(len(block), HEADERS, END_HEADERS | END_STREAM, st.sid) + block)
        if not st.closed_remote:                   # the client may stop sending (RFC 9113 §8.1)
            self.out.append(frame_header(4, RST_STREAM, 0, st.sid) + NO_ERROR.to_bytes(4, "big"))
        self._forget(st)

    def _http_status(self, st: _Stream, status: int) -> None:
        block = b"\x08" + hpack_string(str(status).encode())   # :status, literal, name = static 8
        st.answered = True
        self.out.append(frame_header(len(block), HEADERS, END_HEADERS | END_STREAM, st.sid) + block)
        if not st.closed_remote:
            self.out.append(frame_header(4, RST_STREAM, 0, st.sid) + NO_ERROR.to_bytes(4, "big"))
        self._forget(st)

    def _reset(self, sid: int, code: int) -> None:
        self.out.append(frame_header(4, RST_STREAM, 0, sid) + code.to_bytes(4, "big"))
        st = self.streams.get(sid)
        if st is not None:
            st.answered = True
            self._forget(st)

    def _expire(self, st: _Stream) -> None:
        st.timer = None
        if not st.answered and not self.closed:
            self._abort(st, grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
            self.flush()

    def _finish(self, st: _Stream) -> None:
        if st.closed_remote:
            self._forget(st)

    def _forget(self, st: _Stream) -> None:
        """Drop the stream's state: its timer, its task, its unfinished request bytes."""
        if st.timer is not None:
            st.timer.cancel()
            st.timer = None
        if st.task is not None and not st.task.done():
            st.task.cancel()
        st.task = None
        self._wake(st)
        self.partial -= len(st.data)
        self.budget.held -= len(st.data)
        st.data = bytearray()
        if self.streams.pop(st.sid, None) is not None and not self.streams and self.idle is not None \
                and not self.idle.done():
            self.idle.set_result(None)


async def _one(message: bytes) -> AsyncIterator[bytes]:
    yield message
