"""WriteBinlog throughput of one pump under TiDB's own Go pump client: binlake's pump beside TiDB
Binlog's Go pump and a no-op ``binlog.Pump`` server, in the same run.

The load is ``.peers/pumpbench`` (``tests/peers/pumpbench``): TiDB's pump client
(``github.com/pingcap/tidb/tidb-binlog/pump_client`` at the version ``tests/peers/go.mod`` pins) used as
tidb-server uses it, ``NewPumpsClient`` on pdetcd's URL, then per transaction a prewrite binlog with a
``--payload``-byte prewrite_value and, after its ack, a commit binlog whose commit_ts PD's TSO issued
after that ack; ``N`` goroutines write transactions concurrently (each waits for its commit binlog,
where TiDB writes it in the background). pdetcd (``tests/peers/pdetcd``) is PD's TSO and the etcd the
pumps register in. Exactly one pump is registered online during a round (``pumpbench -pump`` checks the
client can choose no other):

- ``binlake``: a ``binlake pump`` process, ``--registry etcd://…``, ``--pd-urls`` pdetcd, sync-log true;
- ``go``: TiDB Binlog's Go pump (``--go-pump PATH``; sync-log true, its default), when given;
- ``no-op``: the baseline, grpcio's own server (grpc.aio on uvloop, ``bench._common.NoopServer``, the
  obvious alternative to binlake's hand-written front door) whose WriteBinlog returns at once,
  registered online in etcd by this script.

For each goroutine count, ``--rounds`` rounds run every target in turn (the order rotates each round);
each pump starts fresh (new data dir) for its round and is stopped after it (paused). A round writes for
``--warmup`` seconds uncounted, then measures ``--seconds``. Per target and goroutine count it prints
binlogs/s (every acknowledged WriteBinlog in the window), the median over rounds of each round's
p50/p99 WriteBinlog latency, the pump process's CPU time (psutil, user + system) per binlog over the
windows, and the ratios binlake/Go and binlake/no-op.

    .venv/bin/python bench/pump_write_go.py                                # binlake and the no-op
    .venv/bin/python bench/pump_write_go.py --go-pump /path/to/pump        # and TiDB Binlog's Go pump
    .venv/bin/python bench/pump_write_go.py --seconds 3 --goroutines 1,8   # a quick run
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import BenchError, NoopServer, code_version, cpu_seconds, machine_line
from ingest.registry import load_registry
from ingest.registry.base import ONLINE, PAUSED, PUMP, NodeStatus
from tests.realtidb.peers import PDEtcd, peer
from upstream.local import PumpProcess, free_port

BINLAKE, GO, NOOP = "binlake", "go", "no-op"


@dataclass
class Round:
    """What one round of one target measured (pumpbench's JSON plus CPU seconds over the window)."""

    target: str
    goroutines: int
    binlogs: int
    seconds: float
    p50_ms: float
    p99_ms: float
    pump_cpu: float
    client_cpu: float
    errors: int
    first_error: str = ""

    @property
    def rate(self) -> float:
        return self.binlogs / self.seconds if self.seconds else 0.0


def _put_state(pd: PDEtcd, status: NodeStatus) -> None:
    registry = load_registry(f"etcd://{pd.addr}")
    try:
        registry.put_node(PUMP, status)
    finally:
        registry.close()


def _wait_online(pd: PDEtcd, node_id: str, alive: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while pd.pump_state(node_id) != ONLINE:
        if not alive() or time.monotonic() > deadline:
            raise BenchError(f"pump {node_id} is not registered online in {pd.addr}")
        time.sleep(0.1)


def _leave_paused(pd: PDEtcd, node_id: str) -> None:
    """After a pump stopped: make sure its registry entry no longer says online (a killed pump's may)."""
    registry = load_registry(f"etcd://{pd.addr}")
    try:
        node = registry.get_node(PUMP, node_id)
        if node is not None and node.state == ONLINE:
            node.state, node.is_alive = PAUSED, False
            registry.put_node(PUMP, node)
    finally:
        registry.close()


@dataclass
class Target:
    """One kind of pump: ``start`` registers a fresh one online and returns (node id, pid); ``stop``
    stops it and leaves its registry entry paused."""

    name: str
    pd: PDEtcd
    root: Path
    go_pump: Path | None = None
    noop: NoopServer | None = None
    _proc: subprocess.Popen[bytes] | None = None
    _binlake: PumpProcess | None = None
    _node: str = ""
    _dir: Path | None = None
    _seq: int = 0

    def _alive(self) -> bool:
        if self._binlake is not None:
            return self._binlake.proc is not None and self._binlake.proc.poll() is None
        return self._proc is None or self._proc.poll() is None

    def start(self) -> tuple[str, int]:
        self._seq += 1
        self._node = f"{self.name.replace('-', '')}-{self._seq}"
        self._dir = self.root / self._node
        self._dir.mkdir(parents=True)
        if self.name == BINLAKE:
            self._binlake = PumpProcess(data_dir=self._dir / "data", pd_url=self.pd.url,
                                        registry=f"etcd://{self.pd.addr}", node_id=self._node,
                                        extra_args=["--sync-log", "true"], log_path=self._dir / "pump.log")
            self._binlake.start(wait=True, timeout=60)
            assert self._binlake.proc is not None
            pid = self._binlake.proc.pid
        elif self.name == GO:
            assert self.go_pump is not None
            addr = f"127.0.0.1:{free_port()}"
            with open(self._dir / "stdout.log", "ab") as out:
                self._proc = subprocess.Popen(
                    [str(self.go_pump), "-addr", addr, "-advertise-addr", addr, "-pd-urls", self.pd.url,
                     "-data-dir", str(self._dir / "data"), "-node-id", self._node,
                     "-log-file", str(self._dir / "pump.log"), "-L", "warn"],
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=self._dir)
            pid = self._proc.pid
        else:
            assert self.noop is not None
            now_ms = int(time.time() * 1000)
            _put_state(self.pd, NodeStatus(node_id=self._node, host=self.noop.addr, state=ONLINE,
                                           max_commit_ts=now_ms << 18, update_ts=now_ms << 18))
            pid = self.noop.pid
        _wait_online(self.pd, self._node, self._alive)
        return self._node, pid

    def stop(self) -> None:
        """Stop the pump (SIGTERM: it pauses; SIGKILL after 30 s), leave its entry paused, drop its data."""
        if self._binlake is not None:
            self._binlake.terminate(timeout=30)
            self._binlake = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGTERM)
                try:
                    self._proc.wait(30)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._proc = None
        if self._node:
            _leave_paused(self.pd, self._node)
        if self._dir is not None:
            shutil.rmtree(self._dir / "data", ignore_errors=True)
        self._node, self._dir = "", None


def _expect(stream: Any, word: str, proc: subprocess.Popen[bytes], log: Path) -> str:
    line = stream.readline().decode().strip()
    if not line.startswith(word):
        proc.kill()
        proc.wait()
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise BenchError(f"pumpbench: expected {word!r}, got {line!r}:\n{tail}")
    return line


def _round(target: Target, goroutines: int, args: argparse.Namespace, pumpbench: Path, pd: PDEtcd) -> Round:
    node, pid = target.start()
    try:
        log = target.root / f"pumpbench-{node}.log"
        with open(log, "ab") as err:
            proc = subprocess.Popen(
                [str(pumpbench), "-pd", pd.url, "-goroutines", str(goroutines), "-duration", f"{args.seconds}s",
                 "-warmup", f"{args.warmup}s", "-payload", str(args.payload), "-pump", node],
                stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        assert proc.stdout is not None
        try:
            _expect(proc.stdout, "measuring", proc, log)
            pump0, cli0 = cpu_seconds(pid), cpu_seconds(proc.pid)
            _expect(proc.stdout, "stopped", proc, log)
            pump1, cli1 = cpu_seconds(pid), cpu_seconds(proc.pid)
            out = json.loads(_expect(proc.stdout, "{", proc, log))
            if proc.wait(60) != 0:
                raise BenchError(f"pumpbench exited with {proc.returncode}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        target.stop()
    if out["pump"] != node:
        raise BenchError(f"pumpbench wrote to {out['pump']}, not {node}")
    return Round(target=target.name, goroutines=goroutines, binlogs=out["binlogs"], seconds=out["seconds"],
                 p50_ms=out["p50_ms"], p99_ms=out["p99_ms"], pump_cpu=pump1 - pump0, client_cpu=cli1 - cli0,
                 errors=out["errors"], first_error=out.get("first_error", ""))


def _round_line(res: Round) -> str:
    line = (f"{res.rate:>9,.0f} binlogs/s  p50 {res.p50_ms:6.2f} ms  p99 {res.p99_ms:7.2f} ms  pump CPU "
            f"{res.pump_cpu * 1e3 / max(res.binlogs, 1):.3f} ms/binlog ({res.pump_cpu / res.seconds:.2f} cores)  "
            f"client {res.client_cpu / res.seconds:.2f} cores")
    return line + (f"  errors {res.errors}: {res.first_error}" if res.errors else "")


@dataclass
class Summary:
    """Rounds of one target at one goroutine count, combined."""

    rate: float             # all binlogs / all seconds
    p50_ms: float           # median over rounds
    p99_ms: float
    cpu_ms_per_binlog: float
    errors: int

    @classmethod
    def of(cls, rounds: list[Round]) -> Summary:
        binlogs = sum(r.binlogs for r in rounds)
        return cls(rate=binlogs / sum(r.seconds for r in rounds),
                   p50_ms=statistics.median(r.p50_ms for r in rounds),
                   p99_ms=statistics.median(r.p99_ms for r in rounds),
                   cpu_ms_per_binlog=sum(r.pump_cpu for r in rounds) * 1e3 / binlogs if binlogs else float("nan"),
                   errors=sum(r.errors for r in rounds))


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--go-pump", type=Path, help="TiDB Binlog's pump binary: adds the Go pump as a target")
    ap.add_argument("--goroutines", default="1,8,32,64", help="writer goroutine counts (default 1,8,32,64)")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per round (default 10)")
    ap.add_argument("--warmup", type=float, default=1.0, help="uncounted seconds before each window (default 1)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per target and goroutine count (default 3)")
    ap.add_argument("--payload", type=int, default=1024, help="prewrite_value bytes (default 1024)")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.goroutines.split(",") if x.strip()]
    names = [BINLAKE] + ([GO] if args.go_pump else []) + [NOOP]
    if args.go_pump is not None and not os.access(args.go_pump, os.X_OK):
        raise BenchError(f"--go-pump {args.go_pump} is not an executable")

    pumpbench = peer("pumpbench")
    started = time.monotonic()
    print(f"pump_write_go  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}  {machine_line()}, "
          f"{code_version()}, load average {os.getloadavg()[0]:.1f}")
    print(f"  TiDB's pump client (pumpbench), prewrite with {args.payload} B prewrite_value + commit per "
          f"transaction; goroutines {levels}; {args.rounds} round(s) x {args.seconds:g} s (+{args.warmup:g} s "
          f"warm-up) per target; targets {', '.join(names)}")
    root = Path(tempfile.mkdtemp(prefix="binlake-pwgo-"))
    rounds: list[Round] = []
    noop: NoopServer | None = None
    try:
        with PDEtcd(root / "pd") as pd:
            noop = NoopServer()
            targets = {n: Target(n, pd, root, go_pump=args.go_pump, noop=noop) for n in names}
            for level in levels:
                for r in range(args.rounds):
                    for name in names[r % len(names):] + names[:r % len(names)]:
                        res = _round(targets[name], level, args, pumpbench, pd)
                        rounds.append(res)
                        print(f"    {level:>3} goroutines  {name:<8} round {r + 1}: {_round_line(res)}", flush=True)
    finally:
        if noop is not None:
            noop.close()
        shutil.rmtree(root, ignore_errors=True)

    print()
    print(f"  {'goroutines':>10} {'target':<8} {'binlogs/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms/binlog':>14} "
          f"{'errors':>6}")
    table: dict[tuple[int, str], Summary] = {}
    for level in levels:
        for name in names:
            s = table[level, name] = Summary.of([x for x in rounds if x.goroutines == level and x.target == name])
            print(f"  {level:>10} {name:<8} {s.rate:>10,.0f} {s.p50_ms:>8.2f} {s.p99_ms:>8.2f} "
                  f"{s.cpu_ms_per_binlog:>14.3f} {s.errors:>6}")
    print("  (binlogs/s over all rounds; p50/p99 of WriteBinlog calls, median over rounds; CPU = the pump "
          "process's user + system time / binlogs)")
    print()
    header = f"  {'goroutines':>10} {'binlake/no-op':>14}"
    if GO in names:
        header += f" {'binlake/Go':>11} {'CPU binlake/Go':>15} {'Go/no-op':>9}"
    print(header)
    for level in levels:
        b, n = table[level, BINLAKE], table[level, NOOP]
        line = f"  {level:>10} {_ratio(b.rate, n.rate):>14}"
        if GO in names:
            g = table[level, GO]
            line += (f" {_ratio(b.rate, g.rate):>11} {_ratio(b.cpu_ms_per_binlog, g.cpu_ms_per_binlog):>15}"
                     f" {_ratio(g.rate, n.rate):>9}")
        print(line)
    top = max(levels)
    b = table[top, BINLAKE]
    summary = f"SUMMARY pump_write_go: at {top} goroutines binlake {b.rate:,.0f} binlogs/s"
    if GO in names:
        g = table[top, GO]
        summary += f", Go pump {g.rate:,.0f} ({_ratio(b.rate, g.rate)}x)"
    summary += (f", no-op {table[top, NOOP].rate:,.0f} ({_ratio(b.rate, table[top, NOOP].rate)}x); "
                f"{time.monotonic() - started:.0f} s, load average {os.getloadavg()[0]:.1f}")
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
