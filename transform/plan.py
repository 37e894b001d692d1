"""Plan one Drainer run: which pumps to read, how, and the commit_ts range ``(from_ts, to_ts]``.

Each pump is read through the protocol it serves, decided once per run from its answer: binlake's
``binlake.v1.PumpScan`` (its ``Watermark``), else TiDB's ``/binlog.Pump/PullBinlogs`` (TiDB
Binlog's Go pump, which has no Watermark RPC). A PullBinlogs pump's watermark is the larger of the
``maxCommitTS`` its registry entry carries (its sorter's watermark as of its last heartbeat; a
pump waiting to go offline stops updating it) and the last commit ts its stream sends from there
until it falls silent (at most ``CATCH_UP_BUDGET`` seconds): the stream is in commit order and
never passes the pump's watermark, so no commit at or below either can still arrive there (TiDB
Binlog's drainer merges by what each pump has sent, the same bound).

``to_ts`` defaults to the minimum watermark over every pump that is not offline; a requested
``to_ts`` above it is refused (never a silent partial batch), and so is a ``from_ts`` below a
pump's GC point (its records may be gone): Watermark tells a PumpScan pump's; TiDB Binlog's pump
publishes its own as the ``binlog_pump_storage_gc_ts`` gauge (physical ms) of the ``/metrics``
it serves on its gRPC address. A pump that tells neither gets a note: its GC is not checked.
"""
from __future__ import annotations

import http.client
import re
import ssl
import urllib.request
from dataclasses import dataclass, field

import grpc

from ingest.pull_client import PullClient, PullStreamError
from ingest.registry import load_registry
from ingest.registry.base import OFFLINE, PUMP, NodeStatus
from ingest.scan_client import ScanClient
from ingest.security import SecurityConfig
from transform.errors import TransformError
from transform.pull import PULL_BINLOGS, PUMP_SCAN


class PlanError(TransformError):
    """The run cannot be planned (no pumps, unreachable pump, range above the watermark, …).
    Transient: most causes pass; ``from_ts`` below a pump's GC point does not."""

    transient = True


class PumpUnreachableError(PlanError):
    """A pump that is not offline did not answer (the upstream cannot be reached)."""

    transient = True


@dataclass(frozen=True)
class PumpTarget:
    """One pump the run reads: its node id, gRPC address, reported watermark and GC ts (0: not
    told), and the protocol it is read through (``PUMP_SCAN`` or ``PULL_BINLOGS``)."""

    node_id: str
    addr: str
    state: str
    watermark: int
    gc_ts: int
    protocol: str = PUMP_SCAN


@dataclass(frozen=True)
class Plan:
    """The pumps and the range of one run."""

    cluster_id: int
    from_ts: int
    to_ts: int
    pumps: tuple[PumpTarget, ...]
    notes: tuple[str, ...] = field(default=())
    security: SecurityConfig = field(default_factory=SecurityConfig, repr=False)   # TLS towards the pumps
    compressor: str = ""   # PullBinlogs streams: "" or "gzip" (TiDB Binlog's drainer ``compressor``)
    # TiDB's status API, which the decode stage asks where a row a partition job ran across went
    # (``transform.rowchanges``; "": not asked)
    upstream: str = ""

    @property
    def empty(self) -> bool:
        """True when there is nothing to read (``to_ts <= from_ts``)."""
        return self.to_ts <= self.from_ts

    def describe(self) -> str:
        """Human-readable plan, one line per pump."""
        lines = [f"range (from_ts, to_ts] = ({self.from_ts}, {self.to_ts}]  cluster {self.cluster_id}"]
        for p in self.pumps:
            lines.append(f"  pump {p.node_id} {p.addr} state={p.state} watermark={p.watermark} gc_ts={p.gc_ts} "
                         f"via {p.protocol}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def make_plan(registry_uri: str, cluster_id: int, from_ts: int, to_ts: int | None = None,
              timeout: float = 10.0, security: SecurityConfig | None = None, compressor: str = "") -> Plan:
    """Ask every non-offline pump of the registry for its watermark and fix the run's range
    (over TLS with ``security``'s certificate when it is set).

    Raises :class:`PlanError` when no pump is registered, a live pump serves neither protocol or
    belongs to another cluster, the requested ``to_ts`` is above the minimum watermark, or
    ``from_ts`` is below a pump's GC ts; :class:`PumpUnreachableError` when a live pump does not answer.
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
    grpc_tls, http_tls = security.h2_client_context(), security.client_context()
    targets = [_target(node, cluster_id, timeout, grpc_tls, compressor, http_tls)
               for node in sorted(nodes, key=lambda n: n.node_id)]
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
    notes.extend(f"pump {t.node_id} does not tell its GC point: a from_ts older than its gc retention is not "
                 f"detected (keep runs within it)" for t in targets if t.protocol == PULL_BINLOGS and not t.gc_ts)
    for n in gone:
        notes.append(f"WARNING: pump {n.node_id} is offline with binlogs up to {n.max_commit_ts}, above from_ts "
                     f"{from_ts}; they are not read (a pump waits for registered drainers before going offline)")
    return Plan(cluster_id, from_ts, to_ts, tuple(targets), tuple(notes), security, compressor)


CATCH_UP_QUIET = 0.5    # seconds of silence that end a PullBinlogs pump's watermark read
CATCH_UP_BUDGET = 2.0   # seconds the read may take at most


def _target(node: NodeStatus, cluster_id: int, timeout: float, grpc_tls: ssl.SSLContext | None,
            compressor: str, tls: ssl.SSLContext | None) -> PumpTarget:
    """How to read ``node`` and its watermark: PumpScan's Watermark, else the PullBinlogs probe
    (``grpc_tls``: TLS of the gRPC calls, ``tls``: of the HTTP API)."""
    where = f"pump {node.node_id} at {node.host} (state {node.state})"
    try:
        with ScanClient(node.host, cluster_id, timeout=timeout, tls=grpc_tls) as client:
            wm = client.watermark()
        return PumpTarget(node.node_id, node.host, wm.state or node.state, wm.max_commit_ts, wm.gc_ts)
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.UNIMPLEMENTED:
            raise _answer_error(where, "its watermark", e) from e
        scan_error = f"{e.code().name} {e.details()}"
    # no PumpScan (TiDB Binlog's pump): its registry watermark, confirmed by its PullBinlogs stream
    puller = PullClient(node.host, cluster_id, idle_timeout=timeout, tls=grpc_tls, compressor=compressor)
    try:
        first = puller.first(max(node.max_commit_ts - 1, 0))
        # the registry entry lags a heartbeat, and stops moving while the pump waits to go offline: read
        # on to what the pump has emitted by now (it sends what it holds at once, new binlogs within 0.1 s)
        caught_up = PullClient(node.host, cluster_id, idle_timeout=CATCH_UP_QUIET, tls=grpc_tls,
                               compressor=compressor).latest(first.commit_ts, CATCH_UP_BUDGET)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNIMPLEMENTED:
            raise PlanError(f"{where} serves neither binlake.v1.PumpScan ({scan_error}) nor TiDB's "
                            f"binlog.Pump/PullBinlogs ({e.code().name} {e.details()}): is {node.host} a pump's "
                            f"gRPC address?") from e
        raise _answer_error(where, "its PullBinlogs stream", e) from e
    except PullStreamError as e:
        raise PlanError(f"{where}: {e}") from e
    return PumpTarget(node.node_id, node.host, node.state, max(node.max_commit_ts, caught_up),
                      published_gc_ts(node.host, tls), PULL_BINLOGS)


_GC_GAUGE = re.compile(rb"^binlog_pump_storage_gc_ts(?:\{[^}]*\})?\s+(\S+)", re.MULTILINE)


def published_gc_ts(addr: str, tls: ssl.SSLContext | None, timeout: float = 3.0) -> int:
    """The GC ts TiDB Binlog's pump at ``addr`` publishes on its ``/metrics`` (0: none published)."""
    url = f"{'https' if tls else 'http'}://{addr}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=tls) as resp:
            found = _GC_GAUGE.search(resp.read())
    except (OSError, http.client.HTTPException, ValueError):   # not an HTTP/1.1 server: none published
        return 0
    if found is None:
        return 0
    try:
        physical_ms = int(float(found.group(1)))
    except ValueError:
        return 0
    return physical_ms << 18 if physical_ms > 0 else 0


def _answer_error(where: str, what: str, e: grpc.RpcError) -> PlanError:
    """The error of a pump that answered ``what`` with ``e``: another cluster's pump, an unreachable
    one (restart it or mark it offline), or any other refusal as the pump worded it."""
    details = e.details() or ""
    if "cluster ID are mismatch" in details or "cluster id" in details.lower():
        return PlanError(f"{where} belongs to another cluster: {details} (the first id is the one this drain "
                         f"asked for; check pd-urls and the registry)")
    if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return PumpUnreachableError(f"{where} did not answer {what}: {e.code().name} {details}; a crashed pump "
                                    f"must be restarted or marked offline (binlake ctl offline-pump) before a "
                                    f"drain can pass it")
    return PlanError(f"{where} refused {what}: {e.code().name} {details}")
