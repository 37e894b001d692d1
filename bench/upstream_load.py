"""Sustained committed transactions per second of the upstream emulator, against no-op pumps (the
emulator's own ceiling) and against two real pumps, beside the real pumps' own write ceiling.

Phases (2 emulated TiDB servers, transactions of 5 row changes: a 5-row INSERT
of new keys, or up to 3 UPDATEs by primary key (of keys no commit under way holds) + an INSERT of
the rest, through the full path: session, row
encoding, KV 2PC with locks, PumpsClient prewrite in parallel with the KV prewrite, commit ts,
asynchronous commit binlog):

The emulator phases run once per client setting of ``--clients`` (default 1x32,4x8,32x1):
THREADSxIN_FLIGHT is that many client threads (sessions), each keeping up to IN_FLIGHT commits under
way with ``Session.commit_async`` (as a pipelining client does; a commit finishes on the pump
client's answer thread), or, with IN_FLIGHT 1, waiting for every COMMIT. On one GIL, every thread
that waits costs a hand-off per transaction, so a few pipelining threads make more transactions per
CPU second than many waiting ones. Each phase's figure is its best setting; every setting is printed.

  noop      the emulator against two no-op pumps: separate processes registered as online pumps
            that answer every WriteBinlog with success at once and store nothing. They speak
            HTTP/2 gRPC framing directly (about 30 µs of CPU per call, where a grpcio server
            needs about 300 µs), so this figure is the emulator's own ceiling on this machine.
  pumps     raw ``PumpWriter`` prewrite + commit pairs against two real ``binlake pump`` processes
            (sync-log = true; prewrite payload of the emulator's size, timestamps from the same
            TSO), with as many writer threads as the largest setting has commits under way
            (group commits need concurrent writers): the pumps' own write ceiling.
  emulator  the emulator against the same two real pumps.

With ``--profile-seconds N``, a short single-thread cProfile of the emulator path against the
no-op pumps shows where the emulator's own time goes.

As ``binlake-emulator serve --cpu-affinity 0 --pump-client process`` lets a user do, the emulator (this
process) is pinned to one CPU, and the pumps (no-op and real) and the emulated servers' pump client
processes to the others (``--no-pin``: the scheduler places everything). The pump clients run in
child processes against the no-op pumps (``--pump-client thread``: in this process), and in this
process against the real pumps, which need the other CPU themselves on a 2-core machine. The
emulator's GC settings are those of ``binlake-emulator serve`` (``--gc-threshold``).

    flock /tmp/binlake-bench.lock .venv/bin/python bench/upstream_load.py                # 10 s per phase and setting
    flock /tmp/binlake-bench.lock .venv/bin/python bench/upstream_load.py --phases noop  # the emulator's ceiling only
    flock /tmp/binlake-bench.lock .venv/bin/python bench/upstream_load.py --clients 32x1 # one setting
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import functools
import io
import itertools
import multiprocessing as mp
import os
import platform
import pstats
import random
import signal
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ingest import binlog as bl
from ingest.registry import PUMP, NodeStatus, load_registry, node_key
from schemas import binlog_pb2
from upstream import sql as S
from upstream.cluster import Cluster
from upstream.errors import TxnAborted
from upstream.exprs import Cmp, Col, Lit
from upstream.local import PumpProcess, PumpWriter
from upstream.tuning import DEFAULT_GC_THRESHOLD, pin_process, tune_gc

ROWS = 5
TARGET = 2000.0
DEFAULT_CLIENTS = "1x32,4x8,32x1"


# ---- no-op pumps: HTTP/2 gRPC framing answered directly -------------------------------------------

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _SETTINGS, _PING, _GOAWAY, _WINDOW = 0, 1, 4, 6, 7, 8
_END_STREAM, _ACK, _END_HEADERS = 0x1, 0x1, 0x4
_MAX_WINDOW = (1 << 31) - 1
# HPACK: ":status: 200" (static index 8), then literals without indexing (no dynamic table use).
_RESP_HEADERS = b"\x88" + b"\x00\x0ccontent-type\x10application/grpc"
_TRAILERS = b"\x00\x0bgrpc-status\x010"
_EMPTY_RESP = b"\x00\x00\x00\x00\x00"   # gRPC message: not compressed, 0 bytes (empty WriteBinlogResp)


def _frame(typ: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((typ, flags)) + stream.to_bytes(4, "big") + payload


def _ok_response(stream: int) -> bytes:
    s = stream.to_bytes(4, "big")
    return (len(_RESP_HEADERS).to_bytes(3, "big") + bytes((_HEADERS, _END_HEADERS)) + s + _RESP_HEADERS
            + len(_EMPTY_RESP).to_bytes(3, "big") + bytes((_DATA, 0)) + s + _EMPTY_RESP
            + len(_TRAILERS).to_bytes(3, "big") + bytes((_HEADERS, _END_HEADERS | _END_STREAM)) + s + _TRAILERS)


class _NoopH2(asyncio.Protocol):
    """One HTTP/2 connection: every request stream (ended by a DATA frame) gets an OK WriteBinlogResp."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: Any = transport
        self.buf = bytearray()
        self.started = False
        self.consumed = 0
        self.calls = 0
        self.t.write(_frame(_SETTINGS, 0, 0, struct.pack(">HIHI", 3, 1 << 20, 4, _MAX_WINDOW))
                     + _frame(_WINDOW, 0, 0, struct.pack(">I", _MAX_WINDOW - 65535)))

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        if not self.started:
            if len(buf) < len(_PREFACE):
                return
            if bytes(buf[:len(_PREFACE)]) != _PREFACE:
                self.t.close()
                return
            self.started = True
            pos = len(_PREFACE)
        out = []
        n = len(buf)
        while n - pos >= 9:
            end = pos + 9 + ((buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2])
            if end > n:
                break
            typ, flags = buf[pos + 3], buf[pos + 4]
            if typ == _DATA:
                self.consumed += end - pos - 9
                if flags & _END_STREAM:
                    out.append(_ok_response(int.from_bytes(buf[pos + 5:pos + 9], "big") & _MAX_WINDOW))
            elif typ == _SETTINGS and not flags & _ACK:
                out.append(_frame(_SETTINGS, _ACK, 0))
            elif typ == _PING and not flags & _ACK:
                out.append(_frame(_PING, _ACK, 0, bytes(buf[pos + 9:end])))
            elif typ == _GOAWAY:
                self.t.close()
            pos = end
        del buf[:pos]
        if self.consumed > 1 << 24:
            out.append(_frame(_WINDOW, 0, 0, struct.pack(">I", self.consumed)))
            self.consumed = 0
        if out:
            self.t.write(b"".join(out))


def _noop_main(ready: Any, stop: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_NoopH2, "127.0.0.1", 0)
        ready.put(server.sockets[0].getsockname()[1])
        await loop.run_in_executor(None, stop.wait)
        server.close()

    import uvloop
    uvloop.run(serve())


class NoopPumps:
    """``count`` no-op pump processes, registered as online pumps in ``registry``."""

    def __init__(self, registry: str, count: int = 2) -> None:
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self.procs = []
        self.addrs = []
        for _ in range(count):
            ready = ctx.Queue()
            p = ctx.Process(target=_noop_main, args=(ready, self._stop), daemon=True, name="noop-pump")
            p.start()
            self.procs.append(p)
            self.addrs.append(f"127.0.0.1:{int(ready.get(timeout=60))}")
        reg = load_registry(registry)
        try:
            for i, addr in enumerate(self.addrs):
                st = NodeStatus(node_id=f"noop-{i + 1}", host=addr, update_ts=int(time.time()))
                reg.put(node_key(PUMP, st.node_id), st.to_json().encode())
        finally:
            reg.close()

    def close(self) -> None:
        """Stop the processes."""
        self._stop.set()
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)


class Placement:
    """This process (the emulator) on ``emulator`` CPUs, the pump processes on ``pumps`` CPUs."""

    def __init__(self, emulator: set[int], pumps: set[int]) -> None:
        self.emulator, self.pumps = emulator, pumps

    def apply(self, pump_pids: list[int]) -> None:
        """Pin the pumps' processes (every thread) and this one."""
        for pid in pump_pids:
            pin_process(self.pumps, pid)
        pin_process(self.emulator)

    def __str__(self) -> str:
        return (f"emulator on CPU {','.join(map(str, sorted(self.emulator)))}, "
                f"pumps on CPU {','.join(map(str, sorted(self.pumps)))}")


# ---- load ---------------------------------------------------------------------------------------

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


TABLE_SQL = "create table {name} (id bigint primary key, a varchar(32), b decimal(10,2), c datetime, d int, e json)"
NOW = datetime.datetime(2024, 5, 1, 12, 0, 0)


def row(rng: random.Random, key: int) -> list[object]:
    """One row of the bench table."""
    return [key, f"name-{rng.randrange(10**6)}", Decimal(rng.randrange(10**7)) / 100, NOW,
            rng.randrange(10**9), '{"k": 1}']


class Load:
    """The emulator-side load: per-thread key spaces, 5 row changes per transaction."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        cluster.execute(TABLE_SQL.format(name="bench"))
        self.keygen = itertools.count(1)    # next() is atomic: keys are unique across threads and runs

    def _statements(self, rng: random.Random, keys: list[int], busy: set[int],
                    values: Iterator[list[object]]) -> tuple[list[S.Statement], list[int], list[int]]:
        """One transaction's statements, the new keys it inserts and the existing keys it updates
        (never one in ``busy``: a transaction still committing)."""
        stmts: list[S.Statement] = []
        picked: list[int] = []
        if len(keys) >= 6 and rng.random() < 0.5:
            picked = [k for k in rng.sample(keys, 6) if k not in busy][:3]
            for k in picked:
                stmts.append(S.Update(None, "bench", [("d", Lit(rng.randrange(10**9)))], Cmp("=", Col("id"), Lit(k))))
        fresh = [next(self.keygen) for _ in range(ROWS - len(picked))]
        stmts.append(S.Insert(None, "bench", None, [[k, *next(values)] for k in fresh]))
        return stmts, fresh, picked

    def worker(self, i: int, stop_at: float, counts: list[int], aborts: list[int], single: bool = False,
               in_flight: int = 1, errors: list[BaseException] | None = None) -> None:
        """Run transactions until ``stop_at``: each COMMIT waits (``in_flight`` 1), or up to
        ``in_flight`` commits are under way at once (``Session.commit_async``), all finished on return.
        Aborts are counted; another error stops the worker and goes to ``errors`` (raised when None)."""
        rng = random.Random(i)
        session = self.cluster.server(i % len(self.cluster.servers)).session()
        slot = 0 if single else i
        failures: list[BaseException] = [] if errors is None else errors
        keys: list[int] = []
        busy: set[int] = set()
        lock = threading.Lock()
        # Column values are drawn ahead (the load generator is a client's work, not the emulator's).
        values = itertools.cycle([row(rng, 0)[1:] for _ in range(997)])
        room = threading.Semaphore(in_flight)

        def settled(fresh: list[int], picked: list[int], fut: Future[int | None]) -> None:
            exc = fut.exception()
            with lock:
                busy.difference_update(picked)
                if exc is None:
                    keys.extend(fresh)
                    if len(keys) > 1000:
                        del keys[:500]
                    counts[slot] += 1
                elif isinstance(exc, TxnAborted):
                    aborts[slot] += 1
                else:
                    failures.append(exc)
            room.release()

        while time.monotonic() < stop_at and not failures:
            room.acquire()
            with lock:
                stmts, fresh, picked = self._statements(rng, keys, busy, values)
                busy.update(picked)
            outcome: Future[int | None] = Future()
            try:
                session.run(S.Begin())
                for s in stmts:
                    session.run(s)
                if in_flight > 1:
                    session.commit_async().add_done_callback(functools.partial(settled, fresh, picked))
                    continue
                outcome.set_result(session.run(S.Commit()).commit_ts)
            except BaseException as e:  # noqa: BLE001 - counted or reported by settled()
                session.txn = None
                outcome.set_exception(e)
            settled(fresh, picked, outcome)
        for _ in range(in_flight):      # every commit of this worker has finished
            room.acquire()
        if errors is None and failures:
            raise failures[0]

    def run(self, seconds: float, threads: int, in_flight: int = 1) -> tuple[float, int, float]:
        """(committed txn/s, aborts, CPU seconds of this process per committed txn) with ``threads``
        clients keeping up to ``in_flight`` commits each under way."""
        counts = [0] * threads
        aborts = [0] * threads
        errors: list[BaseException] = []
        stop = time.monotonic() + seconds
        ts = [threading.Thread(target=self.worker, args=(i, stop, counts, aborts, False, in_flight, errors))
              for i in range(threads)]
        c0 = _cpu()
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        elapsed = time.monotonic() - t0
        if errors:
            raise errors[0]
        done = max(1, sum(counts))
        return sum(counts) / elapsed, sum(aborts), (_cpu() - c0) / done


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def prewrite_size(cluster: Cluster) -> int:
    """Bytes of the prewrite_value of one 5-row INSERT transaction (not committed)."""
    from upstream.dml import run_dml

    cluster.execute(TABLE_SQL.format(name="size_probe"))
    txn = cluster.server(0).begin()
    run_dml(txn, S.Insert(None, "size_probe", None, [row(random.Random(0), k) for k in range(ROWS)]),
            "test", cluster.catalog)
    return len(txn.prewrite_value().SerializeToString())


def _emulate(cluster: Cluster, args: argparse.Namespace, label: str) -> tuple[Load, float]:
    """Run the load once per client setting; return the best committed txn/s."""
    load = Load(cluster)
    best = 0.0
    for threads, depth in args.clients:
        load.run(min(1.0, args.seconds / 5), threads, depth)   # warm-up: channels, caches
        cluster.flush(60)
        tps, aborts, cpu = load.run(args.seconds, threads, depth)
        t0 = time.monotonic()
        cluster.flush(120)
        print(f"{label:<46} {threads:>3}x{depth:<3} {tps:8.0f} /s   (aborts {aborts}; {cpu * 1e3:.2f} ms CPU "
              f"of this process per txn; commit binlogs drained {time.monotonic() - t0:.1f}s after)", flush=True)
        best = max(best, tps)
    return load, best


def _profile(load: Load, seconds: float) -> None:
    prof = cProfile.Profile()
    counts, aborts = [0], [0]
    prof.enable()
    t1 = time.monotonic()
    load.worker(0, time.monotonic() + seconds, counts, aborts, single=True)
    single = counts[0] / (time.monotonic() - t1)
    prof.disable()
    load.cluster.flush(60)
    print(f"\nprofile (no-op pumps): one thread, {counts[0]} txns ({single:.0f} txn/s under the profiler); "
          f"top functions by own time:")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])


def _clients(text: str) -> list[tuple[int, int]]:
    """``"1x16,32x1"`` -> [(1, 16), (32, 1)]: client threads x commits each keeps under way."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        threads, sep, depth = part.partition("x")
        try:
            pair = (int(threads), int(depth) if sep else 1)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not THREADSxIN_FLIGHT: {part!r} in {text!r}") from None
        if min(pair) < 1:
            raise argparse.ArgumentTypeError(f"threads and commits in flight must be positive: {part!r}")
        out.append(pair)
    if not out:
        raise argparse.ArgumentTypeError("no client settings given")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds per phase")
    ap.add_argument("--clients", type=_clients, default=_clients(DEFAULT_CLIENTS),
                    help=f"comma-separated client settings THREADSxIN_FLIGHT of the emulator phases (default "
                         f"{DEFAULT_CLIENTS}): each thread keeps up to IN_FLIGHT commits under way (1: every "
                         f"COMMIT waits); the pumps phase runs with the largest total")
    ap.add_argument("--phases", default="noop,pumps,emulator",
                    help="comma-separated subset of noop, pumps, emulator (default: all three)")
    ap.add_argument("--profile-seconds", type=float, default=0.0,
                    help="single-thread cProfile of the emulator against the no-op pumps (0: none)")
    ap.add_argument("--pin", action=argparse.BooleanOptionalAction, default=len(os.sched_getaffinity(0)) >= 2,
                    help="pin the emulator to one CPU and the pumps to the others (default: on with 2+ CPUs)")
    ap.add_argument("--pump-client", choices=["thread", "process"], default="process",
                    help="where each emulated server's pump client runs against the no-op pumps, as binlake "
                         "upstream --pump-client (default process: a child process per server, on the pumps' "
                         "CPUs); against real pumps it runs in this process, since the pumps need those CPUs")
    ap.add_argument("--gc-threshold", type=int, default=DEFAULT_GC_THRESHOLD,
                    help=f"the emulator's first-generation GC threshold (default {DEFAULT_GC_THRESHOLD}, "
                         f"as binlake-emulator serve; 0: CPython's default)")
    args = ap.parse_args()
    phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    unknown = phases - {"noop", "pumps", "emulator"}
    if unknown:
        ap.error(f"unknown phases {sorted(unknown)} (known: noop, pumps, emulator)")
    work = Path(tempfile.mkdtemp(prefix="upstream-bench-"))
    print(f"machine: {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    settings = ",".join(f"{t}x{d}" for t, d in args.clients)
    print(f"date: {datetime.date.today()}  clients: {settings}  seconds/phase: {args.seconds:g}  "
          f"rows/txn: {ROWS}", flush=True)
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin and len(cpus) < 2:
        ap.error(f"--pin needs 2 or more CPUs; this process may use {cpus}")
    placement = Placement({cpus[0]}, set(cpus[1:])) if args.pin else None
    print(f"placement: {placement or 'none (--no-pin): the scheduler places every process'}; "
          f"pump clients: {args.pump_client} with no-op pumps, thread with real pumps; "
          f"emulator gc-threshold {args.gc_threshold or 'CPython default'}",
          flush=True)
    client = {"pump_client_process": args.pump_client == "process",
              "pump_client_cpus": placement.pumps if placement else None}
    ceiling = real = pump_ceiling = None
    if "noop" in phases:
        registry = f"file://{work / 'noop-registry.json'}"
        noop = NoopPumps(registry)
        if placement:
            placement.apply([p.pid for p in noop.procs])
        cluster = Cluster(registry=registry, servers=2, **client)
        tune_gc(args.gc_threshold)
        try:
            load, ceiling = _emulate(cluster, args, "noop      emulator vs 2 no-op pumps, txn")
            if args.profile_seconds > 0:
                _profile(load, args.profile_seconds)
        finally:
            cluster.close()
            noop.close()
    if phases & {"pumps", "emulator"}:
        registry = f"file://{work / 'registry.json'}"
        cluster = Cluster(registry=registry, servers=2)
        pumps = [PumpProcess(data_dir=work / f"pump-{i}", pd_url=cluster.tso_url, registry=registry,
                             node_id=f"pump-{i}", extra_args=["--upstream-status-url", cluster.status_url]).start()
                 for i in (1, 2)]
        if placement:
            placement.apply([p.proc.pid for p in pumps if p.proc is not None])
        tune_gc(args.gc_threshold)
        try:
            if "pumps" in phases:
                size = prewrite_size(cluster)
                writers = max(t * d for t, d in args.clients)
                pump_ceiling = baseline(pumps, cluster, writers, args.seconds, size)
                print(f"{'pumps     raw PumpWriter prewrite+commit pairs':<46} {writers:>3} threads: "
                      f"{pump_ceiling:8.0f} /s   "
                      f"(prewrite_value {size} bytes)", flush=True)
            if "emulator" in phases:
                _, real = _emulate(cluster, args, "emulator  emulator vs 2 real pumps, txn")
        finally:
            cluster.close()
            for p in pumps:
                p.kill()
    print()
    if ceiling is not None:
        print(f"emulator's own ceiling (no-op pumps, best client setting): {ceiling:.0f} txn/s; target {TARGET:.0f}: "
              f"{'met' if ceiling >= TARGET else 'NOT met'}")
    if real is not None and pump_ceiling:
        print(f"real pumps: emulator / pumps' own ceiling = {real / pump_ceiling:.2f}")
    if real is not None and ceiling:
        print(f"real pumps: emulator / emulator's own ceiling = {real / ceiling:.2f}"
              + ("  -> capped by the pumps" if pump_ceiling and real < 0.8 * ceiling and real >= 0.6 * pump_ceiling
                 else ""))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
