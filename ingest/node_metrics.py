"""The two series of TiDB Binlog's Grafana "node" row, exported by a Python process.

TiDB Binlog's pump and drainer get ``go_goroutines`` and ``go_memstats_heap_inuse_bytes`` from Go's
runtime collector; the dashboard's node row plots them per instance. Python has no goroutines and
no Go heap, so binlake exports, under those names, the nearest figures of the process itself, read
from ``/proc/self/status`` (Linux): ``go_goroutines`` is the number of its threads (``Threads``:
Python threads and native ones, such as gRPC's), ``go_memstats_heap_inuse_bytes`` its resident
memory (``VmRSS``, in bytes: the interpreter, its objects and native buffers alike). A drainer's
figures are its driver process's; Spark's JVM and its executors are other processes. Without
``/proc`` neither series is exported.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

STATUS = Path("/proc/self/status")
GOROUTINES = "go_goroutines"
HEAP_INUSE = "go_memstats_heap_inuse_bytes"


def process_status(path: Path = STATUS) -> tuple[int, int] | None:
    """``(threads, resident bytes)`` of this process, None where ``/proc`` is not there."""
    try:
        text = path.read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    rss_kb = fields["VmRSS"].split()[0]   # "123456 kB"
    return int(fields["Threads"]), int(rss_kb) * 1024


class NodeCollector(Collector):
    """Collects the node row's two series from :func:`process_status` at each scrape or push."""

    def __init__(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(GOROUTINES, ""), GaugeMetricFamily(HEAP_INUSE, "")]

    def collect(self) -> Iterator[Metric]:
        status = process_status()
        if status is None:
            return
        threads, resident = status
        yield GaugeMetricFamily(GOROUTINES, "binlake: the process's threads (Python has no goroutines)",
                                value=threads)
        yield GaugeMetricFamily(HEAP_INUSE, "binlake: the process's resident memory in bytes (VmRSS; Python "
                                "has no Go heap)", value=resident)
