"""Prometheus metrics of one pump, TiDB Binlog's pump's names, types, labels and buckets (its Grafana
dashboard and alert rules read them: ``ingest.metrics_text``), the node row's ``go_goroutines`` and
``go_memstats_heap_inuse_bytes`` (this process's threads and resident bytes: ``ingest.node_metrics``),
then binlake's own."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ingest.metrics_text import DURATION_BUCKETS, SIZE_BUCKETS, WRITE_DURATION_BUCKETS, GoCounter, render
from ingest.node_metrics import NodeCollector


class PumpMetrics:
    """All metrics of one pump in a registry of its own (so several pumps can share a process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.rpc_duration = Histogram("binlog_pump_rpc_duration_seconds", "gRPC call duration",
                                      ["method", "label"], registry=r, buckets=DURATION_BUCKETS)
        self.loss_binlog = GoCounter("binlog_pump_loss_binlog_count", "binlogs that failed to be written",
                                     registry=r)
        self.gc_ts = Gauge("binlog_pump_storage_gc_ts", "gc ts (physical ms)", registry=r)
        self.done_gc_ts = Gauge("binlog_pump_storage_done_gc_ts", "records up to this ts are purged (physical ms)",
                                registry=r)
        self.deleted_kv = Counter("binlog_pump_storage_deleted_kv_total", "index keys deleted by gc", registry=r)
        self.max_commit_ts = Gauge("binlog_pump_storage_max_commit_ts", "watermark (physical ms)", registry=r)
        self.storage_size = Gauge("binlog_pump_storage_storage_size_bytes", "disk capacity and available",
                                  ["type"], registry=r)
        self.query_upstream = GoCounter("binlog_pump_storage_query_tikv_count",
                                        "upstream queries to resolve lost commits (TiDB's status API)", registry=r)
        self.error_count = GoCounter("binlog_pump_storage_error_count", "storage errors", ["type"], registry=r)
        self.write_size = Histogram("binlog_pump_storage_write_binlog_size", "bytes per write (single: a binlog, "
                                    "batch: a group commit)", ["type"], registry=r, buckets=SIZE_BUCKETS)
        self.write_duration = Histogram("binlog_pump_storage_write_binlog_duration_time", "write stage time",
                                        ["type"], registry=r, buckets=WRITE_DURATION_BUCKETS)
        self.slow_chaser = GoCounter("binlog_pump_storage_slow_chaser_count", "slow chaser activations",
                                     ["type"], registry=r)
        self.corrupt_bytes = Counter("binlog_pump_storage_corrupt_bytes_total",
                                     "bytes skipped as corrupt while scanning the value log", registry=r)
        self.corrupt_records = Counter("binlog_pump_storage_corrupt_records_total",
                                       "corrupt regions skipped while scanning the value log", registry=r)
        self.scans = Counter("binlake_pump_scan_total", "range scans, by where their index entries came from "
                             "(memory: the recent-entries cache; leveldb)", ["source"], registry=r)
        self.late_commits = Counter("binlog_pump_late_commits", "commit binlogs that arrived at or below the "
                                    "published watermark (TiDB's and the pump's clocks disagree)", registry=r)
        self.resolved = Counter("binlog_pump_storage_resolved_prewrites_total",
                                "prewrites resolved through the upstream", ["result"], registry=r)
        NodeCollector(r)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric (counters named as TiDB's Go pump names them)."""
        return render(self.registry)
