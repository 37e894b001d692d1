"""The Pump daemon: storage + gRPC + HTTP + registry, and the background loops TiDB's pump runs."""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ingest import binlog as bl
from ingest.errors import IngestError, NotOnline, TSOError
from ingest.pump import datadir
from ingest.pump.config import PumpConfig
from ingest.pump.metrics import PumpMetrics
from ingest.pump.node import Node, NotifyError, resolve_node_id
from ingest.pump.resolver import UpstreamResolver
from ingest.pump.server import ServerThread
from ingest.pump.storage import Storage
from ingest.registry import load_registry
from ingest.registry.base import CLOSING, DRAINER, OFFLINE, ONLINE, PAUSED, PAUSING, Registry
from ingest.topology import tidb_status_urls
from ingest.tso import TSOClient, compose_ts, physical_ms
from schemas import binlog_pb2
from schemas.retry import retry

if TYPE_CHECKING:
    from ingest.pump.storage.storage import LoopWriter

log = logging.getLogger(__name__)

GC_INTERVAL = 3600.0
DRAINER_CHECK_INTERVAL = 600.0
TSO_INTERVAL = 1.0


class Pump:
    """One pump process. ``start`` brings it online; ``wait`` blocks until it has stopped."""

    def __init__(self, options: PumpConfig, registry: Registry | None = None) -> None:
        self.options = options
        self.metrics = PumpMetrics()
        self.data_dir = Path(options.data_dir)
        self.registry = registry or load_registry(options.registry_uri, security=options.security)
        with datadir.opening(self.data_dir):
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.storage = Storage(self.data_dir, options.storage, resolver=self._resolve, metrics=self.metrics)
        try:
            with datadir.opening(self.data_dir):
                self.node_id = resolve_node_id(self.data_dir, options.node_id, options.addr)
            self.tso = TSOClient(options.pd_urls, cluster_id=options.cluster_id,
                                 credentials=options.security.pd_credentials(options.pd_urls))
            self._latest_ts = self.tso.get_ts()
            self.cluster_id = options.cluster_id or self.tso.cluster_id
            if self.cluster_id:
                datadir.check_cluster(self.data_dir, self.cluster_id)
        except Exception:
            self.storage.close()
            raise
        self._latest_at = time.monotonic()
        self.resolver = UpstreamResolver(
            options.upstream_status_url, read_prewrite=self._read_prewrite, write_commit=self._write_commit,
            latest_ts=lambda: self.latest_ts, max_txn_timeout=options.max_txn_timeout,
            on_query=self.metrics.query_upstream.inc,
            on_result=lambda result: self.metrics.resolved.labels(result).inc(),
            discover=lambda: tidb_status_urls(self.registry, https=options.security.enabled))
        self.node = Node(self.registry, self.node_id, options.advertise, options.status_addr,
                         max_commit_ts=lambda: self.storage.max_commit_ts, update_ts=lambda: self.latest_ts)
        self.stopping = False
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._last_write = time.monotonic()
        self._gc_trigger = threading.Event()
        self.gc_running = False
        self._grpc: ServerThread | None = None

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Serve gRPC and HTTP, register online, notify drainers if (re)joining, start the loops."""
        if self.cluster_id == 0:
            raise IngestError("cluster id unknown: PD answered cluster id 0 and no --cluster-id was given")
        try:
            self._grpc = ServerThread(self, self.options)
        except OSError as exc:
            self._shutdown()
            raise IngestError(f"cannot serve on {self.options.addr} / {self.options.status_addr}: {exc}") from exc
        except IngestError:
            self._shutdown()
            raise
        rejoining = self.node.previous_state == OFFLINE
        self.node.set_state(ONLINE)
        if rejoining:
            try:
                self.node.notify_drainers(credentials=self.options.security.grpc_channel_credentials())
            except NotifyError:
                self.node.set_state(OFFLINE)
                self._shutdown()
                raise
        for target, name in ((self._tso_loop, "tso"), (self._heartbeat_loop, "heartbeat"),
                             (self._fake_binlog_loop, "fake-binlog"), (self._gc_loop, "gc")):
            threading.Thread(target=target, name=f"pump-{name}", daemon=True).start()
        log.info("pump %s online: grpc %s%s, http %s, cluster id %d, data dir %s", self.node_id,
                 self.options.addr, f" and unix:{self._grpc.socket}" if self._grpc.socket else "",
                 self.options.status_addr, self.cluster_id, self.data_dir)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the pump has stopped; True if it did within ``timeout``."""
        return self._stopped.wait(timeout)

    @property
    def state(self) -> str:
        """The pump's registry state."""
        return self.node.state

    @property
    def latest_ts(self) -> int:
        """The last PD timestamp plus the time elapsed since it was fetched (TiDB's updateTS)."""
        elapsed_ms = int((time.monotonic() - self._latest_at) * 1000)
        return compose_ts(physical_ms(self._latest_ts) + elapsed_ms, 0)

    def pause(self) -> None:
        """Stop serving and leave the state ``paused`` (pause-pump, or a signal)."""
        self._request_stop(PAUSING, PAUSED)

    def offline(self) -> None:
        """Go ``closing``, wait until registered drainers consumed everything, then ``offline``."""
        self._request_stop(CLOSING, OFFLINE)

    def _request_stop(self, transient: str, final: str) -> None:
        with self._stop_lock:
            if self.stopping:
                return
            if self.state != ONLINE and transient != PAUSING:
                raise IngestError(f"pump {self.node_id} is {self.state}, not online")
            self.node.set_state(transient)
        if final == OFFLINE:
            self._wait_safe_to_offline()
        self.stopping = True
        self.node.set_state(final)
        self._shutdown()

    def _shutdown(self) -> None:
        self.stopping = True
        if self._grpc is not None:
            self._grpc.stop(grace=10)
        self.storage.close()
        self.tso.close()
        self.registry.close()
        self._stopped.set()
        log.info("pump %s stopped (%s)", self.node_id, self.state)

    def _wait_safe_to_offline(self) -> None:
        """TiDB's waitSafeToOffline: a last fake binlog, all prewrites matched, drainers past it."""
        fake_ts = retry(self._write_fake, wait=1.0, on=(TSOError, IngestError),  # until it is written
                        before_sleep=lambda exc, n, s: log.warning(
                            "offline: writing the final fake binlog failed, retrying: %s", exc))
        while self.storage.max_commit_ts < fake_ts or not self.storage.all_matched():
            self.storage.wait_watermark(fake_ts - 1, timeout=1.0)
        while True:
            drainers = [d for d in self.registry.list_nodes(DRAINER) if d.state != OFFLINE]
            lagging = [d.node_id for d in drainers if d.max_commit_ts < fake_ts]
            if not lagging:
                return
            log.info("offline: waiting for drainers %s to pass ts %d", lagging, fake_ts)
            time.sleep(1)

    # ---- writes -----------------------------------------------------------------------------

    def write_binlog(self, payload: bytes, writer: LoopWriter | None = None) -> asyncio.Future[None] | None:
        """Validate one binlog from WriteBinlog and start storing it (on the running event loop,
        through ``writer`` if given); await the returned future: it is done once the binlog is
        durable. The all-zero probe is accepted and dropped (None); prewrites are refused unless
        the pump is online."""
        b = bl.parse(payload)
        if b.start_ts == 0 and b.commit_ts == 0:
            return None
        if b.tp == bl.PREWRITE and self.state != ONLINE:
            raise NotOnline(f"no online: {self.state}")
        self._last_write = time.monotonic()
        return self.storage.write_async(payload, b.tp, b.start_ts, b.commit_ts, writer)

    def _write_fake(self) -> int:
        ts = self.tso.get_ts()
        self._set_latest(ts)
        self.storage.write(bl.fake_binlog(ts), bl.ROLLBACK, ts, ts)
        return ts

    def _read_prewrite(self, start_ts: int) -> binlog_pb2.Binlog | None:
        found = self.storage.get(start_ts)
        if found is None or found[0].tp != bl.PREWRITE:
            return None
        return bl.parse(found[1])

    def _write_commit(self, prewrite: binlog_pb2.Binlog, commit_ts: int) -> None:
        commit = binlog_pb2.Binlog(tp=bl.COMMIT, start_ts=prewrite.start_ts, commit_ts=commit_ts,
                                   prewrite_key=prewrite.prewrite_key)
        self.storage.write(bl.marshal_gogo(commit), bl.COMMIT, prewrite.start_ts, commit_ts)

    def _resolve(self, entry: object) -> bool:
        return self.resolver(entry)

    # ---- loops ------------------------------------------------------------------------------

    def _set_latest(self, ts: int) -> None:
        if ts > self._latest_ts:
            self._latest_ts, self._latest_at = ts, time.monotonic()

    def _tso_loop(self) -> None:
        while not self._stopped.wait(TSO_INTERVAL):
            try:
                self._set_latest(self.tso.get_ts())
            except TSOError as exc:
                log.warning("%s", exc)

    def _heartbeat_loop(self) -> None:
        while not self._stopped.wait(self.options.heartbeat_interval):
            if self.stopping:
                return
            try:
                self.node.heartbeat()
            except IngestError as exc:
                log.warning("heartbeat failed: %s", exc)

    def _fake_binlog_loop(self) -> None:
        interval = self.options.gen_binlog_interval
        while not self._stopped.wait(interval):
            if self.stopping or time.monotonic() - self._last_write < interval:
                continue
            try:
                self._write_fake()
            except (TSOError, IngestError, OSError) as exc:
                log.warning("fake binlog not written: %s", exc)

    def trigger_gc(self) -> bool:
        """Ask the GC loop to run now; False if a GC is already running."""
        if self.gc_running:
            return False
        self._gc_trigger.set()
        return True

    def _gc_loop(self) -> None:
        last_check = 0.0
        while not self._stopped.is_set():
            self._gc_trigger.wait(GC_INTERVAL)
            self._gc_trigger.clear()
            if self._stopped.is_set():
                return
            self.gc_running = True
            try:
                gc_ts = compose_ts(physical_ms(self.latest_ts) - int(self.options.gc_retention * 1000), 0)
                self.storage.gc(gc_ts)
                if time.monotonic() - last_check > DRAINER_CHECK_INTERVAL:
                    last_check = time.monotonic()
                    self._check_drainers()
            except Exception:
                log.exception("gc failed")
            finally:
                self.gc_running = False

    def _check_drainers(self) -> None:
        for d in self.registry.list_nodes(DRAINER):
            if d.state != OFFLINE and d.max_commit_ts < self.storage.gc_ts:
                log.warning("drainer %s checkpoint %d is older than pump gc ts %d: some binlogs it "
                            "needs are purged", d.node_id, d.max_commit_ts, self.storage.gc_ts)
