"""Certificates for TLS tests, made with the ``cryptography`` package: a CA, a second CA nobody
trusts, a server certificate for 127.0.0.1/localhost and client certificates with chosen CNs."""
from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ingest.security import SecurityConfig


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_file(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path


class Authority:
    """A CA in ``root`` that issues certificates into it."""

    def __init__(self, root: Path, name: str) -> None:
        self.root = root
        self.name = name
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=2))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.pem = root / f"{name}.pem"
        self.pem.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, cn: str, ip: bool = True) -> Pair:
        """A certificate for ``cn``, valid for localhost and (``ip``) 127.0.0.1, as server and as client."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        names: list[x509.GeneralName] = [x509.DNSName("localhost")]
        if ip:
            names.insert(0, x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
        cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(self.cert.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=2))
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(self.key, hashes.SHA256()))
        path = self.root / f"{self.name}-{cn}.pem"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return Pair(path, _key_file(self.root / f"{self.name}-{cn}.key", key))


@dataclass(frozen=True)
class TLSWorld:
    """Everything a TLS matrix needs: the servers' security, and clients that should and should not pass."""

    ca: Authority
    server: SecurityConfig          # the servers' [security]: mutual TLS, cert-allowed-cn = ["client"]
    client: SecurityConfig          # a client certificate the servers accept
    intruder: SecurityConfig        # signed by the right CA, CN not allowed
    stranger: SecurityConfig        # CN allowed, signed by a CA the servers do not trust
    no_cert: SecurityConfig         # trusts the CA, presents nothing (only ssl-ca)


def tls_world(root: Path) -> TLSWorld:
    """Issue the certificates of a :class:`TLSWorld` into ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    ca, other = Authority(root, "ca"), Authority(root, "other-ca")
    server, client, intruder, stranger = ca.issue("server"), ca.issue("client"), ca.issue("intruder"), other.issue(
        "client")

    def sec(pair: Pair, trust: Authority = ca, allowed: list[str] | None = None) -> SecurityConfig:
        return SecurityConfig(ssl_ca=str(trust.pem), ssl_cert=str(pair.cert), ssl_key=str(pair.key),
                              cert_allowed_cn=allowed or [])

    return TLSWorld(ca, sec(server, allowed=["client", "server"]), sec(client), sec(intruder), sec(stranger, ca),
                    SecurityConfig(ssl_ca=str(ca.pem)))


def security_toml(sec: SecurityConfig) -> str:
    """``sec`` as a ``[security]`` TOML table."""
    allowed = ", ".join(f'"{cn}"' for cn in sec.cert_allowed_cn)
    return (f'[security]\nssl-ca = "{sec.ssl_ca}"\nssl-cert = "{sec.ssl_cert}"\nssl-key = "{sec.ssl_key}"\n'
            f"cert-allowed-cn = [{allowed}]\n")
