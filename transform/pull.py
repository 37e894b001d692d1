"""Pull stage (runs in Spark tasks): stream a pump's raw records of a ts sub-range into Arrow.

Each task reads one pump and one sub-range through the ``binlake.v1`` range scan and keeps only
what pairing needs: prewrites with their payload, and real commits (fake binlogs and rollbacks are
dropped here; a commit's payload is not needed — its prewrite carries the transaction).
"""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa

from ingest import binlog as bl
from ingest.scan_client import ScanClient
from schemas import binlake_pb2

RAW_SCHEMA = pa.schema([
    pa.field("tp", pa.int32(), nullable=False),
    pa.field("start_ts", pa.int64(), nullable=False),
    pa.field("commit_ts", pa.int64(), nullable=False),
    pa.field("payload", pa.binary()),
])
TASK_DDL = "addr string, cluster_id long, from_ts long, to_ts long"


def batch_to_arrow(batch: binlake_pb2.RecordBatch) -> pa.RecordBatch:
    """The prewrites and real commits of one scan batch (payloads zero-copy)."""
    n = len(batch.tp)
    tp = np.fromiter(batch.tp, dtype=np.int32, count=n)
    start = np.fromiter(batch.start_ts, dtype=np.int64, count=n)
    commit = np.fromiter(batch.commit_ts, dtype=np.int64, count=n)
    lengths = np.fromiter(batch.lengths, dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    payload = pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(batch.payloads)])
    keep = (tp == bl.PREWRITE) | ((tp == bl.COMMIT) & (start != commit))
    rb = pa.RecordBatch.from_arrays([pa.array(tp), pa.array(start), pa.array(commit), payload], schema=RAW_SCHEMA)
    return rb.filter(pa.array(keep))


def scan_range(addr: str, cluster_id: int, from_ts: int, to_ts: int) -> Iterator[pa.RecordBatch]:
    """Every prewrite and real commit of one pump with key ts in ``(from_ts, to_ts]``."""
    with ScanClient(addr, cluster_id, timeout=600.0) as client:
        for batch in client.scan_batches(from_ts, to_ts):
            if len(batch.tp):
                yield batch_to_arrow(batch)


def pull_tasks(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: each input row is a task (addr, cluster_id, from_ts, to_ts)."""
    for tasks in batches:
        for task in tasks.to_pylist():
            yield from scan_range(task["addr"], task["cluster_id"], task["from_ts"], task["to_ts"])


def split_range(from_ts: int, to_ts: int, parts: int) -> list[tuple[int, int]]:
    """``(from_ts, to_ts]`` cut into at most ``parts`` contiguous sub-ranges covering it exactly."""
    parts = max(1, min(parts, to_ts - from_ts))
    step = (to_ts - from_ts) // parts
    bounds = [from_ts + i * step for i in range(parts)] + [to_ts]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


def lookup_prewrites(addrs: Iterable[str], cluster_id: int, start_ts: list[int]) -> pa.Table:
    """The prewrites of ``start_ts`` found on any of the pumps (one row per start_ts)."""
    found: dict[int, bytes] = {}
    wanted = set(start_ts)
    for addr in addrs:
        missing = sorted(wanted - set(found))
        if not missing:
            break
        with ScanClient(addr, cluster_id, timeout=120.0) as client:
            for rec in client.lookup_prewrites(missing):
                if rec.tp == bl.PREWRITE and rec.start_ts in wanted:
                    found.setdefault(rec.start_ts, rec.payload)
    keys = sorted(found)
    return pa.table({"start_ts": pa.array(keys, pa.int64()), "payload": pa.array([found[k] for k in keys], pa.binary())})
