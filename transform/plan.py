"""Plan one Drainer run: which pumps to read and the commit_ts range ``(from_ts, to_ts]``.

``to_ts`` defaults to the minimum watermark over every pump that is not offline; a requested
``to_ts`` above it is refused (never a silent partial batch), and so is a ``from_ts`` below a
pump's GC point (its records may be gone).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from ingest.registry import load_registry
from ingest.registry.base import OFFLINE, PUMP
from ingest.scan_client import ScanClient
from ingest.security import SecurityConfig
from transform.errors import TransformError


class PlanError(TransformError):
    """The run cannot be planned (no pumps, unreachable pump, range above the watermark, …)."""


class PumpUnreachableError(PlanError):
    """A pump that is not offline did not answer (the upstream cannot be reached)."""


@dataclass(frozen=True)
class PumpTarget:
    """One pump the run reads: its node id, gRPC address and reported watermark."""

    node_id: str
    addr: str
    state: str
    watermark: int
    gc_ts: int


@dataclass(frozen=True)
class Plan:
    """The pumps and the range of one run."""

    cluster_id: int
    from_ts: int
    to_ts: int
    pumps: tuple[PumpTarget, ...]
    notes: tuple[str, ...] = field(default=())
    security: SecurityConfig = field(default_factory=SecurityConfig, repr=False)   # TLS towards the pumps

    @property
    def empty(self) -> bool:
        """True when there is nothing to read (``to_ts <= from_ts``)."""
        return self.to_ts <= self.from_ts

    def describe(self) -> str:
        """Human-readable plan, one line per pump."""
        lines = [f"range (from_ts, to_ts] = ({self.from_ts}, {self.to_ts}]  cluster {self.cluster_id}"]
        for p in self.pumps:
            lines.append(f"  pump {p.node_id} {p.addr} state={p.state} watermark={p.watermark} gc_ts={p.gc_ts}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def make_plan(registry_uri: str, cluster_id: int, from_ts: int, to_ts: int | None = None,
              timeout: float = 10.0, security: SecurityConfig | None = None) -> Plan:
    """Ask every non-offline pump of the registry for its watermark and fix the run's range
    (over TLS with ``security``'s certificate when it is set).

    Raises :class:`PlanError` when no pump is registered, a live pump does not answer, the
    requested ``to_ts`` is above the minimum watermark, or ``from_ts`` is below a pump's GC ts.
    """
    security = security or SecurityConfig()
    registry = load_registry(registry_uri, security=security)
    try:
        every = registry.list_nodes(PUMP)
    finally:
        registry.close()
    nodes = [n for n in every if n.state != OFFLINE]
    gone = [n for n in every if n.state == OFFLINE and n.max_commit_ts > from_ts]
    if not nodes:
        raise PlanError(f"no pump that is not offline is registered in {registry_uri}")
    credentials = security.grpc_channel_credentials()
    targets = []
    for node in sorted(nodes, key=lambda n: n.node_id):
        try:
            with ScanClient(node.host, cluster_id, timeout=timeout, credentials=credentials) as client:
                wm = client.watermark()
        except grpc.RpcError as e:
            raise PumpUnreachableError(f"pump {node.node_id} at {node.host} (state {node.state}) did not answer its "
                            f"watermark: {e.code().name} {e.details()}; a crashed pump must be restarted or "
                            f"marked offline (binlake ctl offline-pump) before a drain can pass it") from e
        targets.append(PumpTarget(node.node_id, node.host, wm.state or node.state, wm.max_commit_ts, wm.gc_ts))
    floor = min(t.watermark for t in targets)
    notes = []
    if to_ts is None:
        to_ts = floor
    elif to_ts > floor:
        slow = min(targets, key=lambda t: t.watermark)
        raise PlanError(f"--to-ts {to_ts} is above the pumps' watermark {floor} (pump {slow.node_id}); "
                        f"binlogs up to it may still arrive; wait or choose a smaller --to-ts")
    for t in targets:
        if t.gc_ts and from_ts < t.gc_ts and to_ts > from_ts:
            raise PlanError(f"from_ts {from_ts} is below pump {t.node_id}'s GC point {t.gc_ts}: "
                            f"records in between may have been purged")
    if to_ts <= from_ts:
        notes.append("nothing to do: the watermark has not passed the checkpoint")
    for n in gone:
        notes.append(f"WARNING: pump {n.node_id} is offline with binlogs up to {n.max_commit_ts}, above from_ts "
                     f"{from_ts}; they are not read (a pump waits for registered drainers before going offline)")
    return Plan(cluster_id, from_ts, to_ts, tuple(targets), tuple(notes), security)
