"""gRPC-over-HTTP/2 client adapters built on libraries (``h2`` from python-hyper, ``grpclib``), doing
the jobs of binlake's hand-written framing, for ``bench/pump_scan.py`` and ``bench/pump_client.py``.

They keep the semantics a caller of ours relies on: every message, in order; the gRPC status read
from the trailers (or a trailers-only answer) and a failure raised as ``WireRpcError`` with a
``grpc.StatusCode``; ``UNAVAILABLE`` for a lost connection, ``DEADLINE_EXCEEDED`` for a silent
server (scan) or a passed deadline (unary), ``RESOURCE_EXHAUSTED`` for a message over the limit
(where the library lets the adapter see the size first). Benchmark code: they are measured, not
used by the product.

Scan stream (one connection per call, like ``ingest.http2.stream.stream_call``):
- ``h2_stream_call``: a blocking socket driven on the caller's thread; ``h2.connection.H2Connection``
  advertising 1 GiB windows and 16 MiB frames as ours does; received data acknowledged as it is
  consumed (WINDOW_UPDATE every 512 MiB, h2's own rule); gRPC messages assembled from
  ``DataReceived`` events into one ``bytearray`` each.
- ``grpclib_stream_call``: grpclib's ``Channel`` and ``Stream`` with a raw-bytes codec, driven on
  the caller's thread by a private event loop (``run_until_complete`` per message; no thread
  hand-off), idle timeout per message.
- ``grpclib_scan_async``: the same call consumed in a coroutine (the library's best case).

Unary (the pump client's WriteBinlog):
- ``H2LibChannel``: one connection shared by threads; h2's state machine behind one lock; requests
  queued under the lock and written by whichever thread finds nobody writing (the design of
  ``upstream.pump_client.h2channel``); a reader thread feeds the socket to h2; calls are that
  module's ``UnaryCall`` (same future, same deadline heap), so only the HTTP/2 part differs.
- ``GrpclibWriteChannel``: grpclib on an event loop thread; a synchronous caller's ``write`` is
  ``asyncio.run_coroutine_threadsafe`` of the method call (what a threaded caller like ours pays).
- ``grpclib_unary_async``: ``tasks`` coroutines on one loop calling sequentially (the best case).

Server (``bench/http2_server.py`` weighs it against ours, ``ingest.http2.GrpcConnection``):
- ``H2ServerProtocol`` / ``serve_h2``: gRPC on an ``h2`` server connection
  (``H2Configuration(client_side=False)``), an ``asyncio.Protocol`` on the same kind of loop ours runs
  on (uvloop, one thread), advertising ours' limits (4,096 streams, 1 MiB stream window, 16 MiB
  connection window, 1 MiB frames); unary and server-streaming handlers (messages sent as the
  client's windows allow, in DATA frames of at most 128 KiB, h2's best size, the transport's
  back-pressure honoured).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import heapq
import select
import socket
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hyperframe.frame
from grpclib.client import Channel, UnaryUnaryMethod
from grpclib.config import Configuration
from grpclib.const import Cardinality
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError, StreamTerminatedError
from h2.errors import ErrorCodes
from h2.settings import SettingCodes

from ingest.http2 import CONNECT_TIMEOUT, WireRpcError, http_error, rst_error, trailers_error
from schemas import pump_pb2
from upstream.pump_client.h2channel import UnaryCall

WINDOW = 1 << 30               # receive windows we advertise (ours: ingest.http2.stream.WINDOW)
MAX_FRAME = (1 << 24) - 1      # largest DATA frame we accept (ours: the same)
RECV_SIZE = 1 << 20            # bytes per recv() handed to h2 (scan)
UNARY_RECV = 1 << 18           # bytes per recv() of the unary reader thread (ours: 256 KiB)
IDLE_POLL = 1.0
WRITE_BINLOG = "/binlog.Pump/WriteBinlog"
_STATUS_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


@contextlib.contextmanager
def cheap_frame_repr() -> Iterator[None]:
    """Info only, not the library as shipped: h2 4.4's ``H2Connection._receive_frame`` formats
    ``repr(frame)`` for its trace log before calling the (no-op) logger, and hyperframe 6.1's
    ``_raw_data_repr`` hexlifies a DATA frame's whole payload before cutting it to 20 characters.
    Within this block only the first 10 bytes are hexlified: what a fix upstream would save."""
    original = hyperframe.frame._raw_data_repr

    def short(data: bytes | None) -> str:
        return original(data[:10] if data else data)

    hyperframe.frame._raw_data_repr = short
    try:
        yield
    finally:
        hyperframe.frame._raw_data_repr = original


def _h2_config() -> h2.config.H2Configuration:
    """Client side, headers as bytes; header validation and normalization off, as grpclib sets it
    (the peer is a gRPC server; our own clients validate nothing either)."""
    return h2.config.H2Configuration(client_side=True, header_encoding=None,
                                     validate_inbound_headers=False, validate_outbound_headers=False,
                                     normalize_inbound_headers=False, normalize_outbound_headers=False)


def _h2_connection(recv_window: int, max_frame: int | None) -> h2.connection.H2Connection:
    """An initiated client connection: push off, ``recv_window`` for the connection and each stream,
    ``max_frame`` as our SETTINGS_MAX_FRAME_SIZE (None: h2's 16 KiB default)."""
    conn = h2.connection.H2Connection(config=_h2_config())
    conn.initiate_connection()
    settings: dict[SettingCodes | int, int] = {SettingCodes.ENABLE_PUSH: 0,
                                               SettingCodes.INITIAL_WINDOW_SIZE: recv_window}
    if max_frame is not None:
        settings[SettingCodes.MAX_FRAME_SIZE] = max_frame
        # h2 applies a new inbound frame size only when the peer's ACK arrives, and only from the next
        # receive_data() call on: an ACK and a large DATA frame in one recv() would fail. Accepting up to
        # the advertised size at once is what our reader does.
        conn.max_inbound_frame_size = max_frame
    conn.update_settings(settings)
    conn.increment_flow_control_window(recv_window - 65535)
    return conn


def _request_headers(authority: str, method: str) -> list[tuple[bytes, bytes]]:
    return [(b":method", b"POST"), (b":scheme", b"http"), (b":path", method.encode()),
            (b":authority", authority.encode()), (b"content-type", b"application/grpc"), (b"te", b"trailers")]


def _split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def _internal(what: str) -> WireRpcError:
    return WireRpcError(grpc.StatusCode.INTERNAL, what)


def _end_status(trailers: list[tuple[bytes, bytes]] | None, headers: list[tuple[bytes, bytes]] | None,
                http_status: bytes | None) -> WireRpcError | None:
    """The error of a stream that ended (None for OK): from its trailers, or from a trailers-only
    response, else the HTTP status's."""
    if trailers is not None:
        return trailers_error(trailers, http_status)
    if headers is not None and any(name == b"grpc-status" for name, _ in headers):
        return trailers_error(headers, http_status)
    return _internal("server ended the stream without trailers") if http_status == b"200" else http_error(http_status)


# ---- h2: server-streaming call on the caller's thread ---------------------------------------------

class _H2StreamCall:
    """One server-streaming call on its own connection, h2's state machine driven by the caller."""

    def __init__(self, addr: str, idle_timeout: float, max_message: int) -> None:
        host, port = _split_addr(addr)
        self.authority = addr
        self.idle_timeout = idle_timeout
        self.max_message = max_message
        try:
            self.sock = socket.create_connection((host, port), timeout=min(CONNECT_TIMEOUT, idle_timeout))
            self.sock.settimeout(idle_timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, ValueError) as exc:
            raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"failed to connect to {addr}: {exc}") from exc
        self.conn = _h2_connection(WINDOW, MAX_FRAME)
        self.sid = self.conn.get_next_available_stream_id()
        self.buf = bytearray(RECV_SIZE)
        self.view = memoryview(self.buf)
        self.ready: list[bytearray] = []
        self.prefix = b""
        self.message: bytearray | None = None
        self.got = 0
        self.http_status: bytes | None = None
        self.headers: list[tuple[bytes, bytes]] | None = None
        self.trailers: list[tuple[bytes, bytes]] | None = None
        self.ended = False

    def _send(self) -> None:
        out = self.conn.data_to_send()
        if out:
            try:
                self.sock.sendall(out)
            except TimeoutError as exc:
                raise WireRpcError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                   f"{self.authority} took no data for {self.idle_timeout:g}s") from exc
            except OSError as exc:
                raise WireRpcError(grpc.StatusCode.UNAVAILABLE,
                                   f"connection to {self.authority} lost: {exc}") from exc

    def start(self, method: str, request: bytes) -> None:
        """Send the preface, settings, headers and the request within the peer's windows."""
        conn, sid = self.conn, self.sid
        conn.send_headers(sid, _request_headers(self.authority, method))
        body = memoryview(b"\0" + len(request).to_bytes(4, "big") + request)
        pos = 0
        while True:
            room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size, len(body) - pos)
            if room > 0:
                last = pos + room == len(body)
                conn.send_data(sid, body[pos:pos + room].tobytes(), end_stream=last)
                pos += room
                if last:
                    self._send()
                    return
            else:
                self._send()
                self._receive()
                if self.ended:
                    return

    def messages(self) -> Iterator[bytearray]:
        """Every response message until the server's OK status."""
        while True:
            if self.ready:
                ready, self.ready = self.ready, []
                yield from ready
            if self.ended:
                return
            self._receive()

    def _receive(self) -> None:
        try:
            n = self.sock.recv_into(self.view)
        except TimeoutError as exc:
            raise WireRpcError(grpc.StatusCode.DEADLINE_EXCEEDED,
                               f"{self.authority} sent nothing for {self.idle_timeout:g}s") from exc
        except OSError as exc:
            raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"connection to {self.authority} lost: {exc}") from exc
        if not n:
            raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"connection to {self.authority} closed by the server")
        try:
            events = self.conn.receive_data(self.view[:n])
        except h2.exceptions.ProtocolError as exc:
            raise _internal(f"HTTP/2 protocol error from {self.authority}: {exc}") from exc
        for ev in events:
            self._on_event(ev)
        self._send()

    def _on_event(self, ev: h2.events.Event) -> None:
        if isinstance(ev, h2.events.DataReceived):
            if ev.stream_id == self.sid:
                self._take(ev.data)
            self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.ResponseReceived):
            self.headers = ev.headers
            self.http_status = dict(ev.headers).get(b":status")
            if ev.stream_ended is None and self.http_status != b"200":
                raise http_error(self.http_status)
        elif isinstance(ev, h2.events.TrailersReceived):
            self.trailers = ev.headers
        elif isinstance(ev, h2.events.StreamEnded):
            error = _end_status(self.trailers, self.headers, self.http_status)
            if error is not None:
                raise error
            if self.message is not None or self.prefix:
                raise _internal("the stream ended inside a message")
            self.ended = True
        elif isinstance(ev, h2.events.StreamReset):
            raise rst_error(int(ev.error_code or 0))
        elif isinstance(ev, h2.events.ConnectionTerminated):
            if ev.last_stream_id is None or ev.last_stream_id < self.sid:
                raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"{self.authority} sent GOAWAY "
                                   f"(HTTP/2 error 0x{int(ev.error_code or 0):x}); stream not processed")
        # WindowUpdated, RemoteSettingsChanged, SettingsAcknowledged, PingReceived (h2 answers it): nothing to do

    def _take(self, data: bytes) -> None:
        """Split one DATA payload into gRPC messages (prefix: flag byte, u32 length)."""
        pos, n = 0, len(data)
        while pos < n:
            if self.message is None:
                step = min(5 - len(self.prefix), n - pos)
                self.prefix += data[pos:pos + step]
                pos += step
                if len(self.prefix) < 5:
                    return
                flag, size = self.prefix[0], int.from_bytes(self.prefix[1:5], "big")
                self.prefix = b""
                if flag:
                    raise _internal("compressed response although none was offered")
                if size > self.max_message:
                    raise WireRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                       f"Received message larger than max ({size} vs. {self.max_message})")
                self.message, self.got = bytearray(size), 0
            step = min(len(self.message) - self.got, n - pos)
            if step:
                self.message[self.got:self.got + step] = memoryview(data)[pos:pos + step]
                self.got += step
                pos += step
            if self.got == len(self.message):
                self.ready.append(self.message)
                self.message = None

    def close(self) -> None:
        """Cancel the stream unless it ended; close the connection."""
        if not self.ended:
            try:
                self.conn.reset_stream(self.sid, ErrorCodes.CANCEL)
                self.sock.settimeout(0.5)
                self.sock.sendall(self.conn.data_to_send())
            except (OSError, h2.exceptions.H2Error):
                pass
        self.sock.close()


def h2_stream_call(addr: str, method: str, request: bytes, idle_timeout: float,
                   max_message: int) -> Iterator[bytearray]:
    """``ingest.http2.stream.stream_call`` on the ``h2`` library: yield each response message."""
    call = _H2StreamCall(addr, idle_timeout, max_message)
    try:
        call.start(method, request)
        yield from call.messages()
    finally:
        call.close()


# ---- grpclib: server-streaming call ---------------------------------------------------------------

class RawCodec(CodecBase):
    """Messages as bytes both ways (the caller serializes and parses), content type application/grpc."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return message

    def decode(self, data: bytes, message_type: Any) -> Any:
        return data


def _grpclib_config() -> Configuration:
    """grpclib's windows set as ours (1 GiB); its frame size is not configurable (h2's 16 KiB)."""
    return Configuration(http2_connection_window_size=WINDOW, http2_stream_window_size=WINDOW)


def _grpclib_error(exc: BaseException, authority: str) -> WireRpcError:
    if isinstance(exc, GRPCError):
        code = _STATUS_BY_NUMBER.get(exc.status.value, grpc.StatusCode.UNKNOWN)
        return WireRpcError(code, exc.message or "")
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return WireRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, f"{authority}: deadline or idle timeout")
    if isinstance(exc, (StreamTerminatedError, OSError, ConnectionError)):
        return WireRpcError(grpc.StatusCode.UNAVAILABLE, f"connection to {authority} failed: {exc}")
    return WireRpcError(grpc.StatusCode.INTERNAL, f"{authority}: {exc!r}")


async def grpclib_scan_async(addr: str, method: str, request: bytes, max_message: int,
                             timeout: float | None = None, max_frame: int | None = None) -> AsyncGenerator[bytes, None]:
    """Yield each response message of a server-streaming call through grpclib (raw bytes); the
    trailers' status is checked when the stream ends (``async with``'s exit). ``timeout``: a
    deadline for the whole call (grpclib's); the sync wrapper adds an idle timeout per message.

    ``max_frame`` (info only): advertise that SETTINGS_MAX_FRAME_SIZE through grpclib's private
    ``H2Connection`` (grpclib has no option for it and receives 16 KiB frames)."""
    host, port = _split_addr(addr)
    channel = Channel(host, port, codec=RawCodec(), config=_grpclib_config())
    try:
        if max_frame is not None:
            protocol = await channel.__connect__()
            h2c = protocol.connection._connection  # private: no public way to set it
            h2c.update_settings({SettingCodes.MAX_FRAME_SIZE: max_frame})
            h2c.max_inbound_frame_size = max_frame
            protocol.connection.flush()
        async with channel.request(method, Cardinality.UNARY_STREAM, bytes, bytes, timeout=timeout) as stream:
            await stream.send_message(request, end=True)
            while True:
                msg = await stream.recv_message()
                if msg is None:
                    break
                if len(msg) > max_message:   # grpclib has no receive limit: checked after the fact
                    raise WireRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                       f"Received message larger than max ({len(msg)} vs. {max_message})")
                yield msg
    except WireRpcError:
        raise
    except (TimeoutError, GRPCError, StreamTerminatedError, OSError, ConnectionError) as exc:
        raise _grpclib_error(exc, addr) from exc
    finally:
        channel.close()


def new_loop(kind: str = "uvloop") -> asyncio.AbstractEventLoop:
    """A new event loop: ``uvloop`` (pinned by the project) or the stdlib's ``asyncio``."""
    if kind == "uvloop":
        import uvloop
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def grpclib_stream_call(addr: str, method: str, request: bytes, idle_timeout: float, max_message: int,
                        loop_kind: str = "uvloop") -> Iterator[bytes]:
    """Synchronous wrapper: a private event loop driven on the caller's thread, one
    ``run_until_complete`` per message (``idle_timeout`` for each); the stream is cancelled and the
    connection closed when the caller stops early."""
    loop = new_loop(loop_kind)
    agen = grpclib_scan_async(addr, method, request, max_message)
    try:
        while True:
            try:
                msg = loop.run_until_complete(asyncio.wait_for(agen.__anext__(), idle_timeout))
            except StopAsyncIteration:
                return
            except TimeoutError as exc:
                raise WireRpcError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                   f"{addr} sent nothing for {idle_timeout:g}s") from exc
            yield msg
    finally:
        try:
            loop.run_until_complete(agen.aclose())
        finally:
            loop.close()


# ---- h2: unary calls over one connection shared by threads ----------------------------------------

class _Pending:
    """One unary stream's state on the h2 connection."""

    __slots__ = ("call", "chunks", "http_status", "headers", "trailers")

    def __init__(self, call: UnaryCall) -> None:
        self.call = call
        self.chunks: list[bytes] = []
        self.http_status: bytes | None = None
        self.headers: list[tuple[bytes, bytes]] | None = None
        self.trailers: list[tuple[bytes, bytes]] | None = None


class H2LibConnection:
    """gRPC unary calls over one plain-text HTTP/2 connection whose framing, HPACK, flow control and
    stream states are the ``h2`` library's; thread-safe (one lock around the ``H2Connection``)."""

    def __init__(self, host: str, port: int, max_message: int) -> None:
        self.authority = f"{host}:{port}"
        self.max_message = max_message
        try:
            self._sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
        except OSError as exc:
            raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"failed to connect to {self.authority}: {exc}") from exc
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._lock = threading.Lock()
        self._window_open = threading.Condition(self._lock)
        self._conn = _h2_connection(WINDOW, None)
        self._out: list[bytes] = [self._conn.data_to_send()]
        self._writing = False
        self._streams: dict[int, _Pending] = {}
        self._ended: list[tuple[UnaryCall, Any, WireRpcError | None]] = []
        self._deadlines: list[tuple[float, int]] = []
        self._closed: str | None = None
        self._goaway = False
        self._flush()
        self._reader = threading.Thread(target=self._read_loop, name=f"h2lib-{self.authority}", daemon=True)
        self._reader.start()

    @property
    def usable(self) -> bool:
        """False once closed or told to go away."""
        return self._closed is None and not self._goaway

    def start_call(self, headers: list[tuple[bytes, bytes]], message: bytes, timeout: float,
                   decode: Callable[[bytes], Any]) -> UnaryCall:
        """Send one unary request and return its call (result: ``decode(response message)``)."""
        call = UnaryCall(time.monotonic() + timeout, decode)
        if len(message) > self.max_message:
            call.finish(None, WireRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                           f"Sent message larger than max ({len(message)} vs. {self.max_message})"))
            return call
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        conn = self._conn
        with self._lock:
            if not self.usable:
                call.finish(None, WireRpcError(grpc.StatusCode.UNAVAILABLE,
                                               f"connection to {self.authority} is closing"))
                return call
            try:
                sid = conn.get_next_available_stream_id()
                conn.send_headers(sid, headers)
            except h2.exceptions.H2Error as exc:
                call.finish(None, WireRpcError(grpc.StatusCode.UNAVAILABLE, f"cannot start a stream: {exc}"))
                return call
            call.stream_id = sid
            self._streams[sid] = _Pending(call)
            heapq.heappush(self._deadlines, (call.deadline, sid))
            pos = self._queue_body_locked(sid, body, 0)
        self._flush()
        while pos < len(body):           # a body larger than the windows: the rest as they open
            with self._lock:
                while (self._closed is None and sid in self._streams
                       and min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size) <= 0):
                    left = call.deadline - time.monotonic()
                    if left <= 0 or not self._window_open.wait(left):
                        self._end_locked(sid, WireRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"),
                                         reset=True)
                        break
                if self._closed is not None or sid not in self._streams:
                    break
                pos = self._queue_body_locked(sid, body, pos)
            self._flush()
        self._settle()
        return call

    def _queue_body_locked(self, sid: int, body: bytes, pos: int) -> int:
        conn, n = self._conn, len(body)
        while pos < n:
            room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size, n - pos)
            if room <= 0:
                break
            conn.send_data(sid, body[pos:pos + room] if pos or room < n else body, end_stream=pos + room == n)
            pos += room
        out = conn.data_to_send()
        if out:
            self._out.append(out)
        return pos

    def _flush(self) -> None:
        """Write the queued bytes unless another thread is writing (lock NOT held)."""
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

    def _settle(self) -> None:
        if not self._ended:
            return
        with self._lock:
            ended, self._ended = self._ended, []
        for call, response, error in ended:
            call.finish(response, error)

    def _end_locked(self, sid: int, error: WireRpcError | None, response: Any = None, reset: bool = False) -> None:
        pending = self._streams.pop(sid, None)
        if pending is None:
            return
        if reset and self._closed is None:
            try:
                self._conn.reset_stream(sid, ErrorCodes.CANCEL)
            except h2.exceptions.H2Error:
                pass
            out = self._conn.data_to_send()
            if out:
                self._out.append(out)
        self._window_open.notify_all()
        self._ended.append((pending.call, response, error))

    def _fail_all_locked(self, reason: str) -> None:
        if self._closed is None:
            self._closed = reason
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        error = WireRpcError(grpc.StatusCode.UNAVAILABLE, reason)
        streams, self._streams = self._streams, {}
        self._window_open.notify_all()
        self._ended.extend((p.call, None, error) for p in streams.values())

    def _expire(self) -> float:
        now = time.monotonic()
        with self._lock:
            heap = self._deadlines
            while heap and (heap[0][0] <= now or heap[0][1] not in self._streams):
                deadline, sid = heapq.heappop(heap)
                if sid in self._streams and deadline <= now:
                    self._end_locked(sid, WireRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"),
                                     reset=True)
            return min(IDLE_POLL, heap[0][0] - now) if heap else IDLE_POLL

    def _read_loop(self) -> None:
        sock = self._sock
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        try:
            while self._closed is None:
                wait = self._expire()
                self._flush()
                self._settle()
                if not poller.poll(max(0.0, wait) * 1000):
                    continue
                chunk = sock.recv(UNARY_RECV)
                if not chunk:
                    raise ConnectionError(f"connection to {self.authority} closed by the server")
                with self._lock:
                    for ev in self._conn.receive_data(chunk):
                        self._on_event_locked(ev)
                    out = self._conn.data_to_send()
                    if out:
                        self._out.append(out)
                self._flush()
                self._settle()
        except (OSError, ConnectionError, h2.exceptions.H2Error) as exc:
            with self._lock:
                self._fail_all_locked(f"connection to {self.authority} failed: {exc}")
        finally:
            sock.close()
            self._settle()

    def _on_event_locked(self, ev: h2.events.Event) -> None:
        if isinstance(ev, h2.events.DataReceived):
            self._conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            pending = self._streams.get(ev.stream_id)
            if pending is not None:
                pending.chunks.append(ev.data)
                if sum(map(len, pending.chunks)) > self.max_message + 5:
                    self._end_locked(ev.stream_id, WireRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                                "Received message larger than max"), reset=True)
        elif isinstance(ev, h2.events.ResponseReceived):
            pending = self._streams.get(ev.stream_id)
            if pending is not None:
                pending.headers = ev.headers
                for name, value in ev.headers:
                    if name == b":status":
                        pending.http_status = value
                if ev.stream_ended is None and pending.http_status != b"200":
                    self._end_locked(ev.stream_id, http_error(pending.http_status), reset=True)
        elif isinstance(ev, h2.events.TrailersReceived):
            pending = self._streams.get(ev.stream_id)
            if pending is not None:
                pending.trailers = ev.headers
        elif isinstance(ev, h2.events.StreamEnded):
            pending = self._streams.get(ev.stream_id)
            if pending is not None:
                self._finish_locked(ev.stream_id, pending)
        elif isinstance(ev, h2.events.StreamReset):
            self._end_locked(ev.stream_id, rst_error(int(ev.error_code or 0)))
        elif isinstance(ev, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
            self._window_open.notify_all()
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self._goaway = True
            last = ev.last_stream_id or 0
            error = WireRpcError(grpc.StatusCode.UNAVAILABLE, f"server sent GOAWAY (HTTP/2 error "
                                 f"0x{int(ev.error_code or 0):x}); stream not processed")
            for sid in [s for s in self._streams if s > last]:
                self._end_locked(sid, error)
            if not self._streams:
                self._fail_all_locked("server sent GOAWAY")

    def _finish_locked(self, sid: int, pending: _Pending) -> None:
        error = _end_status(pending.trailers, pending.headers, pending.http_status)
        if error is not None:
            self._end_locked(sid, error)
            return
        data = pending.chunks[0] if len(pending.chunks) == 1 else b"".join(pending.chunks)
        if len(data) < 5 or int.from_bytes(data[1:5], "big") != len(data) - 5:
            self._end_locked(sid, _internal(f"bad response message framing ({len(data)} bytes)"))
        elif data[0] != 0:
            self._end_locked(sid, _internal("compressed response although none was offered"))
        else:
            try:
                response = pending.call.decode(data[5:])
            except Exception as exc:  # noqa: BLE001 - a parse error fails this call only
                self._end_locked(sid, _internal(f"cannot parse the response message: {exc}"))
                return
            self._end_locked(sid, None, response)

    def close(self, reason: str = "connection closed") -> None:
        """Close the socket; calls in flight fail with ``UNAVAILABLE``."""
        with self._lock:
            self._fail_all_locked(reason)
        self._settle()


class H2LibChannel:
    """Unary calls to ``host:port`` over a lazily dialled ``H2LibConnection``, re-dialled when it ends."""

    def __init__(self, addr: str, max_message: int) -> None:
        self._host, self._port = _split_addr(addr)
        self._max_message = max_message
        self._lock = threading.Lock()
        self._conn: H2LibConnection | None = None
        self._closed = False
        self._headers: dict[str, list[tuple[bytes, bytes]]] = {}

    def unary(self, method: str, message: bytes, timeout: float, decode: Callable[[bytes], Any] = bytes) -> UnaryCall:
        """Start ``method`` with a serialized request; the call's result is ``decode(response)``."""
        conn = self._conn
        if conn is None or not conn.usable:
            with self._lock:
                if self._closed:
                    raise WireRpcError(grpc.StatusCode.UNAVAILABLE, "channel closed")
                conn = self._conn
                if conn is None or not conn.usable:
                    self._conn = conn = H2LibConnection(self._host, self._port, self._max_message)
        headers = self._headers.get(method)
        if headers is None:
            headers = self._headers[method] = _request_headers(conn.authority, method)
        return conn.start_call(headers, message, timeout, decode)

    def close(self) -> None:
        """Close the connection; later calls fail."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close("channel closed")


class H2LibWriteChannel:
    """``WriteChannel``-shaped: WriteBinlog over ``H2LibChannel``."""

    def __init__(self, addr: str, max_message: int = (1 << 31) - 1) -> None:
        self._channel = H2LibChannel(addr, max_message)

    def write(self, req: pump_pb2.WriteBinlogReq, timeout: float) -> UnaryCall:
        return self._channel.unary(WRITE_BINLOG, req.SerializeToString(), timeout, pump_pb2.WriteBinlogResp.FromString)

    def close(self) -> None:
        self._channel.close()


# ---- grpclib: unary calls -------------------------------------------------------------------------

def _write_method(channel: Channel) -> UnaryUnaryMethod[pump_pb2.WriteBinlogReq, pump_pb2.WriteBinlogResp]:
    """grpclib's stub method for WriteBinlog (its ``ProtoCodec``: ``SerializeToString`` / ``FromString``)."""
    return UnaryUnaryMethod(channel, WRITE_BINLOG, pump_pb2.WriteBinlogReq, pump_pb2.WriteBinlogResp)


class GrpclibWriteChannel:
    """``WriteChannel``-shaped: grpclib on its own event-loop thread; ``write`` hands the call to the
    loop with ``asyncio.run_coroutine_threadsafe`` and returns its ``concurrent.futures.Future``."""

    def __init__(self, addr: str, loop_kind: str = "uvloop") -> None:
        self._addr = addr
        self._loop = new_loop(loop_kind)
        self._thread = threading.Thread(target=self._loop.run_forever, name="grpclib-loop", daemon=True)
        self._thread.start()
        self._channel: Channel = asyncio.run_coroutine_threadsafe(self._open(), self._loop).result(10)
        self._method = _write_method(self._channel)

    async def _open(self) -> Channel:
        host, port = _split_addr(self._addr)
        return Channel(host, port, config=_grpclib_config())

    async def _call(self, req: pump_pb2.WriteBinlogReq, timeout: float) -> pump_pb2.WriteBinlogResp:
        try:
            return await self._method(req, timeout=timeout)
        except (TimeoutError, GRPCError, StreamTerminatedError, OSError, ConnectionError) as exc:
            raise _grpclib_error(exc, self._addr) from exc

    def write(self, req: pump_pb2.WriteBinlogReq, timeout: float) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(self._call(req, timeout), self._loop)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._channel.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def grpclib_unary_async(addr: str, calls: int, tasks: int, payload: int, warmup: int = 200,
                        loop_kind: str = "uvloop",
                        cpu: Callable[[], float] = time.process_time) -> tuple[float, float]:
    """Best case: ``tasks`` coroutines on one loop, each making WriteBinlog calls one after another,
    ``calls`` in all; (µs CPU per call, calls per second), warm-up excluded."""
    req = pump_pb2.WriteBinlogReq(clusterID=1, payload=b"x" * payload)

    async def run() -> tuple[float, float, int]:
        host, port = _split_addr(addr)
        channel = Channel(host, port, config=_grpclib_config())
        method = _write_method(channel)
        try:
            for _ in range(warmup):
                await method(req, timeout=5.0)
            per_task = calls // tasks

            async def one() -> None:
                for _ in range(per_task):
                    resp = await method(req, timeout=5.0)
                    if resp.errmsg:
                        raise RuntimeError(resp.errmsg)

            c0, t0 = cpu(), time.monotonic()
            await asyncio.gather(*(one() for _ in range(tasks)))
            return cpu() - c0, time.monotonic() - t0, per_task * tasks
        finally:
            channel.close()

    loop = new_loop(loop_kind)
    try:
        used, wall, done = loop.run_until_complete(run())
    finally:
        loop.close()
    return used / done * 1e6, done / wall


# ---- h2: a gRPC server ----------------------------------------------------------------------------

SERVER_STREAMS = 4096               # the limits ours advertises (ingest.http2.server): concurrent streams,
SERVER_STREAM_WINDOW = 1 << 20      # stream receive window,
SERVER_CONN_WINDOW = 16 << 20       # connection receive window,
SERVER_MAX_FRAME = 1 << 20          # largest frame accepted,
SERVER_HEADER_LIST = 64 << 10       # decoded header list
SERVER_SEND_CHUNK = 128 << 10       # DATA frames h2 sends at most: its best over 16 KiB-16 MiB (2026-12-06:
                                    # 16 MiB frames, 1.3 ms CPU/MiB, 128 KiB 0.36; every frame size is copied)
_RESPONSE_HEADERS = [(b":status", b"200"), (b"content-type", b"application/grpc")]
_TRAILERS_OK = [(b"grpc-status", b"0")]

UnaryHandler = Callable[[bytes], bytes]
StreamHandler = Callable[[bytes], AsyncGenerator[bytes, None]]


def _h2_server_config() -> h2.config.H2Configuration:
    """Server side, headers as bytes, validation and normalization off (ours validates no more)."""
    return h2.config.H2Configuration(client_side=False, header_encoding=None,
                                     validate_inbound_headers=False, validate_outbound_headers=False,
                                     normalize_inbound_headers=False, normalize_outbound_headers=False)


class H2ServerProtocol(asyncio.Protocol):
    """One client connection of a gRPC server built on ``h2``, on an asyncio (uvloop) loop like ours:
    unary handlers answer at once (headers, message, trailers queued together), streaming handlers
    are async generators whose messages leave as the client's windows open; what ``h2`` queues is
    written once per ``data_received`` or per message. No deadlines, gzip or limits beyond h2's own:
    a benchmark peer, not a product."""

    def __init__(self, unary: dict[str, UnaryHandler], streaming: dict[str, StreamHandler]) -> None:
        self.unary = unary
        self.streaming = streaming
        self.conn = h2.connection.H2Connection(config=_h2_server_config())
        self.transport: asyncio.Transport | None = None
        self.paths: dict[int, bytes] = {}
        self.bodies: dict[int, list[bytes]] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.window: asyncio.Event | None = None
        self.drained: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = self.conn
        conn.local_settings = h2.settings.Settings(client=False, initial_values={
            SettingCodes.MAX_CONCURRENT_STREAMS: SERVER_STREAMS, SettingCodes.INITIAL_WINDOW_SIZE: SERVER_STREAM_WINDOW,
            SettingCodes.MAX_FRAME_SIZE: SERVER_MAX_FRAME, SettingCodes.MAX_HEADER_LIST_SIZE: SERVER_HEADER_LIST})
        conn.max_inbound_frame_size = SERVER_MAX_FRAME
        conn.initiate_connection()
        conn.increment_flow_control_window(SERVER_CONN_WINDOW - 65535)
        self._write()

    def _write(self) -> None:
        out = self.conn.data_to_send()
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(out)

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self._write()                          # h2 queued its GOAWAY
            if self.transport is not None:
                self.transport.close()
            return
        for ev in events:
            if isinstance(ev, h2.events.RequestReceived):
                self.paths[ev.stream_id] = dict(ev.headers).get(b":path", b"")
                self.bodies[ev.stream_id] = []
            elif isinstance(ev, h2.events.DataReceived):
                body = self.bodies.get(ev.stream_id)
                if body is not None:
                    body.append(ev.data)
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                self._dispatch(ev.stream_id)
            elif isinstance(ev, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
                if self.window is not None:
                    self.window.set()
            elif isinstance(ev, h2.events.StreamReset):
                self._forget(ev.stream_id)
            elif isinstance(ev, h2.events.ConnectionTerminated):
                if self.transport is not None:
                    self.transport.close()
        self._write()

    def _dispatch(self, sid: int) -> None:
        path = self.paths.pop(sid, b"").decode()
        chunks = self.bodies.pop(sid, [])
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        request = bytes(data[5:])                  # one message, uncompressed: what our clients send
        unary = self.unary.get(path)
        if unary is not None:
            body = _prefixed(unary(request))
            conn = self.conn
            if len(body) <= min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size):
                conn.send_headers(sid, _RESPONSE_HEADERS)
                conn.send_data(sid, body)
                conn.send_headers(sid, _TRAILERS_OK, end_stream=True)
            else:
                self.tasks[sid] = asyncio.ensure_future(self._stream(sid, _one_message(body[5:])))
            return
        streaming = self.streaming.get(path)
        if streaming is not None:
            self.tasks[sid] = asyncio.ensure_future(self._stream(sid, streaming(request)))
            return
        self.conn.send_headers(sid, [*_RESPONSE_HEADERS, (b"grpc-status", b"12")], end_stream=True)

    async def _stream(self, sid: int, messages: AsyncGenerator[bytes, None]) -> None:
        """Send ``messages`` as the windows allow, then the OK trailers."""
        conn = self.conn
        try:
            conn.send_headers(sid, _RESPONSE_HEADERS)
            async for message in messages:
                await self._send_message(sid, message)
            conn.send_headers(sid, _TRAILERS_OK, end_stream=True)
            self._write()
        except (h2.exceptions.StreamClosedError, ConnectionError):
            pass
        finally:
            self.tasks.pop(sid, None)
            await messages.aclose()

    async def _send_message(self, sid: int, message: bytes) -> None:
        conn = self.conn
        prefix = b"\0" + len(message).to_bytes(4, "big")
        view = memoryview(message)
        while prefix or view:
            room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
            if room < len(prefix) + (1 if view else 0):
                self._write()
                self.window = self.window or asyncio.Event()
                self.window.clear()
                await self.window.wait()
                continue
            if prefix:          # a frame of its own: joining it to a large message would copy the message
                conn.send_data(sid, prefix)
                prefix = b""
                continue
            n = min(room, len(view), SERVER_SEND_CHUNK)
            conn.send_data(sid, view[:n])
            view = view[n:]
            self._write()
            if self.drained is not None:
                await self.drained

    def pause_writing(self) -> None:
        self.drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        self.drained = None

    def _forget(self, sid: int) -> None:
        self.paths.pop(sid, None)
        self.bodies.pop(sid, None)
        task = self.tasks.pop(sid, None)
        if task is not None:
            task.cancel()

    def connection_lost(self, exc: Exception | None) -> None:
        for task in list(self.tasks.values()):
            task.cancel()
        self.tasks.clear()
        if self.window is not None:
            self.window.set()
        self.resume_writing()


def _prefixed(message: bytes) -> bytes:
    return b"\0" + len(message).to_bytes(4, "big") + message


async def _one_message(message: bytes) -> AsyncGenerator[bytes, None]:
    yield message


async def serve_h2(host: str, port: int, unary: dict[str, UnaryHandler],
                   streaming: dict[str, StreamHandler]) -> asyncio.AbstractServer:
    """Listen on ``host:port`` (0: any free port) with ``H2ServerProtocol`` on the running loop."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: H2ServerProtocol(unary, streaming), host, port, backlog=1024,
                                    reuse_address=True)
