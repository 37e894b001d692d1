"""TLS for every binlake link, from TiDB Binlog's ``[security]`` keys (pump.toml and drainer.toml).

With ``ssl-cert`` and ``ssl-key`` set, a component's servers (gRPC and HTTP) speak TLS only and its
clients verify the peer against ``ssl-ca`` (mutual TLS: clients present the same certificate).
With ``ssl-ca`` also set, servers require a client certificate signed by it; ``cert-allowed-cn``
then restricts the clients to those whose certificate's Common Name is listed (TiDB's rule; an
empty list allows every certificate the CA signed). Key and certificate files are read when a
credential is built, so a rotated certificate takes effect at the next start; their contents and
paths never reach logs or reports.
"""
from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import grpc
from pydantic import Field

from ingest.config import ConfigError, Str, StringList, TomlModel

PEER_CN_KEY = "x509_common_name"   # grpc's auth-context property of the client certificate's CN


class SecurityConfig(TomlModel):
    """``[security]``: TLS files; mutual TLS when ``ssl-ca`` is set."""

    ssl_ca: Str = Field(default="", alias="ssl-ca")
    ssl_cert: Str = Field(default="", alias="ssl-cert")
    ssl_key: Str = Field(default="", alias="ssl-key")
    cert_allowed_cn: StringList = Field(default_factory=list, alias="cert-allowed-cn")

    @property
    def enabled(self) -> bool:
        """True when a certificate and key are configured."""
        return bool(self.ssl_cert and self.ssl_key)

    @property
    def verifies(self) -> bool:
        """True when a database client uses verified TLS (``ssl-ca`` or a client certificate is set)."""
        return bool(self.ssl_ca or self.enabled)

    def _read(self, key: str, path: str, where: str = "[security]") -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as e:
            raise ConfigError(f"{where} {key}: cannot read the file ({e.strerror})") from None

    def _files(self) -> tuple[bytes | None, bytes, bytes]:
        ca = self._read("ssl-ca", self.ssl_ca) if self.ssl_ca else None
        return ca, self._read("ssl-cert", self.ssl_cert), self._read("ssl-key", self.ssl_key)

    # -- gRPC ---------------------------------------------------------------------------------

    def grpc_server_credentials(self) -> grpc.ServerCredentials | None:
        """Server credentials (client certificates required when ``ssl-ca`` is set); None without TLS."""
        if not self.enabled:
            return None
        ca, cert, key = self._files()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)

    def grpc_channel_credentials(self) -> grpc.ChannelCredentials | None:
        """Client credentials presenting this certificate and trusting ``ssl-ca``; None without TLS."""
        if not self.enabled:
            return None
        ca, cert, key = self._files()
        return grpc.ssl_channel_credentials(ca, key, cert)

    def pd_credentials(self, pd_urls: str) -> grpc.ChannelCredentials | None:
        """Credentials for PD's TSO when ``pd_urls`` are ``https://`` (TiDB's cluster TLS); None for
        plain ``http://`` PDs."""
        if "https://" not in pd_urls.lower():
            return None
        if not self.enabled:
            raise ConfigError(f"pd-urls {pd_urls!r} are https: set [security] ssl-cert/ssl-key (and ssl-ca)")
        return self.grpc_channel_credentials()

    # -- HTTP ---------------------------------------------------------------------------------

    def server_context(self) -> ssl.SSLContext | None:
        """An HTTPS server context (client certificates required when ``ssl-ca`` is set); None without TLS."""
        if not self.enabled:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load_chain(ctx)
        if self.ssl_ca:
            self._load_ca(ctx)
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def client_context(self) -> ssl.SSLContext | None:
        """An HTTPS client context presenting this certificate (host names checked); None without TLS."""
        if not self.enabled:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.ssl_ca:
            self._load_ca(ctx)
        else:
            ctx.load_default_certs()
        self._load_chain(ctx)
        return ctx

    def h2_client_context(self) -> ssl.SSLContext | None:
        """A gRPC client context for ``ingest.http2``'s reader, from the files grpcio's channel
        credentials are built from: this certificate presented, the server's chain checked against
        ``ssl-ca`` (else the system's CAs) and its host name against the address dialled, ALPN ``h2``;
        None without TLS (as ``grpc_channel_credentials``)."""
        ctx = self.client_context()
        if ctx is not None:
            ctx.set_alpn_protocols(["h2"])
        return ctx

    def database_context(self, where: str) -> ssl.SSLContext:
        """A client context for a MySQL-protocol server (MySQL, MariaDB, TiDB): its certificate checked
        against ``ssl-ca`` (else the system's CAs) and its host name, this certificate presented when
        set; ``where`` names the section in errors (``[syncer.to.security]``)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)   # CERT_REQUIRED and check_hostname
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.ssl_ca:
            self._load_ca(ctx, where)
        else:
            ctx.load_default_certs()
        if self.enabled:
            self._load_chain(ctx, where)
        elif self.ssl_cert or self.ssl_key:
            raise ConfigError(f"{where}: ssl-cert and ssl-key go together; one of them is missing")
        return ctx

    def _load_chain(self, ctx: ssl.SSLContext, where: str = "[security]") -> None:
        for key, path in (("ssl-cert", self.ssl_cert), ("ssl-key", self.ssl_key)):
            self._read(key, path, where)   # a missing file is named by its key, not by ssl's errno
        try:
            ctx.load_cert_chain(self.ssl_cert, self.ssl_key)
        except ssl.SSLError as e:
            raise ConfigError(f"{where} ssl-cert/ssl-key: not a certificate and its key ({e.reason})") from None

    def _load_ca(self, ctx: ssl.SSLContext, where: str = "[security]") -> None:
        try:
            ctx.load_verify_locations(cadata=self._read("ssl-ca", self.ssl_ca, where).decode("ascii", "replace"))
        except ssl.SSLError as e:
            raise ConfigError(f"{where} ssl-ca: not a PEM certificate ({e.reason})") from None

    # -- who may call ----------------------------------------------------------------------------

    def allows(self, common_name: str | None) -> bool:
        """True when a client with this certificate CN may call (no ``cert-allowed-cn``: anyone TLS let in)."""
        return not self.cert_allowed_cn or (common_name is not None and common_name in self.cert_allowed_cn)


def http_peer_cn(sock: ssl.SSLSocket) -> str | None:
    """The Common Name of the client certificate an HTTPS connection presented (None: none)."""
    cert: Any = sock.getpeercert() or {}
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def grpc_peer_cn(auth: dict[str, list[bytes]]) -> str | None:
    """The client certificate's Common Name from a gRPC call's auth context (None: none)."""
    names = auth.get(PEER_CN_KEY) or []
    return names[0].decode("utf-8", "replace") if names else None
