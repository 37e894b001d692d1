"""A node's presence in the registry: its Status JSON under TiDB Binlog's key, written the same way
by the pump (``ingest.pump.node``), the following drainer (``binlake.follow``) and the batch drainer
(``binlake.drain.register_drainer``).

What is written is what TiDB's ``binlogctl``, TiDB's pump client and a real TiDB read: TiDB Binlog's
JSON keys and states (``ingest.registry.base.NodeStatus``), ``maxCommitTS`` (a pump's watermark, a
drainer's checkpoint) and ``updateTS``, a TSO (the pump's from PD, the drainer's from
``binlake.tso_clock``): the caller gives both with every write.
"""
from __future__ import annotations

import threading

from ingest.registry.base import OFFLINE, ONLINE, NodeStatus, Registry


class Presence:
    """One node's registry entry: ``put`` writes it in a state, ``heartbeat`` rewrites it in the state
    last written, ``offline`` leaves it offline.

    ``labels`` is TiDB's label object (binlake keeps the HTTP status address there; None writes
    ``"label": null``). ``isAlive`` is written true while ``online``, and in every state when
    ``always_alive`` (binlake's pumps have always written it so). ``state`` is the state the registry
    holds for this node as far as this process knows (``OFFLINE`` until told or written); it changes
    only once the registry holds the new one, so whoever reads it can already find it in the
    registry. Writes are serialised, so a heartbeat never rewrites a state that a concurrent ``put``
    replaced.
    """

    def __init__(self, registry: Registry, kind: str, node_id: str, host: str, *,
                 labels: dict[str, str] | None = None, always_alive: bool = False, state: str = OFFLINE) -> None:
        self.registry = registry
        self.kind = kind
        self.node_id = node_id
        self.host = host
        self.labels = labels
        self.always_alive = always_alive
        self.state = state
        self._lock = threading.Lock()

    def status(self, state: str, max_commit_ts: int, update_ts: int) -> NodeStatus:
        """The entry this node writes in ``state`` (not written)."""
        return NodeStatus(node_id=self.node_id, host=self.host, state=state,
                          is_alive=self.always_alive or state == ONLINE,
                          labels=dict(self.labels) if self.labels is not None else None,
                          max_commit_ts=max_commit_ts, update_ts=update_ts)

    def put(self, state: str, max_commit_ts: int, update_ts: int) -> NodeStatus:
        """Write the entry in ``state``, then take the state on; returns what was written."""
        with self._lock:
            return self._put(state, max_commit_ts, update_ts)

    def heartbeat(self, max_commit_ts: int, update_ts: int) -> NodeStatus:
        """Rewrite the entry in the current state with fresh values."""
        with self._lock:
            return self._put(self.state, max_commit_ts, update_ts)

    def offline(self, max_commit_ts: int, update_ts: int) -> NodeStatus:
        """Leave the entry ``offline``."""
        return self.put(OFFLINE, max_commit_ts, update_ts)

    def registered(self) -> NodeStatus | None:
        """What the registry holds for this node now (None: not registered)."""
        return self.registry.get_node(self.kind, self.node_id)

    def _put(self, state: str, max_commit_ts: int, update_ts: int) -> NodeStatus:
        status = self.status(state, max_commit_ts, update_ts)
        self.registry.put_node(self.kind, status)
        self.state = state
        return status
