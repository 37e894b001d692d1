"""Prometheus metrics as TiDB Binlog's Go processes export them, for its Grafana dashboard and alert
rules. TiDB's Go client exports a counter under exactly its declared name (``binlog_drainer_event``,
``binlog_pump_storage_error_count``: no ``_total`` added) and without a ``_created`` sample;
:class:`GoCounter` is such a counter, and :func:`render` the text format that names it so
(prometheus_client's ``generate_latest`` would head it ``…_total``). :func:`push` sends that text to
a Pushgateway."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

import requests
from prometheus_client import CollectorRegistry, Counter, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.samples import Sample

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


def push(gateway: str, job: str, registry: CollectorRegistry, grouping: Mapping[str, str],
         timeout: float = 10.0) -> None:
    """PUT :func:`render` of ``registry`` to the Pushgateway at ``gateway`` under ``job`` and the
    ``grouping`` labels; ``OSError`` (``requests``' errors are) when it fails."""
    base = gateway if "://" in gateway else f"http://{gateway}"
    url = base.rstrip("/") + f"/metrics/job/{quote(job, safe='')}"
    url += "".join(f"/{quote(k, safe='')}/{quote(v, safe='')}" for k, v in sorted(grouping.items()))
    resp = requests.put(url, data=render(registry), headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4},
                        timeout=timeout)
    if resp.status_code >= 300:
        raise OSError(f"the Pushgateway answered HTTP {resp.status_code}: {resp.text[:200]}")
