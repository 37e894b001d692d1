"""The Drainer's Prometheus metrics: every run writes them to ``DATA_DIR/metrics.prom`` (for a
node-exporter textfile collector) and, with ``metrics-addr`` / ``--pushgateway URL``, pushes them to a
Pushgateway as TiDB Binlog's drainer does (job ``binlog``, grouped by ``instance`` = the drainer's
node id, plus ``cluster_id``); follow mode also serves them on ``/metrics``.

TiDB Binlog's drainer metrics its Grafana dashboard and alert rules read, with its names, types and
labels (``ingest.metrics_text``): ``binlog_drainer_checkpoint_tso`` (physical ms),
``binlog_drainer_checkpoint_delay_seconds`` (a histogram, observed as each run ends),
``binlog_drainer_event{type}`` (Insert/Update/Delete/DDL, no ``_total``),
``binlog_drainer_ddl_jobs_total``, ``binlog_drainer_pump_position{nodeID}`` (each pump's watermark
when planned, physical ms). The per-run figures it has no name for are ``binlake_drain_last_run_*``
gauges (the batch-job convention: the values of the last run, with its outcome and end time),
``binlake_drain_checkpoint_delay_seconds`` (the delay now), ``binlake_drain_runs_total{outcome}``, and
``binlake_drain_stale_row_changes_total``: row changes dropped because they were written to a table
id truncated away or dropped before they committed (TiDB shows them to nobody; alert on a rise).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from binlake.report import PlanReport, RunReport
from ingest.atomic import replace_file
from ingest.metrics_text import DELAY_BUCKETS, GoCounter, push, render

log = logging.getLogger(__name__)

TEXTFILE = "metrics.prom"
JOB = "binlog"   # TiDB Binlog's Pushgateway job
_OPS = {"I": "Insert", "U": "Update", "D": "Delete"}


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
        self.finished = Gauge("binlake_drain_last_run_timestamp_seconds", "when the last run ended", registry=r)
        self.to_ts = Gauge("binlake_drain_last_run_to_ts", "the last run's range end (a TSO)", registry=r)
        self.rows = Gauge("binlake_drain_last_run_row_changes", "row changes of the last run per table and op",
                          ["table", "op"], registry=r)
        self.stages = Gauge("binlake_drain_last_run_stage_seconds", "seconds per stage of the last run",
                            ["stage"], registry=r)

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

    def failed(self) -> None:
        """Record a failed run (the checkpoint gauges keep what the run saw before it failed)."""
        self.runs.labels("failed").inc()
        self.success.set(0)
        self.finished.set(time.time())

    def render(self) -> bytes:
        """The text exposition (counters named as TiDB's Go drainer names them)."""
        return render(self.registry)

    def publish(self, data_dir: str, pushgateway: str = "", cluster_id: int | None = None,
                node_id: str = "") -> None:
        """Write ``DATA_DIR/metrics.prom`` (atomically) and push to ``pushgateway`` when set (job
        ``binlog``, ``instance`` = ``node_id``). A push that fails is logged, not raised: the run's
        outcome does not depend on the monitoring."""
        replace_file(Path(data_dir) / TEXTFILE, self.render())
        if pushgateway:
            key = {"instance": node_id} if node_id else {}
            if cluster_id:
                key["cluster_id"] = str(cluster_id)
            try:
                push(pushgateway, JOB, self.registry, key)
            except OSError as e:
                log.warning("pushing metrics to %s failed: %s", pushgateway, e)
