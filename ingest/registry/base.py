"""The node registry: TiDB Binlog's key layout and Status JSON behind a small abstract class."""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from ingest.errors import RegistryError

ROOT = "/tidb-binlog/v1"
PUMP = "pumps"
DRAINER = "drainers"
KINDS = (PUMP, DRAINER)

ONLINE = "online"
PAUSING = "pausing"
PAUSED = "paused"
CLOSING = "closing"
OFFLINE = "offline"
STATES = (ONLINE, PAUSING, PAUSED, CLOSING, OFFLINE)

STATUS_ADDR_LABEL = "status-addr"  # binlake keeps its HTTP address in TiDB's unused label object


def node_key(kind: str, node_id: str) -> str:
    """Return the registry key of a node: ``/tidb-binlog/v1/<pumps|drainers>/<node_id>``."""
    if kind not in KINDS:
        raise RegistryError(f"unknown node kind {kind!r}; expected one of {KINDS}")
    return f"{ROOT}/{kind}/{node_id}"


def kind_prefix(kind: str) -> str:
    """Return the key prefix under which all nodes of ``kind`` live (with trailing slash)."""
    return node_key(kind, "")


@dataclass
class NodeStatus:
    """One node's registry value; JSON keys and order are TiDB Binlog's ``node.Status``."""

    node_id: str
    host: str
    state: str = ONLINE
    is_alive: bool = True
    score: int = 0
    labels: dict[str, str] | None = None
    max_commit_ts: int = 0
    update_ts: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys, kept on rewrite

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise RegistryError(f"node {self.node_id!r}: unknown state {self.state!r}; expected one of {STATES}")

    @property
    def status_addr(self) -> str:
        """The node's HTTP status address (binlake label), else its advertised host."""
        return (self.labels or {}).get(STATUS_ADDR_LABEL) or self.host

    def to_json(self) -> str:
        """Serialize as TiDB's Status JSON (``nodeId, host, state, isAlive, score, label, maxCommitTS, updateTS``)."""
        obj: dict[str, Any] = {
            "nodeId": self.node_id,
            "host": self.host,
            "state": self.state,
            "isAlive": self.is_alive,
            "score": self.score,
            "label": {"labels": dict(self.labels)} if self.labels is not None else None,
            "maxCommitTS": self.max_commit_ts,
            "updateTS": self.update_ts,
        }
        obj.update({k: v for k, v in self.extra.items() if k not in obj})
        return json.dumps(obj, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | bytes) -> NodeStatus:
        """Parse TiDB's Status JSON; raise ``RegistryError`` naming what is wrong."""
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise RegistryError(f"node status is not JSON: {exc}") from exc
        if not isinstance(obj, dict) or "nodeId" not in obj or "state" not in obj:
            raise RegistryError(f"node status lacks nodeId/state: {str(data)[:200]}")
        label = obj.get("label")
        labels = label.get("labels") or {} if isinstance(label, dict) else None
        if labels is not None and not isinstance(labels, dict):
            raise RegistryError(f"node {obj['nodeId']!r}: label.labels is not an object: {labels!r}")
        known = {"nodeId", "host", "state", "isAlive", "score", "label", "maxCommitTS", "updateTS"}
        try:
            return cls(
                node_id=str(obj["nodeId"]),
                host=str(obj.get("host", "")),
                state=str(obj["state"]),
                is_alive=bool(obj.get("isAlive", False)),
                score=int(obj.get("score") or 0),
                labels=labels,
                max_commit_ts=int(obj.get("maxCommitTS") or 0),
                update_ts=int(obj.get("updateTS") or 0),
                extra={k: v for k, v in obj.items() if k not in known},
            )
        except (TypeError, ValueError) as exc:
            raise RegistryError(f"node {obj['nodeId']!r}: malformed status field: {exc}") from exc


class Registry(ABC):
    """Where pumps and drainers announce themselves. Chosen by URI scheme with ``load_registry``."""

    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """Return the raw value at ``key``, or None."""

    @abstractmethod
    def put(self, key: str, value: bytes) -> None:
        """Store ``value`` at ``key`` durably before returning."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""

    @abstractmethod
    def get_prefix(self, prefix: str) -> dict[str, bytes]:
        """Return every key starting with ``prefix`` and its value."""

    def close(self) -> None:  # noqa: B027 - a deliberate no-op default, for backends without connections
        """Release connections; the default has none."""

    # Node-level helpers shared by every backend.

    def get_node(self, kind: str, node_id: str) -> NodeStatus | None:
        """Return the node's status, or None when it is not registered."""
        raw = self.get(node_key(kind, node_id))
        return NodeStatus.from_json(raw) if raw is not None else None

    def list_nodes(self, kind: str) -> list[NodeStatus]:
        """Return every registered node of ``kind``, sorted by node id."""
        nodes = [NodeStatus.from_json(v) for v in self.get_prefix(kind_prefix(kind)).values()]
        return sorted(nodes, key=lambda n: n.node_id)

    def put_node(self, kind: str, status: NodeStatus) -> None:
        """Write the node's status at its key."""
        self.put(node_key(kind, status.node_id), status.to_json().encode())
