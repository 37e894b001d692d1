"""One listener per address serving gRPC and the HTTP status API, as TiDB Binlog's pump and
drainer do with cmux: TiDB's tools (``binlogctl -cmd pause-pump|offline-pump``) send their HTTP
requests to the address in the registry, which is the gRPC address.

A connection is told apart by its first bytes (after TLS, when ``[security]`` is set): the HTTP/2
client preface makes it a gRPC connection (``ingest.http2.server``); anything else is HTTP/1.1
(``ingest.httpserver``). Under TLS both share the certificate rules: client certificates are required
when ``ssl-ca`` is set, ALPN settles on ``http/1.1`` for clients offering it (curl, browsers) and
``h2`` for gRPC clients, which offer only that, and ``cert-allowed-cn`` is checked per call or
request. A client that sends nothing for ``SNIFF_TIMEOUT`` seconds (or never finishes the
TLS handshake) is disconnected, and so is a TLS client at once when the door speaks plain text.
TCP addresses and a unix socket use the same code.

``FrontDoor`` runs on an event loop of its own thread (uvloop), started and stopped from any thread.
"""
from __future__ import annotations

import asyncio
import logging
import os
import ssl
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import uvloop

from ingest.http2 import PREFACE, PROCESS_PARTIAL_LIMIT, GrpcConnection, Methods, RequestBudget
from ingest.httpserver import GuardedHandler, Http1, HttpSide
from ingest.peerlog import PeerLog
from ingest.security import SecurityConfig

log = logging.getLogger(__name__)

SNIFF_TIMEOUT = 10.0       # seconds a new connection has to send its first bytes
HANDSHAKE_TIMEOUT = 10.0   # seconds a client has to finish the TLS handshake
SOCKET_MODE = 0o660        # a unix socket: the owner's user and group may connect
TLS_HANDSHAKE = 0x16       # the first byte of a TLS ClientHello record; no HTTP/1.1 request starts with it
T = TypeVar("T")


class _Door(asyncio.Protocol):
    """A new connection until its first bytes tell what it is."""

    def __init__(self, front: FrontDoor) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.http1: Http1 | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.client: tuple[str, int] = ("unix", 0)
        self.cn: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and peer:
            self.client = (str(peer[0]), int(peer[1]))
        tls = transport.get_extra_info("ssl_object")
        if tls is not None:
            self.cn = _peer_cn(tls.getpeercert())
        self.timer = asyncio.get_running_loop().call_later(SNIFF_TIMEOUT, transport.close)
        self.front.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.http1 is not None:
            self.http1.feed(data)
            return
        self.buf += data
        n = min(len(self.buf), len(PREFACE))
        if self.buf[:n] == PREFACE[:n]:
            if len(self.buf) < len(PREFACE):
                return
            self._grpc()
            return
        if self.buf[0] == TLS_HANDSHAKE and not self.front.security.enabled:
            self._sniffed()   # a TLS client at a plain-text door: closed now, its handshake fails at once
            self.close()
            return
        self._http1()

    def _grpc(self) -> None:
        assert self.transport is not None
        self._sniffed()
        front = self.front
        conn = GrpcConnection(front.methods, front.max_message, self.client[0], self.cn, front.forget, front.budget)
        front.connections.discard(self)
        front.connections.add(conn)
        self.transport.set_protocol(conn)
        conn.start(self.transport, self.buf)

    def _http1(self) -> None:
        assert self.transport is not None
        self._sniffed()
        front = self.front
        if front.http is None:
            self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            self.transport.close()
            return
        self.http1 = Http1(self.transport, front.http, front.side, self.client, self.cn, front.http_pool)
        data, self.buf = self.buf, b""
        self.http1.feed(data)

    def _sniffed(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._sniffed()
        if self.http1 is not None:
            self.http1.closed()
        self.front.connections.discard(self)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def _peer_cn(cert: Any) -> str | None:
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class FrontDoor:
    """gRPC ``methods`` and the HTTP ``http`` handler on ``addrs`` (``host:port``; ``unix:PATH``)."""

    def __init__(self, methods: Methods, http: type[GuardedHandler] | None, security: SecurityConfig,
                 max_message: int, peer_log: PeerLog, name: str) -> None:
        self.methods = methods
        self.security = security
        self.http = type(http.__name__, (http,), {"security": security}) if http is not None else None
        self.max_message = max_message
        self.budget = RequestBudget(max(PROCESS_PARTIAL_LIMIT, max_message + 5))   # unfinished requests, all conns
        self.side = HttpSide(security.enabled, peer_log)
        self.connections: set[Any] = set()
        self.http_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"{name}-http")
        self.loop = uvloop.new_event_loop()
        self._servers: list[asyncio.AbstractServer] = []
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def forget(self, conn: Any) -> None:
        self.connections.discard(conn)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run ``coro`` on the door's loop from another thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def listen(self, addr: str) -> int:
        """Serve on ``addr``; the TCP port bound (0 for a unix socket). OSError when it cannot."""
        return self.run(self._listen(addr))

    async def _listen(self, addr: str) -> int:
        tls = self._tls()
        extra: dict[str, Any] = {"ssl": tls, "ssl_handshake_timeout": HANDSHAKE_TIMEOUT} if tls else {}
        if addr.startswith("unix:"):
            path = addr[len("unix:"):]
            server = await self.loop.create_unix_server(lambda: _Door(self), path, backlog=1024, **extra)
            os.chmod(path, SOCKET_MODE)
            port = 0
        else:
            host, _, port_text = addr.rpartition(":")
            host = host.strip("[]") or "0.0.0.0"
            server = await self.loop.create_server(lambda: _Door(self), host, int(port_text), backlog=1024,
                                                   reuse_address=True, **extra)
            port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        self._servers.append(server)
        return port

    def _tls(self) -> ssl.SSLContext | None:
        ctx = self.security.server_context()
        if ctx is not None:
            ctx.set_alpn_protocols(["http/1.1", "h2"])   # our order decides: curl offering both gets HTTP/1.1
        return ctx

    def stop(self, grace: float = 10.0) -> None:
        """Stop listening, let running gRPC calls finish for up to ``grace`` seconds, then close."""
        try:
            self.run(self._stop(grace), timeout=grace + 5)
        except Exception:
            log.exception("front door stop failed")
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.http_pool.shutdown(wait=False, cancel_futures=True)

    async def _stop(self, grace: float) -> None:
        for server in self._servers:
            server.close()
        waits = []
        for conn in list(self.connections):
            if isinstance(conn, GrpcConnection) and conn.streams:
                conn.goaway()
                conn.idle = self.loop.create_future()
                waits.append(conn.idle)
        if waits:
            await asyncio.wait(waits, timeout=grace)
        for conn in list(self.connections):
            conn.abort()                       # connection_lost cancels each stream's task
        await asyncio.sleep(0)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        await self.loop.shutdown_asyncgens()  # a scan's producer thread learns it may stop
