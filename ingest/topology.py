"""The TiDB servers of a cluster as they announce themselves in PD's etcd: each writes
``/topology/tidb/<ip:port>/info`` (JSON with ``ip`` and ``status_port``) and keeps
``/topology/tidb/<ip:port>/ttl`` alive under a lease while it runs. What binlake asks them for (the
DDL history, MVCC lookups) goes to a live one's status port, so ``status-url`` need not be configured
where the pumps' registry is PD's etcd."""
from __future__ import annotations

import json

from ingest.registry.base import Registry

TOPOLOGY_PREFIX = "/topology/tidb/"


def tidb_status_urls(registry: Registry, https: bool = False) -> list[str]:
    """The status URLs of the TiDB servers alive in ``registry`` (PD's etcd), sorted; ``https``: the
    cluster runs TLS. A file registry, or one with no live TiDB, gives none; :class:`RegistryError`
    when the registry does not answer."""
    entries = registry.get_prefix(TOPOLOGY_PREFIX)
    out = []
    for key, value in entries.items():
        if not key.endswith("/info") or key.removesuffix("info") + "ttl" not in entries:
            continue
        try:
            info = json.loads(value)
            ip, port = str(info["ip"]), int(info["status_port"])
        except (ValueError, KeyError, TypeError):
            continue
        host = f"[{ip}]" if ":" in ip else ip
        out.append(f"{'https' if https else 'http'}://{host}:{port}")
    return sorted(out)
