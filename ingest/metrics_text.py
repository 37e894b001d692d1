"""Prometheus metrics as TiDB Binlog's Go processes export them, for its Grafana dashboard and alert
rules. TiDB's Go client exports a counter under exactly its declared name (``binlog_drainer_event``,
``binlog_pump_storage_error_count``: no ``_total`` added) and without a ``_created`` sample;
:class:`GoCounter` is such a counter, and :func:`render` the text format that names it so
(prometheus_client's ``generate_latest`` would head it ``…_total``). :func:`push` sends that text to
a Pushgateway. :class:`BucketCounts` are a histogram's observations as numbers that add up (made
where values are observed, e.g. in a Spark task), :class:`MergedHistogram` a histogram family
exported from such counts merged together."""
from __future__ import annotations

import re
import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import numpy as np
import requests
from prometheus_client import CollectorRegistry, Counter, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

disable_created_metrics()  # type: ignore[no-untyped-call]  # TiDB's Go client has no _created samples; neither does anything binlake exports

# buckets of TiDB Binlog's histograms (prometheus.ExponentialBuckets(start, factor, count))


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """``start · factor^i`` for i = 0 … count-1 (``+Inf`` is added by the histogram)."""
    return tuple(start * factor ** i for i in range(count))


DURATION_BUCKETS = exponential_buckets(0.00005, 2, 18)        # rpc, execute, query, reach durations
WRITE_DURATION_BUCKETS = exponential_buckets(0.00005, 2, 20)  # the pump's storage writes
SIZE_BUCKETS = exponential_buckets(16, 2, 25)                 # binlog sizes: 16 B … 256 MiB
DELAY_BUCKETS = exponential_buckets(0.001, 2, 22)             # checkpoint delay, slow-chaser catch-up


class GoCounter(Counter):
    """A counter exported under its declared name, as TiDB's Go client exports it (render with
    :func:`render`); for a declared name ending in ``_total`` (``binlog_drainer_ddl_jobs_total``) a
    plain ``Counter`` already is."""

    def __init__(self, name: str, documentation: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(name, documentation, *args, **kwargs)
        _GO_NAMES.add(self._name)

    def _child_samples(self) -> Iterable[Sample]:
        return (Sample("", {}, self._value.get(), None, None),)


_GO_NAMES: set[str] = set()   # the families of every GoCounter (the same name means the same metric)


@dataclass
class BucketCounts:
    """One histogram series' observations as numbers that add up: ``counts[i]`` values fell in
    ``(bounds[i-1], bounds[i]]`` (a Prometheus ``le`` bucket, not cumulative), the last count above
    every bound; ``total`` is their sum. Picklable, so a Spark task can hand them to the driver."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Count one value."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def observe_many(self, values: np.ndarray) -> None:
        """Count every value of ``values`` (one vectorised pass)."""
        if not len(values):
            return
        found = np.bincount(np.searchsorted(self.bounds, values, side="left"), minlength=len(self.counts))
        self.counts = [a + b for a, b in zip(self.counts, found.tolist())]
        self.total += float(values.sum())

    def merge(self, other: BucketCounts) -> None:
        """Add ``other``'s observations (same bounds) to these."""
        if other.bounds != self.bounds:
            raise ValueError("histogram counts with different bucket bounds do not add up")
        self.counts = [a + b for a, b in zip(self.counts, other.counts)]
        self.total += other.total

    def cumulative(self) -> list[tuple[str, float]]:
        """The ``(le, count)`` buckets of the text format, ``+Inf`` last."""
        out, running = [], 0
        for bound, n in zip(self.bounds, self.counts):
            running += n
            le = floatToGoString(bound)  # type: ignore[no-untyped-call]  # as prometheus_client's Histogram writes it
            out.append((le, float(running)))
        out.append(("+Inf", float(running + self.counts[-1])))
        return out


class MergedHistogram(Collector):
    """A histogram family (``name``, ``labelnames``, ``bounds``) whose series are :class:`BucketCounts`
    observed elsewhere and merged in with :meth:`add`; exported as a ``Histogram`` would be."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], bounds: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(bounds)
        self._series: dict[tuple[str, ...], BucketCounts] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def add(self, labelvalues: Sequence[str], counts: BucketCounts) -> None:
        """Merge ``counts`` into the series of ``labelvalues``."""
        key = tuple(labelvalues)
        if len(key) != len(self.labelnames):
            raise ValueError(f"{self.name} takes the labels {self.labelnames}, not {key}")
        with self._lock:
            self._series.setdefault(key, BucketCounts(self.bounds)).merge(counts)

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            for key, counts in sorted(self._series.items()):
                family.add_metric(list(key), counts.cumulative(), counts.total)
        yield family


_HEADER = re.compile(r"^# (HELP|TYPE) (\S+)(.*)$")


def render(registry: CollectorRegistry) -> bytes:
    """The text format of ``registry``, a :class:`GoCounter` family headed by its own name."""
    lines = generate_latest(registry).decode().split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        block = [lines[i]]
        i += 1
        while i < len(lines) and not lines[i].startswith("# HELP "):
            block.append(lines[i])
            i += 1
        headers = [m for m in (_HEADER.match(line) for line in block) if m]
        named = headers[0].group(2) if headers else ""
        if named.endswith("_total") and named.removesuffix("_total") in _GO_NAMES:
            go = named.removesuffix("_total")
            block = [f"# {m.group(1)} {go}{m.group(3)}" if (m := _HEADER.match(line)) else line for line in block]
        out.extend(block)
    return "\n".join(out).encode()


def push(gateway: str, job: str, text: bytes, grouping: Mapping[str, str], timeout: float = 10.0) -> None:
    """PUT ``text`` (a registry's :func:`render`) to the Pushgateway at ``gateway`` under ``job`` and
    the ``grouping`` labels; ``OSError`` (``requests``' errors are) when it fails."""
    base = gateway if "://" in gateway else f"http://{gateway}"
    url = base.rstrip("/") + f"/metrics/job/{quote(job, safe='')}"
    url += "".join(f"/{quote(k, safe='')}/{quote(v, safe='')}" for k, v in sorted(grouping.items()))
    resp = requests.put(url, data=text, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4},
                        timeout=timeout)
    if resp.status_code >= 300:
        raise OSError(f"the Pushgateway answered HTTP {resp.status_code}: {resp.text[:200]}")
