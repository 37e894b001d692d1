"""The Drainer's Prometheus metrics: every run writes them to ``DATA_DIR/metrics.prom`` (for a
node-exporter textfile collector) and, with ``metrics-addr`` / ``--pushgateway URL``, pushes them to a
Pushgateway as TiDB Binlog's drainer does (job ``binlog``, grouped by ``instance`` = the drainer's
node id, plus ``cluster_id``); follow mode also serves them on ``/metrics``.

Every drainer series TiDB Binlog's Grafana dashboard and alert rules read, with its names, types,
labels and buckets (``ingest.metrics_text``):

- ``binlog_drainer_checkpoint_tso`` (physical ms), ``binlog_drainer_checkpoint_delay_seconds`` (a
  histogram, observed as each run ends), ``binlog_drainer_ddl_jobs_total``,
  ``binlog_drainer_event{type}`` (Insert/Update/Delete/DDL, no ``_total``),
  ``binlog_drainer_pump_position{nodeID}`` (each pump's watermark when planned, physical ms);
- ``binlog_drainer_read_binlog_size{nodeID}`` (payload bytes of each binlog received from a pump) and
  ``binlog_drainer_binlog_reach_duration_time{nodeID}`` (seconds from the commit ts's physical time
  to the arrival of each commit or fake binlog): observed in the Spark pull tasks, counted there per
  bucket and merged here (``transform.pull.PumpReads``);
- ``binlog_drainer_error_count{type}`` (no ``_total``): ``unmarshal_binlog``, a binlog received
  from a pump that does not decode (the run fails on it). Exported as 0 from the start, where TiDB's
  Go drainer exports the series only after the first error: an alert's ``increase``/``changes`` then
  sees the first one;
- ``binlog_drainer_execute_duration_time``: seconds to hand one item to the downstream (the MySQL
  sink: each transaction and each DDL; a lake sink: the whole run, its commit batch;
  ``sink.base.SinkObserver``); ``binlog_drainer_query_duration_time{type}``: the MySQL sink's
  statements (``exec``), commits (``commit``) and loopback marks (``update_mark_table``);
- ``binlog_drainer_queue_size{name}``: ``syncer_input`` the transactions of the run in progress the
  sink has not taken yet (set when the Spark stages end, one less per item the sink hands over, 0
  when the sink's write ends: a lake sink takes them all at its end), ``worker_0`` … ``worker_9`` the
  DMLs the MySQL sink's last flush gave each worker (TiDB Binlog's loader samples the same);
- ``go_goroutines`` and ``go_memstats_heap_inuse_bytes``, the node row's: this process's threads and
  resident bytes (``ingest.node_metrics``).

The per-run figures TiDB has no name for are ``binlake_drain_last_run_*`` gauges (the batch-job
convention: the values of the last run, with its outcome and end time),
``binlake_drain_checkpoint_delay_seconds`` (the delay now), ``binlake_drain_runs_total{outcome}``, and
``binlake_drain_stale_row_changes_total``: row changes dropped because they were written to a table
id truncated away or dropped before they committed (TiDB shows them to nobody; alert on a rise).
``conf/grafana/binlake.json`` is a Grafana dashboard of them.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from binlake.report import PlanReport, RunReport
from ingest.atomic import replace_file
from ingest.metrics_text import (
    DELAY_BUCKETS,
    DURATION_BUCKETS,
    SIZE_BUCKETS,
    GoCounter,
    MergedHistogram,
    push,
    render,
)
from ingest.node_metrics import NodeCollector
from sink.base import SinkObserver
from transform.errors import UndecodableBinlog
from transform.pull import Reads

log = logging.getLogger(__name__)

TEXTFILE = "metrics.prom"
JOB = "binlog"   # TiDB Binlog's Pushgateway job
_OPS = {"I": "Insert", "U": "Update", "D": "Delete"}
UNMARSHAL = "unmarshal_binlog"   # binlog_drainer_error_count's type
SYNCER_INPUT = "syncer_input"    # binlog_drainer_queue_size's name of the run's pending transactions
WORKER_SAMPLES = 10              # worker_N queue sizes exported, as TiDB Binlog's loader samples them


def physical_seconds(ts: int) -> float:
    """A TSO's physical time in seconds since the epoch."""
    return (ts >> 18) / 1000


class DrainerMetrics:
    """One registry of the drainer's metrics; a process keeps one across its runs (follow mode)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.checkpoint_tso = Gauge("binlog_drainer_checkpoint_tso", "checkpoint tso (physical ms)", registry=r)
        self.checkpoint_delay = Histogram("binlog_drainer_checkpoint_delay_seconds",
                                          "how far the checkpoint lags behind now, observed as each run ends",
                                          registry=r, buckets=DELAY_BUCKETS)
        self.delay_now = Gauge("binlake_drain_checkpoint_delay_seconds",
                               "seconds between now and the checkpoint's physical time", registry=r)
        self.events = GoCounter("binlog_drainer_event", "row changes and DDLs applied", ["type"], registry=r)
        self.ddl_jobs = Counter("binlog_drainer_ddl_jobs_total", "DDL jobs applied", registry=r)
        self.pump_position = Gauge("binlog_drainer_pump_position", "each pump's watermark when the last run "
                                   "planned (physical ms)", ["nodeID"], registry=r)
        self.runs = Counter("binlake_drain_runs", "runs by outcome", ["outcome"], registry=r)
        self.stale = Counter("binlake_drain_stale_row_changes",
                             "row changes dropped: written to a table id that had ended before they committed",
                             registry=r)
        self.success = Gauge("binlake_drain_last_run_success", "1 when the last run succeeded, else 0", registry=r)
        self.failed_in_a_row = Gauge("binlake_drain_failed_runs_in_a_row", "failed runs since the last success "
                                     "(follow mode; 0 after a success)", registry=r)
        self.finished = Gauge("binlake_drain_last_run_timestamp_seconds", "when the last run ended", registry=r)
        self.to_ts = Gauge("binlake_drain_last_run_to_ts", "the last run's range end (a TSO)", registry=r)
        self.rows = Gauge("binlake_drain_last_run_row_changes", "row changes of the last run per table and op",
                          ["table", "op"], registry=r)
        self.stages = Gauge("binlake_drain_last_run_stage_seconds", "seconds per stage of the last run",
                            ["stage"], registry=r)
        self.read_size = MergedHistogram("binlog_drainer_read_binlog_size", "payload bytes of each binlog "
                                         "received from a pump", ["nodeID"], SIZE_BUCKETS, r)
        self.reach = MergedHistogram("binlog_drainer_binlog_reach_duration_time", "seconds from a binlog's commit "
                                     "(its ts's physical time) to its arrival", ["nodeID"], DURATION_BUCKETS, r)
        self.errors = GoCounter("binlog_drainer_error_count", "errors by type (unmarshal_binlog: a binlog "
                                "received from a pump does not decode)", ["type"], registry=r)
        self.errors.labels(UNMARSHAL)   # 0 until the first one (see the module doc)
        self.execute = Histogram("binlog_drainer_execute_duration_time", "seconds to hand one item to the "
                                 "downstream (MySQL: a transaction or a DDL; a lake sink: the run)",
                                 registry=r, buckets=DURATION_BUCKETS)
        self.query = Histogram("binlog_drainer_query_duration_time", "seconds of one downstream statement "
                               "(exec) or commit (commit) of the MySQL sink", ["type"], registry=r,
                               buckets=DURATION_BUCKETS)
        self.queue = Gauge("binlog_drainer_queue_size", "syncer_input: transactions of the run the sink has not "
                           "taken yet; worker_N: DMLs the MySQL sink's last flush gave worker N", ["name"], registry=r)
        self.waiting = 0   # syncer_input
        self.pending(0)
        NodeCollector(r)
        self.sink_observer: SinkObserver = _SinkMetrics(self)

    def pulled(self, reads: Reads) -> None:
        """Merge what the pull tasks counted per pump (node id)."""
        for node, counts in reads.items():
            self.read_size.add([node], counts.size)
            self.reach.add([node], counts.reach)

    def pending(self, transactions: int) -> None:
        """``transactions`` of the run wait for the sink (``queue_size{name="syncer_input"}``)."""
        self.waiting = max(0, transactions)
        self.queue.labels(SYNCER_INPUT).set(self.waiting)

    def observe_checkpoint(self, checkpoint: int | None) -> float:
        """Set the checkpoint gauges (delay 0 before the first checkpoint); the delay."""
        ts = checkpoint or 0
        delay = max(0.0, time.time() - physical_seconds(ts)) if ts else 0.0
        self.checkpoint_tso.set(ts >> 18)
        self.delay_now.set(delay)
        return delay

    def succeeded(self, report: PlanReport | RunReport) -> None:
        """Record a finished run from its report."""
        self.runs.labels("ok").inc()
        self.pending(0)
        self.success.set(1)
        self.finished.set(time.time())
        self.to_ts.set(report.to_ts)
        self.rows.clear()
        self.stages.clear()
        for t in report.tables:
            for op, n in t.rows.items():
                self.rows.labels(t.table, op).set(n)
                self.events.labels(_OPS.get(op, op)).inc(n)
            self.events.labels("DDL").inc(len(t.ddl))
            self.ddl_jobs.inc(len(t.ddl))
        for stage, seconds in report.stages.items():
            self.stages.labels(stage).set(seconds)
        for pump in report.pumps:
            self.pump_position.labels(pump.node_id).set(pump.watermark >> 18)
        if isinstance(report, RunReport):
            self.stale.inc(report.counts.get("stale_row_changes", 0))
        delay = self.observe_checkpoint(report.checkpoint_after)
        if report.checkpoint_after:
            self.checkpoint_delay.observe(delay)

    def failed(self, error: BaseException | None = None) -> None:
        """Record a failed run (the checkpoint gauges keep what the run saw before it failed); an
        :class:`UndecodableBinlog` ``error`` counts as ``error_count{type="unmarshal_binlog"}``."""
        self.runs.labels("failed").inc()
        self.pending(0)
        if isinstance(error, UndecodableBinlog):
            self.errors.labels(UNMARSHAL).inc()
        self.success.set(0)
        self.finished.set(time.time())

    def render(self) -> bytes:
        """The text exposition (counters named as TiDB's Go drainer names them)."""
        return render(self.registry)

    def publish(self, data_dir: str, pushgateway: str = "", cluster_id: int | None = None,
                node_id: str = "") -> None:
        """Write ``DATA_DIR/metrics.prom`` (atomically) and push to ``pushgateway`` when set (job
        ``binlog``, ``instance`` = ``node_id``), the same text. A push that fails is logged, not raised:
        the run's outcome does not depend on the monitoring."""
        text = self.render()
        replace_file(Path(data_dir) / TEXTFILE, text)
        if pushgateway:
            key = {"instance": node_id} if node_id else {}
            if cluster_id:
                key["cluster_id"] = str(cluster_id)
            try:
                push(pushgateway, JOB, text, key)
            except OSError as e:
                log.warning("pushing metrics to %s failed: %s", pushgateway, e)


class _SinkMetrics(SinkObserver):
    """What a sink's write took, into the drainer's execute, query and queue metrics."""

    def __init__(self, metrics: DrainerMetrics) -> None:
        self.metrics = metrics

    def executed(self, seconds: float) -> None:
        self.metrics.execute.observe(seconds)
        self.metrics.pending(self.metrics.waiting - 1)

    def queried(self, kind: str, seconds: float) -> None:
        self.metrics.query.labels(kind).observe(seconds)

    def dispatched(self, sizes: Sequence[int]) -> None:
        for i, n in enumerate(sizes[:WORKER_SAMPLES]):
            self.metrics.queue.labels(f"worker_{i}").set(n)
