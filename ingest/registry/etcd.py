"""EtcdRegistry: TiDB Binlog's registry keys in etcd v3 (PD's embedded etcd, or a plain etcd).

Talks to etcd's JSON gateway (``/v3/kv/*``) through ``etcd3gw``. Keys and values are exactly what
TiDB's pump client and binlogctl read, so a real TiDB cluster can share the registry. Requests go
to the endpoint that last answered; on a connection failure or timeout the next endpoint is tried,
and only when every endpoint failed a ``RegistryError`` naming them is raised.
"""
from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import requests
from etcd3gw import exceptions as etcd_exc
from etcd3gw.client import Etcd3Client

from ingest.config import ConfigError
from ingest.errors import RegistryError
from ingest.registry.base import Registry
from ingest.security import SecurityConfig

DEFAULT_PORT = 2379
DEFAULT_TIMEOUT = 3.0

T = TypeVar("T")

# Failures after which another endpoint may answer; anything else is the server's verdict.
_FAILOVER_ERRORS: tuple[type[BaseException], ...] = (
    etcd_exc.ConnectionFailedError, etcd_exc.ConnectionTimeoutError, requests.RequestException,
)


def parse_endpoints(spec: str) -> list[tuple[str, int]]:
    """Parse ``host:port[,host:port...]`` (each optionally ``http://``-prefixed, port default 2379).

    Raises ``ConfigError`` for an empty list, a bad port or an unknown scheme (``https`` endpoints
    are accepted; TLS itself comes from ``[security]``, see :class:`EtcdRegistry`).
    """
    endpoints: list[tuple[str, int]] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            scheme, item = item.split("://", 1)
            if scheme.lower() not in ("http", "https", "etcd"):
                raise ConfigError(f"etcd endpoint {scheme}://{item}: scheme {scheme!r} is not supported "
                                  "(use http://, https:// or etcd://)")
        item = item.split("/", 1)[0]
        if item.startswith("["):  # [ipv6]:port
            host, _, rest = item[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else ""
        elif item.count(":") == 1:
            host, port_text = item.split(":")
        else:
            host, port_text = item, ""
        if not host:
            raise ConfigError(f"etcd endpoint {item!r} has no host")
        try:
            port = int(port_text) if port_text else DEFAULT_PORT
        except ValueError:
            raise ConfigError(f"etcd endpoint {item!r}: port {port_text!r} is not a number") from None
        if not 0 < port < 65536:
            raise ConfigError(f"etcd endpoint {item!r}: port {port} out of range")
        endpoints.append((host, port))
    if not endpoints:
        raise ConfigError(f"no etcd endpoints in {spec!r}")
    return endpoints


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix`` (``\\0`` = no upper bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\0"
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _session(security: SecurityConfig | None) -> requests.Session:
    """A session presenting ``security``'s certificate and trusting its CA. The environment's CA
    bundle (``REQUESTS_CA_BUNDLE``) would override a session's own CA in requests, so the session
    does not read the environment (no proxies either: etcd is reached directly)."""
    session = requests.Session()
    if security is not None and security.enabled:
        session.trust_env = False
        session.verify = security.ssl_ca or True
        session.cert = (security.ssl_cert, security.ssl_key)
    return session


class EtcdRegistry(Registry):
    """A registry in etcd v3 at one or more ``(host, port)`` endpoints; each request times out after
    ``timeout`` s. With ``security`` enabled it speaks HTTPS, presenting ``ssl-cert`` and checking
    etcd's certificate against ``ssl-ca`` (etcd's ``--client-cert-auth``/``--trusted-ca-file``)."""

    def __init__(self, endpoints: Sequence[tuple[str, int]], timeout: float = DEFAULT_TIMEOUT,
                 security: SecurityConfig | None = None) -> None:
        if not endpoints:
            raise ConfigError("EtcdRegistry needs at least one endpoint")
        self.endpoints = [(h, int(p)) for h, p in endpoints]
        self.timeout = timeout
        self.scheme = "https" if security is not None and security.enabled else "http"
        self._clients = [Etcd3Client(host=h, port=p, api_path="/v3/", timeout=timeout, protocol=self.scheme,
                                     session=_session(security)) for h, p in self.endpoints]
        self._current = 0

    @classmethod
    def from_spec(cls, spec: str, timeout: float = DEFAULT_TIMEOUT, security: SecurityConfig | None = None
                  ) -> EtcdRegistry:
        """Build from ``host:port[,host:port...]`` (see ``parse_endpoints``); ``https://`` endpoints
        need ``security``."""
        if "https://" in spec.lower() and (security is None or not security.enabled):
            raise ConfigError(f"etcd endpoints {spec!r} are https: set [security] ssl-cert/ssl-key (and ssl-ca)")
        return cls(parse_endpoints(spec), timeout=timeout, security=security)

    @property
    def uri(self) -> str:
        """The ``etcd://`` URI of this registry."""
        return "etcd://" + ",".join(self._name(i) for i in range(len(self.endpoints)))

    def __repr__(self) -> str:
        return f"EtcdRegistry({self.uri!r})"

    def _name(self, index: int) -> str:
        host, port = self.endpoints[index]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def _call(self, what: str, fn: Callable[[Etcd3Client], T]) -> T:
        """Run ``fn`` on the current client, failing over through all endpoints once."""
        errors: list[str] = []
        n = len(self._clients)
        for attempt in range(n):
            index = (self._current + attempt) % n
            try:
                result = fn(self._clients[index])
            except _FAILOVER_ERRORS as exc:
                errors.append(f"{self._name(index)}: {type(exc).__name__}: {exc}"[:300])
                continue
            except etcd_exc.Etcd3Exception as exc:
                raise RegistryError(f"etcd {self._name(index)} refused {what}: {exc}") from exc
            except ValueError as exc:  # a non-etcd server answered with something that is not JSON
                raise RegistryError(f"etcd {self._name(index)} gave a malformed answer to {what}: {exc}") from exc
            self._current = index
            return result
        raise RegistryError(f"etcd unreachable for {what} at {', '.join(self._name(i) for i in range(n))} "
                            f"(timeout {self.timeout}s): " + "; ".join(errors))

    @staticmethod
    def _post(client: Etcd3Client, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        result: Any = client.post(client.get_url(path), json=payload)
        if not isinstance(result, dict):
            raise ValueError(f"expected a JSON object from {path}, got {type(result).__name__}")
        return result

    def _range(self, key: bytes, range_end: bytes | None, what: str) -> dict[str, bytes]:
        payload: dict[str, Any] = {"key": _b64(key)}
        if range_end is not None:
            payload["range_end"] = _b64(range_end)
            payload["sort_order"] = 1  # ASCEND
            payload["sort_target"] = 0  # KEY
        result = self._call(what, lambda c: self._post(c, "/kv/range", payload))
        out: dict[str, bytes] = {}
        for kv in result.get("kvs", []):
            raw_key = base64.b64decode(kv["key"])
            out[raw_key.decode("utf-8", "surrogateescape")] = base64.b64decode(kv.get("value", ""))
        return out

    # Registry API.

    def get(self, key: str) -> bytes | None:
        """Return the value at ``key`` or None."""
        return self._range(key.encode(), None, f"get {key}").get(key)

    def put(self, key: str, value: bytes) -> None:
        """Store ``value`` at ``key``; etcd has committed it (raft quorum, fsynced) when this returns."""
        payload = {"key": _b64(key.encode()), "value": _b64(bytes(value))}
        self._call(f"put {key}", lambda c: self._post(c, "/kv/put", payload))

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        payload = {"key": _b64(key.encode())}
        self._call(f"delete {key}", lambda c: self._post(c, "/kv/deleterange", payload))

    def get_prefix(self, prefix: str) -> dict[str, bytes]:
        """Return every key starting with ``prefix`` and its value, in key order."""
        start = prefix.encode() or b"\0"
        return self._range(start, _prefix_end(prefix.encode()), f"get prefix {prefix}")

    def close(self) -> None:
        """Close the HTTP sessions."""
        for client in self._clients:
            client.session.close()

    def __enter__(self) -> EtcdRegistry:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
