"""Shared pieces of the pump benchmarks: a one-oracle local cluster, WriteBinlog load processes,
a no-op ``binlog.Pump`` server, process sampling and small formatting helpers.

Every process runs on 127.0.0.1; every child is started with the ``spawn`` method (gRPC and fork do
not mix) and stopped by the harness that started it.
"""
from __future__ import annotations

import array
import asyncio
import multiprocessing as mp
import os
import platform
import queue
import re
import shutil
import signal
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psutil

from ingest.binlog import marshal_gogo
from ingest.tso import LOGICAL_MASK, PHYSICAL_SHIFT_BITS
from schemas import binlog_pb2, pdpb_pb2_grpc, pump_pb2, pump_pb2_grpc

CLUSTER_ID = 6_000_000_000_000_000_001
MiB = 1 << 20
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class BenchError(RuntimeError):
    """A benchmark could not run or its check failed."""


def parse_size(text: str) -> int:
    """Parse ``1GiB``, ``64MiB``, ``256M``, ``4096`` (binary units) into bytes."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 1GiB, 64MiB, 4096)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def fmt_size(n: float) -> str:
    """Human form of a byte count in binary units."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1, nearest rank) of an ascending list; NaN when empty."""
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[k]


def machine_line() -> str:
    """One line naming the machine: cores, memory, OS, Python."""
    mem = psutil.virtual_memory().total / (1 << 30)
    try:
        with open("/etc/os-release") as f:
            osr = dict(line.rstrip().split("=", 1) for line in f if "=" in line)
        os_name = osr.get("PRETTY_NAME", "").strip('"')
    except OSError:
        os_name = platform.platform()
    return (f"{psutil.cpu_count()} cores / {mem:.0f} GiB, {os_name}, Python {platform.python_version()}, "
            f"grpcio {grpc.__version__}")


def code_version() -> str:
    """A short digest of the pump's sources (``ingest/**/*.py``), to tie results to a code state."""
    import hashlib

    root = Path(__file__).resolve().parent.parent / "ingest"
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return f"ingest@{h.hexdigest()[:10]}"


# ---- one timestamp oracle for every process of a run --------------------------------------------

class SharedOracle:
    """Strictly increasing TSOs (``physical_ms << 18 | logical``) shared by processes through one
    ``multiprocessing.Value``; also serves as the oracle of the PD-compatible TSO server, so fake
    binlogs of the pump and the load's transactions draw from a single clock, as in a real cluster."""

    def __init__(self, value: Any) -> None:
        self._value = value

    @classmethod
    def create(cls, ctx: Any) -> SharedOracle:
        return cls(ctx.Value("q", 0, lock=True))

    @property
    def raw(self) -> Any:
        """The shared value, to hand to child processes."""
        return self._value

    def next_ts(self, count: int = 1) -> int:
        """Reserve ``count`` timestamps and return the last one."""
        with self._value.get_lock():
            now = int(time.time() * 1000) << PHYSICAL_SHIFT_BITS
            ts = max(self._value.value + count, now + count - 1)
            self._value.value = ts
            return ts

    def allocate(self, count: int = 1) -> tuple[int, int]:
        """``upstream.tso.TimestampOracle`` interface: (physical, logical) of the last of ``count``."""
        ts = self.next_ts(count)
        return ts >> PHYSICAL_SHIFT_BITS, ts & LOGICAL_MASK


class TSOServer:
    """A PD-compatible ``/pdpb.PD/Tso`` server on 127.0.0.1 backed by a :class:`SharedOracle`."""

    def __init__(self, oracle: SharedOracle, cluster_id: int = CLUSTER_ID) -> None:
        from upstream.tso import TSOService

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="bench-tso"))
        pdpb_pb2_grpc.add_PDServicer_to_server(TSOService(cluster_id, oracle), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop serving."""
        self.server.stop(grace=0.5).wait()


# ---- processes ----------------------------------------------------------------------------------

class Sampler:
    """Samples the RSS of some processes every ``interval`` seconds in a thread; keeps the peak."""

    def __init__(self, pids: dict[str, int], interval: float = 0.1) -> None:
        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.peak_rss = {name: 0 for name in pids}
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, p in self.procs.items():
                try:
                    self.peak_rss[name] = max(self.peak_rss[name], p.memory_info().rss)
                except psutil.Error:
                    pass
            self._stop.wait(self.interval)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by a process (0 if it is gone)."""
    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.Error:
        return 0.0


@dataclass
class LocalPump:
    """A temp dir, the shared-oracle TSO and one real ``binlake pump`` process; ``close`` removes all."""

    extra_args: list[str] = field(default_factory=list)
    keep: bool = False

    def __post_init__(self) -> None:
        from upstream.local import PumpProcess

        self.ctx = mp.get_context("spawn")
        self.tmp = Path(tempfile.mkdtemp(prefix="binlake-bench-"))
        self.oracle = SharedOracle.create(self.ctx)
        self.tso: TSOServer | None = None
        self.pump: PumpProcess | None = None
        try:
            self.tso = TSOServer(self.oracle)
            self.pump = PumpProcess(data_dir=self.tmp / "pump", pd_url=self.tso.url,
                                    registry=f"file://{self.tmp / 'registry.json'}", node_id="bench-pump",
                                    extra_args=self.extra_args)
            self.pump.start(wait=True, timeout=60)
        except BaseException:
            self.close()
            raise

    @property
    def addr(self) -> str:
        assert self.pump is not None
        return self.pump.addr

    @property
    def pid(self) -> int:
        assert self.pump is not None and self.pump.proc is not None
        return self.pump.proc.pid

    @property
    def data_dir(self) -> Path:
        return self.tmp / "pump"

    def close(self) -> None:
        """Stop the pump (SIGTERM, then SIGKILL) and the TSO, and remove the temp dir."""
        try:
            if self.pump is not None:
                self.pump.terminate(timeout=30)
        finally:
            if self.tso is not None:
                self.tso.stop()
            if not self.keep:
                shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> LocalPump:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_watermark(addr: str, at_least: int, timeout: float = 120.0) -> int:
    """Poll the pump's Watermark until ``max_commit_ts >= at_least``; return it or raise."""
    from ingest.scan_client import ScanClient

    deadline = time.monotonic() + timeout
    with ScanClient(addr, CLUSTER_ID) as client:
        while True:
            wm = client.watermark().max_commit_ts
            if wm >= at_least:
                return int(wm)
            if time.monotonic() > deadline:
                raise BenchError(f"watermark {wm} did not reach the last commit ts {at_least} in {timeout}s")
            time.sleep(0.05)


# ---- the no-op server ---------------------------------------------------------------------------

class _NoopPump(pump_pb2_grpc.PumpServicer):
    async def WriteBinlog(self, request: pump_pb2.WriteBinlogReq,
                          context: grpc.aio.ServicerContext) -> pump_pb2.WriteBinlogResp:
        return pump_pb2.WriteBinlogResp()


def _noop_server_main(ready: Any, stop: Any, workers: int) -> None:
    import asyncio

    from ingest.pump.config import MAX_MESSAGE_SIZE

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    async def serve() -> None:
        # grpcio's own server (grpc.aio on uvloop) with the pump's message limits: the obvious alternative
        # to the pump's hand-written front door, answering at once.
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
                                          ("grpc.max_send_message_length", -1),
                                          ("grpc.so_reuseport", 0)])
        pump_pb2_grpc.add_PumpServicer_to_server(_NoopPump(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        ready.put(port)
        await asyncio.get_running_loop().run_in_executor(None, stop.wait)
        await server.stop(1)

    import uvloop
    uvloop.run(serve())


class NoopServer:
    """A separate process serving ``binlog.Pump`` whose WriteBinlog returns at once."""

    def __init__(self, workers: int = 64) -> None:
        ctx = mp.get_context("spawn")
        ready = ctx.Queue()
        self._stop = ctx.Event()
        self.proc = ctx.Process(target=_noop_server_main, args=(ready, self._stop, workers),
                                name="bench-noop-server", daemon=True)
        self.proc.start()
        try:
            self.port = int(ready.get(timeout=60))
        except BaseException:
            self.close()
            raise
        self.addr = f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc.pid is not None
        return self.proc.pid

    def close(self) -> None:
        """Stop the server process (terminate, then kill)."""
        self._stop.set()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


# ---- WriteBinlog load ---------------------------------------------------------------------------

@dataclass
class LoadResult:
    """What the load processes measured: counts, bytes, timings and every acknowledged ts."""

    txns: int
    binlogs: int
    payload_bytes: int      # prewrite_value bytes of acknowledged transactions
    wire_bytes: int         # marshalled binlog bytes of acknowledged WriteBinlog calls
    elapsed: float          # start signal to the last acknowledgement
    latencies: list[float]  # seconds per WriteBinlog call, ascending
    prewrite_lat: list[float]
    commit_lat: list[float]
    start_ts: array.array   # acknowledged prewrites' start_ts
    commit_ts: array.array  # acknowledged commits' commit_ts (same order as start_ts)
    client_cpu: float       # CPU seconds used by the load processes during the run
    errors: list[str]


def _worker_main(addr: str, cluster_id: int, txns: int, concurrency: int, payload: int,
                 oracle_value: Any, go: Any, ready: Any, results: Any, seed: int, progress: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = asyncio.run(_worker(addr, cluster_id, txns, concurrency, payload, SharedOracle(oracle_value),
                              go, ready, seed, progress))
    results.put(out)


async def _worker(addr: str, cluster_id: int, txns: int, concurrency: int, payload: int,
                  oracle: SharedOracle, go: Any, ready: Any, seed: int, progress: Any) -> dict[str, Any]:
    value = os.urandom(payload)
    starts = array.array("q")
    commits = array.array("q")
    pre_lat = array.array("d")
    com_lat = array.array("d")
    errors: list[str] = []
    wire = 0
    remaining = txns
    async with grpc.aio.insecure_channel(addr, options=[("grpc.max_send_message_length", -1)]) as channel:
        await channel.channel_ready()
        stub = pump_pb2_grpc.PumpStub(channel)
        ready.put(seed)
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        cpu_start = time.process_time()
        clock = time.perf_counter

        async def client(cid: int) -> None:
            nonlocal remaining, wire
            key = b"bench-%d-%d-" % (seed, cid)
            n = 0
            while remaining > 0 and not errors:
                remaining -= 1
                n += 1
                start_ts = oracle.next_ts()
                pre = marshal_gogo(binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts,
                                                     prewrite_key=key + b"%d" % n, prewrite_value=value))
                t0 = clock()
                resp = await stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=pre),
                                              timeout=60)
                t1 = clock()
                if resp.errmsg:
                    errors.append(f"prewrite {start_ts}: {resp.errmsg}")
                    return
                pre_lat.append(t1 - t0)
                commit_ts = oracle.next_ts()  # allocated after the prewrite was acknowledged
                com = marshal_gogo(binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start_ts,
                                                     commit_ts=commit_ts, prewrite_key=key + b"%d" % n))
                t0 = clock()
                resp = await stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=com),
                                              timeout=60)
                t1 = clock()
                if resp.errmsg:
                    errors.append(f"commit {start_ts}/{commit_ts}: {resp.errmsg}")
                    return
                com_lat.append(t1 - t0)
                starts.append(start_ts)
                commits.append(commit_ts)
                wire += len(pre) + len(com)
                if not len(starts) & 1023:
                    progress[seed] = len(starts)

        try:
            await asyncio.gather(*(client(i) for i in range(concurrency)))
        except grpc.aio.AioRpcError as exc:
            errors.append(f"WriteBinlog failed: {exc.code().name}: {exc.details()}")
        t_end = time.monotonic()
        cpu = time.process_time() - cpu_start
    return {"starts": starts, "commits": commits, "pre_lat": pre_lat, "com_lat": com_lat,
            "wire": wire, "t_end": t_end, "cpu": cpu, "errors": errors}


def run_load(addr: str, txns: int, clients: int, payload: int, oracle: SharedOracle,
             procs: int = 1, cluster_id: int = CLUSTER_ID, on_start: Any = None,
             progress_every: float = 30.0) -> LoadResult:
    """Run ``txns`` prewrite+commit transactions against ``addr`` from ``procs`` processes that
    together keep ``clients`` WriteBinlog calls in flight (grpc.aio); wait for all to finish.

    ``on_start()`` is called just before the start signal (e.g. to begin sampling)."""
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    ready = ctx.Queue()
    results = ctx.Queue()
    progress = ctx.Array("q", procs, lock=False)  # acknowledged transactions per load process
    workers = []
    per_txn = [txns // procs + (1 if i < txns % procs else 0) for i in range(procs)]
    per_cli = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    try:
        for i in range(procs):
            p = ctx.Process(target=_worker_main, name=f"bench-load-{i}", daemon=True,
                            args=(addr, cluster_id, per_txn[i], per_cli[i], payload, oracle.raw, go,
                                  ready, results, i, progress))
            p.start()
            workers.append(p)
        for _ in range(procs):
            ready.get(timeout=60)
        if on_start is not None:
            on_start()
        t0 = time.monotonic()
        go.set()
        outs = []
        last_report = t0
        while len(outs) < procs:
            if progress_every and time.monotonic() - last_report >= progress_every:
                last_report = time.monotonic()
                done = sum(progress)
                print(f"    ... {done}/{txns} transactions after {last_report - t0:.0f}s "
                      f"({done / (last_report - t0):,.0f} txn/s)", flush=True)
            try:
                outs.append(results.get(timeout=1.0))
            except queue.Empty:
                dead = [p for p in workers if not p.is_alive() and p.exitcode not in (0, None)]
                if dead:
                    raise BenchError(f"load process {dead[0].name} died with exit code {dead[0].exitcode}") from None
                continue
        elapsed = max(o["t_end"] for o in outs) - t0
        for p in workers:
            p.join(30)
    finally:
        for p in workers:
            if p.is_alive():
                p.kill()
                p.join(5)
    starts = array.array("q")
    commits = array.array("q")
    pre: list[float] = []
    com: list[float] = []
    errors: list[str] = []
    wire = 0
    for o in outs:
        starts.extend(o["starts"])
        commits.extend(o["commits"])
        pre.extend(o["pre_lat"])
        com.extend(o["com_lat"])
        wire += o["wire"]
        errors.extend(o["errors"])
    pre.sort()
    com.sort()
    return LoadResult(txns=len(starts), binlogs=len(pre) + len(com), payload_bytes=len(starts) * payload,
                      wire_bytes=wire, elapsed=elapsed, latencies=sorted(pre + com), prewrite_lat=pre,
                      commit_lat=com, start_ts=starts, commit_ts=commits,
                      client_cpu=sum(o["cpu"] for o in outs),
                      errors=errors)


# ---- raw value-log reading ----------------------------------------------------------------------

VLOG_MAGIC = 0x823A56E8
_HEADER = struct.Struct("<IQI")  # magic u32 | length u64 | crc32c u32, little-endian
READ_CHUNK = 4 << 20


def vlog_files(data_dir: Path) -> list[Path]:
    """The value-log files of a pump data dir, in fid order."""
    return sorted((data_dir / "value").glob("*.vlog"))


def read_plain(paths: list[Path], chunk: int = READ_CHUNK) -> int:
    """Read the files sequentially in ``chunk``-byte reads (like cat); return the bytes read."""
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while True:
                data = f.read(chunk)
                if not data:
                    break
                total += len(data)
    return total


def iter_frames(path: Path, chunk: int = READ_CHUNK) -> Iterator[bytes]:
    """Yield the payload of every framed record of one value-log file, read sequentially.

    Stops at the first header that is not a record (the 12-byte footer of a finalized file, or a
    torn tail); no CRC check (the baseline is read + split)."""
    unpack = _HEADER.unpack_from
    with open(path, "rb", buffering=0) as f:
        buf = f.read(chunk)
        pos = 0
        while True:
            if len(buf) - pos < 16:
                more = f.read(chunk)
                if not more:
                    return
                buf = buf[pos:] + more
                pos = 0
                continue
            magic, length, _crc = unpack(buf, pos)
            if magic != VLOG_MAGIC:
                return
            end = pos + 16 + length
            if end > len(buf):
                more = f.read(max(chunk, end - len(buf)))
                if not more:
                    return
                buf = buf[pos:] + more
                pos = 0
                continue
            yield buf[pos + 16:end]
            pos = end
