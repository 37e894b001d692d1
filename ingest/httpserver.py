"""HTTP/1.1 under every binlake status API (the pump's, the following drainer's), as the front door
(``ingest.frontdoor``) serves it beside gRPC on one port.

A route table is a ``GuardedHandler`` subclass (``http.server``'s handler: ``do_GET``, ``do_PUT``…);
``Http1`` parses requests off a connection's bytes (at most ``MAX_HEAD`` bytes of request line and
headers, ``MAX_BODY`` of body, ``Content-Length`` bodies only), runs the handler on a thread (handlers
may block on the registry or PD), and writes its response; keep-alive as HTTP/1.1 has it. Under
``[security]`` the connection is TLS: ``cert-allowed-cn`` applies as on gRPC (``403`` otherwise).
Refused clients and handler errors are logged as one line per client per interval
(:class:`ingest.peerlog.PeerLog`), never as tracebacks.
"""
from __future__ import annotations

import asyncio
import io
import ipaddress
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from http.server import BaseHTTPRequestHandler
from typing import Any

from ingest.peerlog import PeerLog
from ingest.security import SecurityConfig

log = logging.getLogger(__name__)

MAX_HEAD = 64 << 10      # request line and headers
MAX_BODY = 1 << 20       # a request body (the status APIs take none or a small one)
IDLE_TIMEOUT = 120.0     # seconds a kept-alive connection may sit idle
REQUEST_TIMEOUT = 30.0   # seconds from a request's first byte to its last


class HttpSide:
    """What handlers see as ``self.server``: the scheme and the per-client log."""

    def __init__(self, tls: bool, peer_log: PeerLog) -> None:
        self.tls = tls
        self.peer_log = peer_log

    @property
    def scheme(self) -> str:
        """``https`` under TLS, else ``http``."""
        return "https" if self.tls else "http"


class GuardedHandler(BaseHTTPRequestHandler):
    """A request handler run on one buffered request; refuses clients ``cert-allowed-cn`` does not
    list (under mutual TLS)."""

    security: SecurityConfig = SecurityConfig()
    protocol_version = "HTTP/1.1"
    server: HttpSide  # type: ignore[assignment]
    peer_cn: str | None = None

    def __init__(self, raw: bytes, client_address: tuple[str, int], server: HttpSide, peer_cn: str | None) -> None:
        self.peer_cn = peer_cn
        super().__init__(raw, client_address, server)  # type: ignore[arg-type]

    def setup(self) -> None:
        self.rfile = io.BytesIO(self.request)
        self.wfile = io.BytesIO()

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()

    def finish(self) -> None:
        pass

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s", format % args)

    def send_body(self, status: int, body: bytes, content_type: str) -> None:
        """One complete response."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.server.tls and self.security.ssl_ca and not self.security.allows(self.peer_cn):
            cn = self.peer_cn
            self.server.peer_log.warn(self.client_address[0],
                                      f"HTTPS request refused: certificate CN {cn!r} is not in cert-allowed-cn")
            self.send_body(403, f"client certificate CN {cn!r} is not in cert-allowed-cn\n".encode(),
                           "text/plain; charset=utf-8")
            return False
        return True


def respond(handler: type[GuardedHandler], raw: bytes, client: tuple[str, int], side: HttpSide,
            cn: str | None) -> tuple[bytes, bool]:
    """Run ``handler`` on one request: its response bytes, and whether the connection may stay."""
    try:
        done = handler(raw, client, side, cn)
    except Exception as exc:  # noqa: BLE001 - one line per client, and a 500 to the client
        side.peer_log.warn(client[0], f"HTTP request failed: {type(exc).__name__}: {exc}")
        body = b"internal error\n"
        return (b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body, False)
    out = done.wfile
    assert isinstance(out, io.BytesIO)
    return out.getvalue(), not done.close_connection


class Http1:
    """The HTTP/1.1 side of one connection: requests in order, one at a time."""

    def __init__(self, transport: asyncio.Transport, handler: type[GuardedHandler], side: HttpSide,
                 client: tuple[str, int], cn: str | None, executor: Executor) -> None:
        self.transport = transport
        self.handler = handler
        self.side = side
        self.client = client
        self.cn = cn
        self.executor = executor
        self.loop = asyncio.get_running_loop()
        self.buf = bytearray()
        self.busy = False
        self.in_request = False                   # bytes of a request arrived, not all of it yet
        self.timer: asyncio.TimerHandle | None = None   # closes the connection: idle, or a request too slow

    def feed(self, data: bytes) -> None:
        """Bytes from the client."""
        self.buf += data
        if not self.busy:
            self._next()

    def _arm(self, seconds: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(seconds, self.transport.close)

    def _next(self) -> None:
        if not self.buf:                          # between requests: the idle timeout
            self._arm(IDLE_TIMEOUT)
            self.in_request = False
            return
        if not self.in_request:                   # a request began: it has REQUEST_TIMEOUT to arrive
            self._arm(REQUEST_TIMEOUT)
            self.in_request = True
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            if len(self.buf) > MAX_HEAD:
                self._refuse(431, "Request Header Fields Too Large")
            return
        if head_end > MAX_HEAD:
            self._refuse(431, "Request Header Fields Too Large")
            return
        length = 0
        for line in bytes(self.buf[:head_end]).split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            key = name.strip().lower()
            if key == b"transfer-encoding":
                self._refuse(411, "Length Required")
                return
            if key == b"content-length":
                if not value.strip().isdigit():
                    self._refuse(400, "Bad Request")
                    return
                length = int(value)
        if length > MAX_BODY:
            self._refuse(413, "Content Too Large")
            return
        end = head_end + 4 + length
        if len(self.buf) < end:
            return
        raw = bytes(self.buf[:end])
        del self.buf[:end]
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.in_request = False
        self.busy = True
        self.transport.pause_reading()
        future = self.loop.run_in_executor(self.executor, respond, self.handler, raw, self.client, self.side, self.cn)
        future.add_done_callback(self._answered)

    def _answered(self, future: asyncio.Future[tuple[bytes, bool]]) -> None:
        self.busy = False
        if self.transport.is_closing():
            return
        response, keep = future.result()
        self.transport.write(response)
        if not keep:
            self.transport.close()
            return
        self.transport.resume_reading()
        self._next()

    def _refuse(self, status: int, reason: str) -> None:
        body = f"{status} {reason}\n".encode()
        self.transport.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                             f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        self.transport.close()

    def closed(self) -> None:
        """The connection ended."""
        if self.timer is not None:
            self.timer.cancel()


def is_loopback(host: str) -> bool:
    """True for a host only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warn_if_plain(addr: str, security: SecurityConfig, what: str, warn: Callable[..., Any] = log.warning) -> None:
    """Warn that ``what`` on ``addr`` is plain HTTP reachable beyond this machine (no ``[security]``)."""
    host = addr.rpartition(":")[0].strip("[]") or "127.0.0.1"
    if not security.enabled and not is_loopback(host):
        warn("%s on %s is plain HTTP without authentication: whoever reaches it can change the node's "
             "state and read what it serves; set [security] ssl-cert/ssl-key (and ssl-ca) or bind it "
             "to 127.0.0.1", what, addr)
