"""The Drainer's Prometheus metrics: every run writes them to ``DATA_DIR/metrics.prom`` (for a
node-exporter textfile collector) and, with ``metrics-addr`` / ``--pushgateway URL``, pushes them to a
Pushgateway (job ``binlake_drain``, grouped by cluster id); follow mode also serves them on
``/metrics``.

Names follow TiDB Binlog's drainer where it has one (``binlog_drainer_checkpoint_tso``,
``binlog_drainer_checkpoint_delay_seconds``, ``binlog_drainer_event_total{type}``); the per-run
figures it has no name for are ``binlake_drain_last_run_*`` gauges (the batch-job convention: the
values of the last run, with its outcome and end time), ``binlake_drain_runs_total{outcome}``, and
``binlake_drain_stale_row_changes_total``: row changes dropped because they were written to a table
id truncated away or dropped before they committed (TiDB shows them to nobody; alert on a rise).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, push_to_gateway, write_to_textfile

from binlake.report import PlanReport, RunReport

log = logging.getLogger(__name__)

TEXTFILE = "metrics.prom"
JOB = "binlake_drain"
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
        self.checkpoint_delay = Gauge("binlog_drainer_checkpoint_delay_seconds",
                                      "seconds between now and the checkpoint's physical time", registry=r)
        self.events = Counter("binlog_drainer_event", "row changes and DDLs applied", ["type"], registry=r)
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

    def observe_checkpoint(self, checkpoint: int | None) -> None:
        """Set the checkpoint gauges (delay 0 before the first checkpoint)."""
        ts = checkpoint or 0
        self.checkpoint_tso.set(ts >> 18)
        self.checkpoint_delay.set(max(0.0, time.time() - physical_seconds(ts)) if ts else 0.0)

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
        for stage, seconds in report.stages.items():
            self.stages.labels(stage).set(seconds)
        if isinstance(report, RunReport):
            self.stale.inc(report.counts.get("stale_row_changes", 0))
        self.observe_checkpoint(report.checkpoint_after)

    def failed(self) -> None:
        """Record a failed run (the checkpoint gauges keep what the run saw before it failed)."""
        self.runs.labels("failed").inc()
        self.success.set(0)
        self.finished.set(time.time())

    def publish(self, data_dir: str, pushgateway: str = "", cluster_id: int | None = None) -> None:
        """Write ``DATA_DIR/metrics.prom`` (atomically) and push to ``pushgateway`` when set. A push
        that fails is logged, not raised: the run's outcome does not depend on the monitoring."""
        path = Path(data_dir) / TEXTFILE
        path.parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(str(path), self.registry)
        if pushgateway:
            key = {"cluster_id": str(cluster_id)} if cluster_id else {}
            try:
                push_to_gateway(pushgateway, job=JOB, registry=self.registry, grouping_key=key, timeout=10)
            except OSError as e:
                log.warning("pushing metrics to %s failed: %s", pushgateway, e)
