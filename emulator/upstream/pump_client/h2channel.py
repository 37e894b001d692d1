"""gRPC unary calls over one plain-text HTTP/2 connection, without grpcio (the pump client's fast path).

grpcio's Python client spends 150-250 µs of CPU under the GIL per unary call; the emulated TiDB
servers make two WriteBinlog calls per transaction, so that alone capped the emulator. This module
speaks the gRPC wire protocol (HTTP/2 framing, RFC 9113; gRPC's length-prefixed messages and
``grpc-status`` trailers) itself, for plain-text connections only — TLS stays on grpcio.

Promises:
- ``H2Connection.start_call`` sends one request (HEADERS + DATA, split by the peer's frame size and
  flow-control windows) and returns a ``UnaryCall`` at once when the windows allow it; the result
  arrives on the connection's reader thread, which also runs done-callbacks.
- Frames are queued under the connection's lock, in stream order, and written by whichever thread
  finds nobody writing: that thread sends everything queued so far in one ``sendall``, outside the
  lock, and goes on until the queue is empty. Concurrent callers therefore never wait for another
  caller's socket write (nor for the GIL it needs after it), and their requests share syscalls.
- Every call ends exactly once: with the response message, or with ``WireRpcError`` carrying a
  ``grpc.StatusCode`` (the server's status, ``DEADLINE_EXCEEDED`` at the deadline, ``UNAVAILABLE``
  when the connection is lost or refuses the stream), as a grpcio call would.
- Header blocks are encoded with literals only (no dynamic table); responses are decoded with the
  ``hpack`` library, whose dynamic table sees every block the peer sends (``ingest.http2.HpackDecoder``).
"""
from __future__ import annotations

import heapq
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
from hpack.exceptions import HPACKError

from ingest.http2 import (
    ACK,
    CONNECT_TIMEOUT,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    MAX_STREAM_ID,
    MAX_WINDOW,
    PADDED,
    PING,
    PREFACE,
    PRIORITY_FLAG,
    PUSH_PROMISE,
    RST_STREAM,
    S_ENABLE_PUSH,
    S_INITIAL_WINDOW_SIZE,
    S_MAX_CONCURRENT_STREAMS,
    S_MAX_FRAME_SIZE,
    SETTINGS,
    WINDOW_UPDATE,
    HpackDecoder,
    WireRpcError,
    frame,
    http_error,
    request_headers,
    rst_error,
    trailers_error,
)

log = logging.getLogger(__name__)

RECV_WINDOW = 1 << 30          # what we let the peer send before it sees a WINDOW_UPDATE
IDLE_POLL = 1.0                # the reader wakes at least this often to expire deadlines
_CALLBACKS = threading.Lock()   # guards every UnaryCall's done flag and callback list (tiny sections)


class UnaryCall:
    """One call in flight: a ``grpc.Future``-like handle (``result``, ``add_done_callback``, ``done``)."""

    __slots__ = ("decode", "stream_id", "deadline", "send_window", "data", "http_status", "_waiter", "_callbacks",
                 "_response", "_error", "_done", "__weakref__")

    def __init__(self, deadline: float, decode: Callable[[bytes], Any] = bytes) -> None:
        self.decode = decode
        self.stream_id = 0
        self.deadline = deadline
        self.send_window = 0
        self.data = b""
        self.http_status: bytes | None = None
        self._waiter = threading.Lock()
        self._waiter.acquire()
        self._callbacks: list[Callable[[UnaryCall], None]] | None = []
        self._response: Any = None
        self._error: WireRpcError | None = None
        self._done = False

    def done(self) -> bool:
        """True once the call has a response or an error."""
        return self._done

    def result(self, timeout: float | None = None) -> Any:
        """The decoded response message; raise ``WireRpcError`` for a failed call, ``TimeoutError`` if not
        done in time."""
        if not self._done:
            if not self._waiter.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
                raise TimeoutError("call not finished")
            self._waiter.release()
        if self._error is not None:
            raise self._error
        return self._response

    def add_done_callback(self, fn: Callable[[UnaryCall], None]) -> None:
        """Run ``fn(self)`` when the call ends (at once, in this thread, if it already has)."""
        with _CALLBACKS:
            if self._callbacks is not None:
                self._callbacks.append(fn)
                return
        fn(self)

    def finish(self, response: Any, error: WireRpcError | None) -> bool:
        """End the call once (later ends are ignored); False if it had already ended."""
        with _CALLBACKS:
            if self._done:
                return False
            self._response, self._error = response, error
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
        self._waiter.release()
        for fn in callbacks or ():
            try:
                fn(self)
            except Exception:
                log.exception("done-callback of a pump write failed")
        return True


def _failed_call(code: grpc.StatusCode, details: str) -> UnaryCall:
    call = UnaryCall(0.0)
    call.finish(None, WireRpcError(code, details))
    return call


class H2Connection:
    """One HTTP/2 connection to ``host:port`` carrying gRPC unary calls; thread-safe.

    The socket is dialled in the constructor (``UNAVAILABLE`` ``WireRpcError`` when that fails).
    A reader thread parses every frame; it fails all calls in flight when the connection ends.
    """

    def __init__(self, host: str, port: int, max_message: int, connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.authority = f"{host}:{port}"
        self.max_message = max_message
        try:
            self._sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as exc:
            raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"failed to connect to {self.authority}: {exc}") from exc
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._lock = threading.Lock()                  # guards the send queue, the stream table and the windows
        self._window_open = threading.Condition(self._lock)
        self._out: list[bytes] = []                    # frames queued for the socket, in order
        self._writing = False                          # a thread is in ``_flush`` (it owns socket writes)
        self._streams: dict[int, UnaryCall] = {}
        self._ended: list[tuple[UnaryCall, Any, WireRpcError | None]] = []   # finished under the lock, settled after
        self._deadlines: list[tuple[float, int]] = []  # heap of (deadline, stream id)
        self._next_id = 1
        self._send_window = 65535                      # connection-level, RFC 9113 initial value
        self._peer_initial_window = 65535
        self._peer_max_frame = 16384
        self._peer_max_streams = MAX_WINDOW
        self._goaway_last: int | None = None
        self._closed: str | None = None
        self._headers = HpackDecoder()
        self._received = 0                             # connection-level bytes since our last WINDOW_UPDATE
        self._header_stream = 0
        self._header_flags = 0
        self._header_parts: list[bytes] = []
        settings = (S_ENABLE_PUSH.to_bytes(2, "big") + (0).to_bytes(4, "big")
                    + S_INITIAL_WINDOW_SIZE.to_bytes(2, "big") + RECV_WINDOW.to_bytes(4, "big"))
        try:
            self._sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings)
                               + frame(WINDOW_UPDATE, 0, 0, (RECV_WINDOW - 65535).to_bytes(4, "big")))
        except OSError as exc:
            self._sock.close()
            raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"failed to talk to {self.authority}: {exc}") from exc
        self._reader = threading.Thread(target=self._read_loop, name=f"h2-{self.authority}", daemon=True)
        self._reader.start()

    @property
    def usable(self) -> bool:
        """False once closed, told to go away, or out of stream ids: new calls need a new connection."""
        return self._closed is None and self._goaway_last is None and self._next_id < MAX_STREAM_ID

    # ---- calls -----------------------------------------------------------------------------------

    def start_call(self, header_block: bytes, message: bytes, timeout: float,
                   decode: Callable[[bytes], Any] = bytes) -> UnaryCall:
        """Send one unary request (``header_block`` from ``request_headers``) and return its call,
        whose result is ``decode(response message)``."""
        if len(message) > self.max_message:
            return _failed_call(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"Sent message larger than max ({len(message)} vs. {self.max_message})")
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        call = UnaryCall(time.monotonic() + timeout, decode)
        with self._lock:
            while self._closed is None and len(self._streams) >= self._peer_max_streams:
                if not self._window_open.wait(max(0.0, call.deadline - time.monotonic())):
                    return _failed_call(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
            if not self.usable:
                return _failed_call(grpc.StatusCode.UNAVAILABLE, f"connection to {self.authority} is closing")
            sid = call.stream_id = self._next_id
            self._next_id += 2
            call.send_window = self._peer_initial_window
            self._streams[sid] = call
            heapq.heappush(self._deadlines, (call.deadline, sid))
            head = frame(HEADERS, END_HEADERS, sid, header_block)
            n = len(body)
            if n <= self._send_window and n <= call.send_window and n <= self._peer_max_frame:
                self._send_window -= n
                call.send_window -= n
                self._out.append(head + frame(DATA, END_STREAM, sid, body))
                pos = n
            else:
                self._out.append(head)
                pos = self._queue_body_locked(call, body, 0)
        self._flush()
        while pos < len(body):          # a body larger than the windows: more as they open
            with self._lock:
                more = self._wait_window_locked(call)
                if more:
                    pos = self._queue_body_locked(call, body, pos)
            self._flush()               # also a RST_STREAM queued at the deadline
            if not more:
                break
        self._settle()
        return call

    def _queue_body_locked(self, call: UnaryCall, body: bytes, pos: int) -> int:
        """Queue DATA frames of ``body`` from ``pos`` as far as the windows allow; return the new position."""
        sid, n = call.stream_id, len(body)
        while pos < n:
            room = min(self._send_window, call.send_window, self._peer_max_frame, n - pos)
            if room <= 0:
                break
            self._send_window -= room
            call.send_window -= room
            self._out.append(frame(DATA, END_STREAM if pos + room == n else 0, sid, body[pos:pos + room]))
            pos += room
        return pos

    def _wait_window_locked(self, call: UnaryCall) -> bool:
        """Wait until a window opens for ``call``; False (the call ended, or at its deadline it is
        reset) when the rest of its body must not be sent."""
        while True:
            if call.done() or call.stream_id not in self._streams or self._closed is not None:
                return False
            if min(self._send_window, call.send_window) > 0:
                return True
            left = call.deadline - time.monotonic()
            if left <= 0 or not self._window_open.wait(left):
                if call.stream_id in self._streams:
                    self._end_stream_locked(call.stream_id, WireRpcError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                                                         "Deadline Exceeded"), reset=True)
                return False

    def _flush(self) -> None:
        """Write the queued frames unless another thread is writing (lock NOT held). The writer sends
        all that is queued in one ``sendall`` outside the lock, and repeats until the queue is empty,
        so frames queued while it was writing are not left behind."""
        with self._lock:
            if self._writing or not self._out:
                return
            self._writing = True
        while True:
            with self._lock:
                out, self._out = self._out, []
                if not out or self._closed is not None:
                    self._writing = False
                    return
            try:
                self._sock.sendall(out[0] if len(out) == 1 else b"".join(out))
            except OSError as exc:
                with self._lock:
                    self._writing = False
                    self._out = []
                    self._fail_all_locked(f"send to {self.authority} failed: {exc}")
                return

    def close(self, reason: str = "connection closed") -> None:
        """Close the socket; calls in flight fail with ``UNAVAILABLE``."""
        with self._lock:
            self._fail_all_locked(reason)
        self._settle()

    # ---- internals (lock held unless said otherwise) ------------------------------------------

    def _settle(self) -> None:
        """Hand the calls ended under the lock their results, outside the lock (lock NOT held):
        done-callbacks may start new calls or take their owners' locks."""
        if not self._ended:
            return
        with self._lock:
            ended, self._ended = self._ended, []
        for call, response, error in ended:
            call.finish(response, error)

    def _end_stream_locked(self, sid: int, error: WireRpcError | None, response: Any = None,
                           reset: bool = False) -> UnaryCall | None:
        call = self._streams.pop(sid, None)
        if call is None:
            return None
        if reset and self._closed is None:
            self._out.append(frame(RST_STREAM, 0, sid, (0x8).to_bytes(4, "big")))
        self._window_open.notify_all()
        self._ended.append((call, response, error))
        return call

    def _fail_all_locked(self, reason: str) -> None:
        if self._closed is None:
            self._closed = reason
            try:
                self._sock.shutdown(socket.SHUT_RDWR)     # wakes the reader, which closes the socket
            except OSError:
                pass
        error = WireRpcError(grpc.StatusCode.UNAVAILABLE, reason)
        calls, self._streams = self._streams, {}
        self._window_open.notify_all()
        self._ended.extend((call, None, error) for call in calls.values())

    def _send_locked(self, frame: bytes) -> None:
        """Queue ``frame``; the caller runs ``_flush`` once it has released the lock."""
        if self._closed is None:
            self._out.append(frame)

    def _expire(self) -> float:
        """Fail calls past their deadline; return seconds until the next deadline (at most ``IDLE_POLL``)."""
        now = time.monotonic()
        with self._lock:
            heap = self._deadlines
            while heap and (heap[0][0] <= now or heap[0][1] not in self._streams):
                deadline, sid = heapq.heappop(heap)
                if sid in self._streams and deadline <= now:
                    self._end_stream_locked(sid, WireRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"),
                                            reset=True)
            return min(IDLE_POLL, heap[0][0] - now) if heap else IDLE_POLL

    def _read_loop(self) -> None:
        sock = self._sock
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        buf = b""
        try:
            while self._closed is None:
                wait = self._expire()
                self._flush()
                self._settle()
                if not poller.poll(max(0.0, wait) * 1000):
                    continue
                chunk = sock.recv(262144)
                if not chunk:
                    raise ConnectionError(f"connection to {self.authority} closed by the server")
                buf = buf + chunk if buf else chunk
                pos, n = 0, len(buf)
                while n - pos >= 9:
                    length = int.from_bytes(buf[pos:pos + 3], "big")
                    if n - pos < 9 + length:
                        break
                    typ, flags = buf[pos + 3], buf[pos + 4]
                    sid = int.from_bytes(buf[pos + 5:pos + 9], "big") & MAX_STREAM_ID
                    self._on_frame(typ, flags, sid, buf[pos + 9:pos + 9 + length])
                    pos += 9 + length
                buf = buf[pos:]
                self._flush()
                self._settle()
        except (OSError, ConnectionError, ValueError, HPACKError) as exc:
            with self._lock:
                self._fail_all_locked(f"connection to {self.authority} failed: {exc}")
        finally:
            sock.close()            # only here: closing elsewhere could hand the fd number to another file
            self._settle()
            log.debug("h2 connection to %s ended: %s", self.authority, self._closed)

    def _on_frame(self, typ: int, flags: int, sid: int, payload: bytes) -> None:
        """Handle one frame (reader thread)."""
        if self._header_parts and typ != CONTINUATION:
            raise ValueError("PROTOCOL_ERROR: expected a CONTINUATION frame")
        if typ == DATA:
            self._on_data(flags, sid, payload)
        elif typ == HEADERS:
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]]
            if flags & PRIORITY_FLAG:
                payload = payload[5:]
            self._header_stream, self._header_flags = sid, flags
            self._header_parts = [payload]
            if flags & END_HEADERS:
                self._on_header_block()
        elif typ == CONTINUATION:
            if not self._header_parts or sid != self._header_stream:
                raise ValueError("PROTOCOL_ERROR: unexpected CONTINUATION frame")
            self._header_parts.append(payload)
            if flags & END_HEADERS:
                self._on_header_block()
        elif typ == RST_STREAM:
            with self._lock:
                self._end_stream_locked(sid, rst_error(int.from_bytes(payload[:4], "big")))
        elif typ == SETTINGS:
            if not flags & ACK:
                self._on_settings(payload)
        elif typ == PING:
            if not flags & ACK:
                with self._lock:
                    self._send_locked(frame(PING, ACK, 0, payload))
        elif typ == GOAWAY:
            self._on_goaway(payload)
        elif typ == WINDOW_UPDATE:
            inc = int.from_bytes(payload[:4], "big") & MAX_WINDOW
            with self._lock:
                if sid == 0:
                    self._send_window += inc
                elif sid in self._streams:
                    self._streams[sid].send_window += inc
                self._window_open.notify_all()
        elif typ == PUSH_PROMISE:
            raise ValueError("PROTOCOL_ERROR: PUSH_PROMISE although push is disabled")
        # PRIORITY and unknown frame types are ignored, as RFC 9113 asks.

    def _on_data(self, flags: int, sid: int, payload: bytes) -> None:
        self._received += len(payload)
        if self._received >= RECV_WINDOW // 2:
            with self._lock:
                self._send_locked(frame(WINDOW_UPDATE, 0, 0, self._received.to_bytes(4, "big")))
            self._received = 0
        if flags & PADDED:
            payload = payload[1:len(payload) - payload[0]]
        call = self._streams.get(sid)
        if call is None:
            return
        call.data = call.data + payload if call.data else payload
        if len(call.data) > self.max_message + 5:
            with self._lock:
                self._end_stream_locked(sid, WireRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                          "Received message larger than max"), reset=True)
        elif flags & END_STREAM:
            with self._lock:
                self._end_stream_locked(sid, WireRpcError(grpc.StatusCode.INTERNAL,
                                                          "server ended the stream without trailers"), reset=True)

    def _on_header_block(self) -> None:
        block = self._header_parts[0] if len(self._header_parts) == 1 else b"".join(self._header_parts)
        sid, flags = self._header_stream, self._header_flags
        self._header_parts = []
        headers = self._headers.decode(block)
        call = self._streams.get(sid)
        if call is None:
            return
        for name, value in headers:
            if name == b":status":
                call.http_status = value
        if not flags & END_STREAM or all(name != b"grpc-status" for name, _ in headers):
            if flags & END_STREAM or call.http_status != b"200":
                self._finish_http_error(sid, call)   # no gRPC status: reset (the body may be unsent)
            return
        error = trailers_error(headers, call.http_status)
        with self._lock:
            if error is not None:
                self._end_stream_locked(sid, error)
                return
            data = call.data
            if len(data) < 5 or int.from_bytes(data[1:5], "big") != len(data) - 5:
                self._end_stream_locked(sid, WireRpcError(grpc.StatusCode.INTERNAL,
                                                          f"bad response message framing ({len(data)} bytes)"))
            elif data[0] != 0:
                self._end_stream_locked(sid, WireRpcError(grpc.StatusCode.INTERNAL,
                                                          "compressed response although none was offered"))
            else:
                try:
                    response = call.decode(data[5:])
                except Exception as exc:  # noqa: BLE001 - any parser error fails this call only
                    self._end_stream_locked(sid, WireRpcError(grpc.StatusCode.INTERNAL,
                                                              f"cannot parse the response message: {exc}"))
                    return
                self._end_stream_locked(sid, None, response)

    def _finish_http_error(self, sid: int, call: UnaryCall) -> None:
        with self._lock:
            self._end_stream_locked(sid, http_error(call.http_status), reset=True)

    def _on_settings(self, payload: bytes) -> None:
        with self._lock:
            for i in range(0, len(payload) - 5, 6):
                ident = int.from_bytes(payload[i:i + 2], "big")
                value = int.from_bytes(payload[i + 2:i + 6], "big")
                if ident == S_INITIAL_WINDOW_SIZE:
                    delta = value - self._peer_initial_window
                    self._peer_initial_window = value
                    for call in self._streams.values():
                        call.send_window += delta
                elif ident == S_MAX_FRAME_SIZE:
                    self._peer_max_frame = value
                elif ident == S_MAX_CONCURRENT_STREAMS:
                    self._peer_max_streams = value
            self._send_locked(frame(SETTINGS, ACK, 0))
            self._window_open.notify_all()

    def _on_goaway(self, payload: bytes) -> None:
        last = int.from_bytes(payload[:4], "big") & MAX_STREAM_ID
        code = int.from_bytes(payload[4:8], "big")
        with self._lock:
            self._goaway_last = last
            error = WireRpcError(grpc.StatusCode.UNAVAILABLE,
                                 f"server sent GOAWAY (HTTP/2 error 0x{code:x}); stream not processed")
            for sid in [s for s in self._streams if s > last]:
                self._end_stream_locked(sid, error)
            if not self._streams:
                self._fail_all_locked("server sent GOAWAY")


class H2Channel:
    """Unary calls to one ``host:port`` over a lazily dialled ``H2Connection``, re-dialled when it ends."""

    def __init__(self, addr: str, max_message: int) -> None:
        host, _, port = addr.rpartition(":")
        self._host = host.strip("[]") or "127.0.0.1"
        self._port = int(port)
        self._max_message = max_message
        self._lock = threading.Lock()
        self._conn: H2Connection | None = None
        self._closed = False
        self._blocks: dict[str, bytes] = {}

    def unary(self, method: str, message: bytes, timeout: float, decode: Callable[[bytes], Any] = bytes) -> UnaryCall:
        """Start ``method`` (e.g. ``/binlog.Pump/WriteBinlog``) with a serialized request; the call's
        result is ``decode(response bytes)``."""
        conn = self._conn
        if conn is None or not conn.usable:
            try:
                conn = self._connect()
            except WireRpcError as exc:
                return _failed_call(exc.code(), exc.details())
        block = self._blocks.get(method)
        if block is None:
            block = self._blocks[method] = request_headers(conn.authority, method)
        return conn.start_call(block, message, timeout, decode)

    def _connect(self) -> H2Connection:
        with self._lock:
            if self._closed:
                raise WireRpcError(grpc.StatusCode.UNAVAILABLE, "channel closed")
            conn = self._conn
            if conn is None or not conn.usable:
                self._conn = conn = H2Connection(self._host, self._port, self._max_message)
            return conn

    def close(self) -> None:
        """Close the connection; calls in flight fail with ``UNAVAILABLE``; later calls fail too."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close("channel closed")
