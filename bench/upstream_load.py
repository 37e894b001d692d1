"""Sustained committed transactions per second of the upstream emulator against two real pumps,
beside the pumps' own write ceiling measured in the same run.

Same run, same two ``binlake pump`` processes (sync-log = true), same number of client threads:
  baseline  raw ``PumpWriter`` prewrite + commit pairs (prewrite payload of the emulator's size,
            timestamps from the same TSO), threads alternating between the two pumps;
  emulator  transactions of 5 row changes (multi-row INSERT of new keys, or 3 UPDATEs + 2 INSERTs)
            through the full path: session, row encoding, KV 2PC with locks, PumpsClient prewrite in
            parallel with the KV prewrite, commit ts, async commit binlog.
Then a short single-thread cProfile of the emulator path shows where the time goes.

    .venv/bin/python bench/upstream_load.py                 # 20 s per phase, 8 threads
    .venv/bin/python bench/upstream_load.py --seconds 5     # quick
"""
from __future__ import annotations

import argparse
import cProfile
import datetime
import io
import platform
import pstats
import random
import sys
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from binlake.local import PumpProcess, PumpWriter  # noqa: E402
from ingest import binlog as bl  # noqa: E402
from schemas import binlog_pb2  # noqa: E402
from upstream import sql as S  # noqa: E402
from upstream.cluster import Cluster  # noqa: E402
from upstream.errors import TxnAborted  # noqa: E402
from upstream.exprs import Cmp, Col, Lit  # noqa: E402

ROWS = 5


def baseline(pumps: list[PumpProcess], cluster: Cluster, threads: int, seconds: float, payload: int) -> float:
    """Prewrite+commit pairs per second written straight to the pumps."""
    count = [0] * threads
    stop = time.monotonic() + seconds
    value = bytes(random.Random(1).randrange(256) for _ in range(payload))

    def run(i: int) -> None:
        w = PumpWriter(pumps[i % len(pumps)].addr, cluster.cluster_id)
        while time.monotonic() < stop:
            s = cluster.ts()
            w.write(bl.marshal_gogo(binlog_pb2.Binlog(tp=bl.PREWRITE, start_ts=s, prewrite_key=b"t\x80k",
                                                      prewrite_value=value)))
            c = cluster.ts()
            w.write(bl.marshal_gogo(binlog_pb2.Binlog(tp=bl.COMMIT, start_ts=s, commit_ts=c, prewrite_key=b"t\x80k")))
            count[i] += 1
        w.close()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(count) / (time.monotonic() - t0)


class Load:
    """The emulator-side load: per-thread key spaces, 5 row changes per transaction."""

    def __init__(self, cluster: Cluster, threads: int) -> None:
        self.cluster = cluster
        self.threads = threads
        cluster.execute("create table bench (id bigint primary key, a varchar(32), b decimal(10,2), "
                        "c datetime, d int, e json)")
        self.now = datetime.datetime(2024, 5, 1, 12, 0, 0)

    def row(self, rng: random.Random, key: int) -> list[object]:
        return [key, f"name-{rng.randrange(10**6)}", Decimal(rng.randrange(10**7)) / 100, self.now,
                rng.randrange(10**9), '{"k": 1}']

    def worker(self, i: int, stop_at: float, counts: list[int], aborts: list[int], base: int = 0) -> None:
        rng = random.Random(i)
        session = self.cluster.server(i % len(self.cluster.servers)).session()
        keys: list[int] = []
        n = 0
        while time.monotonic() < stop_at:
            stmts: list[S.Statement] = []
            if len(keys) >= 3 and rng.random() < 0.5:
                for k in rng.sample(keys, 3):
                    stmts.append(S.Update(None, "bench", [("d", Lit(rng.randrange(10**9)))], Cmp("=", Col("id"), Lit(k))))
                new = 2
            else:
                new = ROWS
            fresh = []
            for _ in range(new):
                n += 1
                fresh.append(base + n * self.threads + i)
            stmts.append(S.Insert(None, "bench", None, [self.row(rng, k) for k in fresh]))
            try:
                session.run(S.Begin())
                for s in stmts:
                    session.run(s)
                session.run(S.Commit())
                keys.extend(fresh)
                counts[i if not base else 0] += 1
            except TxnAborted:
                session.txn = None
                aborts[i if not base else 0] += 1

    def run(self, seconds: float) -> tuple[float, int]:
        counts = [0] * self.threads
        aborts = [0] * self.threads
        stop = time.monotonic() + seconds
        ts = [threading.Thread(target=self.worker, args=(i, stop, counts, aborts)) for i in range(self.threads)]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        elapsed = time.monotonic() - t0
        return sum(counts) / elapsed, sum(aborts)


def prewrite_size(cluster: Cluster, load: Load) -> int:
    txn = cluster.server(0).begin()
    from upstream.dml import run_dml
    run_dml(txn, S.Insert(None, "bench", None, [load.row(random.Random(0), -k - 1) for k in range(ROWS)]),
            "test", cluster.catalog)
    return len(txn.prewrite_value().SerializeToString())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds per phase")
    ap.add_argument("--threads", type=int, default=8, help="client threads in both phases")
    ap.add_argument("--profile-seconds", type=float, default=3.0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="upstream-bench-"))
    registry = f"file://{work / 'registry.json'}"
    cluster = Cluster(registry=registry, servers=2)
    pumps = [PumpProcess(data_dir=work / f"pump-{i}", pd_url=cluster.tso_url, registry=registry,
                         node_id=f"pump-{i}", extra_args=["--upstream-status-url", cluster.status_url]).start()
             for i in (1, 2)]
    try:
        load = Load(cluster, args.threads)
        size = prewrite_size(cluster, load)
        print(f"machine: {platform.platform()}, {__import__('os').cpu_count()} cores, Python {platform.python_version()}")
        print(f"date: {datetime.date.today()}  threads: {args.threads}  seconds/phase: {args.seconds:g}  "
              f"prewrite_value: {size} bytes ({ROWS} rows)")
        base = baseline(pumps, cluster, args.threads, args.seconds, size)
        print(f"baseline  raw PumpWriter prewrite+commit pairs : {base:8.0f} /s")
        tps, aborts = load.run(args.seconds)
        t0 = time.monotonic()
        cluster.flush(120)
        print(f"emulator  committed transactions (5 rows each) : {tps:8.0f} /s   "
              f"(aborts {aborts}; commit binlogs drained {time.monotonic() - t0:.1f}s after)")
        print(f"ratio emulator / baseline: {tps / base:.2f}   target 2000 txn/s: {'met' if tps >= 2000 else 'NOT met'}")
        prof = cProfile.Profile()
        counts, aborts_l = [0], [0]
        prof.enable()
        t1 = time.monotonic()
        load.worker(0, time.monotonic() + args.profile_seconds, counts, aborts_l, base=10**12)
        single = counts[0] / (time.monotonic() - t1)
        prof.disable()
        cluster.flush(60)
        print(f"\nprofile: one thread, {counts[0]} txns ({single:.0f} txn/s under the profiler); "
              f"top functions by own time:")
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])
    finally:
        cluster.close()
        for p in pumps:
            p.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
