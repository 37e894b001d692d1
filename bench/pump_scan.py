"""Range-scan throughput of a pump (``binlake.v1.PumpScan/Scan`` over the whole range) beside reading
the same value-log files raw, measured in the same run.

The pump is filled first through WriteBinlog (``--bytes`` of 1 KiB prewrite_values, one commit per
prewrite, sync-log = true). Then, after one untimed pass of every method below (files warm in the
page cache, the pump's and the client's one-time setup done: dropping caches is not possible here),
each repeat measures in turn:

- plain: a sequential read of every ``value/*.vlog`` in 4 MiB reads (cat-like), the physical floor;
- raw frames (the baseline): the same sequential read, split into records by their 16-byte header
  (``magic u32 | length u64 | crc32c u32``, little-endian), each payload materialized as bytes;
- scan (the measure): ``ScanClient.scan_batches(0)`` up to the watermark, consumed as the Drainer's
  pull stage does: each batch through ``transform.pull.batch_to_arrow`` (columns read in place as
  numpy arrays, the payloads gathered into one Arrow binary array in record order);
- records (info): ``ScanClient.scan(0)``, every record materialized as a ``Record`` with its own
  payload bytes.

The measure reads its index entries from the pump's recent-entries cache (``[storage]
scan-cache-entries``, which holds the whole fill). Afterwards the pump is restarted with the cache
off, and the same scan is timed again beside the raw baseline (info): what a scan of a range older
than the cache costs, with every index entry read from LevelDB.

MiB/s are of record payload (marshalled binlogs) for raw frames and scan, of file bytes for plain.

With ``--libs`` (the default), each round also scans through other HTTP/2 clients, consumed the same
way (every message through ``ScanBatch`` and ``batch_to_arrow``, records and payload bytes checked
against our reader's), and prints client CPU per MiB of payload, MiB/s and pump cores for each:
grpcio (plain text, the baseline: no ``ScanClient`` path uses it), ours (``ingest.http2.stream``: the scan
row above), ``h2`` on a blocking socket on the caller's thread, and ``grpclib`` through a synchronous
wrapper and consumed in a coroutine (its best case); see ``bench/http2_libs.py``. Client CPU is this
process's user + system time during the scan (all its threads); the pump's is sampled from its pid.

With ``--pin``, the pump and this process (the client, and the baseline's reader) are pinned to
different CPUs before the timed passes, as they would run on different machines; by default the
scheduler places both.

    .venv/bin/python bench/pump_scan.py                  # 256 MiB fill (the reference run)
    .venv/bin/python bench/pump_scan.py --bytes 32MiB    # a quick run
    flock /tmp/binlake-bench.lock .venv/bin/python bench/pump_scan.py --bytes 64MiB --repeat 5   # libraries too
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import crc32c
import grpc
import pyarrow.compute as pc

from bench._common import (
    CLUSTER_ID,
    BenchError,
    LocalPump,
    MiB,
    code_version,
    cpu_seconds,
    fmt_size,
    iter_frames,
    machine_line,
    parse_size,
    read_plain,
    run_load,
    vlog_files,
    wait_watermark,
)
from ingest.http2 import HTTP2_OPTIONS
from ingest.scan_client import MAX_MESSAGE, ScanBatch, ScanClient
from schemas import binlake_pb2
from transform.pull import batch_to_arrow
from upstream.tuning import pin_process

RATIO_TARGET = 0.5
SCAN_METHOD = "/binlake.v1.PumpScan/Scan"
LIB_RATIO_KEEP = 1.5   # keep hand-written framing only where a library costs at least this much more CPU


def _raw_frames(paths: list[Path]) -> tuple[int, int]:
    n = size = 0
    for path in paths:
        for payload in iter_frames(path):
            n += 1
            size += len(payload)
    return n, size


def _raw_frames_crc(paths: list[Path]) -> tuple[int, int]:
    n = size = 0
    for path in paths:
        for payload in iter_frames(path):
            crc32c.crc32c(payload)
            n += 1
            size += len(payload)
    return n, size


def _scan_records(addr: str, to_ts: int) -> tuple[int, int]:
    n = size = 0
    with ScanClient(addr, CLUSTER_ID, timeout=600) as client:
        for rec in client.scan(0, to_ts):
            n += 1
            size += len(rec.payload)
    return n, size


def _scan_batches(addr: str, to_ts: int) -> tuple[int, int]:
    """The Drainer's way: each batch through ``transform.pull.batch_to_arrow`` (columns read in place,
    the payloads gathered into one Arrow binary array in record order), as the pull stage does."""
    n = size = 0
    with ScanClient(addr, CLUSTER_ID, timeout=600) as client:
        for batch in client.scan_batches(0, to_ts):
            rb = batch_to_arrow(batch)
            count = len(batch)
            expected = int(batch.lengths.sum())
            got = pc.sum(pc.binary_length(rb.column(3))).as_py() or 0
            if rb.num_rows != count or got != expected:
                raise BenchError(f"batch of {count} records ({expected} payload bytes) became "
                                 f"{rb.num_rows} rows ({got} bytes)")
            n += count
            size += expected
    return n, size


def _take_batch(batch: ScanBatch) -> tuple[int, int]:
    """``batch_to_arrow`` of one batch, checked as ``_scan_batches`` does; (records, payload bytes)."""
    rb = batch_to_arrow(batch)
    count = len(batch)
    expected = int(batch.lengths.sum())
    got = pc.sum(pc.binary_length(rb.column(3))).as_py() or 0
    if rb.num_rows != count or got != expected:
        raise BenchError(f"batch of {count} records ({expected} payload bytes) became "
                         f"{rb.num_rows} rows ({got} bytes)")
    return count, expected


def _scan_request(to_ts: int) -> bytes:
    return binlake_pb2.ScanRequest(cluster_id=CLUSTER_ID, from_ts=0, to_ts=to_ts).SerializeToString()


def _scan_grpcio(addr: str, to_ts: int) -> tuple[int, int]:
    """The same scan through grpcio without TLS (``ScanClient``'s grpcio path: same channel options,
    ``ScanBatch`` as the response deserializer)."""
    n = size = 0
    opts = [("grpc.max_receive_message_length", MAX_MESSAGE), *HTTP2_OPTIONS]
    with grpc.insecure_channel(addr, opts) as channel:
        call = channel.unary_stream(SCAN_METHOD, request_serializer=binlake_pb2.ScanRequest.SerializeToString,
                                    response_deserializer=ScanBatch)
        for batch in call(binlake_pb2.ScanRequest(cluster_id=CLUSTER_ID, from_ts=0, to_ts=to_ts), timeout=600):
            c, b = _take_batch(batch)
            n += c
            size += b
    return n, size


def _scan_raw_messages(messages: Iterator[bytes | bytearray]) -> tuple[int, int]:
    n = size = 0
    for raw in messages:
        c, b = _take_batch(ScanBatch(raw))
        n += c
        size += b
    return n, size


def _scan_grpclib_async(addr: str, to_ts: int, loop_kind: str, max_frame: int | None = None) -> tuple[int, int]:
    """grpclib's best case: the stream consumed in a coroutine, each batch converted inline."""
    from bench.http2_libs import grpclib_scan_async, new_loop

    async def run() -> tuple[int, int]:
        n = size = 0
        async for raw in grpclib_scan_async(addr, SCAN_METHOD, _scan_request(to_ts), MAX_MESSAGE, timeout=600,
                                            max_frame=max_frame):
            c, b = _take_batch(ScanBatch(raw))
            n += c
            size += b
        return n, size

    loop = new_loop(loop_kind)
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


def _lib_methods(addr: str, to_ts: int, loop_kind: str) -> dict[str, Callable[[], tuple[int, int]]]:
    """The other HTTP/2 clients of the same scan (``--libs``)."""
    from bench.http2_libs import MAX_FRAME, cheap_frame_repr, grpclib_stream_call, h2_stream_call

    req = _scan_request(to_ts)

    def h2_scan() -> tuple[int, int]:
        return _scan_raw_messages(h2_stream_call(addr, SCAN_METHOD, req, 600, MAX_MESSAGE))

    def h2_scan_patched() -> tuple[int, int]:
        with cheap_frame_repr():
            return h2_scan()

    def grpclib_tuned() -> tuple[int, int]:
        with cheap_frame_repr():
            return _scan_grpclib_async(addr, to_ts, loop_kind, MAX_FRAME)

    return {
        "grpcio": lambda: _scan_grpcio(addr, to_ts),
        "h2": h2_scan,
        "grpclib": lambda: _scan_raw_messages(grpclib_stream_call(addr, SCAN_METHOD, req, 600, MAX_MESSAGE,
                                                                  loop_kind)),
        "grpclib-async": lambda: _scan_grpclib_async(addr, to_ts, loop_kind),
        "h2-patched": h2_scan_patched,
        "grpclib-async-16M": lambda: _scan_grpclib_async(addr, to_ts, loop_kind, MAX_FRAME),
        "grpclib-async-tuned": grpclib_tuned,
    }


def _lib_versions() -> dict[str, str]:
    from importlib.metadata import version
    return {name: version(name) for name in ("h2", "grpclib", "grpcio")}


def _scan_sources(pump: LocalPump) -> dict[str, float]:
    """The pump's ``binlake_pump_scan_total`` by source (memory, leveldb), from ``/metrics``."""
    assert pump.pump is not None
    with urllib.request.urlopen(f"{pump.pump.status_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    found = re.findall(r'^binlake_pump_scan_total\{source="(\w+)"\} (\S+)$', text, re.M)
    return {source: float(value) for source, value in found}


def _without_scan_cache(pump: LocalPump, wm: int, paths: list[Path], repeat: int) -> dict[str, list[float]]:
    """Restart the pump with ``[storage] scan-cache-entries = 0`` and time the scan (and the raw
    baseline beside it) ``repeat`` times after one untimed pass; MiB/s per round."""
    assert pump.pump is not None
    config = pump.tmp / "no-scan-cache.toml"
    config.write_text("[storage]\nscan-cache-entries = 0\n")
    pump.pump.terminate(timeout=60)
    pump.pump.config = config
    pump.pump.start(wait=True, timeout=120)
    if wait_watermark(pump.addr, wm) < wm:
        raise BenchError("the restarted pump's watermark went back")
    methods = {"raw": lambda: _raw_frames(paths), "scan": lambda: _scan_batches(pump.addr, wm)}
    for fn in methods.values():
        fn()
    rates: dict[str, list[float]] = {k: [] for k in methods}
    for _ in range(repeat):
        for name, fn in methods.items():
            t = time.perf_counter()
            _, size = fn()
            rates[name].append(size / (time.perf_counter() - t) / MiB)
    sources = _scan_sources(pump)
    if sources.get("memory", 0) or sources.get("leveldb", 0) < repeat + 1:
        raise BenchError(f"the pump without its scan cache counted scans by source {sources}")
    return rates


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", type=parse_size, default=parse_size("256MiB"),
                    help="prewrite_value payload to fill the pump with (default 256MiB)")
    ap.add_argument("--payload", type=parse_size, default=1024, help="prewrite_value bytes (default 1024)")
    ap.add_argument("--clients", type=int, default=32, help="WriteBinlog calls in flight while filling")
    ap.add_argument("--repeat", type=int, default=3, help="timed rounds; medians are reported (default 3)")
    ap.add_argument("--pin", action=argparse.BooleanOptionalAction, default=False,
                    help="pin the pump to one CPU and this process to the others (default: off; on a 2-core "
                         "VM it did not change the ratio beyond the noise, see docs/benchmarks.md)")
    ap.add_argument("--libs", action=argparse.BooleanOptionalAction, default=True,
                    help="also scan through grpcio (plain text), h2 and grpclib each round and print client "
                         "CPU per MiB against ours (default: on; bench/http2_libs.py)")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                    help="event loop of the grpclib clients (default uvloop, pinned by the project)")
    args = ap.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin and len(cpus) < 2:
        ap.error(f"--pin needs 2 or more CPUs; this process may use {cpus}")
    txns = max(1, args.bytes // args.payload)

    print(f"pump_scan  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}  {machine_line()}, "
          f"{code_version()}")
    # No fake binlogs while idle: every record in the files is then below the watermark, so the raw
    # read and the scan cover the same records.
    with LocalPump(extra_args=["--gen-binlog-interval", "86400"]) as pump:
        print(f"  filling: {txns} transactions ({fmt_size(txns * args.payload)} of {args.payload} B "
              f"prewrite_values, + commits) through WriteBinlog, {args.clients} in flight ...", flush=True)
        t0 = time.monotonic()
        load = run_load(pump.addr, txns, args.clients, args.payload, pump.oracle)
        if load.errors:
            raise BenchError(f"fill failed: {load.errors[0]}")
        wm = wait_watermark(pump.addr, max(load.commit_ts), timeout=300)
        paths = vlog_files(pump.data_dir)
        file_bytes = sum(p.stat().st_size for p in paths)
        print(f"  filled in {time.monotonic() - t0:.0f}s ({load.txns / load.elapsed:,.0f} txn/s): "
              f"{len(paths)} value-log file(s), {fmt_size(file_bytes)}; watermark {wm}")

        if args.pin:
            pin_process({cpus[0]}, pump.pid)
            pin_process(set(cpus[1:]))
            print(f"  placement: pump on CPU {cpus[0]}, client and baseline on CPU {','.join(map(str, cpus[1:]))}")
        else:
            print("  placement: none (--no-pin)")
        methods: dict[str, Callable[[], tuple[int, int]]] = {
            "plain": lambda: (0, read_plain(paths)),
            "raw": lambda: _raw_frames(paths),
            "raw+crc": lambda: _raw_frames_crc(paths),
            "scan": lambda: _scan_batches(pump.addr, wm),
            "records": lambda: _scan_records(pump.addr, wm),
        }
        lib_names = ["scan", *(_lib_methods(pump.addr, wm, args.loop) if args.libs else {})]
        if args.libs:
            methods.update(_lib_methods(pump.addr, wm, args.loop))
        for fn in methods.values():  # one untimed pass of every method: nothing below is timed cold
            fn()
        print("  warmed: every method ran once untimed (page cache, the pump's first-scan setup, "
              "client imports; caches cannot be dropped here)")
        rates: dict[str, list[float]] = {k: [] for k in methods}
        counts: dict[str, tuple[int, int]] = {}
        server_cpu: dict[str, float] = {"scan": 0.0, "records": 0.0}
        client_cpu: dict[str, float] = {"scan": 0.0, "records": 0.0}
        secs: dict[str, list[float]] = {k: [] for k in methods}
        # per round, for the clients compared (ours = "scan"): client CPU ms per MiB, pump cores
        lib_ms: dict[str, list[float]] = {k: [] for k in lib_names}
        lib_pump: dict[str, list[float]] = {k: [] for k in lib_names}
        lib_client: dict[str, list[float]] = {k: [] for k in lib_names}
        load_before = os.getloadavg()
        extra = [k for k in methods if k in lib_names and k != "scan"]
        for r in range(args.repeat):
            # the existing methods in their order, then the other clients, their order rotated per round
            shift = r % len(extra) if extra else 0
            order = [k for k in methods if k not in extra] + extra[shift:] + extra[:shift]
            for name in order:
                fn = methods[name]
                c0 = cpu_seconds(pump.pid)
                m0 = time.process_time()
                t = time.perf_counter()
                n, size = fn()
                el = time.perf_counter() - t
                if name in server_cpu:
                    server_cpu[name] += (cpu_seconds(pump.pid) - c0) / el / args.repeat
                    client_cpu[name] += (time.process_time() - m0) / el / args.repeat
                if name in lib_ms:
                    used = time.process_time() - m0
                    lib_ms[name].append(used * 1000 / (size / MiB))
                    lib_client[name].append(used / el)
                    lib_pump[name].append((cpu_seconds(pump.pid) - c0) / el)
                rates[name].append(size / el / MiB)
                secs[name].append(el)
                counts[name] = (n, size)
        sources = _scan_sources(pump)
        if sources.get("leveldb", 0) or sources.get("memory", 0) < 2 * (args.repeat + 1):
            raise BenchError(f"the measured scans did not all read the scan cache: {sources}")
        load_after = os.getloadavg()
        cold = _without_scan_cache(pump, wm, paths, args.repeat)
    med = {k: statistics.median(v) for k, v in rates.items()}
    n, size = counts["raw"]
    agree = counts["scan"] == counts["raw"] == counts["records"]
    print(f"  {n} records, {fmt_size(size)} of payload in {fmt_size(file_bytes)} of files "
          + ("(raw and scan agree on records and bytes)" if agree else
             f"MISMATCH: raw {counts['raw']}, scan {counts['scan']}, records {counts['records']} "
             f"(records, payload bytes)"))
    print()
    print(f"  {'method':<44} {'MiB/s':>8} {'secs':>7}   (median of {args.repeat}; all rounds MiB/s)")
    labels = {"plain": "plain sequential read (cat-like, floor)",
              "raw": "raw vlog frames: read + split  [BASELINE]",
              "raw+crc": "raw vlog frames + crc32c (info)",
              "scan": "PumpScan/Scan -> columnar batches [MEASURE]",
              "records": "PumpScan/Scan -> scan() Records (info)"}
    for k, label in labels.items():
        print(f"  {label:<44} {med[k]:>8.1f} {statistics.median(secs[k]):>7.2f}   "
              + ", ".join(f"{r:.1f}" for r in rates[k]))
    print(f"  cores busy during the scan: pump process {server_cpu['scan']:.2f}, client {client_cpu['scan']:.2f} "
          f"(batches); pump {server_cpu['records']:.2f}, client {client_cpu['records']:.2f} (records)")
    cold_ratio = statistics.median(cold["scan"]) / statistics.median(cold["raw"])
    print(f"  {'PumpScan/Scan, index from LevelDB (info)':<44} {statistics.median(cold['scan']):>8.1f}           "
          + ", ".join(f"{r:.1f}" for r in cold["scan"])
          + f"   (cache off; raw beside it {statistics.median(cold['raw']):.1f}: ratio {cold_ratio:.2f})")
    ratio = med["scan"] / med["raw"]
    print(f"  ratio scan/raw: {ratio:.2f} (target >= {RATIO_TARGET}: {'met' if ratio >= RATIO_TARGET else 'MISSED'}); "
          f"records/raw {med['records'] / med['raw']:.2f}; raw/plain {med['raw'] / med['plain']:.2f}")
    libs_agree = all(counts[k] == counts["scan"] for k in lib_names)
    if args.libs:
        _print_libs(lib_names, rates, lib_ms, lib_client, lib_pump, counts, load_before, load_after,
                    args.repeat, args.loop)
    print(f"SUMMARY pump_scan: Scan {med['scan']:.1f} MiB/s (columnar batches) vs raw vlog frames "
          f"{med['raw']:.1f} MiB/s = {ratio:.2f} (target 0.5); scan() records {med['records']:.1f} MiB/s = "
          f"{med['records'] / med['raw']:.2f}; plain read {med['plain']:.0f} MiB/s; {fmt_size(size)} payload, "
          f"{n} records, warm cache")
    return 0 if agree and libs_agree else 1


LIB_LABELS = {"grpcio": "grpcio {grpcio}, plain text",
              "scan": "ours: ingest.http2.stream [= scan row]",
              "h2": "h2 {h2}, blocking socket, caller's thread",
              "grpclib": "grpclib {grpclib}, sync wrapper ({loop})",
              "grpclib-async": "grpclib {grpclib}, async consumer ({loop})",
              "h2-patched": "h2, frame repr cut (info: upstream fix)",
              "grpclib-async-16M": "grpclib async, 16 MiB frames (info)",
              "grpclib-async-tuned": "grpclib async, 16 MiB frames + repr (info)"}


def _print_libs(names: list[str], rates: dict[str, list[float]], ms: dict[str, list[float]],
                client: dict[str, list[float]], pump: dict[str, list[float]], counts: dict[str, tuple[int, int]],
                load_before: tuple[float, ...], load_after: tuple[float, ...], repeat: int, loop: str) -> None:
    """The clients' table: medians of the rounds, the ratio of client CPU per MiB to ours."""
    versions = _lib_versions()
    ours = statistics.median(ms["scan"])
    print()
    print(f"  HTTP/2 clients of the same scan (median of {repeat} alternated rounds; load average "
          f"{' '.join(f'{x:.2f}' for x in load_before)} before, {' '.join(f'{x:.2f}' for x in load_after)} after)")
    print(f"  {'client':<44} {'MiB/s':>8} {'client ms/MiB':>14} {'client cores':>12} {'pump cores':>10} "
          f"{'CPU/ours':>9} {'per round':>9}   all rounds ms/MiB")
    for k in names:
        label = LIB_LABELS[k].format(loop=loop, **versions)
        same = "" if counts[k] == counts["scan"] else f"  MISMATCH {counts[k]} vs ours {counts['scan']}"
        per_round = statistics.median(a / b for a, b in zip(ms[k], ms["scan"]))
        print(f"  {label:<44} {statistics.median(rates[k]):>8.1f} {statistics.median(ms[k]):>14.2f} "
              f"{statistics.median(client[k]):>12.2f} {statistics.median(pump[k]):>10.2f} "
              f"{statistics.median(ms[k]) / ours:>8.2f}x {per_round:>8.2f}x   "
              + ", ".join(f"{v:.2f}" for v in ms[k]) + same)
    print("  (CPU/ours: ratio of the medians; per round: median of each round's ratio to ours)")
    within = f"within {LIB_RATIO_KEEP}x"
    verdict = ", ".join(
        f"{k} {statistics.median(ms[k]) / ours:.2f}x "
        f"({'keep ours' if statistics.median(ms[k]) / ours >= LIB_RATIO_KEEP else within})"
        for k in ("h2", "grpclib", "grpclib-async"))
    print(f"SUMMARY pump_scan clients: client CPU per MiB, ours {ours:.2f} ms; library/ours: {verdict}; "
          f"grpcio/ours {statistics.median(ms['grpcio']) / ours:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
