"""The node registry, chosen by URI scheme with ``load_registry``.

- ``file:///abs/path/registry.json`` or ``file://relative/path.json`` → ``FileRegistry`` (one machine)
- ``etcd://host:port[,host:port...]`` or ``http://host:port[,...]`` (a pd-urls value) → ``EtcdRegistry``
"""
from __future__ import annotations

from ingest.config import ConfigError
from ingest.registry.base import (
    CLOSING,
    DRAINER,
    KINDS,
    OFFLINE,
    ONLINE,
    PAUSED,
    PAUSING,
    PUMP,
    ROOT,
    STATES,
    STATUS_ADDR_LABEL,
    NodeStatus,
    Registry,
    kind_prefix,
    node_key,
)
from ingest.registry.etcd import EtcdRegistry
from ingest.registry.file import FileRegistry
from ingest.security import SecurityConfig

SCHEMES = ("file", "etcd", "http", "https")

__all__ = [
    "CLOSING", "DRAINER", "KINDS", "OFFLINE", "ONLINE", "PAUSED", "PAUSING", "PUMP", "ROOT", "STATES",
    "STATUS_ADDR_LABEL", "SCHEMES", "EtcdRegistry", "FileRegistry", "NodeStatus", "Registry",
    "kind_prefix", "load_registry", "node_key",
]


def load_registry(uri: str, timeout: float = 3.0, security: SecurityConfig | None = None) -> Registry:
    """Open the registry named by ``uri``; ``ConfigError`` names an unknown scheme and the accepted ones.

    ``timeout`` bounds each etcd request (seconds); ``security`` makes etcd's connection TLS
    (``https://`` endpoints require it). The file registry ignores both.
    """
    uri = uri.strip()
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise ConfigError(f"registry URI {uri!r} has no scheme; expected one of "
                          f"{', '.join(s + '://' for s in SCHEMES)}")
    scheme = scheme.lower()
    if scheme == "file":
        if not rest:
            raise ConfigError(f"registry URI {uri!r} names no file")
        return FileRegistry(rest)
    if scheme == "etcd":
        return EtcdRegistry.from_spec(rest, timeout=timeout, security=security)
    if scheme in ("http", "https"):   # pd-urls style, maybe a scheme per entry
        return EtcdRegistry.from_spec(uri, timeout=timeout, security=security)
    raise ConfigError(f"registry URI {uri!r}: unknown scheme {scheme!r}; expected one of "
                      f"{', '.join(s + '://' for s in SCHEMES)}")
