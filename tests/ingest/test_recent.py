"""The recent-entries cache answers range scans exactly as the LevelDB index does, whenever it answers."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from ingest import binlog as bl
from ingest.pump.storage import Storage, StorageConfig
from ingest.pump.storage.index import Entry, Index
from ingest.pump.storage.recent import RecentEntries
from ingest.pump.storage.vlog import Pointer
from tests.waiting import wait_for


def _entry(rng: random.Random, key: int, seq: int) -> Entry:
    """An entry keyed ``key``: a prewrite (key = start_ts) or a commit/rollback (key = commit_ts)."""
    tp = rng.choice((bl.PREWRITE, bl.COMMIT, bl.ROLLBACK))
    if tp == bl.PREWRITE:
        return Entry(key, tp, key, 0, Pointer(seq // 1000, seq))
    return Entry(key, tp, max(1, key - rng.randint(0, 50)), key, Pointer(seq // 1000, seq))


@pytest.mark.parametrize("seed", range(6))
def test_select_equals_leveldb_through_writes_rewrites_eviction_gc_and_reopen(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    index = Index(tmp_path / "kv")
    cache = RecentEntries(capacity=rng.choice((0, 40, 100, 1000)), block=rng.choice((8, 16, 64)))
    seq, top, answered = 0, 10, 0
    for step in range(120):
        op = rng.random()
        if op < 0.75:                                   # a batch of writes, keys roughly rising
            batch = []
            for _ in range(rng.randint(1, 30)):
                seq += 1
                top += rng.randint(0, 3)
                key = top - rng.randint(0, 40) if rng.random() < 0.3 else top   # late and rewritten keys
                batch.append(_entry(rng, max(1, key), seq))
            cache.add(index.put_entries(batch, head=None))
        elif op < 0.85:                                 # GC: the floor rises before LevelDB deletes
            purge = rng.randint(0, top)
            cache.raise_floor(purge)
            index.delete_through(purge)
        elif op < 0.92:                                 # a restart: the cache starts from LevelDB
            cache = RecentEntries(cache.capacity, cache.block)
            cache.load(index.newest_values())
        for _ in range(5):
            a = rng.randint(0, top + 5)
            b = rng.randint(a, top + 10)
            got = cache.select(a, b)
            if got is None:
                assert a < cache.floor
                continue
            answered += 1
            assert got.tobytes() == b"".join(c.tobytes() for c in index.raw_chunks(a, b)), (step, a, b, cache.floor)
    if cache.capacity:
        assert answered > 50, "the cache answered almost nothing: the test would prove little"
    else:
        assert answered == 0
    index.close()


def test_memory_and_leveldb_scans_agree_and_are_counted(tmp_path: Path) -> None:
    """Through Storage: the same records from the cache, from LevelDB (cache off), and after a reopen."""
    payloads: dict[int, bytes] = {}

    def scans(s: Storage) -> list[list[tuple[int, bytes]]]:
        ranges = [(0, 0), (0, 150), (90, 160), (150, 0), (299, 0)]
        return [[(e.key_ts, p) for e, p in s.scan(a, b)] for a, b in ranges]

    def source_counts(s: Storage) -> tuple[float, float]:
        return (s.metrics.scans.labels("memory")._value.get(), s.metrics.scans.labels("leveldb")._value.get())

    opts = StorageConfig(stop_write_at_available_space=0, sync_log=False)
    s = Storage(tmp_path, opts)
    for start in range(1, 200, 2):          # prewrite at start, commit at start + 101 (out of key order)
        payloads[start] = bl.marshal_gogo(bl.binlog_pb2.Binlog(tp=bl.PREWRITE, start_ts=start,
                                                               prewrite_value=b"v" * start))
        s.write(payloads[start], bl.PREWRITE, start, 0)
        payloads[start + 101] = bl.marshal_gogo(bl.binlog_pb2.Binlog(tp=bl.COMMIT, start_ts=start,
                                                                     commit_ts=start + 101))
        s.write(payloads[start + 101], bl.COMMIT, start, start + 101)
    wait_for(lambda: s.max_commit_ts == 300)
    from_memory = scans(s)
    assert source_counts(s) == (5, 0)
    assert [k for k, _ in from_memory[0]] == sorted(payloads) and all(payloads[k] == p for k, p in from_memory[0])
    s.close()

    s = Storage(tmp_path, StorageConfig(stop_write_at_available_space=0, sync_log=False, scan_cache_entries=0))
    assert scans(s) == from_memory and source_counts(s) == (0, 5)
    s.close()

    s = Storage(tmp_path, opts)             # reopened: the cache is loaded from LevelDB
    assert scans(s) == from_memory and source_counts(s) == (5, 0)
    s.close()

    s = Storage(tmp_path, StorageConfig(stop_write_at_available_space=0, sync_log=False, scan_cache_entries=50))
    assert s.recent.floor > 0 and len(s.recent) == 50   # only the newest 50 keys: older ranges use LevelDB
    assert scans(s) == from_memory
    memory, leveldb = source_counts(s)
    assert memory >= 1 and leveldb >= 1
    s.close()


def test_no_cache_means_every_scan_reads_leveldb() -> None:
    cache = RecentEntries(capacity=0)
    cache.add([Entry(5, bl.PREWRITE, 5, 0, Pointer(0, 0)).pack()])
    assert len(cache) == 0 and cache.select(0, 10) is None
    ones = RecentEntries(capacity=10, block=4)
    ones.add([Entry(k, bl.PREWRITE, k, 0, Pointer(0, k)).pack() for k in range(1, 31)])
    assert len(ones) <= 10 + 4 and ones.floor >= 30 - 10 - 4
    got = ones.select(ones.floor, 30)
    assert got is not None and np.array_equal(got["start"], np.arange(ones.floor + 1, 31))
