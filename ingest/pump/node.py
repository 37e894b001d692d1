"""A pump's presence in the registry: node id, state, heartbeat, and notifying drainers."""
from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from ingest.errors import IngestError
from ingest.registry.base import DRAINER, OFFLINE, ONLINE, PUMP, STATUS_ADDR_LABEL, NodeStatus, Registry
from ingest.registry.presence import Presence
from schemas import cistern_pb2, cistern_pb2_grpc

log = logging.getLogger(__name__)

NOTIFY_TIMEOUT = 10.0


def resolve_node_id(data_dir: Path, configured: str, addr: str) -> str:
    """TiDB's rule: the ``.node`` file wins, else the configured id, else ``hostname:port``; persisted."""
    node_file = data_dir / ".node"
    if node_file.exists():
        existing = node_file.read_text().strip()
        if existing:
            if configured and configured != existing:
                log.warning("node-id %r ignored: data dir %s belongs to node %r", configured, data_dir, existing)
            return existing
    node_id = configured or f"{socket.gethostname()}:{addr.rsplit(':', 1)[-1]}"
    node_file.write_text(node_id)
    node_file.chmod(0o600)
    return node_id


class NotifyError(IngestError):
    """An online drainer could not be notified."""

    transient = True


class Node:
    """This pump's registry entry (``ingest.registry.presence``), its state, and notifying drainers."""

    def __init__(self, registry: Registry, node_id: str, host: str, status_addr: str,
                 max_commit_ts: Callable[[], int], update_ts: Callable[[], int]) -> None:
        self.registry = registry
        self.node_id = node_id
        self.host = host
        self.status_addr = status_addr
        self._max_commit_ts = max_commit_ts
        self._update_ts = update_ts
        previous = registry.get_node(PUMP, node_id)
        self.previous_state = previous.state if previous is not None else OFFLINE
        self.presence = Presence(registry, PUMP, node_id, host, labels={STATUS_ADDR_LABEL: status_addr},
                                 always_alive=True, state=self.previous_state)

    @property
    def state(self) -> str:
        """The pump's state, once the registry holds it."""
        return self.presence.state

    def status(self, state: str | None = None) -> NodeStatus:
        """The Status this pump publishes now (with ``state`` instead of the current one, if given)."""
        return self.presence.status(state or self.state, self._max_commit_ts(), self._update_ts())

    def set_state(self, state: str) -> None:
        """Write the new state to the registry, then take it on: whoever sees it in ``/status`` (or
        anywhere in this process) can already find it in the registry."""
        self.presence.put(state, self._max_commit_ts(), self._update_ts())
        log.info("pump %s is %s", self.node_id, state)

    def heartbeat(self) -> None:
        """Rewrite the Status with the current watermark."""
        self.presence.heartbeat(self._max_commit_ts(), self._update_ts())

    def notify_drainers(self, timeout: float = NOTIFY_TIMEOUT,
                        credentials: grpc.ChannelCredentials | None = None) -> None:
        """Call ``/binlog.Cistern/Notify`` on every online drainer (over TLS with ``credentials``);
        raise ``NotifyError`` if one fails."""
        deadline = time.monotonic() + timeout
        for drainer in self.registry.list_nodes(DRAINER):
            if drainer.state != ONLINE:
                continue
            last: Exception | None = None
            delay = 1.0
            for _ in range(3):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    with (grpc.secure_channel(drainer.host, credentials) if credentials
                          else grpc.insecure_channel(drainer.host)) as channel:
                        cistern_pb2_grpc.CisternStub(channel).Notify(cistern_pb2.NotifyReq(),
                                                                      timeout=min(remaining, 3.0))
                    last = None
                    break
                except grpc.RpcError as exc:
                    last = exc
                    time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
                    delay *= 2
            if last is not None:
                details = getattr(last, "details", None)  # grpc's errors describe themselves with details()
                raise NotifyError(f"fail to notify all living drainer: drainer {drainer.node_id} at "
                                  f"{drainer.host}: {last if details is None else details()}")
            log.info("notified drainer %s at %s", drainer.node_id, drainer.host)
