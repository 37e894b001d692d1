"""CPU per WriteBinlog call of the pump client's two transports, against the no-op pumps of
``upstream_load.py`` (HTTP/2 gRPC framing answered directly, so the server is not the limit).

The baseline is grpcio's channel (``transport="grpc"``), measured in the same run; the figure is
binlake's own HTTP/2 client (``h2``). Sequential calls on one thread, then 16 threads sharing the
channel; CPU is this process's user + system time per call (reader threads included).

With ``--libs`` (the default) the same calls also go through client adapters built on HTTP/2
libraries (``bench/http2_libs.py``): ``h2`` (one connection shared by the threads, h2's state machine
behind a lock, a reader thread: the design of ours with the framing left to h2) and ``grpclib``
(synchronous callers handing each call to an event-loop thread with
``asyncio.run_coroutine_threadsafe``, the cost a threaded caller like ours pays; and, as the
library's best case, as many asyncio tasks on one loop as there are threads). Each thread count
runs ``--rounds`` rounds in which every variant is measured once, the order rotated from round to
round; medians are printed (the first line per thread count keeps its old form and meaning), with
the CPU ratio library/ours.

    flock /tmp/binlake-bench.lock .venv/bin/python bench/pump_client.py
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from upstream_load import NoopPumps

from schemas import pump_pb2
from upstream.pump_client.channel import open_write_channel

KEEP_RATIO = 1.5     # keep hand-written framing only where a library costs at least this much more CPU
LIB_VARIANTS = ("h2lib", "grpclib", "grpclib-async", "h2lib-patched")
LABELS = {"h2lib": "h2 {h2}: lock + reader thread",
          "grpclib": "grpclib {grpclib}: threads -> loop thread ({loop})",
          "grpclib-async": "grpclib {grpclib}: asyncio tasks, best case ({loop})",
          "h2lib-patched": "h2, frame repr cut (info: upstream fix)"}


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _open(addr: str, transport: str, loop: str) -> Any:
    """A channel with ``write(req, timeout).result()`` and ``close()``: ``grpc``/``h2`` (ours) through
    ``open_write_channel``, ``h2lib``/``grpclib`` from ``bench/http2_libs.py``."""
    if transport in ("grpc", "h2"):
        return open_write_channel(addr, None, transport)
    from http2_libs import GrpclibWriteChannel, H2LibWriteChannel
    if transport in ("h2lib", "h2lib-patched"):
        return H2LibWriteChannel(addr)
    if transport == "grpclib":
        return GrpclibWriteChannel(addr, loop)
    raise ValueError(transport)


def measure_variant(addr: str, variant: str, calls: int, threads: int, payload: int,
                    loop: str = "uvloop") -> tuple[float, float]:
    """``measure`` for any variant: the grpclib best case runs ``threads`` asyncio tasks instead of
    threads; ``h2lib-patched`` runs with ``http2_libs.cheap_frame_repr``."""
    if variant == "grpclib-async":
        from http2_libs import grpclib_unary_async
        return grpclib_unary_async(addr, calls, threads, payload, loop_kind=loop, cpu=_cpu)
    if variant == "h2lib-patched":
        from http2_libs import cheap_frame_repr
        with cheap_frame_repr():
            return measure(addr, variant, calls, threads, payload, loop)
    return measure(addr, variant, calls, threads, payload, loop)


def measure(addr: str, transport: str, calls: int, threads: int, payload: int,
            loop: str = "uvloop") -> tuple[float, float]:
    """(µs CPU per call, calls per second) of ``calls`` WriteBinlogs over ``threads`` threads."""
    channel = _open(addr, transport, loop)
    req = pump_pb2.WriteBinlogReq(clusterID=1, payload=b"x" * payload)
    for _ in range(200):                       # connect and warm up
        channel.write(req, 5.0).result()

    def run(n: int) -> None:
        for _ in range(n):
            channel.write(req, 5.0).result()

    workers = [threading.Thread(target=run, args=(calls // threads,)) for _ in range(threads)]
    c0, t0 = _cpu(), time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done = calls // threads * threads
    cpu, wall = _cpu() - c0, time.monotonic() - t0
    channel.close()
    return cpu / done * 1e6, done / wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=8000, help="calls per measurement")
    ap.add_argument("--payload", type=int, default=600, help="binlog payload bytes per call")
    ap.add_argument("--libs", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure the h2 and grpclib adapters of bench/http2_libs.py (default: on)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternated rounds per thread count; medians are printed (default 3)")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                    help="event loop of the grpclib variants (default uvloop, pinned by the project)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pump-client-bench-"))
    noop = NoopPumps(f"file://{work / 'registry.json'}", count=1)
    variants = ["grpc", "h2", *(LIB_VARIANTS if args.libs else ())]
    summary: list[str] = []
    try:
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.calls} calls of "
              f"{args.payload} B per line")
        if args.libs:
            from importlib.metadata import version

            from _common import machine_line
            versions = {name: version(name) for name in ("h2", "grpclib")}
            print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}  {machine_line()}, "
                  f"h2 {versions['h2']}, grpclib {versions['grpclib']}, loop {args.loop}; "
                  f"{args.rounds} alternated rounds, medians")
        for threads in (1, 16):
            got: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
            for r in range(args.rounds):
                order = variants[r % len(variants):] + variants[:r % len(variants)]
                for v in order:
                    got[v].append(measure_variant(noop.addrs[0], v, args.calls, threads, args.payload, args.loop))
            med = {v: (statistics.median(x[0] for x in got[v]), statistics.median(x[1] for x in got[v]))
                   for v in variants}
            base, ours = med["grpc"], med["h2"]
            print(f"{threads:2d} thread(s): grpcio {base[0]:6.1f} µs CPU/call ({base[1]:7.0f} calls/s)   "
                  f"h2 {ours[0]:6.1f} µs CPU/call ({ours[1]:7.0f} calls/s)   "
                  f"CPU ratio grpcio/h2 {base[0] / ours[0]:.1f}x")
            if not args.libs:
                continue
            print(f"    rounds, µs CPU/call: grpcio {', '.join(f'{x[0]:.1f}' for x in got['grpc'])}; "
                  f"ours {', '.join(f'{x[0]:.1f}' for x in got['h2'])}")
            for v in LIB_VARIANTS:
                label = LABELS[v].format(loop=args.loop, **versions)
                per_round = statistics.median(a[0] / b[0] for a, b in zip(got[v], got["h2"]))
                print(f"    {label:<48} {med[v][0]:6.1f} µs CPU/call ({med[v][1]:7.0f} calls/s)   "
                      f"library/ours {med[v][0] / ours[0]:4.2f}x (per round {per_round:4.2f}x)   rounds: "
                      + ", ".join(f"{x[0]:.1f}" for x in got[v]))
            summary.append(f"{threads} thread(s) ours {ours[0]:.1f} µs; " + ", ".join(
                f"{v} {med[v][0] / ours[0]:.2f}x" for v in LIB_VARIANTS if v != "h2lib-patched"))
        if args.libs:
            print(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            print(f"SUMMARY pump_client libraries (CPU per call, library/ours; keep ours at >= {KEEP_RATIO}x): "
                  + " | ".join(summary))
    finally:
        noop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
