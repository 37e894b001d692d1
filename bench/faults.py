"""A seeded fault campaign: real pumps, a real drain, one injected fault per run, and after every run a
count of what was lost or duplicated.

Each run starts a fresh emulated 2-server TiDB cluster with two real ``binlake pump`` processes
(``tests/drain/conftest.py`` ``cluster_with_pumps``; an etcd registry for ``etcd-outage``), puts load
on it, injects one fault, drains (Iceberg on the campaign's one local Spark session, or MariaDB), and
checks. Run ``i`` uses kind ``KINDS[i % len(KINDS)]`` (of the ``--kinds`` chosen); its seed is drawn
from ``random.Random(--seed)``, one draw per run, so run ``i`` is the same whatever ``--runs`` is, and
that seed drives every choice of the run (which pump, when, how long, which failpoint count, ...).

Load: 4 *ledger* workers (2 per emulated server, 240 transactions at 60 txn/s) each commit
``insert into faults_ledger`` (a new id) + ``update faults_counter`` (the worker's row), and remember
the start_ts/commit_ts the emulator reports for every transaction it says committed (a
``ServerCrashed`` one included: it is committed); beside them a seeded churn ``upstream.workload``
(120 transactions, key churn, a DDL every 0.5 s on ``wl_ddl``).

Fault kinds (one small function each, ``fault_*``):

- ``pump-kill``: ``kill -9`` of one pump under load, restarted from its data dir after 0.3-2 s; the
  pump client writes prewrites to the other pump meanwhile and retries the commits of the dead one.
- ``drain-kill-iceberg``: the load finishes, then ``python -m tests.drain.crashing_cli sink-commit=N
  -- drain ...`` dies (exit 86, as kill -9) after its N-th Iceberg commit (N in 1..2 x tables); maybe
  more load; a plain in-process drain then finishes the range.
- ``drain-kill-mysql``: the same into Debian's MariaDB (``--sink mysql``, failpoint ``mysql-flush=N``).
- ``lost-commit``: ``faults.crash_before_commit_binlog(k)`` on one server: committed transactions
  whose commit binlog never reaches the pump; the pump resolves them through ``/mvcc/hex``.
- ``abort-after-prewrite``: ``faults.abort_after_prewrite(k)``: rolled-back transactions must not appear.
- ``duplicate-prewrite``: the prewrite of k just-acknowledged transactions written again to the
  other pump (as TiDB does when a prewrite write times out); that pump resolves it as committed.
- ``torn-vlog-tail``: ``kill -9`` of a pump, then its newest value-log file gets a torn tail: either a
  partial frame appended (a write in flight at the crash; under load) or, with the load stopped, the
  last record cut when it is a fake binlog (nothing acknowledged depends on it); restart, more load.
- ``full-disk`` (root only, else skipped): one pump's data dir on a tmpfs of 10 GiB + 256 MiB (the
  default ``stop-write-at-available-space`` is 10 GiB); a filler file takes the free space below
  it, the pump refuses writes ("no available space"), the client uses the other pump; the filler
  is removed after 1-3 s.
- ``etcd-outage``: pumps and clients on a Debian etcd registry; etcd stopped 2-5 s under load.
- ``slow-pump``: SIGSTOP/SIGCONT of one pump for 1-4 s (past the client's 3 s write timeout, the
  prewrite goes to the other pump too), or the emulator's ``faults.pump_delay`` on one server.
- ``racing-drains``: two ``binlake drain`` processes started together on one catalog and range; at
  least one must succeed, a loser may only fail with "concurrent run"; a re-run completes.

Checks after every run (counted; a run passes with no problem, 0 lost and 0 duplicated):

- binlogs: every ledger transaction the emulator reported committed (and every crashed one) has its
  prewrite on some pump and its commit binlog (for a lost commit, the pump's resolution) with the
  same commit_ts; no aborted ledger transaction has a commit; no start_ts has two commit ts;
  commit_ts at or below the sink's checkpoint after the final drain.
- Iceberg: ``binlake verify`` at the checkpoint (``run_verify_command``: the mirrors equal the
  upstream read at that ts); every changelog replayed in commit order equals its mirror (not
  ``wl_ddl``, whose older changelog rows lack the columns added later); no changelog row twice
  (same ``_tidb_commit_ts``, ``_tidb_seq`` and key), no key twice in a mirror; every acknowledged
  ledger row in the mirror and its changelog with its commit ts; no changelog row of an aborted
  transaction or of any prewrite the pumps hold no commit for (rolled back; TiDB's Rollback binlogs
  carry commit_ts 0 and are indexed at ts 0, so scans do not return them).
- MySQL: ``verify --against`` at the downstream checkpoint; every acknowledged ledger row present once;
  the checkpoint row consistent.

"lost" counts acknowledged ledger transactions with a missing binlog or missing rows, plus the rows a
verify finds missing; "duplicated" counts changelog rows or mirror keys present twice, plus the rows a
verify finds extra or twice. The final table gives per kind: runs, passed, lost,
duplicated, and the first failure. Exit status 0 only when every run that ran passed (a kind
skipped here, e.g. ``full-disk`` without root, is listed as skipped and does not fail the campaign).

    .venv/bin/python bench/faults.py --runs 11 --seed 1          # one run of each kind
    .venv/bin/python bench/faults.py --runs 100 --seed 1         # the long campaign (about 50 minutes here)
    .venv/bin/python bench/faults.py --runs 3 --kinds pump-kill,lost-commit --keep
    .venv/bin/python bench/faults.py --runs 22 --seed 1 --only 3 --keep   # run 3 of that campaign again
    .venv/bin/python bench/faults.py --runs 100 --seed 1 --from 46        # runs 46-100 of that campaign

Run directories (pump logs, warehouse, drain outputs) live under one temporary directory; ``--keep``
keeps them all, otherwise only those of failed runs are kept (their paths are printed).
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import logging
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from binlake.process import HARNESS, configure_process

configure_process(HARNESS)   # the environment of the drains it runs in-process, as binlake's CLI runs them

from bench._common import machine_line
from binlake.drain import run_verify_command
from binlake.drain_config import DrainerConfig, SparkSection, UpstreamSection
from ingest import binlog as bl
from ingest.scan_client import ScanClient
from schemas import pump_pb2
from sink.iceberg.plugin import IcebergSettings
from tests.drain.conftest import Env, cluster_with_pumps, mirror_state, read_table, replay_changelog
from tests.drain.crashing_cli import CRASH_STATUS
from tests.drain.test_drain_cli import binlake, cli_args
from upstream.cluster import Cluster
from upstream.errors import ServerCrashed, TxnAborted
from upstream.local import PumpProcess, http
from upstream.pump_client.channel import GrpcWriteChannel
from upstream.workload import Workload

KINDS = ["pump-kill", "drain-kill-iceberg", "drain-kill-mysql", "lost-commit", "abort-after-prewrite",
         "duplicate-prewrite", "torn-vlog-tail", "full-disk", "etcd-outage", "slow-pump", "racing-drains"]
LEDGER_WORKERS = 4
LEDGER_TXNS = 240          # per run (first burst), over LEDGER_WORKERS workers
LEDGER_RATE = 60.0         # txn/s, all ledger workers together
WORKLOAD_TXNS = 120
WORKLOAD_RATE = 30.0
TABLES_WRITTEN = 6         # faults_ledger, faults_counter, wl_orders, wl_events, wl_log, wl_ddl
NO_REPLAY = {"wl_ddl"}     # its older changelog rows lack the columns added later: no replay to the mirror
STOP_WRITE_AT = 10 << 30   # the pump's default stop-write-at-available-space
FRAME = struct.Struct("<IQI")  # value-log record header: magic, length, crc32c
VLOG_MAGIC = 0x823A56E8
LEDGER_SQL = ("create table faults_ledger (id bigint primary key, w int, note varchar(40)); "
              "create table faults_counter (w int primary key, n int, last bigint)")


class Skipped(Exception):
    """The kind cannot run on this machine (the reason is printed)."""


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: stop the campaign after cleaning up the current run."""


# ---- the load -----------------------------------------------------------------------------------

@dataclass
class Txn:
    """A ledger transaction the emulator reported committed."""

    row_id: int
    start_ts: int
    commit_ts: int
    crashed: bool = False


class Load:
    """Ledger workers (every acknowledged transaction remembered) beside a seeded churn workload."""

    def __init__(self, cluster: Cluster, seed: int) -> None:
        self.cluster = cluster
        self.seed = seed
        self.acked: dict[int, Txn] = {}          # start_ts -> transaction
        self.aborted: dict[int, int] = {}        # start_ts -> ledger row id it would have written
        self.errors: list[str] = []
        self.workload_stats: Any = None
        self._next = [0] * LEDGER_WORKERS
        self._lock = threading.Lock()
        self._progress = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._workload: Workload | None = None
        self._wl: Workload | None = None

    def setup(self) -> None:
        """Create the ledger tables (one counter row per worker) and the workload's tables."""
        self.cluster.execute(LEDGER_SQL)
        self.cluster.execute("insert into faults_counter values " +
                             ", ".join(f"({w}, 0, 0)" for w in range(LEDGER_WORKERS)))
        self._workload = Workload(self.cluster, seed=self.seed, churn=True, ddl_interval=0.5)
        self._workload.setup()

    def start(self, ledger_txns: int = LEDGER_TXNS, workload_txns: int = WORKLOAD_TXNS) -> Load:
        """Start a burst: ``ledger_txns`` ledger transactions, and (first burst only) the workload's."""
        self._stop.clear()
        per = [ledger_txns // LEDGER_WORKERS + (1 if w < ledger_txns % LEDGER_WORKERS else 0)
               for w in range(LEDGER_WORKERS)]
        self._threads = [threading.Thread(target=self._ledger, args=(w, per[w]), daemon=True, name=f"ledger-{w}")
                         for w in range(LEDGER_WORKERS)]
        wl, self._workload = self._workload, None    # a Workload runs once (its key ids restart per run)
        if wl is not None and workload_txns:
            def work() -> None:
                self.workload_stats = wl.run(rate=WORKLOAD_RATE, duration=0, workers=2, max_txns=workload_txns)
            self._threads.append(threading.Thread(target=work, daemon=True, name="workload"))
            self._wl = wl
        for t in self._threads:
            t.start()
        return self

    def _ledger(self, w: int, count: int) -> None:
        session = self.cluster.server(w % 2).session("test")
        started = time.monotonic()
        per_worker = LEDGER_RATE / LEDGER_WORKERS
        for k in range(count):
            if self._stop.is_set():
                return
            n = self._next[w]
            self._next[w] += 1
            rid = (w + 1) * 1_000_000 + n
            script = (f"begin; insert into faults_ledger values ({rid}, {w}, 'w{w}-{n}'); "
                      f"update faults_counter set n = n + 1, last = {rid} where w = {w}; commit")
            try:
                done = session.execute(script)[-1]
                self._record(Txn(rid, done.start_ts, done.commit_ts))
            except ServerCrashed as e:           # committed; its commit binlog was never sent
                self._record(Txn(rid, e.start_ts, e.commit_ts, crashed=True))
            except TxnAborted as e:              # rolled back (BinlogWriteFailed, injected abort, ...)
                session.txn = None
                with self._lock:
                    self.aborted[e.start_ts] = rid
            except Exception as e:  # noqa: BLE001 - counted; the load goes on
                session.txn = None
                with self._lock:
                    self.errors.append(f"{type(e).__name__}: {e}")
            lag = started + (k + 1) / per_worker - time.monotonic()
            if lag > 0:
                self._stop.wait(lag)

    def _record(self, txn: Txn) -> None:
        with self._progress:
            self.acked[txn.start_ts] = txn
            self._progress.notify_all()

    def wait_acked(self, n: int, timeout: float = 60.0) -> int:
        """Wait until ``n`` ledger transactions are acknowledged (or the burst ended); return the count."""
        deadline = time.monotonic() + timeout
        with self._progress:
            while len(self.acked) < n and time.monotonic() < deadline and self.running():
                self._progress.wait(0.1)
            return len(self.acked)

    def recent(self, n: int) -> list[int]:
        """The start_ts of the ``n`` newest acknowledged ledger transactions."""
        with self._lock:
            return sorted(self.acked)[-n:]

    def running(self) -> bool:
        """True while a ledger worker of the burst is still going."""
        return any(t.is_alive() for t in self._threads if t.name.startswith("ledger"))

    def join(self, timeout: float = 180.0) -> None:
        """Wait for the burst to end (the workload included)."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            raise RuntimeError(f"the load did not finish in {timeout:.0f}s")

    def stop(self) -> None:
        """Stop every worker soon (used when a run fails)."""
        self._stop.set()
        if self._wl is not None:
            self._wl.stop.set()
        for t in self._threads:
            t.join(60)

    def describe(self) -> str:
        """One line: what the load committed and aborted."""
        wl = self.workload_stats
        extra = f", workload {wl.committed} committed/{wl.aborted} aborted/{wl.ddls} DDL" if wl else ""
        if wl and wl.errors:
            extra += f" ({len(wl.errors)} error(s), first: {wl.errors[0][:120]})"
        return f"ledger {len(self.acked)} acked/{len(self.aborted)} aborted{extra}"


# ---- pumps as the checks read them --------------------------------------------------------------

@dataclass
class PumpView:
    """Every record the pumps hold up to their watermarks."""

    prewrites: dict[int, set[str]] = field(default_factory=dict)               # start_ts -> pumps
    commits: dict[int, dict[int, list[str]]] = field(default_factory=dict)     # start_ts -> commit_ts -> pumps
    same_pump_dups: int = 0      # a (key ts, type) stored twice on one pump (a re-sent binlog)

    @classmethod
    def scan(cls, pumps: list[PumpProcess], cluster_id: int) -> PumpView:
        """Range-scan every pump from ts 0 to its watermark (fake binlogs left out)."""
        view = cls()
        for p in pumps:
            seen: Counter[tuple[int, int]] = Counter()
            with ScanClient(p.addr, cluster_id) as c:
                for r in c.scan(0):
                    if bl.is_fake(r.tp, r.start_ts, r.commit_ts):
                        continue
                    seen[(r.key_ts, r.tp)] += 1
                    if r.tp == bl.PREWRITE:
                        view.prewrites.setdefault(r.start_ts, set()).add(p.node_id)
                    elif r.tp == bl.COMMIT:
                        view.commits.setdefault(r.start_ts, {}).setdefault(r.commit_ts, []).append(p.node_id)
                    # rollbacks carry commit_ts 0: indexed at ts 0 (as TiDB's pump does), so no scan sees them
            view.same_pump_dups += sum(n - 1 for n in seen.values() if n > 1)
        return view

    @property
    def uncommitted(self) -> set[int]:
        """start_ts of the prewrites no pump holds a commit for: rolled back (or resolved as such)."""
        return set(self.prewrites) - set(self.commits)


def metric(pump: PumpProcess, name: str) -> float:
    """The sum of the pump's ``/metrics`` samples named ``name`` (with labels as printed, or any labels
    when ``name`` has none); 0 if there is none (a labelled counter before its first increment)."""
    status, body = http("GET", f"{pump.status_url}/metrics")
    found = [float(line.rsplit(" ", 1)[1]) for line in body.decode(errors="replace").splitlines()
             if line.startswith(name + " ") or ("{" not in name and line.startswith(name + "{"))]
    return sum(found)


def vlog_frames(path: Path) -> list[tuple[int, int]]:
    """(offset, size) of every whole record of a value-log file, in order (stops at a torn tail)."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + FRAME.size <= len(data):
        magic, length, _ = FRAME.unpack_from(data, pos)
        if magic != VLOG_MAGIC or pos + FRAME.size + length > len(data):
            break
        out.append((pos, FRAME.size + length))
        pos += FRAME.size + length
    return out


def newest_vlog(pump: PumpProcess) -> Path:
    """The pump's newest value-log file (``value/NNNNNN.vlog``)."""
    return sorted((pump.data_dir / "value").glob("*.vlog"))[-1]


def last_record_is_fake(pump: PumpProcess) -> tuple[int, int] | None:
    """(offset, size) of the newest value-log file's last record when it is a fake binlog, else None."""
    path = newest_vlog(pump)
    frames = vlog_frames(path)
    if not frames:
        return None
    off, size = frames[-1]
    with open(path, "rb") as f:
        f.seek(off + FRAME.size)
        b = bl.parse(f.read(size - FRAME.size))
    return (off, size) if bl.is_fake(b.tp, b.start_ts, b.commit_ts) else None


# ---- one run ------------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What one run found."""

    index: int
    kind: str
    seed: int
    lost: set[Any] = field(default_factory=set)      # start_ts of lost acknowledged txns; verify's missing rows
    lost_why: list[str] = field(default_factory=list)
    duplicated: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str = ""
    seconds: float = 0.0
    root: Path | None = None

    @property
    def passed(self) -> bool:
        return not self.skipped and not self.problems and not self.lost and not self.duplicated

    def detail(self) -> str:
        """The first problem (or lost/duplicated summary), one line."""
        if self.problems:
            return self.problems[0]
        if self.lost:
            return f"{len(self.lost)} lost; first: {self.lost_why[0] if self.lost_why else '?'}"
        if self.duplicated:
            return f"{self.duplicated} duplicated row change(s)"
        return ""


class Campaign:
    """What runs share besides the process's Spark session: a MariaDB, started on first use."""

    def __init__(self, base: Path, keep: bool) -> None:
        self.base = base
        self.keep = keep
        self._maria: Any = None

    def maria(self) -> Any:
        """The campaign's MariaDB (``tests.servers.MariaDBServer``), started on first use."""
        if self._maria is None:
            from tests.servers import MariaDBServer
            self._maria = MariaDBServer().__enter__()
        return self._maria

    def close(self) -> None:
        if self._maria is not None:
            self._maria.__exit__(None, None, None)
            self._maria = None


class Run:
    """One run: its seeded choices, cluster, load, drains and checks."""

    def __init__(self, campaign: Campaign, out: Outcome) -> None:
        self.campaign = campaign
        self.out = out
        self.rng = random.Random(out.seed)
        self.root = out.root or campaign.base
        self.env: Env | None = None
        self.load: Load | None = None

    # ---- bookkeeping ----
    def note(self, text: str) -> None:
        self.out.notes.append(text)

    def problem(self, text: str) -> None:
        self.out.problems.append(text)

    def lose(self, start_ts: int, why: str) -> None:
        """Count an acknowledged transaction as lost (the first three reasons are printed)."""
        if start_ts not in self.out.lost and len(self.out.lost_why) < 3:
            self.out.lost_why.append(f"txn {start_ts}: {why}")
        self.out.lost.add(start_ts)

    # ---- the cluster ----
    @contextmanager
    def cluster(self, registry: str | None = None) -> Iterator[Env]:
        """A cluster with two pumps (``cluster_with_pumps``, on ``registry`` when given) and its Env;
        the load is set up and stopped on the way out."""
        with cluster_with_pumps(self.root, registry=registry) as (cluster, pumps, registry):
            options = DrainerConfig(registry=registry, pd_urls=cluster.tso_url, data_dir=str(self.root / "drainer"),
                                    initial_commit_ts=0,
                                    upstream=UpstreamSection(status_url=cluster.status_url, dsn=cluster.mysql_dsn),
                                    iceberg=IcebergSettings(warehouse=str(self.root / "warehouse")),
                                    spark=SparkSection(master="local[2]"))
            self.env = Env(self.root, cluster, pumps, options)
            self.load = Load(cluster, self.rng.randrange(1 << 30))
            self.load.setup()
            try:
                yield self.env
            finally:
                self.load.stop()
                self.out.notes.append(self.load.describe())
                if self.load.errors:
                    self.out.notes.append(f"load errors: {self.load.errors[:2]}")
                (self.root / "drains.log").write_text("\n\n".join(self.env.outputs))

    def maybe_drain_during_load(self) -> None:
        """Half the runs (by the seed) drain once while the load still runs, after the fault."""
        assert self.env is not None and self.load is not None
        if self.rng.random() < 0.5:
            self.env.drain()
            self.note("a drain ran during the load")

    # ---- checks ----
    def expected(self) -> dict[int, int]:
        """start_ts -> commit_ts of every transaction the emulator reported committed that the checks
        follow: the ledger's, and every one a lost-commit fault hit."""
        assert self.env is not None and self.load is not None
        out = {s: t.commit_ts for s, t in self.load.acked.items()}
        for server in self.env.cluster.servers:
            out.update(dict(server.faults.crashed))
        return out

    def check_binlogs(self, checkpoint: int) -> PumpView:
        """Every acknowledged transaction stored (prewrite on some pump, commit with its commit_ts),
        at or below ``checkpoint``; no aborted transaction has a commit."""
        assert self.env is not None and self.load is not None
        view = PumpView.scan(self.env.pumps, self.env.cluster.cluster_id)
        for s, cts in self.expected().items():
            if s not in view.prewrites:
                self.lose(s, "its prewrite binlog is on no pump")
            elif cts not in view.commits.get(s, {}):
                self.lose(s, f"no commit binlog with commit_ts {cts} (found {sorted(view.commits.get(s, {}))})")
            if cts > checkpoint:
                self.lose(s, f"commit_ts {cts} above the checkpoint {checkpoint} after the final drain")
        for s, commits in view.commits.items():
            if len(commits) > 1:
                self.problem(f"txn {s} stored with two commit ts {sorted(commits)}")
        for s in self.load.aborted:
            if view.commits.get(s):
                self.problem(f"aborted txn {s} has a commit binlog {sorted(view.commits[s])}")
        if view.uncommitted:
            self.note(f"{len(view.uncommitted)} prewrite(s) on the pumps never committed (none may have a row)")
        if view.same_pump_dups:
            self.note(f"{view.same_pump_dups} binlog(s) stored twice on one pump (re-sent; the drain dedups)")
        return view

    def verify_result(self, what: str, code: int, text: str, duplicates: bool) -> None:
        """Count a verify report: its missing rows as lost (not the ledger's: counted per transaction),
        extra rows (and, with ``duplicates``, rows held twice) as duplicated."""
        if code == 0:
            return
        diffs = [line.strip() for line in text.splitlines() if line.strip().startswith(("DIFF", "!"))]
        self.problem(f"{what}: {' '.join('; '.join(diffs[:3]).split()) or text[-300:]}")
        for line in diffs:
            if not line.startswith("DIFF"):
                continue
            counts = {k: int(v) for k, v in re.findall(r"(missing|extra|duplicates) (\d+)", line)}
            if counts.get("missing") and line.split()[1] != "test.faults_ledger":
                self.out.lost.update((line.split()[1], "missing row", i) for i in range(counts["missing"]))
                self.out.lost_why.append(f"{what}: {counts['missing']} row(s) of {line.split()[1]} missing")
            self.out.duplicated += counts.get("extra", 0) + (counts.get("duplicates", 0) if duplicates else 0)

    def check_iceberg(self, checkpoint: int, view: PumpView) -> None:
        """verify at the checkpoint, changelog replay = mirror, no duplicates, ledger rows present."""
        assert self.env is not None and self.load is not None
        out = io.StringIO()
        self.verify_result(f"verify at {checkpoint}", run_verify_command(self.env.options, checkpoint, out=out),
                           out.getvalue(), duplicates=False)    # mirror keys held twice: counted below
        cat = self.env.catalog()
        rolled_back = set(self.load.aborted) | view.uncommitted
        for _, name in sorted(cat.list_tables("test")):
            if "__changelog" in name:
                continue
            ident = f"test.{name}"
            mirror_tbl = cat.load_table(ident)
            schema = mirror_tbl.schema()
            keys = [schema.find_column_name(i) for i in schema.identifier_field_ids]
            mirror = mirror_tbl.scan().to_arrow()
            mkeys = Counter(tuple(r[k] for k in keys) for r in mirror.select(keys).to_pylist())
            dup_keys = sum(n - 1 for n in mkeys.values() if n > 1)
            log = read_table(cat, ident + "__changelog")
            rows = log.select(["_tidb_commit_ts", "_tidb_seq", "_tidb_start_ts", *keys]).to_pylist()
            changes = Counter((r["_tidb_commit_ts"], r["_tidb_seq"], tuple(r[k] for k in keys)) for r in rows)
            dup_changes = sum(n - 1 for n in changes.values() if n > 1)
            if dup_keys or dup_changes:
                self.out.duplicated += dup_keys + dup_changes
                self.problem(f"{ident}: {dup_changes} changelog row(s) twice, {dup_keys} mirror key(s) twice")
            phantoms = sorted({r["_tidb_start_ts"] for r in rows} & rolled_back)
            if phantoms:
                self.problem(f"{ident}: rows of rolled-back txn(s) {phantoms[:3]}")
            if name not in NO_REPLAY and not dup_keys:
                try:
                    if replay_changelog(log, keys) != mirror_state(mirror, keys):
                        self.problem(f"{ident}: the changelog replayed in commit order differs from the mirror")
                except AssertionError as e:
                    self.problem(f"{ident}: changelog replay: {e}")
            if name == "faults_ledger":
                self._ledger_rows(mirror.select(["id", "_tidb_commit_ts"]).to_pylist(),
                                  log.select(["id", "_tidb_op", "_tidb_commit_ts"]).to_pylist(), checkpoint)

    def _ledger_rows(self, mirror: list[dict[str, Any]], log: list[dict[str, Any]], checkpoint: int) -> None:
        assert self.load is not None
        in_mirror = {r["id"]: r["_tidb_commit_ts"] for r in mirror}
        inserted = {(r["id"], r["_tidb_commit_ts"]) for r in log if r["_tidb_op"] == "I"}
        for s, t in self.load.acked.items():
            if t.commit_ts > checkpoint:
                continue   # counted by check_binlogs
            if in_mirror.get(t.row_id) != t.commit_ts:
                self.lose(s, f"ledger row {t.row_id} (commit_ts {t.commit_ts}) not in the mirror "
                             f"(found {in_mirror.get(t.row_id)})")
            elif (t.row_id, t.commit_ts) not in inserted:
                self.lose(s, f"ledger row {t.row_id} not in the changelog")
        aborted_rows = set(self.load.aborted.values()) & set(in_mirror)
        if aborted_rows:
            self.problem(f"ledger rows of aborted txns in the mirror: {sorted(aborted_rows)[:3]}")

    def finish_iceberg(self, **drain_kw: Any) -> None:
        """The final drain (in process) and every Iceberg check at its checkpoint."""
        assert self.env is not None and self.load is not None
        self.load.join()
        report = self.env.drain(**drain_kw)
        checkpoint = int(report["checkpoint_after"])
        view = self.check_binlogs(checkpoint)
        self.check_iceberg(checkpoint, view)

    # ---- MySQL ----
    def mysql_options(self) -> DrainerConfig:
        assert self.env is not None
        maria = self.campaign.maria()
        o = self.env.options.model_copy(deep=True)
        o.syncer.db_type = "mysql"
        o.syncer.to.dsn = maria.dsn
        o.syncer.worker_count = 2
        o.syncer.txn_batch = 5
        return o

    def finish_mysql(self, options: DrainerConfig) -> None:
        """The final MySQL drain (in process), ``verify --against``, ledger rows and checkpoint row."""
        assert self.env is not None and self.load is not None
        self.load.join()
        report = self.env.drain(options)
        checkpoint = int(report["checkpoint_after"])
        self.check_binlogs(checkpoint)
        out = io.StringIO()
        self.verify_result("verify --against mysql", run_verify_command(options, None, out=out,
                                                                         against=options.syncer.to.dsn),
                           out.getvalue(), duplicates=True)
        ids = Counter(r[0] for r in self.campaign.maria().query("SELECT id FROM test.faults_ledger"))
        dups = sum(n - 1 for n in ids.values() if n > 1)
        if dups:   # counted by verify's duplicates
            self.problem(f"{dups} ledger row(s) twice in MariaDB")
        for s, t in self.load.acked.items():
            if t.commit_ts <= checkpoint and t.row_id not in ids:
                self.lose(s, f"ledger row {t.row_id} not in MariaDB")
        if set(self.load.aborted.values()) & set(ids):
            self.problem("ledger rows of aborted txns in MariaDB")
        row = self.campaign.maria().query(f"SELECT checkPoint FROM tidb_binlog.checkpoint WHERE clusterID = "
                               f"{self.env.cluster.cluster_id}")
        cp = json.loads(row[0][0]) if row else {}
        if cp.get("consistent") is not True or cp.get("commitTS") != checkpoint:
            self.problem(f"MariaDB checkpoint row after the final drain at {checkpoint}: {cp or 'none'}")


# ---- fault kinds --------------------------------------------------------------------------------

def fault_pump_kill(run: Run) -> None:
    """kill -9 of one pump under load; restarted from its data dir."""
    with run.cluster() as env:
        assert run.load is not None
        victim = run.rng.choice(env.pumps)
        at = run.rng.randint(20, LEDGER_TXNS // 2)
        down = round(run.rng.uniform(0.3, 2.0), 2)
        run.load.start()
        run.load.wait_acked(at)
        victim.kill()
        time.sleep(down)
        victim.start()
        run.note(f"kill -9 {victim.node_id} after {at} ledger txns, restarted {down}s later")
        run.finish_iceberg()


def fault_drain_kill_iceberg(run: Run) -> None:
    """The drain killed after its N-th Iceberg commit; a plain re-run finishes the range."""
    with run.cluster() as env:
        assert run.load is not None
        n = run.rng.randint(1, 2 * TABLES_WRITTEN)
        more = run.rng.random() < 0.5
        run.load.start().join()
        env.settle()
        r = binlake("drain", *cli_args(env.options), "--spark-master", "local[2]",
                    failpoints=(f"sink-commit={n}",), cwd=env.root)
        env.outputs.append(r.stdout + r.stderr)
        if r.returncode not in (CRASH_STATUS, 0):
            run.problem(f"the crashing drain exited {r.returncode}: {r.stderr.strip()[-300:]}")
        run.note(f"drain killed at sink-commit={n}" if r.returncode == CRASH_STATUS
                 else f"sink-commit={n} did not fire (exit {r.returncode})")
        if more:
            run.note("more load before the re-run")
            run.load.start(ledger_txns=60)
        run.finish_iceberg()


def fault_drain_kill_mysql(run: Run) -> None:
    """The MySQL-sink drain killed after its N-th loader flush; a plain re-run finishes the range."""
    maria = run.campaign.maria()
    maria.reset("test")
    with run.cluster() as env:
        assert run.load is not None
        options = run.mysql_options()
        run.load.start().join()
        env.settle()
        n = run.rng.randint(1, max(1, len(run.load.acked) // 8))   # a run has a flush every few ledger txns
        more = run.rng.random() < 0.5
        args = [*cli_args(env.options), "--sink", "mysql", "--to-dsn", maria.dsn, "--spark-master", "local[2]",
                "--txn-batch", "5", "--worker-count", "2"]
        r = binlake("drain", *args, failpoints=(f"mysql-flush={n}",), cwd=env.root)
        env.outputs.append(r.stdout + r.stderr)
        if r.returncode not in (CRASH_STATUS, 0):
            run.problem(f"the crashing drain exited {r.returncode}: {r.stderr.strip()[-300:]}")
        run.note(f"MySQL drain killed at mysql-flush={n}" if r.returncode == CRASH_STATUS
                 else f"mysql-flush={n} did not fire (exit {r.returncode})")
        if maria.PASSWORD in r.stdout + r.stderr:
            run.problem("the MariaDB password was printed")
        if more:
            run.note("more load before the re-run")
            run.load.start(ledger_txns=60)
        run.finish_mysql(options)


def _upstream_fault(run: Run, arm: Callable[[Any, int], None]) -> tuple[int, int, int]:
    """Under load, after a seeded number of ledger transactions, ``arm(faults, k)`` on a random
    server (k in 1..3); half the runs drain during the load. Returns (server, k, at)."""
    assert run.env is not None and run.load is not None
    server = run.rng.randrange(len(run.env.cluster.servers))
    k = run.rng.randint(1, 3)
    at = run.rng.randint(10, LEDGER_TXNS // 2)
    run.load.start()
    run.load.wait_acked(at)
    arm(run.env.cluster.server(server).faults, k)
    run.maybe_drain_during_load()
    run.load.join()
    return server, k, at


def fault_lost_commit(run: Run) -> None:
    """Committed transactions whose commit binlog never reaches the pump (resolved via /mvcc/hex)."""
    with run.cluster() as env:
        server, k, at = _upstream_fault(run, lambda faults, n: faults.crash_before_commit_binlog(n))
        crashed = env.cluster.server(server).faults.crashed
        run.note(f"{k} commit binlog(s) lost on server {server} after {at} ledger txns: {len(crashed)} hit")
        if len(crashed) < k:
            run.note("the load ended before every armed fault fired")
        run.finish_iceberg()
        resolved = sum(metric(p, "binlog_pump_storage_resolved_prewrites_total") for p in env.pumps)
        run.note(f"the pumps resolved {resolved:g} prewrite(s) through the upstream")


def fault_abort_after_prewrite(run: Run) -> None:
    """Transactions rolled back after both prewrites: none may appear downstream."""
    with run.cluster():
        server, k, at = _upstream_fault(run, lambda faults, n: faults.abort_after_prewrite(n))
        assert run.load is not None
        run.note(f"{k} abort(s) after prewrite on server {server} after {at} ledger txns; "
                 f"{len(run.load.aborted)} ledger txn(s) aborted")
        run.finish_iceberg()


def _duplicate_prewrites(env: Env, starts: list[int]) -> int:
    """Write the stored prewrite of each of ``starts`` to every pump that does not hold it; return how many."""
    cid = env.cluster.cluster_id
    written = 0
    for s in starts:
        held: dict[str, bytes] = {}
        deadline = time.monotonic() + 15
        while not held and time.monotonic() < deadline:   # the index may lag the acknowledgement a little
            for p in env.pumps:
                with ScanClient(p.addr, cid) as c:
                    for r in c.lookup_prewrites([s]):
                        held[p.node_id] = r.payload
            if not held:
                time.sleep(0.05)
        if not held:
            raise RuntimeError(f"the acknowledged prewrite {s} is on no pump")
        payload = next(iter(held.values()))
        for p in env.pumps:
            if p.node_id in held:
                continue
            channel = GrpcWriteChannel(p.addr)
            try:
                resp = channel.write(pump_pb2.WriteBinlogReq(clusterID=cid, payload=payload), timeout=10).result(10)
            finally:
                channel.close()
            if resp.errmsg:
                raise RuntimeError(f"writing the duplicate prewrite {s} to {p.node_id}: {resp.errmsg}")
            written += 1
    return written


def fault_duplicate_prewrite(run: Run) -> None:
    """The prewrite of just-acknowledged transactions also written to the other pump."""
    with run.cluster() as env:
        assert run.load is not None
        k = run.rng.randint(1, 4)
        at = run.rng.randint(20, LEDGER_TXNS // 2)
        run.load.start()
        run.load.wait_acked(at)
        recent = run.load.recent(10)
        picked = run.rng.sample(recent, min(k, len(recent)))
        n = _duplicate_prewrites(env, picked)
        run.note(f"{n} prewrite(s) duplicated to the other pump after {at} ledger txns")
        run.maybe_drain_during_load()
        run.finish_iceberg()


def fault_torn_vlog_tail(run: Run) -> None:
    """kill -9, then a torn tail on the newest value-log file; restart; acknowledged records stay."""
    with run.cluster() as env:
        assert run.load is not None
        victim = run.rng.choice(env.pumps)
        mode = run.rng.choice(["append-partial", "cut-fake"])
        at = run.rng.randint(20, LEDGER_TXNS // 2)
        run.load.start()
        if mode == "cut-fake":      # nothing acknowledged may be cut: stop the load, wait for a fake at the tail
            run.load.join()
            env.settle()
            deadline = time.monotonic() + 10
            while last_record_is_fake(victim) is None and time.monotonic() < deadline:
                time.sleep(0.05)
        else:
            run.load.wait_acked(at)
        victim.kill()
        path = newest_vlog(victim)
        size = path.stat().st_size
        last = last_record_is_fake(victim) if mode == "cut-fake" else None
        if last is not None:
            cut = run.rng.randint(1, last[1] - 1)
            with open(path, "r+b") as f:
                f.truncate(last[0] + last[1] - cut)
            run.note(f"kill -9 {victim.node_id} (load stopped), its last record (a fake binlog) cut by {cut} bytes")
        else:
            off, rec = vlog_frames(path)[-1]
            keep = run.rng.randint(1, rec - 1)
            with open(path, "r+b") as f:
                f.seek(off)
                frame = f.read(rec)
                f.seek(size)
                f.write(frame[:keep])
            run.note(f"kill -9 {victim.node_id} after {at if mode != 'cut-fake' else 'all'} ledger txns, "
                     f"{keep} of {rec} bytes of a record appended as a torn tail")
        victim.start()
        corrupt = metric(victim, "binlog_pump_storage_corrupt_records_total")
        if "torn tail" not in victim.log_tail(200):
            run.note(f"the restarted pump logged no torn tail (corrupt records {corrupt:g})")
        run.load.join()
        run.load.start(ledger_txns=60)
        run.finish_iceberg()


@contextmanager
def tmpfs(path: Path, size: int, keep: bool) -> Iterator[None]:
    """A tmpfs of ``size`` bytes mounted at ``path`` (created); unmounted on exit (copied beside first
    when ``keep``)."""
    path.mkdir(parents=True)
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=False,
                           capture_output=True, text=True)
    if mount.returncode != 0:
        raise Skipped(f"mount -t tmpfs failed: {mount.stderr.strip()}")
    try:
        yield
    finally:
        if keep:
            shutil.copytree(path, path.with_name(path.name + "-tmpfs"), dirs_exist_ok=True)
        if subprocess.run(["umount", str(path)], check=False, capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fault_full_disk(run: Run) -> None:
    """A pump whose disk fills below stop-write-at-available-space, then frees."""
    if os.geteuid() != 0:
        raise Skipped("not root")
    k = run.rng.choice([1, 2])
    at = run.rng.randint(20, LEDGER_TXNS // 3)
    hold = round(run.rng.uniform(1.0, 3.0), 2)
    data_dir = run.root / f"pump-{k}"
    with tmpfs(data_dir, STOP_WRITE_AT + (256 << 20), keep=run.campaign.keep), \
            run.cluster() as env:
        assert run.load is not None
        victim = env.pumps[k - 1]
        assert victim.data_dir == data_dir
        refused0 = metric(victim, "binlog_pump_loss_binlog_count_total")
        run.load.start()
        run.load.wait_acked(at)
        free = shutil.disk_usage(data_dir).free
        filler = data_dir / "filler"
        with open(filler, "wb") as f:
            left = free - STOP_WRITE_AT + (32 << 20)
            chunk = b"\0" * (8 << 20)
            while left > 0:
                left -= f.write(chunk[:left])
        deadline = time.monotonic() + 15
        while metric(victim, "binlog_pump_storage_storage_size_bytes{type=\"available\"}") > STOP_WRITE_AT \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        if metric(victim, "binlog_pump_storage_storage_size_bytes{type=\"available\"}") > STOP_WRITE_AT:
            run.note(f"{victim.node_id} did not see its disk full within 15s")
        time.sleep(hold)
        refused = metric(victim, "binlog_pump_loss_binlog_count_total") - refused0
        filler.unlink()
        run.note(f"{victim.node_id}'s disk filled after {at} ledger txns for {hold}s: {refused:g} write(s) refused")
        if not refused and run.load.running():
            run.note("no write reached the full pump while it was full")
        run.finish_iceberg()


def fault_etcd_outage(run: Run) -> None:
    """The registry's etcd stopped for a few seconds under load, then started again."""
    from tests.servers import EtcdServer

    at = run.rng.randint(20, LEDGER_TXNS // 2)
    down = round(run.rng.uniform(2.0, 5.0), 2)
    with EtcdServer() as etcd, run.cluster(registry=etcd.uri) as env:
        assert run.load is not None
        run.load.start()
        run.load.wait_acked(at)
        etcd.stop()
        time.sleep(down)
        etcd.start()
        run.note(f"etcd stopped after {at} ledger txns for {down}s")
        run.load.join()
        for p in env.pumps:
            if p.proc is not None and p.proc.poll() is not None:
                run.problem(f"{p.node_id} exited ({p.proc.returncode}) during the etcd outage: {p.log_tail(3)}")
        run.finish_iceberg()


def fault_slow_pump(run: Run) -> None:
    """One pump stalled (SIGSTOP/SIGCONT), or one server's binlog writes delayed."""
    with run.cluster() as env:
        assert run.load is not None
        mode = run.rng.choice(["sigstop", "delay"])
        at = run.rng.randint(20, LEDGER_TXNS // 2)
        hold = round(run.rng.uniform(1.0, 4.0), 2)
        run.load.start()
        run.load.wait_acked(at)
        if mode == "sigstop":
            victim = run.rng.choice(env.pumps)
            assert victim.proc is not None
            os.killpg(victim.proc.pid, signal.SIGSTOP)
            try:
                time.sleep(hold)
            finally:
                os.killpg(victim.proc.pid, signal.SIGCONT)
            run.note(f"{victim.node_id} stopped (SIGSTOP) {hold}s after {at} ledger txns")
        else:
            server = run.rng.randrange(len(env.cluster.servers))
            delay = round(run.rng.uniform(0.05, 0.5), 2)
            env.cluster.server(server).faults.pump_delay = delay
            time.sleep(hold)
            env.cluster.server(server).faults.pump_delay = 0.0
            run.note(f"server {server}'s binlog writes delayed {delay}s each for {hold}s after {at} ledger txns")
        run.maybe_drain_during_load()
        run.finish_iceberg()


def fault_racing_drains(run: Run) -> None:
    """Two drains started together on one catalog; a loser fails only with "concurrent run"."""
    with run.cluster() as env:
        assert run.load is not None
        run.load.start().join()
        to_ts = env.settle()
        args = [*cli_args(env.options), "--spark-master", "local[1]", "--to-ts", str(to_ts)]
        env_vars = {**os.environ, "PYTHONPATH": str(ROOT)}
        procs = [subprocess.Popen([sys.executable, "-m", "binlake.cli", "drain", *args, "--report",
                                   str(env.root / f"race-{i}.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, cwd=env.root, env=env_vars) for i in (1, 2)]
        outcomes = []
        try:
            for p in procs:
                stdout, stderr = p.communicate(timeout=600)
                outcomes.append((p.returncode, stderr))
                env.outputs.append(stdout + stderr)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        codes = [c for c, _ in outcomes]
        if 0 not in codes:
            run.problem(f"neither racing drain succeeded: exits {codes}")
        for code, err in outcomes:
            if code != 0 and "concurrent run" not in err:
                run.problem(f"a racing drain failed otherwise (exit {code}): {err.strip()[-300:]}")
        run.note(f"racing drains exited {codes}")
        written: Counter[str] = Counter()
        for i in (1, 2):
            path = env.root / f"race-{i}.json"
            if path.exists():
                written.update(t["table"] for t in json.loads(path.read_text())["tables"] if not t["skipped"])
        both = [t for t, n in written.items() if n > 1]
        if both:
            run.problem(f"tables committed by both racing drains: {both}")
        run.finish_iceberg()


FAULTS: dict[str, Callable[[Run], None]] = {
    "pump-kill": fault_pump_kill, "drain-kill-iceberg": fault_drain_kill_iceberg,
    "drain-kill-mysql": fault_drain_kill_mysql, "lost-commit": fault_lost_commit,
    "abort-after-prewrite": fault_abort_after_prewrite, "duplicate-prewrite": fault_duplicate_prewrite,
    "torn-vlog-tail": fault_torn_vlog_tail, "full-disk": fault_full_disk, "etcd-outage": fault_etcd_outage,
    "slow-pump": fault_slow_pump, "racing-drains": fault_racing_drains,
}
assert list(FAULTS) == KINDS


# ---- the campaign -------------------------------------------------------------------------------

def run_one(campaign: Campaign, out: Outcome) -> Outcome:
    """Run one fault; every exception becomes a problem of the run (Ctrl-C stops the campaign)."""
    started = time.monotonic()
    assert out.root is not None
    handler = logging.FileHandler(out.root / "campaign.log")   # the emulator's and pump client's log
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    try:
        FAULTS[out.kind](Run(campaign, out))
    except Skipped as e:
        out.skipped = str(e)
    except Interrupted:
        raise
    except KeyboardInterrupt:
        raise Interrupted() from None
    except BaseException as e:
        if isinstance(e, SystemExit):
            raise
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb)
                      if f.filename.endswith("faults.py")), "")
        out.problems.append(f"error{' at ' + where if where else ''}: {type(e).__name__}: "
                            f"{' '.join(str(e).split())[:300]}")
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    out.seconds = time.monotonic() - started
    return out


def table(outcomes: list[Outcome], kinds: list[str]) -> str:
    """The final table: per kind runs, passed, lost, duplicated and the first failure's detail."""
    lines = [f"{'fault':<22}{'runs':>5}{'passed':>8}{'lost':>6}{'duplicated':>12}  detail"]
    for kind in kinds + ["all"]:
        mine = [o for o in outcomes if kind in (o.kind, "all")]
        ran = [o for o in mine if not o.skipped]
        if not mine:
            continue
        failed = next((o for o in ran if not o.passed), None)
        detail = f"run {failed.index}: {failed.detail()}" if failed and kind != "all" else ""
        skipped = [o for o in mine if o.skipped]
        if skipped and kind != "all":
            detail = f"skipped: {skipped[0].skipped}" + (f"; {detail}" if detail else "")
        elif skipped:
            detail = f"{len(skipped)} run(s) skipped"
        lines.append(f"{kind:<22}{len(ran):>5}{sum(o.passed for o in ran):>8}{sum(len(o.lost) for o in ran):>6}"
                     f"{sum(o.duplicated for o in ran):>12}  {detail[:160]}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=len(KINDS), help="runs (default: one of each kind)")
    ap.add_argument("--seed", type=int, default=1, help="campaign seed (each run's seed is drawn from it)")
    ap.add_argument("--kinds", default="", help=f"comma-separated subset of: {','.join(KINDS)}")
    ap.add_argument("--only", type=int, default=0, metavar="N",
                    help="run only run N (1-based, as printed) of this campaign: reproduces it with the same seed")
    ap.add_argument("--from", dest="first", type=int, default=1, metavar="N",
                    help="start at run N of this campaign (same seeds as a whole campaign): resumes one that stopped")
    ap.add_argument("--keep", action="store_true", help="keep every run's directory (failed runs' are always kept)")
    args = ap.parse_args(argv)
    args.kind_list = [k.strip() for k in args.kinds.split(",") if k.strip()] or list(KINDS)
    unknown = [k for k in args.kind_list if k not in FAULTS]
    if unknown:
        ap.error(f"unknown kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    args.kind_list = [k for k in KINDS if k in args.kind_list]   # KINDS order
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if not 0 <= args.only <= args.runs or not 1 <= args.first <= args.runs:
        ap.error("--only and --from must name a run of the campaign (1..--runs)")
    if args.only:
        args.first = args.last = args.only
    else:
        args.last = args.runs
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the campaign; 0 when every run that ran passed with nothing lost or duplicated."""
    args = parse_args(argv)
    kinds = args.kind_list
    logging.getLogger().setLevel(logging.INFO)
    logging.lastResort = None          # log records go to each run's campaign.log only

    def terminated(signum: int, frame: Any) -> None:
        raise Interrupted()
    signal.signal(signal.SIGTERM, terminated)   # clean up the run (pumps, MariaDB, tmpfs) and print the table
    base = Path(tempfile.mkdtemp(prefix="binlake-faults-"))
    print(f"binlake fault campaign {dt.datetime.now().isoformat(timespec='seconds')}: --runs {args.runs} "
          f"--seed {args.seed} kinds {','.join(kinds)}", flush=True)
    print(f"machine: {machine_line()}", flush=True)
    print(f"run directories under {base}", flush=True)
    master = random.Random(args.seed)
    campaign = Campaign(base, args.keep)
    outcomes: list[Outcome] = []
    started = time.monotonic()
    from transform.spark import spark_session

    spark = spark_session("local[2]")    # the one session every in-process drain of the campaign uses
    try:
        for i in range(args.runs):
            kind = kinds[i % len(kinds)]
            out = Outcome(i + 1, kind, master.randrange(1 << 32))   # one draw per run, run or not
            if not args.first <= i + 1 <= args.last:
                continue
            out.root = base / f"run-{i + 1:03d}-{kind}"
            out.root.mkdir()
            print(f"run {i + 1}/{args.runs} {kind} (seed {out.seed}) ...", end=" ", flush=True)
            try:
                run_one(campaign, out)
            except Interrupted:
                print(f"interrupted (resume with --from {i + 1})", flush=True)
                if not args.keep:
                    shutil.rmtree(out.root, ignore_errors=True)
                break
            outcomes.append(out)
            verdict = ("skipped: " + out.skipped if out.skipped else "passed" if out.passed else
                       f"FAILED (lost {len(out.lost)}, duplicated {out.duplicated})")
            print(f"{verdict} in {out.seconds:.1f}s", flush=True)
            for line in out.notes + out.problems + [f"lost {why}" for why in out.lost_why]:
                print(f"    {line}", flush=True)
            if out.passed and not args.keep or out.skipped:
                shutil.rmtree(out.root, ignore_errors=True)
            elif not out.passed:
                print(f"    kept {out.root}", flush=True)
    finally:
        campaign.close()
        spark.stop()
        if not any(base.iterdir()):
            base.rmdir()
    ran = [o for o in outcomes if not o.skipped]
    print(f"\n{len(outcomes)} run(s) in {time.monotonic() - started:.0f}s "
          f"({sum(o.seconds for o in ran) / max(1, len(ran)):.1f}s per run)")
    print(table(outcomes, kinds), flush=True)
    ok = len(outcomes) == args.last - args.first + 1 and all(o.passed for o in ran)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
