"""``binlake drain --follow``: one warm Spark session running back-to-back small ranges, present in
the registry as an *online* drainer the way TiDB Binlog's drainer is.

- gRPC ``binlog.Cistern`` on ``addr`` (registered as the node's host): ``Notify`` answers, so a pump
  (re)joining the cluster can notify this drainer before serving writes.
- HTTP on ``addr`` too, as TiDB's drainer serves it (``binlogctl -cmd pause-drainer`` sends its
  request to the registered host), and on ``status-addr`` (the registry label pumps and
  ``binlake ctl`` use): ``GET /status``
  (TiDB's keys: ``PumpPos``, each pump's node id → the commit ts drained from it, ``Synced``: no
  rows applied for ``synced-check-time`` minutes, ``LastTS``, ``TsMap``), ``GET /metrics``
  (Prometheus, TiDB Binlog's drainer names),
  ``PUT /state/<node-id>/pause|close`` (``ingest.state_route``, as the pumps answer it).
- The registry entry is rewritten every second with ``maxCommitTS`` = the checkpoint, so a pump
  taken offline waits for this drainer to pass its last binlog, as with TiDB's. The first entry
  already holds the sink's saved checkpoint (TiDB's drainer registers its checkpoint at start), and
  ``updateTS`` is a TSO (``binlake.tso_clock``); written by ``ingest.registry.presence``.
- Ranges start ``--interval`` seconds apart (default ``detect-interval``); each reads the pumps the
  registry lists then, as TiDB's drainer re-detects them every ``detect-interval``.
- SIGTERM (or ``pause``) finishes the current range, writes its checkpoint, leaves the entry
  ``paused`` and exits 0; ``close`` leaves it ``offline``.
"""
from __future__ import annotations

import json
import logging
import signal
import threading
import time
from typing import Any, TextIO

import grpc
from google.protobuf.message import DecodeError

from binlake.drain import cluster_id_of, initial_ts, open_sink, run_drain_command
from binlake.drain_config import DrainerConfig
from binlake.metrics import DrainerMetrics
from binlake.report import PlanReport, RunReport
from binlake.tso_clock import UpdateClock
from ingest.config import ConfigError
from ingest.frontdoor import FrontDoor
from ingest.http2 import Call, Method, Methods, RpcAbort
from ingest.httpserver import GuardedHandler, warn_if_plain
from ingest.peerlog import PeerLog
from ingest.registry import load_registry
from ingest.registry.base import DRAINER, OFFLINE, ONLINE, PAUSED, STATUS_ADDR_LABEL
from ingest.registry.presence import Presence
from ingest.security import SecurityConfig
from ingest.state_route import CLOSE, serve_state_change
from schemas import cistern_pb2
from schemas.errors import BinlakeError, is_terminal

log = logging.getLogger(__name__)
MAX_BACKOFF = 300.0   # seconds: the longest wait between failed runs (unless the interval is longer)


def _cistern(security: SecurityConfig) -> Methods:
    """``/binlog.Cistern/Notify``: a pump (re)joining tells the drainer; under mutual TLS only the
    Common Names in ``cert-allowed-cn`` may call."""

    def notify(raw: bytes, call: Call) -> bytes:
        if security.enabled and security.ssl_ca and not security.allows(call.cn):
            raise RpcAbort(grpc.StatusCode.PERMISSION_DENIED,
                           f"client certificate CN {call.cn!r} is not in the drainer's cert-allowed-cn")
        try:
            cistern_pb2.NotifyReq.FromString(raw)
        except DecodeError as e:
            raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT,
                           f"malformed NotifyReq: not valid protobuf ({e})") from None
        log.info("notified by a pump")
        return b""
    return {"/binlog.Cistern/Notify": Method(notify)}


class Follower:
    """The follow loop and its servers (``run`` blocks until stopped)."""

    def __init__(self, options: DrainerConfig, interval: float | None, out: TextIO) -> None:
        self.options = options
        self.interval = interval if interval is not None else float(options.detect_interval)
        self.out = out
        self.stop = threading.Event()
        self.final_state = PAUSED
        self.checkpoint = 0
        self.last_applied = time.monotonic()
        self.pump_pos: dict[str, int] = {}
        self.metrics = DrainerMetrics()
        self.door: FrontDoor | None = None
        self.advertise = ""
        self.status_addr = ""
        self.clock: UpdateClock | None = None
        self.presence: Presence | None = None

    # ---- presence --------------------------------------------------------------------------

    def _presence(self) -> tuple[Presence, UpdateClock]:
        """This drainer's registry entry (host and label are known once the servers listen) and
        the clock of its ``updateTS``."""
        if self.clock is None:
            self.clock = UpdateClock.start(self.options)
        if self.presence is None:
            self.presence = Presence(load_registry(self.options.registry_uri, security=self.options.security),
                                     DRAINER, self.options.node_id, self.advertise,
                                     labels={STATUS_ADDR_LABEL: self.status_addr})
        return self.presence, self.clock

    def _register(self, state: str) -> None:
        presence, clock = self._presence()
        presence.put(state, self.checkpoint, clock.now())

    def _leave(self) -> None:
        """The last entry: ``final_state`` (paused, or offline after ``close``)."""
        try:
            self._register(self.final_state)
        finally:
            if self.presence is not None:
                self.presence.registry.close()

    def saved_checkpoint(self) -> int:
        """The checkpoint to register before the first range ends: the sink's saved one, else
        ``initial-commit-ts`` for a sink never written. When the sink cannot be read, what this node
        registered last (0 when nothing): never more than the sink holds, so no pump leaves early."""
        o = self.options
        try:
            cluster_id = cluster_id_of(o)
            sink = open_sink(o, cluster_id, dry_run=True)
            try:
                saved = sink.checkpoint()
            finally:
                sink.close()
            return saved if saved is not None else initial_ts(o, cluster_id)
        except Exception as e:  # noqa: BLE001 (the first run reports the sink's problem; register what is known)
            registry = load_registry(o.registry_uri, security=o.security)
            try:
                previous = registry.get_node(DRAINER, o.node_id)
            finally:
                registry.close()
            known = previous.max_commit_ts if previous is not None else 0
            print(f"binlake drain --follow: cannot read the sink's checkpoint ({e}); registering {known}",
                  file=self.out, flush=True)
            return known

    def _heartbeat(self) -> None:
        while not self.stop.wait(1.0):
            try:
                presence, clock = self._presence()
                presence.heartbeat(self.checkpoint, clock.now())
            except Exception as e:  # noqa: BLE001 (a registry hiccup must not end the follower)
                log.warning("heartbeat failed: %s", e)

    def at(self, ts: int) -> None:
        """Record a new checkpoint (the runs' ``register`` hook)."""
        self.checkpoint = max(self.checkpoint, ts)
        self.metrics.observe_checkpoint(self.checkpoint)
        self._register(ONLINE)

    # ---- servers ---------------------------------------------------------------------------

    def _start_servers(self) -> None:
        """Cistern and the HTTP API on ``addr`` (TiDB's tools send ``PUT /state/…`` there), and the
        HTTP API on ``status-addr`` too (binlake's tools find it in the registry label)."""
        o = self.options
        self.door = FrontDoor(_cistern(o.security), _handler(self), o.security, 4 << 20, PeerLog(log), "drainer-door")
        try:
            port = self.door.listen(o.addr)
            host = o.addr.rsplit(":", 1)[0]
            self.advertise = o.advertise_addr or f"{host}:{port}"
            if o.status_addr and o.status_addr != o.addr:
                warn_if_plain(o.status_addr, o.security, "the drainer's status API")
                sport = self.door.listen(o.status_addr)
                self.status_addr = f"{o.status_addr.rpartition(':')[0] or '127.0.0.1'}:{sport}"
            else:
                self.status_addr = self.advertise
        except OSError as e:
            self.door.stop(0)
            self.door = None
            raise ConfigError(f"addr {o.addr} / status-addr {o.status_addr}: cannot listen ({e})") from None

    def status(self) -> dict[str, Any]:
        """TiDB's drainer ``/status`` body."""
        synced = time.monotonic() - self.last_applied > self.options.synced_check_time * 60
        return {"PumpPos": dict(self.pump_pos), "Synced": synced, "LastTS": self.checkpoint, "TsMap": ""}

    def request_state(self, action: str) -> str | None:
        """``pause``: stop after the current range, stay ``paused``; ``close``: likewise, then ``offline``
        (``PUT /state/<id>/<action>``; never refused: a later ``close`` turns a pause into an offline)."""
        self.final_state = OFFLINE if action == CLOSE else PAUSED
        self.stop.set()
        return None

    # ---- loop ------------------------------------------------------------------------------

    def retry_wait(self, failures: int) -> float:
        """Seconds before the next run after ``failures`` failed runs in a row: the interval, doubled
        after each further failure, at most :data:`MAX_BACKOFF` (or the interval, when longer)."""
        return float(min(self.interval * 2 ** min(failures - 1, 30), max(self.interval, MAX_BACKOFF)))

    def run(self) -> int:
        """Follow until stopped; 0 on a clean stop. A failed run is retried after :meth:`retry_wait`
        unless its error is terminal (``schemas.errors``: a cluster-id mismatch, an incompatible schema
        change, corrupt data, …) or, for an error that is not binlake's (a bug: its traceback is
        logged), the ``max-failed-runs``-th such run in a row: the follower then stops as on
        ``pause`` and re-raises it (the command prints it and exits 1). The gauge
        ``binlake_drain_failed_runs_in_a_row`` counts the failed runs since the last success."""
        self.checkpoint = self.saved_checkpoint()
        self.metrics.observe_checkpoint(self.checkpoint)
        self._start_servers()
        scheme = "https" if self.options.security.enabled else "http"
        print(f"binlake drain --follow: Cistern on {self.advertise}, status on {scheme}://{self.status_addr}, "
              f"every {self.interval:g} s", file=self.out, flush=True)
        self._register(ONLINE)
        beat = threading.Thread(target=self._heartbeat, daemon=True, name="drainer-heartbeat")
        beat.start()
        fatal: Exception | None = None
        failures = unexpected = 0
        limit = self.options.max_failed_runs
        try:
            while not self.stop.is_set():
                try:
                    report = run_drain_command(self.options, out=self.out, register=self.at, metrics=self.metrics)
                except Exception as e:  # a failed run is retried, unless terminal or past the limit
                    failures += 1
                    self.metrics.failed_in_a_row.set(failures)
                    print(f"binlake drain --follow: run failed: {e}", file=self.out, flush=True)
                    if is_terminal(e):
                        print(f"binlake drain --follow: {type(e).__name__} is a terminal error: not retried, "
                              f"stopping", file=self.out, flush=True)
                        fatal = e
                        break
                    if not isinstance(e, BinlakeError):
                        unexpected += 1
                        log.error("run failed with an error that is not binlake's (%d in a row)", unexpected,
                                  exc_info=e)
                        if limit and unexpected >= limit:
                            print(f"binlake drain --follow: {unexpected} runs in a row failed with errors that are "
                                  f"not binlake's ({type(e).__name__}; max-failed-runs = {limit}): stopping",
                                  file=self.out, flush=True)
                            fatal = e
                            break
                    wait = self.retry_wait(failures)
                    print(f"binlake drain --follow: {failures} failed run(s) in a row, the next in {wait:g} s",
                          file=self.out, flush=True)
                    self.stop.wait(wait)
                    continue
                failures = unexpected = 0
                self.metrics.failed_in_a_row.set(0)
                self._account(report)
                if report.checkpoint_after is not None:
                    self.at(report.checkpoint_after)
                self.stop.wait(self.interval)
        finally:
            self.stop.set()
            beat.join(5)
            self._leave()
            if self.door is not None:
                self.door.stop(1)
        print(f"binlake drain --follow: stopped at checkpoint {self.checkpoint}, registry state "
              f"{self.final_state}", file=self.out, flush=True)
        if fatal is not None:
            raise fatal
        return 0

    def _account(self, report: PlanReport | RunReport) -> None:
        """Note what a successful run drained: each pump's position (``/status`` PumpPos: the run read
        every pump of its plan through ``to_ts``) and when rows were last applied (``Synced``)."""
        if report.pumps:
            self.pump_pos = {p.node_id: report.to_ts for p in report.pumps}
        if isinstance(report, RunReport) and report.rows_written():
            self.last_applied = time.monotonic()


def _handler(follower: Follower) -> type[GuardedHandler]:
    class Handler(GuardedHandler):
        def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
            self.send_body(code, body, kind)

        def do_GET(self) -> None:
            if self.path == "/status":
                self._send(200, json.dumps(follower.status()).encode())
            elif self.path == "/metrics":
                follower.metrics.observe_checkpoint(follower.checkpoint)
                self._send(200, follower.metrics.render(), "text/plain; version=0.0.4")
            else:
                self._send(404, b'{"message": "not found"}')

        def do_PUT(self) -> None:
            if not serve_state_change(self, "drainer", follower.options.node_id, follower.request_state):
                self._send(404, b'{"message": "not found"}')

    return Handler


def run_follow(options: DrainerConfig, interval: float | None, out: TextIO) -> int:
    """Follow with SIGTERM/SIGINT wired to a clean stop; ``interval`` (seconds between ranges)
    defaults to ``detect-interval``."""
    follower = Follower(options, interval, out)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: follower.stop.set())
    return follower.run()
