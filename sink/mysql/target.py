"""Where the MySQL sink writes: host, port, user, password and session settings of a MySQL,
MariaDB or TiDB server, from ``[syncer.to]`` (TiDB Binlog's keys) or a ``mysql://`` DSN."""
from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ingest.security import SecurityConfig
from sink.errors import SinkError
from sink.redact import redact_uri


class MySQLTargetError(SinkError):
    """The destination is malformed or cannot be reached (the message never holds the password).
    Transient: mostly a connection or a checkpoint-table read that failed."""

    transient = True


# can't connect, server has gone away, lost connection during a query: the server dropped the session
CONNECTION_LOST_CODES = frozenset({2003, 2006, 2013})


def connection_lost(e: BaseException) -> bool:
    """True for an error that a new connection may not have: the destination refused one, or dropped
    the session (a restart). A :class:`MySQLTargetError` counts by the pymysql error it wraps."""
    import pymysql

    if isinstance(e, MySQLTLSError):
        return False
    if isinstance(e, MySQLTargetError) and e.__cause__ is not None:
        e = e.__cause__
    if isinstance(e, pymysql.InterfaceError):   # "(0, '')": a closed connection used again
        return True
    code = e.args[0] if e.args and isinstance(e.args[0], int) else None
    return isinstance(e, pymysql.Error) and code in CONNECTION_LOST_CODES


class MySQLTLSError(MySQLTargetError):
    """Verified TLS to the destination failed: its certificate is not signed by the configured CA,
    does not name the host, or it does not speak TLS (terminal: retrying changes nothing)."""

    transient = False


@dataclass(frozen=True)
class TLSFiles:
    """Verified TLS for a MySQL-protocol connection: ``[…security]``'s files, and that section's name."""

    ssl_ca: str = ""
    ssl_cert: str = ""
    ssl_key: str = ""
    where: str = "[syncer.to.security]"

    @classmethod
    def of(cls, security: SecurityConfig, where: str) -> TLSFiles | None:
        """The files of ``security`` when it asks for verified TLS (a CA or a client certificate), else None."""
        if not security.verifies:
            return None
        return cls(security.ssl_ca, security.ssl_cert, security.ssl_key, where)


@dataclass(frozen=True)
class MySQLTarget:
    """A MySQL-protocol server and the session variables every connection sets (``params``)."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    params: dict[str, str] = field(default_factory=dict)
    read_timeout: float = 60.0
    tls: TLSFiles | None = None   # verified TLS; None: TLS when the server offers it, certificate unchecked

    @classmethod
    def from_dsn(cls, dsn: str, **defaults: Any) -> MySQLTarget:
        """``mysql://USER[:PASS]@HOST[:PORT][?var=value…]`` (query items become session variables)."""
        parts = urlsplit(dsn)
        if parts.scheme not in ("mysql", "tidb") or not parts.hostname:
            raise MySQLTargetError(f"not a mysql://USER:PASS@HOST:PORT DSN: {redact_uri(dsn)!r}")
        try:
            port = parts.port or 3306
        except ValueError as e:
            raise MySQLTargetError(f"bad port in {redact_uri(dsn)!r}: {e}") from None
        params = dict(defaults.pop("params", {}))
        params.update(parse_qsl(parts.query))
        return cls(host=parts.hostname, port=port, user=unquote(parts.username or "root"),
                   password=unquote(parts.password or ""), params=params, **defaults)

    def describe(self) -> str:
        """``user@host:port`` (no password): how logs and reports name the destination."""
        return f"{self.user}@{self.host}:{self.port}"

    def connect(self, database: str | None = None) -> Any:
        """A new pymysql connection (autocommit off, utf8mb4, UTC session time zone, ``params`` set)."""
        import pymysql

        tls = {"ssl": _verified_tls(self.tls)} if self.tls else {}
        try:
            conn = _connection_class()(host=self.host, port=self.port, user=self.user, password=self.password,
                                   database=database, charset="utf8mb4", autocommit=False,
                                   read_timeout=self.read_timeout, write_timeout=self.read_timeout,
                                   connect_timeout=10, init_command="SET time_zone = '+00:00'", **tls)
        except pymysql.Error as e:
            if self.tls and ("SSL" in str(e) or "certificate" in str(e).lower()):
                raise MySQLTLSError(f"verified TLS to {self.describe()} failed ({self.tls.where}): {e}") from None
            raise MySQLTargetError(f"cannot connect to {self.describe()}: {e}") from e
        if self.params:
            with conn.cursor() as cur:
                for name, value in self.params.items():
                    cur.execute(f"SET SESSION {_ident(name)} = %s", (value,))
        return conn


@functools.cache
def _preferred_tls() -> ssl.SSLContext:
    """The context of PyMySQL's PREFERRED mode (TLS when the server offers it, certificates not
    checked), built once per process."""
    ctx = ssl.create_default_context()
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


@functools.cache
def _verified_tls(files: TLSFiles) -> ssl.SSLContext:
    """The verifying context of ``files`` (built once per process: see :func:`_connection_class`)."""
    security = SecurityConfig(ssl_ca=files.ssl_ca, ssl_cert=files.ssl_cert, ssl_key=files.ssl_key)
    return security.database_context(files.where)


@functools.cache
def _connection_class() -> type:
    """PyMySQL's connection sharing one PREFERRED-mode TLS context: PyMySQL 1.2 builds a new one per
    connection (~30 ms of CPU loading the system CA store under the GIL), and a run opens a worker
    connection per loader worker (0.5 s per range with 16 workers)."""
    from pymysql.connections import Connection

    class SharedTLSConnection(Connection):  # type: ignore[misc]
        def _create_ssl_ctx(self, sslp: Any) -> Any:
            return _preferred_tls() if isinstance(sslp, dict) and not sslp else super()._create_ssl_ctx(sslp)

    return SharedTLSConnection


def _ident(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise MySQLTargetError(f"session variable {name!r} is not a plain name")
    return name
