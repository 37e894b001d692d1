"""The HTTP(S) server under every binlake status API (the pump's, the following drainer's).

With ``[security]`` set it is HTTPS with the component's certificate: client certificates are
required when ``ssl-ca`` is set, and ``cert-allowed-cn`` applies as on the gRPC ports (``403``
otherwise). The TLS handshake runs in the connection's own thread, so a client that never finishes
it holds no one else up. Without ``[security]`` a bind beyond loopback is warned about at start.
Refused handshakes, refused clients and handler errors are logged as one line per client per
interval (:class:`ingest.peerlog.PeerLog`), never as tracebacks.
"""
from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ingest.peerlog import PeerLog
from ingest.security import SecurityConfig, http_peer_cn

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0   # seconds a client has to finish the TLS handshake


class SecureHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with TLS set up per connection in its thread, and one-line error logs."""

    daemon_threads = True
    tls: ssl.SSLContext | None = None
    peer_log: PeerLog

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is not None:
            request.settimeout(HANDSHAKE_TIMEOUT)
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as exc:
                self.peer_log.warn(client_address[0], f"HTTPS handshake refused: {exc}")
                return
            request.settimeout(None)
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        self.peer_log.warn(client_address[0], f"HTTP request failed: {type(exc).__name__}: {exc}")

    @property
    def scheme(self) -> str:
        """``https`` under TLS, else ``http``."""
        return "https" if self.tls is not None else "http"


class GuardedHandler(BaseHTTPRequestHandler):
    """A request handler that refuses clients ``cert-allowed-cn`` does not list (under mutual TLS)."""

    security: SecurityConfig = SecurityConfig()
    protocol_version = "HTTP/1.1"
    server: SecureHTTPServer

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
        if isinstance(self.connection, ssl.SSLSocket) and self.security.ssl_ca:
            cn = http_peer_cn(self.connection)
            if not self.security.allows(cn):
                self.server.peer_log.warn(self.client_address[0],
                                          f"HTTPS request refused: certificate CN {cn!r} is not in cert-allowed-cn")
                self.send_body(403, f"client certificate CN {cn!r} is not in cert-allowed-cn\n".encode(),
                               "text/plain; charset=utf-8")
                return False
        return True


def is_loopback(host: str) -> bool:
    """True for a host only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_server(addr: str, handler: type[GuardedHandler], security: SecurityConfig | None, what: str
                ) -> SecureHTTPServer:
    """A server for ``handler`` on ``addr`` (``host:port``; port 0 picks one), HTTPS under ``security``;
    ``what`` names it in the plain-HTTP warning."""
    security = security or SecurityConfig()
    host, _, port = addr.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class: type[SecureHTTPServer] = type("Server", (SecureHTTPServer,), {"address_family": family})
    bound = type(handler.__name__, (handler,), {"security": security})
    httpd = server_class((host, int(port)), bound)
    httpd.tls = security.server_context()
    httpd.peer_log = PeerLog(log)
    if httpd.tls is None and not is_loopback(host):
        log.warning("%s on %s is plain HTTP without authentication: whoever reaches it can change the node's "
                    "state and read what it serves; set [security] ssl-cert/ssl-key (and ssl-ca) or bind it "
                    "to 127.0.0.1", what, addr)
    return httpd


def serve_in_thread(httpd: SecureHTTPServer, name: str) -> threading.Thread:
    """Start ``httpd.serve_forever`` in a daemon thread."""
    thread = threading.Thread(target=httpd.serve_forever, name=name, daemon=True)
    thread.start()
    return thread
