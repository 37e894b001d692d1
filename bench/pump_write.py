"""WriteBinlog throughput of one real pump (sync-log = true) beside a no-op ``binlog.Pump`` server.

Both servers get the same load in the same run: ``--clients`` WriteBinlog calls in flight (grpc.aio,
from ``--client-procs`` load processes), transactions of one prewrite (``--payload`` bytes of
prewrite_value) and, after its ack, one commit whose commit_ts is allocated after that ack. The
no-op server is a separate process, grpcio's server (grpc.aio on uvloop, the pump's message limits)
whose WriteBinlog returns at once. Afterwards every
acknowledged record is checked to be stored exactly once, through the pump's range scan and in the
value log itself.

    .venv/bin/python bench/pump_write.py                  # 1 GiB of payload (the reference run)
    .venv/bin/python bench/pump_write.py --bytes 64MiB    # a quick run
"""
from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    CLUSTER_ID,
    BenchError,
    LoadResult,
    LocalPump,
    MiB,
    NoopServer,
    Sampler,
    SharedOracle,
    code_version,
    cpu_seconds,
    fmt_size,
    iter_frames,
    machine_line,
    parse_size,
    percentile,
    run_load,
    vlog_files,
    wait_watermark,
)
from schemas import binlog_pb2

RATIO_TARGET = 0.7
RSS_TARGET = 300 * MiB


def _run(name: str, addr: str, server_pid: int, args: argparse.Namespace, txns: int, oracle: object,
         sample_rss: bool) -> tuple[LoadResult, dict[str, float]]:
    sampler = Sampler({name: server_pid}, interval=0.1) if sample_rss else None
    marks: dict[str, float] = {}

    def on_start() -> None:
        marks["server_cpu0"] = cpu_seconds(server_pid)
        marks["sys0"] = sum(psutil.cpu_times()[:3])  # user, nice, system of the machine
        marks["bench0"] = cpu_seconds(os.getpid())
        if sampler is not None:
            sampler.start()

    print(f"  {name}: {txns} transactions from {args.client_procs} load process(es), "
          f"{args.clients} calls in flight ...", flush=True)
    result = run_load(addr, txns, args.clients, args.payload, oracle,
                      procs=args.client_procs, on_start=on_start)
    stats = {"server_cpu": cpu_seconds(server_pid) - marks["server_cpu0"],
             "machine_busy": sum(psutil.cpu_times()[:3]) - marks["sys0"],
             "bench_cpu": cpu_seconds(os.getpid()) - marks["bench0"]}
    if sampler is not None:
        sampler.stop()
        stats["peak_rss"] = sampler.peak_rss[name]
    if result.errors:
        raise BenchError(f"{name}: {len(result.errors)} failed calls, first: {result.errors[0]}")
    return result, stats


def _verify(pump: LocalPump, result: LoadResult) -> list[str]:
    """Check through the range scan, and in the value log, that each acked record is stored once."""
    from ingest.scan_client import ScanClient

    lines = []
    last_commit = max(result.commit_ts) if len(result.commit_ts) else 0
    t0 = time.monotonic()
    wm = wait_watermark(pump.addr, last_commit, timeout=300)
    lines.append(f"watermark {wm} >= last acknowledged commit_ts {last_commit} "
                 f"({time.monotonic() - t0:.2f}s after the last ack)")
    acked_starts = np.sort(np.frombuffer(result.start_ts, dtype=np.int64))
    acked_pairs = np.frombuffer(result.commit_ts, dtype=np.int64)
    order = np.argsort(acked_pairs)
    acked_commits = acked_pairs[order]
    acked_commit_starts = np.frombuffer(result.start_ts, dtype=np.int64)[order]

    pre, com, com_start, fakes, other = [], [], [], 0, 0
    t0 = time.monotonic()
    with ScanClient(pump.addr, CLUSTER_ID, timeout=600) as client:
        for batch in client.scan_batches(0, wm):
            tp = np.array(batch.tp, dtype=np.int32)
            st = np.array(batch.start_ts, dtype=np.int64)
            ct = np.array(batch.commit_ts, dtype=np.int64)
            pre.append(st[tp == 0])
            is_c = tp == 1
            com.append(ct[is_c])
            com_start.append(st[is_c])
            fake = (tp == 2) & (st == ct)
            fakes += int(fake.sum())
            other += int((~((tp == 0) | is_c | fake)).sum())
    scanned_pre = np.sort(np.concatenate(pre)) if pre else np.array([], dtype=np.int64)
    c = np.concatenate(com) if com else np.array([], dtype=np.int64)
    cs = np.concatenate(com_start) if com_start else np.array([], dtype=np.int64)
    o = np.argsort(c, kind="stable")
    ok_pre = np.array_equal(scanned_pre, acked_starts)
    ok_com = np.array_equal(c[o], acked_commits) and np.array_equal(cs[o], acked_commit_starts)
    lines.append(f"range scan (0, {wm}] in {time.monotonic() - t0:.1f}s: {len(scanned_pre)} prewrites "
                 f"(acked {len(acked_starts)}), {len(c)} commits (acked {len(acked_commits)}), "
                 f"{fakes} fake binlogs, {other} other -> "
                 f"{'OK, each acknowledged record exactly once' if ok_pre and ok_com and not other else 'MISMATCH'}")

    # The index is keyed by ts, so a record written twice would show once in a scan: count the
    # frames in the value log as well.
    t0 = time.monotonic()
    n_pre = n_com = n_fake = n_other = 0
    binlog = binlog_pb2.Binlog()
    for path in vlog_files(pump.data_dir):
        for payload in iter_frames(path):
            binlog.ParseFromString(payload)
            if binlog.tp == 0:
                n_pre += 1
            elif binlog.tp == 1:
                n_com += 1
            elif binlog.start_ts == binlog.commit_ts:
                n_fake += 1
            else:
                n_other += 1
    ok_vlog = n_pre == len(acked_starts) and n_com == len(acked_commits) and n_other == 0
    lines.append(f"value log frames ({time.monotonic() - t0:.1f}s): {n_pre} prewrites, {n_com} commits, "
                 f"{n_fake} fake, {n_other} other -> {'OK, no duplicates' if ok_vlog else 'MISMATCH'}")
    if not (ok_pre and ok_com and ok_vlog and other == 0):
        raise BenchError("stored records do not match the acknowledged ones:\n  " + "\n  ".join(lines))
    return lines


def _pump_metrics(pump: LocalPump) -> dict[str, float]:
    """Sums and counts of the pump's write histograms, from its ``/metrics``."""
    from upstream.local import http

    status, body = http("GET", f"{pump.pump.status_url}/metrics")
    wanted = {'binlog_pump_storage_write_binlog_duration_time_count{type="batch"}': "batches",
              'binlog_pump_storage_write_binlog_duration_time_sum{type="batch"}': "batch_secs",
              'binlog_pump_rpc_duration_seconds_count{label="succ",method="WriteBinlog"}': "rpcs",
              'binlog_pump_rpc_duration_seconds_sum{label="succ",method="WriteBinlog"}': "rpc_secs",
              'binlog_pump_storage_slow_chaser_count_total{type="on"}': "chaser"}
    out: dict[str, float] = {}
    for line in body.decode().splitlines():
        name, _, value = line.rpartition(" ")
        if name in wanted:
            out[wanted[name]] = float(value)
    return out


def _row(name: str, r: LoadResult, st: dict[str, float]) -> str:
    lat = r.latencies
    return (f"  {name:<8} {r.txns / r.elapsed:>10,.0f} {r.binlogs / r.elapsed:>10,.0f} "
            f"{r.payload_bytes / r.elapsed / MiB:>9.2f} {percentile(lat, 0.5) * 1e3:>8.2f} "
            f"{percentile(lat, 0.99) * 1e3:>8.2f} {percentile(r.prewrite_lat, 0.5) * 1e3:>8.2f} "
            f"{percentile(r.commit_lat, 0.5) * 1e3:>8.2f} {r.elapsed:>8.1f} "
            f"{r.client_cpu / r.elapsed:>6.2f} {st['server_cpu'] / r.elapsed:>6.2f} "
            f"{st['machine_busy'] / r.elapsed:>6.2f} "
            f"{(st['machine_busy'] - st['bench_cpu'] - r.client_cpu - st['server_cpu']) / r.elapsed:>6.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", type=parse_size, default=parse_size("1GiB"),
                    help="total prewrite_value payload to write (default 1GiB; e.g. 64MiB)")
    ap.add_argument("--clients", type=int, default=32, help="WriteBinlog calls in flight (default 32)")
    ap.add_argument("--payload", type=parse_size, default=1024, help="prewrite_value bytes (default 1024)")
    ap.add_argument("--client-procs", type=int, default=1,
                    help="load processes sharing --clients (default 1: one grpc.aio event loop)")
    ap.add_argument("--workers", type=int, default=64,
                    help="unused (the no-op server is grpc.aio, like the pump's)")
    ap.add_argument("--sync-log", default="true", choices=["true", "false"],
                    help="the pump's [storage] sync-log (default true)")
    ap.add_argument("--skip-noop", action="store_true", help="measure the pump only (no ratio)")
    args = ap.parse_args(argv)
    txns = max(1, args.bytes // args.payload)

    print(f"pump_write  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}  {machine_line()}, "
          f"{code_version()}")
    print(f"  {txns} transactions x (prewrite with {args.payload} B prewrite_value + commit) = "
          f"{fmt_size(txns * args.payload)} payload, {args.clients} calls in flight, "
          f"{args.client_procs} load process(es), sync-log={args.sync_log}")

    noop = None
    if not args.skip_noop:
        server = NoopServer(workers=args.workers)
        try:
            oracle = SharedOracle.create(mp.get_context("spawn"))
            noop = _run("no-op", server.addr, server.pid, args, txns, oracle, sample_rss=False)
        finally:
            server.close()

    with LocalPump(extra_args=["--sync-log", args.sync_log]) as pump:
        res, st = _run("pump", pump.addr, pump.pid, args, txns, pump.oracle, sample_rss=True)
        metrics = _pump_metrics(pump)
        checks = _verify(pump, res)
        vlog_bytes = sum(p.stat().st_size for p in vlog_files(pump.data_dir))

    print()
    print(f"  {'server':<8} {'txn/s':>10} {'binlog/s':>10} {'MiB/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'p50 P':>8} {'p50 C':>8} {'secs':>8} {'cliCPU':>6} {'srvCPU':>6} {'allCPU':>6} {'other':>6}")
    if noop is not None:
        print(_row("no-op", *noop))
    print(_row("pump", res, st))
    print("  (MiB/s = prewrite_value payload; p50/p99 over every WriteBinlog call, P = prewrites, "
          "C = commits;\n   CPU columns = cores busy on average: load processes, server process, whole machine,\n"
          "   and what else ran on the machine (other than this benchmark's processes))")
    print(f"  pump wrote {fmt_size(res.wire_bytes)} of marshalled binlogs, "
          f"{fmt_size(vlog_bytes)} of value log")
    if metrics.get("batches") and metrics.get("rpcs"):
        print(f"  pump internals (/metrics): {metrics['batches']:.0f} value-log group commits, "
              f"{metrics['rpcs'] / metrics['batches']:.1f} binlogs each, "
              f"{metrics['batch_secs'] / metrics['batches'] * 1e3:.2f} ms each (write + fdatasync); "
              f"WriteBinlog handler mean {metrics['rpc_secs'] / metrics['rpcs'] * 1e3:.2f} ms vs client-side mean "
              f"{sum(res.latencies) / len(res.latencies) * 1e3:.2f} ms; "
              f"slow chaser activations {metrics.get('chaser', 0):.0f}")
    for line in checks:
        print(f"  check: {line}")
    rss = st["peak_rss"]
    rss_ok = rss < RSS_TARGET
    print(f"  pump peak RSS (sampled every 0.1 s): {rss / MiB:.0f} MiB "
          f"(target < {RSS_TARGET // MiB} MiB: {'met' if rss_ok else 'MISSED'})")
    if noop is not None:
        nres = noop[0]
        ratio = (res.txns / res.elapsed) / (nres.txns / nres.elapsed)
        busy = nres.client_cpu / nres.elapsed / args.client_procs
        print(f"  client: {args.client_procs} load process(es) were {busy:.0%} busy (per process) while driving "
              f"the no-op at {nres.binlogs / nres.elapsed:,.0f} calls/s and "
              f"{res.client_cpu / res.elapsed / args.client_procs:.0%} busy while driving the pump at "
              f"{res.binlogs / res.elapsed:,.0f} calls/s -> "
              + ("the client is not what limits the pump"
                 if busy < 0.9 and res.binlogs / res.elapsed < nres.binlogs / nres.elapsed
                 else "the client may be a limit (add --client-procs)"))
        print(f"  ratio pump/no-op (transactions/s): {ratio:.2f} "
              f"(target >= {RATIO_TARGET}: {'met' if ratio >= RATIO_TARGET else 'MISSED'})")
        print(f"SUMMARY pump_write: pump {res.txns / res.elapsed:,.0f} txn/s "
              f"({res.binlogs / res.elapsed:,.0f} binlog/s, {res.payload_bytes / res.elapsed / MiB:.2f} MiB/s) "
              f"vs no-op {nres.txns / nres.elapsed:,.0f} txn/s = {ratio:.2f} (target 0.7); "
              f"p99 {percentile(res.latencies, 0.99) * 1e3:.1f} vs {percentile(nres.latencies, 0.99) * 1e3:.1f} ms; "
              f"peak RSS {rss / MiB:.0f} MiB; {fmt_size(res.payload_bytes)} written, stored exactly once")
    else:
        print(f"SUMMARY pump_write: pump {res.txns / res.elapsed:,.0f} txn/s "
              f"({res.payload_bytes / res.elapsed / MiB:.2f} MiB/s), peak RSS {rss / MiB:.0f} MiB (no baseline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
