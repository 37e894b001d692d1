"""Prometheus metrics of one pump, named like TiDB Binlog's (namespace ``binlog``)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5)


class PumpMetrics:
    """All metrics of one pump in a registry of its own (so several pumps can share a process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.rpc_duration = Histogram("binlog_pump_rpc_duration_seconds", "gRPC call duration",
                                      ["method", "label"], registry=r, buckets=_LATENCY_BUCKETS)
        self.loss_binlog = Counter("binlog_pump_loss_binlog_count", "binlogs that failed to be written",
                                   registry=r)
        self.gc_ts = Gauge("binlog_pump_storage_gc_ts", "gc ts (physical ms)", registry=r)
        self.max_commit_ts = Gauge("binlog_pump_storage_max_commit_ts", "watermark (physical ms)", registry=r)
        self.storage_size = Gauge("binlog_pump_storage_storage_size_bytes", "disk capacity and available",
                                  ["type"], registry=r)
        self.query_upstream = Counter("binlog_pump_storage_query_tikv_count",
                                      "MVCC queries to resolve lost commits", registry=r)
        self.error_count = Counter("binlog_pump_storage_error_count", "storage errors", ["type"], registry=r)
        self.write_size = Histogram("binlog_pump_storage_write_binlog_size", "bytes per write",
                                    ["type"], registry=r,
                                    buckets=(256, 1024, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20))
        self.write_duration = Histogram("binlog_pump_storage_write_binlog_duration_time", "write stage time",
                                        ["type"], registry=r, buckets=_LATENCY_BUCKETS)
        self.slow_chaser = Counter("binlog_pump_storage_slow_chaser_count", "slow chaser activations",
                                   ["type"], registry=r)
        self.corrupt_bytes = Counter("binlog_pump_storage_corrupt_bytes_total",
                                     "bytes skipped as corrupt while scanning the value log", registry=r)
        self.corrupt_records = Counter("binlog_pump_storage_corrupt_records_total",
                                       "corrupt regions skipped while scanning the value log", registry=r)
        self.scans = Counter("binlake_pump_scan_total", "range scans, by where their index entries came from "
                             "(memory: the recent-entries cache; leveldb)", ["source"], registry=r)
        self.resolved = Counter("binlog_pump_storage_resolved_prewrites_total",
                                "prewrites resolved through the upstream", ["result"], registry=r)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
