"""The pump's HTTP/2 server (``ingest.http2.GrpcConnection`` behind the front door, as a pump runs it)
beside a gRPC server built on the ``h2`` library (``bench/http2_libs.py``: ``H2ServerProtocol``, the
baseline), both doing the same trivial work behind the RPC, measured in the same run.

Each server runs in a process of its own (``serve ours|h2``: uvloop, one event-loop thread, the
pump's collector settings) serving the two calls of the pump's hot paths:

- ``/binlog.Pump/WriteBinlog`` (unary): acknowledged at once with an empty ``WriteBinlogResp``;
- ``/binlake.v1.PumpScan/Scan`` (server-streaming): ``ScanRequest.to_ts`` bytes in messages of
  ``max_batch_bytes`` (the pump's default, 16 MiB, when 0) sent from one buffer made at start.

The client is binlake's own in both cases: WriteBinlog calls from ``--threads`` threads sharing one
connection (``upstream.pump_client.h2channel.H2Channel``), calls/s; a whole scan read by
``ingest.http2.stream_call``, MiB/s of message bytes. Server CPU is the server process's user +
system time during the measurements (µs per call, ms per MiB, from the rounds' totals); ``--rounds``
alternated rounds, median rates printed, the ratio ours/h2 (above 1: ours serves more per second).

    flock /tmp/binlake-bench.lock .venv/bin/python bench/http2_server.py                   # ~40 s
    .venv/bin/python bench/http2_server.py --calls 2000 --scan 32MiB --rounds 1            # a smoke run
"""
from __future__ import annotations

import argparse
import datetime
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncGenerator, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import cpu_seconds, fmt_size, machine_line, parse_size

WRITE_BINLOG = "/binlog.Pump/WriteBinlog"
SCAN = "/binlake.v1.PumpScan/Scan"
DEFAULT_BATCH = 16 << 20          # the pump's default scan batch (ingest.pump.server.DEFAULT_BATCH_BYTES)
MAX_MESSAGE = (1 << 31) - 1
KINDS = ("h2", "ours")
MiB = 1 << 20


# ---- the servers (child processes) ----------------------------------------------------------------

def _write_binlog(request: bytes) -> bytes:
    return b""                     # an empty WriteBinlogResp: written


def _scanner(buffer: bytes) -> Callable[[bytes], AsyncGenerator[bytes, None]]:
    """The scan handler: ``to_ts`` bytes of ``buffer`` in messages of ``max_batch_bytes`` (at most its size)."""
    from schemas import binlake_pb2

    async def scan(request: bytes) -> AsyncGenerator[bytes, None]:
        req = binlake_pb2.ScanRequest.FromString(request)
        size = min(req.max_batch_bytes or DEFAULT_BATCH, len(buffer))
        whole = buffer if size == len(buffer) else buffer[:size]
        left = req.to_ts
        while left > 0:
            yield whole if left >= size else whole[:left]
            left -= size
    return scan


def serve(kind: str, max_batch: int) -> None:
    """Serve both calls on 127.0.0.1 (a free port, printed on stdout) until stdin closes."""
    from binlake.process import configure_process, startup_done
    configure_process("pump")
    import uvloop

    buffer = bytes(max_batch)
    scan = _scanner(buffer)
    loop = uvloop.new_event_loop()
    if kind == "h2":
        from bench.http2_libs import serve_h2
        server = loop.run_until_complete(serve_h2("127.0.0.1", 0, {WRITE_BINLOG: _write_binlog}, {SCAN: scan}))
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]  # a Server, not its ABC
        threading.Thread(target=loop.run_forever, daemon=True).start()
    else:
        from ingest.frontdoor import FrontDoor
        from ingest.http2 import Call, Method
        from ingest.peerlog import PeerLog
        from ingest.security import SecurityConfig

        def unary(request: bytes, call: Call) -> bytes:
            return _write_binlog(request)

        def streaming(request: bytes, call: Call) -> AsyncGenerator[bytes, None]:
            return scan(request)

        methods = {WRITE_BINLOG: Method(unary), SCAN: Method(streaming, streaming=True)}
        door = FrontDoor(methods, None, SecurityConfig(), MAX_MESSAGE, PeerLog(logging.getLogger("bench")),
                         "bench-ours")
        port = door.listen("127.0.0.1:0")
    startup_done()
    print(port, flush=True)
    sys.stdin.read()


class ServerProcess:
    """``serve KIND`` in a child process; ``addr`` and ``cpu()`` (its user + system seconds)."""

    def __init__(self, kind: str, max_batch: int) -> None:
        self.kind = kind
        self.proc = subprocess.Popen([sys.executable, __file__, "serve", kind, "--batch", str(max_batch)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            self.close()
            raise RuntimeError(f"the {kind} server did not start (exit {self.proc.returncode})")
        self.addr = f"127.0.0.1:{int(line)}"

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---- the measures ---------------------------------------------------------------------------------

def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def unary(server: ServerProcess, calls: int, threads: int, payload: int) -> dict[str, float]:
    """WriteBinlog calls/s from ``threads`` threads on one connection; server and client CPU seconds."""
    from schemas import pump_pb2
    from upstream.pump_client.h2channel import H2Channel

    channel = H2Channel(server.addr, MAX_MESSAGE)
    req = pump_pb2.WriteBinlogReq(clusterID=1, payload=b"x" * payload).SerializeToString()
    decode = pump_pb2.WriteBinlogResp.FromString
    try:
        for _ in range(200):                          # connect and warm up
            channel.unary(WRITE_BINLOG, req, 5.0, decode).result()
        per = calls // threads

        def run() -> None:
            for _ in range(per):
                if channel.unary(WRITE_BINLOG, req, 5.0, decode).result().errmsg:
                    raise RuntimeError("WriteBinlog failed")

        workers = [threading.Thread(target=run) for _ in range(threads)]
        s0, c0, t0 = server.cpu(), _own_cpu(), time.monotonic()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        wall, done = time.monotonic() - t0, per * threads
        return {"rate": done / wall, "server_s": server.cpu() - s0, "client_s": _own_cpu() - c0}
    finally:
        channel.close()


def scan(server: ServerProcess, size: int, batch: int) -> dict[str, float]:
    """MiB/s of one scan of ``size`` bytes read by ``ingest.http2.stream_call``; server and client CPU seconds."""
    from ingest.http2 import stream_call
    from schemas import binlake_pb2

    req = binlake_pb2.ScanRequest(cluster_id=1, to_ts=size, max_batch_bytes=batch).SerializeToString()
    s0, c0, t0 = server.cpu(), _own_cpu(), time.monotonic()
    got = sum(len(m) for m in stream_call(server.addr, SCAN, req, 60.0, MAX_MESSAGE))
    wall = time.monotonic() - t0
    if got != size:
        raise RuntimeError(f"scan of {server.kind} gave {got} bytes, not {size}")
    mib = size / MiB
    return {"rate": mib / wall, "server_s": server.cpu() - s0, "client_s": _own_cpu() - c0}


def _figures(results: list[dict[str, float]], count: float) -> tuple[float, float, float, float]:
    """(median rate, server CPU per unit, client CPU per unit, server CPU seconds per round): CPU from
    the rounds' totals (``count`` units each), as a process's CPU time ticks in 10 ms steps."""
    server = sum(r["server_s"] for r in results)
    client = sum(r["client_s"] for r in results)
    units = count * len(results)
    return statistics.median(r["rate"] for r in results), server / units, client / units, server / len(results)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a (below the CPU clock's tick)"


def _scaled(f: tuple[float, float, float, float], unit: float) -> tuple[float, float, float, float]:
    return f[0], f[1] * unit, f[2] * unit, f[3]


def run(args: argparse.Namespace) -> int:
    from importlib.metadata import version

    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}  {machine_line()}, h2 {version('h2')}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"unary: {args.calls} WriteBinlog calls of {args.payload} B from {args.threads} threads on one "
          f"connection; scan: {fmt_size(args.scan)} in {fmt_size(args.batch)} messages; "
          f"{args.rounds} alternated rounds, median rates")
    servers = {kind: ServerProcess(kind, args.batch) for kind in KINDS}
    got: dict[str, dict[str, list[dict[str, float]]]] = {k: {"unary": [], "scan": []} for k in KINDS}
    try:
        for kind in KINDS:                               # untimed: connections, caches, the loop's first calls
            unary(servers[kind], min(args.calls, 2000), args.threads, args.payload)
            scan(servers[kind], min(args.scan, 64 * MiB), args.batch)
        for r in range(args.rounds):
            for kind in (KINDS if r % 2 == 0 else KINDS[::-1]):
                got[kind]["unary"].append(unary(servers[kind], args.calls, args.threads, args.payload))
                got[kind]["scan"].append(scan(servers[kind], args.scan, args.batch))
    finally:
        for server in servers.values():
            server.close()
    calls = args.calls // args.threads * args.threads
    u = {k: _scaled(_figures(got[k]["unary"], calls), 1e6) for k in KINDS}
    s = {k: _scaled(_figures(got[k]["scan"], args.scan / MiB), 1e3) for k in KINDS}
    for name, label in (("h2", "baseline, h2 server"), ("ours", "ours (ingest.http2)")):
        print(f"unary  {label:<22} {u[name][0]:9.0f} calls/s   server {u[name][1]:6.1f} µs CPU/call "
              f"({u[name][3]:5.2f} s a round)   client {u[name][2]:6.1f} µs CPU/call   rounds: "
              + ", ".join(f"{x['rate']:.0f}" for x in got[name]["unary"]))
    print(f"unary  ratio ours/h2: {u['ours'][0] / u['h2'][0]:.2f}x calls/s, server CPU per call h2/ours "
          f"{_ratio(u['h2'][1], u['ours'][1])}")
    for name, label in (("h2", "baseline, h2 server"), ("ours", "ours (ingest.http2)")):
        print(f"scan   {label:<22} {s[name][0]:9.1f} MiB/s     server {s[name][1]:6.2f} ms CPU/MiB "
              f"({s[name][3]:5.2f} s a round)   client {s[name][2]:6.2f} ms CPU/MiB   rounds: "
              + ", ".join(f"{x['rate']:.1f}" for x in got[name]["scan"]))
    print(f"scan   ratio ours/h2: {s['ours'][0] / s['h2'][0]:.2f}x MiB/s, server CPU per MiB h2/ours "
          f"{_ratio(s['h2'][1], s['ours'][1])}")
    print(f"SUMMARY http2_server (ours/h2 server): unary {u['ours'][0] / u['h2'][0]:.2f}x calls/s "
          f"({u['ours'][0]:.0f} vs {u['h2'][0]:.0f}), server CPU h2/ours {_ratio(u['h2'][1], u['ours'][1])} | "
          f"scan {s['ours'][0] / s['h2'][0]:.2f}x MiB/s ({s['ours'][0]:.1f} vs {s['h2'][0]:.1f}), "
          f"server CPU h2/ours {_ratio(s['h2'][1], s['ours'][1])}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command")
    sv = sub.add_parser("serve", help="run one server (a child of the benchmark)")
    sv.add_argument("kind", choices=KINDS)
    sv.add_argument("--batch", type=parse_size, default=DEFAULT_BATCH)
    ap.add_argument("--calls", type=int, default=20000, help="WriteBinlog calls per measurement (default 20000)")
    ap.add_argument("--threads", type=int, default=16, help="client threads sharing the connection (default 16)")
    ap.add_argument("--payload", type=int, default=600, help="binlog payload bytes per call (default 600)")
    ap.add_argument("--scan", type=parse_size, default=1 << 30, help="bytes per scan (default 1GiB)")
    ap.add_argument("--batch", type=parse_size, default=DEFAULT_BATCH, help="bytes per scan message (default 16MiB)")
    ap.add_argument("--rounds", type=int, default=5, help="alternated rounds; medians printed (default 5)")
    args = ap.parse_args()
    if args.command == "serve":
        serve(args.kind, args.batch)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
