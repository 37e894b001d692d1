"""Pull stage (runs in Spark tasks): stream a pump's raw records of a ts sub-range into Arrow.

Each task reads one pump and one sub-range and keeps only what pairing needs: prewrites with their
payload, and real commits (fake binlogs and rollbacks are dropped here; a commit's payload is not
needed — its prewrite carries the transaction — except for the DDL job id a DDL transaction's
commit binlog keeps: ``ddl_job_id`` gives the run each DDL's commit position, which decides the
schema a DML committed after it is decoded with).

A pump is read through ``binlake.v1.PumpScan`` (``scan_range``: every record, prewrites keyed by
start_ts) or TiDB's ``/binlog.Pump/PullBinlogs`` (``pull_range``: commit binlogs with their
prewrite joined in by the pump, sought from the sub-range's start). A pulled commit becomes the two
rows a scan would give: a prewrite row carrying the joined binlog (the decoder reads only its
prewrite fields) and a commit row without payload, so pairing and decoding treat both sources alike.

Each task also counts what its pump sent (:class:`PumpReads`, TiDB Binlog's drainer observes the same
per binlog): the payload bytes of every binlog received, and for every binlog carrying its commit ts
(commits, fake binlogs) the seconds from that ts's physical time to its arrival. The counts go to the
driver through a Spark accumulator (:class:`ReadsParam`), summed per pump node id: a few hundred
numbers per pump, never rows. A commit binlog that does not decode fails the task with
:class:`ingest.errors.MalformedBinlog`.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.accumulators import Accumulator, AccumulatorParam

from ingest import binlog as bl
from ingest.errors import MalformedBatch
from ingest.metrics_text import DURATION_BUCKETS, SIZE_BUCKETS, BucketCounts
from ingest.pull_client import PullClient
from ingest.scan_client import ScanBatch, ScanClient
from ingest.security import SecurityConfig
from transform.codec import mysqltypes as mt

RAW_SCHEMA = pa.schema([
    pa.field("tp", pa.int32(), nullable=False),
    pa.field("start_ts", pa.int64(), nullable=False),
    pa.field("commit_ts", pa.int64(), nullable=False),
    pa.field("payload", pa.binary()),
    pa.field("source", pa.int32(), nullable=False),   # the pull task that read it (pairing picks one copy)
    pa.field("ddl_job_id", pa.int64(), nullable=False),   # commits of DDL jobs (not delete-only states): the job
])
TASK_DDL = "addr string, node_id string, cluster_id long, from_ts long, to_ts long, source int, protocol string"
PUMP_SCAN = "PumpScan"         # a pump's protocol: binlake.v1.PumpScan (scans, prewrite lookups, Watermark)
PULL_BINLOGS = "PullBinlogs"   # … or binlog.Pump/PullBinlogs, TiDB Binlog's drainer protocol
PULL_ROWS = 8192               # pulled commits per Arrow batch
PULL_IDLE_TIMEOUT = 120.0      # seconds a PullBinlogs pump may send nothing before the task fails
LOOKUP_SOURCE = -1   # ``source`` of prewrites looked up on the driver (older than the range)


@dataclass
class PumpReads:
    """What pull tasks received from one pump: each binlog's payload bytes (``size``) and, for each
    binlog carrying its commit ts, the seconds from that ts's physical time to its arrival (``reach``)."""

    size: BucketCounts = field(default_factory=lambda: BucketCounts(SIZE_BUCKETS))
    reach: BucketCounts = field(default_factory=lambda: BucketCounts(DURATION_BUCKETS))

    def merge(self, other: PumpReads) -> None:
        """Add ``other``'s counts to these."""
        self.size.merge(other.size)
        self.reach.merge(other.reach)


Reads = dict[str, PumpReads]   # by pump node id


class ReadsParam(AccumulatorParam[Reads]):
    """Sums the :data:`Reads` of every pull task into one (a Spark accumulator's rules)."""

    def zero(self, value: Reads) -> Reads:
        return {}

    def addInPlace(self, value1: Reads, value2: Reads) -> Reads:
        for node, reads in value2.items():
            value1.setdefault(node, PumpReads()).merge(reads)
        return value1


def observe_batch(batch: ScanBatch, reads: PumpReads) -> None:
    """Count a scan batch: every record's payload size; the reach of its commits and fake binlogs."""
    now = time.time()
    reads.size.observe_many(batch.lengths)
    committed = (batch.tp == bl.COMMIT) | ((batch.tp == bl.ROLLBACK) & (batch.start_ts == batch.commit_ts)
                                           & (batch.start_ts != 0))
    reads.reach.observe_many(now - (batch.commit_ts[committed] >> 18) / 1000)   # seconds since the commit


def payload_array(batch: ScanBatch) -> pa.BinaryArray:
    """The batch's payloads, in record order, as one Arrow binary array.

    ``data`` is viewed (no copy) as a binary array that alternates the bytes before each payload
    with the payload, in data order; one ``take`` then gathers the payloads in record order (a
    C++ copy)."""
    n = len(batch)
    starts = batch.offsets.astype(np.int64)
    ends = starts + batch.lengths
    in_order = n == 0 or bool((starts[1:] >= ends[:-1]).all())  # the usual case: data order = record order
    order = None if in_order else np.argsort(starts, kind="stable")
    s, e = (starts, ends) if order is None else (starts[order], ends[order])
    if n and (bool((s[1:] < e[:-1]).any()) or int(e[-1]) > len(batch.data)):
        raise MalformedBatch("RecordBatch payload ranges overlap or end past its data")
    bounds = np.zeros(2 * n + 1, dtype=np.int32)
    bounds[1::2] = s
    bounds[2::2] = e
    pieces = pa.Array.from_buffers(pa.binary(), 2 * n, [None, pa.py_buffer(bounds), pa.py_buffer(batch.data)])
    picks = np.arange(1, 2 * n, 2)
    if order is not None:
        picks[order] = picks.copy()
    return pieces.take(pa.array(picks))


def batch_to_arrow(batch: ScanBatch, source: int = 0) -> pa.RecordBatch:
    """The prewrites and real commits of one scan batch, tagged with the pull task ``source``."""
    tp, start, commit = batch.tp, batch.start_ts, batch.commit_ts
    commits = (tp == bl.COMMIT) & (start != commit)
    keep = (tp == bl.PREWRITE) | commits
    rb = pa.RecordBatch.from_arrays([pa.array(tp), pa.array(start), pa.array(commit), payload_array(batch),
                                     pa.array(np.full(len(tp), source, np.int32)), ddl_job_ids(batch, commits)],
                                    schema=RAW_SCHEMA)
    return rb if keep.all() else rb.filter(pa.array(keep))


def ddl_job_ids(batch: ScanBatch, commits: np.ndarray) -> pa.Int64Array:
    """Per record: the DDL job id its commit binlog names (TiDB keeps the DDL fields in the commit
    binlog), 0 for DML commits, prewrites and the delete-only state's extra DDL binlog."""
    out = np.zeros(len(batch.tp), np.int64)
    data = memoryview(batch.data)
    for i in np.flatnonzero(commits).tolist():
        off = int(batch.offsets[i])
        b = bl.parse(bytes(data[off:off + int(batch.lengths[i])]))   # MalformedBinlog when it does not decode
        out[i] = ddl_commit_job(b.ddl_job_id, b.ddl_schema_state)
    return pa.array(out, pa.int64())


def ddl_commit_job(job_id: int, schema_state: int) -> int:
    """The DDL job whose commit position a commit binlog with these DDL fields marks (0: none; the
    delete-only state's extra binlog of DROP COLUMN marks none)."""
    return job_id if schema_state != mt.STATE_DELETE_ONLY else 0


def scan_range(addr: str, cluster_id: int, from_ts: int, to_ts: int, source: int = 0,
               security: SecurityConfig | None = None, reads: PumpReads | None = None) -> Iterator[pa.RecordBatch]:
    """Every prewrite and real commit of one pump with key ts in ``(from_ts, to_ts]`` (TLS with
    ``security``); every record received is counted in ``reads``."""
    tls = security.h2_client_context() if security else None
    with ScanClient(addr, cluster_id, timeout=600.0, tls=tls) as client:
        for batch in client.scan_batches(from_ts, to_ts):
            if len(batch.tp):
                if reads is not None:
                    observe_batch(batch, reads)
                yield batch_to_arrow(batch, source)


def pull_range(addr: str, cluster_id: int, from_ts: int, to_ts: int, source: int = 0,
               security: SecurityConfig | None = None, compressor: str = "",
               idle_timeout: float = PULL_IDLE_TIMEOUT, reads: PumpReads | None = None) -> Iterator[pa.RecordBatch]:
    """Every real commit of one pump's PullBinlogs stream with commit ts in ``(from_ts, to_ts]``, as a
    prewrite row (the joined binlog) and a commit row each. ``to_ts`` must not be above the pump's
    watermark: the read ends at the first binlog at or past it. Every binlog received (fake ones
    too) is counted in ``reads``."""
    tls = security.h2_client_context() if security else None
    client = PullClient(addr, cluster_id, idle_timeout, tls, compressor)
    tp: list[int] = []
    start: list[int] = []
    commit: list[int] = []
    payload: list[bytes | None] = []
    job: list[int] = []
    for item in client.read_range(from_ts, to_ts):
        if reads is not None:
            reads.size.observe(len(item.payload))
            reads.reach.observe(time.time() - (item.commit_ts >> 18) / 1000)
        if item.fake or item.tp != bl.COMMIT:
            continue
        ddl = ddl_commit_job(item.ddl_job_id, item.ddl_schema_state)
        tp += (bl.PREWRITE, bl.COMMIT)
        start += (item.start_ts, item.start_ts)
        commit += (0, item.commit_ts)
        payload += (item.payload, None)
        job += (0, ddl)
        if len(tp) >= 2 * PULL_ROWS:
            yield _pulled(tp, start, commit, payload, job, source)
            tp, start, commit, payload, job = [], [], [], [], []
    if tp:
        yield _pulled(tp, start, commit, payload, job, source)


def _pulled(tp: list[int], start: list[int], commit: list[int], payload: list[bytes | None], job: list[int],
            source: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(tp, pa.int32()), pa.array(start, pa.int64()),
                                       pa.array(commit, pa.int64()), pa.array(payload, pa.binary()),
                                       pa.array(np.full(len(tp), source, np.int32)), pa.array(job, pa.int64())],
                                      schema=RAW_SCHEMA)


def pull_tasks(security: SecurityConfig, compressor: str, received: Accumulator[Reads],
               batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: each input row is a task (addr, node_id, cluster_id, from_ts, to_ts,
    source, protocol); the executor reads ``security``'s files at their paths (they must exist there
    too). What the pumps sent is added to ``received`` (a Spark accumulator of :class:`ReadsParam`)
    once every task of the partition has ended."""
    counted: Reads = {}
    for tasks in batches:
        for task in tasks.to_pylist():
            yield from pull_task(task, security, compressor, counted)
    received.add(counted)


def pull_task(task: dict[str, Any], security: SecurityConfig, compressor: str,
              counted: Reads) -> Iterator[pa.RecordBatch]:
    """One pull task (a ``TASK_DDL`` row as a dict): its pump's records of its sub-range, what the pump
    sent counted into ``counted`` under the pump's node id."""
    args = (task["addr"], task["cluster_id"], task["from_ts"], task["to_ts"], task["source"], security)
    reads = counted.setdefault(task["node_id"], PumpReads())
    if task["protocol"] == PULL_BINLOGS:
        return pull_range(*args, compressor=compressor, reads=reads)
    if task["protocol"] == PUMP_SCAN:
        return scan_range(*args, reads=reads)
    raise ValueError(f"unknown pump protocol {task['protocol']!r}")


def split_range(from_ts: int, to_ts: int, parts: int) -> list[tuple[int, int]]:
    """``(from_ts, to_ts]`` cut into at most ``parts`` contiguous sub-ranges covering it exactly."""
    parts = max(1, min(parts, to_ts - from_ts))
    step = (to_ts - from_ts) // parts
    bounds = [from_ts + i * step for i in range(parts)] + [to_ts]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


def lookup_prewrites(addrs: Iterable[str], cluster_id: int, start_ts: list[int],
                     security: SecurityConfig | None = None) -> pa.Table:
    """The prewrites of ``start_ts`` found on any of the pumps (one row per start_ts; TLS with ``security``)."""
    tls = security.h2_client_context() if security else None
    found: dict[int, bytes] = {}
    wanted = set(start_ts)
    for addr in addrs:
        missing = sorted(wanted - set(found))
        if not missing:
            break
        with ScanClient(addr, cluster_id, timeout=120.0, tls=tls) as client:
            for rec in client.lookup_prewrites(missing):
                if rec.tp == bl.PREWRITE and rec.start_ts in wanted:
                    found.setdefault(rec.start_ts, rec.payload)
    keys = sorted(found)
    return pa.table({"start_ts": pa.array(keys, pa.int64()),
                     "payload": pa.array([found[k] for k in keys], pa.binary()),
                     "source": pa.array([LOOKUP_SOURCE] * len(keys), pa.int32())})
