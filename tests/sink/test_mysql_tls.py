"""Verified TLS to every MySQL-protocol database binlake talks to: the MySQL sink's downstream
(``[syncer.to.security]``: its writers, checkpoint, ``verify --against`` and ``restore --into``) and
the upstream's MySQL port (``[upstream.security]``), against a MariaDB that takes only TLS
(``require_secure_transport``). A certificate from another CA, one that does not name the host, and a
server without TLS are refused with a clear error; nothing falls back to unverified TLS."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binlake.drain import _upstream_snapshot
from binlake.drain_config import DrainerConfig
from ingest.config import ConfigError, load_config
from sink.mysql.plugin import SPEC, target_of
from sink.mysql.restore import MySQLRestore
from sink.mysql.target import MySQLTLSError
from tests.certs import Authority, tls_world
from tests.servers import MariaDBServer
from transform.history import SchemaHistory

pytestmark = pytest.mark.integration


class TLSMaria:
    """A MariaDB serving ``server`` certificates only over TLS, and the CAs of the test."""

    def __init__(self, root: Path) -> None:
        world = tls_world(root)
        self.ca, self.other_ca = world.ca, Authority(root, "stranger-ca")
        self.client = world.client
        server = world.ca.issue("maria", ip=False)           # names localhost only, not 127.0.0.1
        self.server = MariaDBServer(options=(f"--ssl-ca={self.ca.pem}", f"--ssl-cert={server.cert}",
                                             f"--ssl-key={server.key}", "--require-secure-transport=ON"))

    def options(self, host: str, **security: str) -> DrainerConfig:
        return load_config(DrainerConfig, None, {
            "syncer.db-type": "mysql", "syncer.to.host": host, "syncer.to.port": self.server.port,
            "syncer.to.user": self.server.USER, "syncer.to.password": self.server.PASSWORD,
            **{f"syncer.to.security.{k}": v for k, v in security.items()}})


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSMaria]:
    m = TLSMaria(tmp_path_factory.mktemp("tls-maria"))
    with m.server:
        yield m


def _cipher(conn: Any) -> str:
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        row = cur.fetchone()
    conn.close()
    return str(row[1])


def test_the_downstream_is_reached_over_verified_tls(tls: TLSMaria) -> None:
    assert _cipher(target_of(tls.options("localhost", **{"ssl-ca": str(tls.ca.pem)}).syncer).connect())
    with_cert = tls.options("localhost", **{"ssl-ca": str(tls.ca.pem), "ssl-cert": str(tls.client.ssl_cert),
                                            "ssl-key": str(tls.client.ssl_key)})
    assert _cipher(target_of(with_cert.syncer).connect())


def test_another_cas_certificate_is_refused(tls: TLSMaria) -> None:
    with pytest.raises(MySQLTLSError, match=r"verified TLS to binlake@localhost:\d+ failed \(\[syncer.to.security\]\)"
                                            r".*certificate verify failed"):
        target_of(tls.options("localhost", **{"ssl-ca": str(tls.other_ca.pem)}).syncer).connect()


def test_a_certificate_that_does_not_name_the_host_is_refused(tls: TLSMaria) -> None:
    with pytest.raises(MySQLTLSError, match=r"127\.0\.0\.1.*(Hostname mismatch|IP address mismatch)"):
        target_of(tls.options("127.0.0.1", **{"ssl-ca": str(tls.ca.pem)}).syncer).connect()


def test_a_server_without_tls_is_refused(tmp_path: Path, tls: TLSMaria, mariadb_server: MariaDBServer) -> None:
    options = load_config(DrainerConfig, None, {
        "syncer.db-type": "mysql", "syncer.to.host": "127.0.0.1", "syncer.to.port": mariadb_server.port,
        "syncer.to.security.ssl-ca": str(tls.ca.pem)})
    with pytest.raises(MySQLTLSError, match="SSL is required but the server doesn't support it"):
        target_of(options.syncer).connect()


def test_restore_targets_and_the_upstream_port_take_their_sections(tls: TLSMaria) -> None:
    good = tls.options("localhost", **{"ssl-ca": str(tls.ca.pem)})
    dsn = f"mysql://{tls.server.USER}:{tls.server.PASSWORD}@localhost:{tls.server.port}"
    restore = MySQLRestore.from_uri(dsn, good.syncer)   # type: ignore[arg-type]
    assert _cipher(restore.target.connect())
    bad = tls.options("localhost", **{"ssl-ca": str(tls.other_ca.pem)})
    with pytest.raises(MySQLTLSError, match="certificate verify failed"):
        MySQLRestore.from_uri(dsn, bad.syncer).target.connect()   # type: ignore[arg-type]
    upstream = load_config(DrainerConfig, None, {"upstream.dsn": dsn, "upstream.security.ssl-ca": str(tls.ca.pem)})
    with pytest.raises(Exception, match="tidb_snapshot"):    # connected over TLS; MariaDB is not TiDB
        _upstream_snapshot(upstream, 1, lambda db, t: False, SchemaHistory([]))
    upstream = load_config(DrainerConfig, None, {"upstream.dsn": dsn,
                                                 "upstream.security.ssl-ca": str(tls.other_ca.pem)})
    with pytest.raises(MySQLTLSError, match=r"\(\[upstream.security\]\).*certificate verify failed"):
        _upstream_snapshot(upstream, 0, lambda db, t: False, SchemaHistory([]))
    with pytest.raises(ConfigError, match=r"\[syncer.to.security\] ssl-ca: cannot read the file"):
        target_of(tls.options("localhost", **{"ssl-ca": "/nonexistent/ca.pem"}).syncer).connect()
    assert SPEC.settings(good).to.security.ssl_ca == str(tls.ca.pem)
