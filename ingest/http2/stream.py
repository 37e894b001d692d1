"""Server-streaming and unary gRPC calls over one HTTP/2 connection per call, plain text or TLS,
each response message read from the socket straight into its own buffer (the Drainer's reader of
Scan, LookupPrewrites, Watermark and PullBinlogs).

Why: grpcio's Python client assembles every received message from its slices into a new object and
hands it between its threads. For the MiB-sized RecordBatches of a range scan that cost about
1.9 ms of client CPU per MiB on the 2-core VM, where reading the socket on the caller's thread with
``recv_into`` each message's buffer costs about 1.1 ms (docs/benchmarks.md, "pump_scan session
2026-11-22 12:57 UTC").

Promises of ``stream_call``:
- It yields every response message, in order, as a ``bytearray`` that nothing else refers to, and
  returns when the server ends the call with status OK.
- Any other ending raises ``WireRpcError`` with a ``grpc.StatusCode``, as grpcio would: the server's
  status (also from a trailers-only answer), ``UNAVAILABLE`` when the connection fails or is lost,
  ``DEADLINE_EXCEEDED`` when the server sends nothing for ``idle_timeout`` seconds,
  ``RESOURCE_EXHAUSTED`` for a message over ``max_message``, ``INTERNAL`` for a protocol violation.
- With ``tls`` (a client ``ssl.SSLContext``, e.g. ``SecurityConfig.h2_client_context()``) the
  socket is wrapped for the host of ``addr`` (the context decides what is verified: the
  certificate chain and the host name when it checks them) and the same HTTP/2 follows; the server
  must agree to ALPN ``h2`` or offer no ALPN. Connecting gets ``CONNECT_TIMEOUT`` and the TLS
  handshake ``HANDSHAKE_TIMEOUT`` (each ``idle_timeout`` if shorter); a refused connection, a failed
  or unfinished handshake (wrong CA, a server without TLS) and a refused ALPN are ``UNAVAILABLE``
  with the reason, never a longer wait. After the handshake ``idle_timeout`` means what it means in
  plain text.
- One connection per call; it is closed when the generator ends, also when the caller stops early
  (the server then sees the call cancelled).
- With ``gzip`` the request is sent gzip-compressed and gzip answers are asked for (grpc-go servers
  answer in the request's encoding). A message the server marks compressed with ``grpc-encoding:
  gzip`` is inflated, asked for or not, up to ``max_message`` bytes (more is
  ``RESOURCE_EXHAUSTED``); any other encoding is ``INTERNAL``.
- The request is sent within the server's flow-control windows and frame size. The receive windows
  are 1 GiB and are re-opened as frames arrive; a caller that stops reading stops the server
  through TCP, not through an unbounded buffer here.

``unary_call`` is ``stream_call`` for a method that answers with one message: that message, or
``INTERNAL`` when an OK call carried none or several.
"""
from __future__ import annotations

import collections
import gzip as gzip_format
import socket
import ssl
import zlib
from collections.abc import Iterator

import grpc
from hpack.exceptions import HPACKError

from ingest.http2.framing import (
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
    S_MAX_FRAME_SIZE,
    SETTINGS,
    WINDOW_UPDATE,
    WireRpcError,
    frame,
    http_error,
    request_headers,
    rst_error,
    trailers_error,
)
from ingest.http2.hpack_decoder import HpackDecoder

WINDOW = 1 << 30               # what the server may send before it sees a WINDOW_UPDATE
MAX_FRAME = (1 << 24) - 1      # the largest DATA frame we accept (RFC 9113's maximum)
READ_BUFFER = 1 << 16          # frame headers and small frames are read through a buffer this large
STREAM = 1                     # the one stream of the connection
UNIX_HOST = "localhost"        # the authority and TLS host name of a ``unix:`` address
# A TCP connect is the kernel's work; a TLS handshake needs the server process's CPU too, so it gets
# longer: the front door's own limit for a client's handshake (ingest.frontdoor.HANDSHAKE_TIMEOUT).
HANDSHAKE_TIMEOUT = 10.0
_CANCEL = 0x8


class _Call:
    """One streaming call on its own connection, driven by the caller's thread."""

    def __init__(self, addr: str, idle_timeout: float, max_message: int, gzip: bool = False,
                 tls: ssl.SSLContext | None = None) -> None:
        self.gzip = gzip
        self.tls = tls is not None
        self.idle_timeout = idle_timeout
        self.max_message = max_message
        raw, host = _dial(addr, min(CONNECT_TIMEOUT, idle_timeout))
        self.addr = addr                               # named in errors
        self.authority = UNIX_HOST if addr.startswith("unix:") else addr
        self.sock = raw if tls is None else _handshake(raw, tls, host, addr, min(HANDSHAKE_TIMEOUT, idle_timeout))
        try:
            self.sock.settimeout(idle_timeout)
        except OSError as exc:
            self.sock.close()
            raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"failed to set up {addr}: {exc}") from exc
        self.buf = bytearray(READ_BUFFER)
        self.view = memoryview(self.buf)
        self.lo = self.hi = 0                          # buffered bytes: buf[lo:hi]
        self.headers = HpackDecoder()
        self.http_status: bytes | None = None
        self.header_parts: list[bytes] = []
        self.header_flags = 0
        self.send_window = 65535                       # connection and stream windows (RFC 9113 initial)
        self.stream_window = 65535
        self.peer_initial_window = 65535
        self.peer_max_frame = 16384
        self.unacked = 0                               # DATA bytes since our last WINDOW_UPDATE
        self.prefix = b""                              # the part of a message's 5-byte prefix read so far
        self.message: bytearray | None = None
        self.compressed = False                        # the message being read is gzip-compressed
        self.encoding = b"identity"                    # the response's grpc-encoding
        self.got = 0
        self.ready: collections.deque[bytearray] = collections.deque()
        self.ended = False

    # -- socket ---------------------------------------------------------------------------------
    def _recv_into(self, view: memoryview) -> int:
        try:
            n = self.sock.recv_into(view)
        except TimeoutError as exc:
            raise WireRpcError(grpc.StatusCode.DEADLINE_EXCEEDED,
                               f"{self.addr} sent nothing for {self.idle_timeout:g}s") from exc
        except ssl.SSLError as exc:   # e.g. the server's alert refusing our certificate (TLS 1.3)
            raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"TLS with {self.addr} failed: {_reason(exc)}"
                               ) from exc
        except OSError as exc:
            raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"connection to {self.addr} lost: {exc}") from exc
        if not n:
            raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"connection to {self.addr} closed by the server")
        return n

    def _read(self, n: int) -> bytes:
        """The next ``n`` bytes (``n`` ≤ READ_BUFFER) through the buffer."""
        if self.hi - self.lo < n:
            if self.lo:
                self.buf[:self.hi - self.lo] = self.buf[self.lo:self.hi]
                self.hi -= self.lo
                self.lo = 0
            while self.hi < n:
                self.hi += self._recv_into(self.view[self.hi:])
        out = bytes(self.view[self.lo:self.lo + n])
        self.lo += n
        return out

    def _read_into(self, target: memoryview) -> None:
        """Fill ``target``: buffered bytes first, the rest straight from the socket."""
        have = min(self.hi - self.lo, len(target))
        if have:
            target[:have] = self.view[self.lo:self.lo + have]
            self.lo += have
        while have < len(target):
            have += self._recv_into(target[have:])

    def _skip(self, n: int) -> None:
        while n:
            step = min(n, READ_BUFFER)
            self._read(step)
            n -= step

    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except TimeoutError as exc:
            raise WireRpcError(grpc.StatusCode.DEADLINE_EXCEEDED,
                               f"{self.addr} took no data for {self.idle_timeout:g}s") from exc
        except ssl.SSLError as exc:
            raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"TLS with {self.addr} failed: {_reason(exc)}"
                               ) from exc
        except OSError as exc:
            raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"connection to {self.addr} lost: {exc}") from exc

    # -- request ----------------------------------------------------------------------------------
    def start(self, method: str, request: bytes) -> None:
        """Send the preface, our settings, the request headers and as much of the body as the windows
        allow; the rest is sent as WINDOW_UPDATEs arrive."""
        settings = b"".join(ident.to_bytes(2, "big") + value.to_bytes(4, "big") for ident, value in
                            ((S_ENABLE_PUSH, 0), (S_INITIAL_WINDOW_SIZE, WINDOW), (S_MAX_FRAME_SIZE, MAX_FRAME)))
        self._send(PREFACE + frame(SETTINGS, 0, 0, settings)
                   + frame(WINDOW_UPDATE, 0, 0, (WINDOW - 65535).to_bytes(4, "big"))
                   + frame(HEADERS, END_HEADERS, STREAM, request_headers(self.authority, method, self.gzip, self.tls)))
        if self.gzip:
            request = gzip_format.compress(request, mtime=0)
        body = memoryview(bytes((int(self.gzip),)) + len(request).to_bytes(4, "big") + request)
        pos = 0
        while True:
            room = min(self.send_window, self.stream_window, self.peer_max_frame, len(body) - pos)
            if room > 0:
                last = pos + room == len(body)
                self._send(frame(DATA, END_STREAM if last else 0, STREAM, bytes(body[pos:pos + room])))
                self.send_window -= room
                self.stream_window -= room
                pos += room
                if last:
                    return
            else:
                self._next_frame()
                if self.ended:
                    return

    # -- response ---------------------------------------------------------------------------------
    def messages(self) -> Iterator[bytearray]:
        """Every response message, until the server's OK status."""
        while True:
            while self.ready:
                yield self.ready.popleft()
            if self.ended:
                return
            self._next_frame()

    def _next_frame(self) -> None:
        head = self._read(9)
        length = int.from_bytes(head[:3], "big")
        typ, flags = head[3], head[4]
        sid = int.from_bytes(head[5:9], "big") & MAX_STREAM_ID
        if length > MAX_FRAME:
            raise self._protocol(f"a {length}-byte frame is larger than our maximum")
        if self.header_parts and typ != CONTINUATION:
            raise self._protocol("expected a CONTINUATION frame")
        if typ == DATA:
            self._on_data(flags, sid, length)
            return
        payload = self._read_payload(length)
        if typ == HEADERS and sid == STREAM:
            if flags & PADDED:
                if not payload or payload[0] >= len(payload):
                    raise self._protocol("HEADERS padding longer than the frame")
                payload = payload[1:len(payload) - payload[0]]
            if flags & PRIORITY_FLAG:
                payload = payload[5:]
            self.header_parts, self.header_flags = [payload], flags
            if flags & END_HEADERS:
                self._on_header_block()
        elif typ == CONTINUATION:
            if not self.header_parts or sid != STREAM:
                raise self._protocol("unexpected CONTINUATION frame")
            self.header_parts.append(payload)
            if flags & END_HEADERS:
                self._on_header_block()
        elif typ == RST_STREAM and sid == STREAM:
            raise rst_error(int.from_bytes(payload[:4], "big"))
        elif typ == SETTINGS and not flags & ACK:
            for i in range(0, len(payload) - 5, 6):
                ident, value = int.from_bytes(payload[i:i + 2], "big"), int.from_bytes(payload[i + 2:i + 6], "big")
                if ident == S_INITIAL_WINDOW_SIZE:
                    self.stream_window += value - self.peer_initial_window
                    self.peer_initial_window = value
                elif ident == S_MAX_FRAME_SIZE:
                    self.peer_max_frame = value
            self._send(frame(SETTINGS, ACK, 0))
        elif typ == PING and not flags & ACK:
            self._send(frame(PING, ACK, 0, payload))
        elif typ == GOAWAY:
            # Our stream goes on if the server says it will still process it; if the server then
            # closes the connection instead, the read fails with UNAVAILABLE.
            last = int.from_bytes(payload[:4], "big") & MAX_STREAM_ID
            if last < STREAM:
                code = int.from_bytes(payload[4:8], "big")
                raise WireRpcError(grpc.StatusCode.UNAVAILABLE,
                                   f"{self.addr} sent GOAWAY (HTTP/2 error 0x{code:x}); stream not processed")
        elif typ == WINDOW_UPDATE:
            inc = int.from_bytes(payload[:4], "big") & MAX_WINDOW
            if sid == 0:
                self.send_window += inc
            elif sid == STREAM:
                self.stream_window += inc
        elif typ == PUSH_PROMISE:
            raise self._protocol("PUSH_PROMISE although push is disabled")
        # PRIORITY, other streams' frames and unknown frame types are ignored (RFC 9113).

    def _read_payload(self, length: int) -> bytes:
        if length <= READ_BUFFER:
            return self._read(length)
        out = bytearray(length)
        self._read_into(memoryview(out))
        return bytes(out)

    def _on_data(self, flags: int, sid: int, length: int) -> None:
        self.unacked += length
        if self.unacked >= WINDOW // 2:
            update = self.unacked.to_bytes(4, "big")
            self._send(frame(WINDOW_UPDATE, 0, 0, update) + frame(WINDOW_UPDATE, 0, STREAM, update))
            self.unacked = 0
        pad = 0
        if flags & PADDED:
            if not length:
                raise self._protocol("a padded DATA frame without its pad length")
            pad = self._read(1)[0]
            length -= 1
            if pad > length:
                raise self._protocol("DATA frame padding longer than the frame")
            length -= pad
        if sid != STREAM:
            self._skip(length + pad)
            return
        self._take(length)
        self._skip(pad)
        if flags & END_STREAM:
            raise WireRpcError(grpc.StatusCode.INTERNAL, "server ended the stream without trailers")

    def _take(self, n: int) -> None:
        """Consume ``n`` bytes of the stream's DATA: message prefixes and bodies."""
        while n:
            if self.message is None:
                step = min(5 - len(self.prefix), n)
                self.prefix += self._read(step)
                n -= step
                if len(self.prefix) < 5:
                    continue
                compressed, size = self.prefix[0], int.from_bytes(self.prefix[1:5], "big")
                self.prefix = b""
                if compressed and self.encoding != b"gzip":
                    raise WireRpcError(grpc.StatusCode.INTERNAL, f"compressed response in the unsupported "
                                       f"encoding {self.encoding.decode(errors='replace')!r}")
                self.compressed = bool(compressed)
                if size > self.max_message:
                    raise WireRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                       f"Received message larger than max ({size} vs. {self.max_message})")
                self.message, self.got = bytearray(size), 0
            else:
                step = min(len(self.message) - self.got, n)
                self._read_into(memoryview(self.message)[self.got:self.got + step])
                self.got += step
                n -= step
            if self.message is not None and self.got == len(self.message):
                self.ready.append(self._inflate(self.message) if self.compressed else self.message)
                self.message = None

    def _inflate(self, data: bytearray) -> bytearray:
        """A gzip-compressed message's bytes, at most ``max_message`` of them."""
        inflater = zlib.decompressobj(wbits=31)
        try:
            out = inflater.decompress(data, self.max_message + 1)
        except zlib.error as exc:
            raise WireRpcError(grpc.StatusCode.INTERNAL, f"a gzip message from {self.addr} is corrupt: {exc}"
                               ) from exc
        if len(out) > self.max_message:
            raise WireRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"Received message larger than max (over {self.max_message} bytes inflated)")
        if not inflater.eof:
            raise WireRpcError(grpc.StatusCode.INTERNAL, f"a gzip message from {self.addr} is truncated")
        return bytearray(out)

    def _on_header_block(self) -> None:
        block = self.header_parts[0] if len(self.header_parts) == 1 else b"".join(self.header_parts)
        self.header_parts = []
        try:
            headers = self.headers.decode(block)
        except HPACKError as exc:
            raise self._protocol(f"bad header block: {exc}") from exc
        named = dict(headers)
        self.http_status = named.get(b":status", self.http_status)
        self.encoding = named.get(b"grpc-encoding", self.encoding)
        if not self.header_flags & END_STREAM:
            if self.http_status != b"200":
                raise http_error(self.http_status)
            return
        error = trailers_error(headers, self.http_status)
        if error is not None:
            raise error
        if self.message is not None or self.prefix:
            raise WireRpcError(grpc.StatusCode.INTERNAL, "the stream ended inside a message")
        self.ended = True

    def _protocol(self, what: str) -> WireRpcError:
        return WireRpcError(grpc.StatusCode.INTERNAL, f"HTTP/2 protocol error from {self.addr}: {what}")

    def close(self) -> None:
        """Cancel the stream unless it ended, and close the connection."""
        if not self.ended:
            try:
                self.sock.settimeout(0.5)
                self.sock.sendall(frame(RST_STREAM, 0, STREAM, _CANCEL.to_bytes(4, "big")))
            except OSError:
                pass
        self.sock.close()


def _dial(addr: str, timeout: float) -> tuple[socket.socket, str]:
    """A connected socket to ``host:port`` (TCP, no Nagle delay) or ``unix:PATH`` (``unix:///PATH``
    too), and the host name TLS checks (``UNIX_HOST`` for a unix socket)."""
    try:
        if addr.startswith("unix:"):
            path = addr[len("unix:"):]
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(path[2:] if path.startswith("///") else path)
            except OSError:
                sock.close()
                raise
            return sock, UNIX_HOST
        host, _, port = addr.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except (OSError, ValueError) as exc:
        raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"failed to connect to {addr}: {exc}") from exc
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError as exc:
        sock.close()
        raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"failed to set up {addr}: {exc}") from exc
    return sock, host


def _reason(exc: ssl.SSLError) -> str:
    """What went wrong in TLS, in OpenSSL's words (the certificate check's own message when it failed)."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLEOFError):   # our front door refusing a client certificate closes so
        return f"the server closed the connection ({exc}): did it refuse our certificate?"
    return str(exc.reason or exc)


def _handshake(raw: socket.socket, tls: ssl.SSLContext, host: str, addr: str, timeout: float) -> ssl.SSLSocket:
    """``raw`` wrapped by ``tls`` for ``host``, the handshake finished within ``timeout`` seconds and
    ALPN on ``h2`` (or none); ``UNAVAILABLE`` with the reason otherwise, the socket closed."""
    try:
        sock = tls.wrap_socket(raw, server_hostname=host, do_handshake_on_connect=False)
    except (OSError, ValueError) as exc:
        raw.close()
        raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"TLS with {addr} could not start: {exc}") from exc
    try:
        sock.settimeout(timeout)
        sock.do_handshake()
    except TimeoutError as exc:
        sock.close()
        raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"TLS handshake with {addr} did not finish in "
                           f"{timeout:g}s (does it speak TLS?)") from exc
    except (ssl.SSLEOFError, ConnectionError) as exc:   # closed or reset in the middle
        sock.close()
        raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"TLS handshake with {addr} failed: the server closed "
                           f"the connection (a server without TLS, or one refusing our certificate)") from exc
    except ssl.SSLError as exc:
        sock.close()
        raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"TLS handshake with {addr} failed: {_reason(exc)}"
                           ) from exc
    except OSError as exc:
        sock.close()
        raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"TLS handshake with {addr} failed: {exc}") from exc
    protocol = sock.selected_alpn_protocol()
    if protocol not in (None, "h2"):
        sock.close()
        raise WireRpcError(grpc.StatusCode.UNAVAILABLE, f"{addr} chose {protocol!r} by ALPN, not h2")
    return sock


def stream_call(addr: str, method: str, request: bytes, idle_timeout: float,
                max_message: int, gzip: bool = False, tls: ssl.SSLContext | None = None) -> Iterator[bytearray]:
    """Call the server-streaming ``method`` (e.g. ``/binlake.v1.PumpScan/Scan``) at ``host:port`` (or
    ``unix:PATH``) with a serialized request and yield the response messages (see the module's promises)."""
    call = _Call(addr, idle_timeout, max_message, gzip, tls)
    try:
        call.start(method, request)
        yield from call.messages()
    finally:
        call.close()


def unary_call(addr: str, method: str, request: bytes, idle_timeout: float, max_message: int,
               tls: ssl.SSLContext | None = None) -> bytearray:
    """Call the unary ``method`` at ``host:port`` (or ``unix:PATH``): its one response message (see the
    module's promises)."""
    answers = list(stream_call(addr, method, request, idle_timeout, max_message, tls=tls))
    if len(answers) != 1:
        raise WireRpcError(grpc.StatusCode.INTERNAL, f"{addr} answered the unary {method} with "
                           f"{len(answers)} messages")
    return answers[0]
