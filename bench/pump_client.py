"""CPU per WriteBinlog call of the pump client's two transports, against the no-op pumps of
``upstream_load.py`` (HTTP/2 gRPC framing answered directly, so the server is not the limit).

The baseline is grpcio's channel (``transport="grpc"``), measured in the same run; the figure is
binlake's own HTTP/2 client (``h2``). Sequential calls on one thread, then 16 threads sharing the
channel; CPU is this process's user + system time per call (reader threads included).

    flock /tmp/binlake-bench.lock .venv/bin/python bench/pump_client.py
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from upstream.pump_client.channel import open_write_channel  # noqa: E402
from schemas import pump_pb2  # noqa: E402
from upstream_load import NoopPumps  # noqa: E402


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def measure(addr: str, transport: str, calls: int, threads: int, payload: int) -> tuple[float, float]:
    """(µs CPU per call, calls per second) of ``calls`` WriteBinlogs over ``threads`` threads."""
    channel = open_write_channel(addr, None, transport)
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
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pump-client-bench-"))
    noop = NoopPumps(f"file://{work / 'registry.json'}", count=1)
    try:
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.calls} calls of "
              f"{args.payload} B per line")
        for threads in (1, 16):
            base = measure(noop.addrs[0], "grpc", args.calls, threads, args.payload)
            ours = measure(noop.addrs[0], "h2", args.calls, threads, args.payload)
            print(f"{threads:2d} thread(s): grpcio {base[0]:6.1f} µs CPU/call ({base[1]:7.0f} calls/s)   "
                  f"h2 {ours[0]:6.1f} µs CPU/call ({ours[1]:7.0f} calls/s)   CPU ratio grpcio/h2 {base[0] / ours[0]:.1f}x")
    finally:
        noop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
