"""A seeded fault campaign whose writer is a real ``tidb-server``: TiDB's own pump client, TiDB's own
transactions, binlake pumps, binlake drains into Iceberg and MariaDB, one or two faults per run, and
after every run a count of what was lost, duplicated, or broke an invariant.

Each run starts a fresh real cluster (``tests/realtidb/conftest.py`` ``real_cluster``: pdetcd as PD
and etcd, two ``binlake pump`` processes, the newest tidb-server build on unistore with binlog on and
a 3 s pump-client write timeout), puts load on it over TiDB's MySQL port, injects its fault(s) at
seeded points, drains, and checks. Run ``i`` uses kind ``KINDS[i % len(KINDS)]`` (of the ``--kinds``
chosen); its seed is the ``i``-th draw of ``random.Random(--seed)`` and drives every choice of the run.

Load (pymysql, database ``fc``):

- *bank*: 3 threads (15 transfers/s each at most) move money between 60 accounts spread over
  ``bank_a``/``bank_b``/``bank_c``, one transfer per transaction (``BEGIN PESSIMISTIC`` or
  ``BEGIN OPTIMISTIC``, two UPDATEs and an INSERT of a unique ``ledger`` row); the total is
  constant at every ts. A transfer whose COMMIT returned OK is *acknowledged*, one whose COMMIT
  raised is *unknown* (there at most once), one that failed before COMMIT is *aborted* (never there).
- *churn*: a writer (15 transactions/s at most) on ``churn_cols``/``churn_trunc``/``churn_ren``/
  ``churn_part`` beside a DDL thread (ADD/DROP COLUMN, TRUNCATE TABLE, RENAME TABLE back and forth,
  ADD PARTITION).

Every run also drains Iceberg in process once during the load (``tag-runs`` on, so each run of the
drain tags ``tidb-ts-<to_ts>``), for half the runs MariaDB too, and Kafka in ``kafka-restart`` runs.

Fault kinds (``fault_*``):

- ``pump-kill``: ``kill -9`` of one pump under load, restarted from its data dir 0.5-3 s later.
- ``pump-stop``: SIGSTOP of one pump for 4-7 s (past TiDB's 3 s write timeout: TiDB writes the
  prewrite again to the other pump, so both may hold it), then SIGCONT.
- ``drain-kill-iceberg``: ``tests.drain.crashing_cli sink-commit=N`` under load (exit 86 as
  ``kill -9``), N in 1..16; the final drain completes the range.
- ``drain-kill-mysql``: the same into MariaDB with ``mysql-flush=N``, N in 1..30.
- ``pd-stop``: pdetcd (PD + etcd) terminated under load for 2-5 s, restarted on its data dir.
- ``racing-drains``: two ``binlake drain`` processes at once on one catalog and ``--to-ts`` under load;
  one must succeed, a loser may only fail with "concurrent run".
- ``tidb-kill``: ``kill -9`` of tidb-server under load, after 0.3-1.5 s of the bank threads
  transferring unthrottled (transactions in flight: lost commits for the pumps to resolve through
  TiDB's status API), restarted 0.5-3 s later on its unistore data
  (``real_cluster(persistent=True)``); then every table of ``fc`` is read once, as a live cluster's
  traffic (or TiKV's GC) would, so that the dead server's locks are resolved. A prewrite binlog whose
  transaction never reached the store has no lock and no record upstream: the pump drops it after
  ``max-txn-timeout``, 600 s by default as in TiDB Binlog, set to 15 s in these runs.
- ``disk-full``: pump-1's data dir is a tmpfs of its own, filled under load for 4-7 s, then freed:
  either below the pumps' ``stop-write-at-available-space`` (the pump refuses writes; TiDB writes to
  the other pump) or to a few KiB free with no threshold (the pump's writes fail with ENOSPC).
- ``drain-kill-stage``: an Iceberg or MariaDB drain (``crashing_cli drain-stage=S``) killed when its
  stage S ends: plan, pull, pair, decode, collect, written, ddl-recorded or checkpoint.
- ``mariadb-kill``: ``kill -9`` of MariaDB in the middle of a MariaDB drain, restarted on its data
  0.5-3 s later; the drain must ride it out (its loader retries). The drain (``crashing_cli
  mysql-flush=1@PATH``) holds after its first batch committed: MariaDB dies while it holds, or 0-0.3 s
  after it goes on (a batch in flight may lose its COMMIT).
- ``kafka-restart``: a Kafka broker of the run's own (``make kafka``), killed (``kill -9``) or stopped
  in the middle of a Kafka drain (held before its message 1-20, the broker goes while it holds or
  0-0.3 s after it goes on), restarted on its data 1-4 s later; the drain completes or fails naming
  the brokers.

A fault tied to a drain lands at a point of that drain, not at a time: a drain that runs in its own
process finishes a small range in about a second. A fault that still missed (the drain ended first)
is counted as ``missed``.

Checks after every run (the final drains are in process, after the load stopped):

- ledger: every acknowledged transfer's row exactly once in the Iceberg mirror, in the Iceberg
  changelog (as an insert) and in MariaDB; an unknown one at most once; no row of an aborted
  transfer or of an id never attempted;
- bank: the total equals the initial one in the Iceberg mirror at every ``tidb-ts-*`` tag all three
  bank tables carry (a killed drain may leave a tag on only some: noted, not summed), in the current
  mirror, and in MariaDB after every MySQL drain (at its checkpoint); the MariaDB checkpoint row
  consistent at the final drain's checkpoint;
- ``binlake verify`` exact: Iceberg at the checkpoint, MariaDB ``--against``;
- Parquet (a final drain of the whole range into CDC files, every run) and Kafka (``kafka-restart``):
  ledger rows as above, and the bank tables' changes replayed in commit order: the total constant
  after every commit ts once the setup's rows are in; in Kafka every commit ts once, in order.

``lost`` counts (sink, ledger id) pairs of acknowledged transfers missing from a sink plus rows a
verify finds missing; ``duplicated`` counts extra copies of ledger rows plus rows a verify finds extra
or twice; ``invariant_breaks`` counts bank totals off and rows of aborted or never-attempted
transfers. A run's other problems (a verify diff it could not count, an error) are listed.

    .venv/bin/python bench/faults_real.py --runs 6 --seed 1            # one run of each kind
    .venv/bin/python bench/faults_real.py --runs 12 --seed 1 --kinds pump-kill,pump-stop
"""
from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from binlake.drain import run_verify_command
from binlake.drain_config import DrainerConfig
from ingest import binlog as bl
from ingest.scan_client import ScanClient
from schemas import secondary_binlog_pb2 as sb
from sink.changelog import TAG_PREFIX
from sink.iceberg.plugin import catalog_for
from sink.parquet.files import read_changelog
from sink.secondary import column_value
from tests.drain.crashing_cli import CRASH_STATUS
from tests.realtidb.conftest import RealCluster, real_cluster
from tests.realtidb.peers import remove, scratch_dir
from tests.realtidb.versions import NEWEST, TiDBBuild
from tests.servers import KafkaServer, MariaDBServer, kafka_classpath
from transform.changes import COMMIT_TS, OP, SEQ

KINDS = ["pump-kill", "pump-stop", "drain-kill-iceberg", "drain-kill-mysql", "pd-stop", "racing-drains",
         "tidb-kill", "disk-full", "drain-kill-stage", "mariadb-kill", "kafka-restart"]
DB = "fc"
BANK = ("bank_a", "bank_b", "bank_c")
ACCOUNTS = 20                  # per bank table
BALANCE = 1000
TOTAL = BALANCE * ACCOUNTS * len(BANK)
BANK_WORKERS = 3
BANK_RATE = 15.0               # transfers/s per bank thread at most (the drains' work stays bounded)
CHURN_RATE = 15.0              # churn transactions/s at most
WRITE_TIMEOUT = "3s"           # TiDB's [binlog] write-timeout in these runs
TABLES_WRITTEN = 8             # 3 bank tables, ledger, 4 churn tables: 2 commits each per drain run
TIDB_KILL_TXN_TIMEOUT = 15     # tidb-kill: the pumps' max-txn-timeout (s; default 600, as TiDB Binlog's)
DRAIN_STAGES = ("plan", "pull", "pair", "decode", "collect", "written", "ddl-recorded", "checkpoint")
PUMP_FS = 512 << 20            # disk-full: the tmpfs that holds pump-1's data dir
KAFKA_TOPIC = "fc_obinlog"  # kafka-restart: the topic
STOP_WRITE_AT = 64 << 20       # disk-full: the pumps' stop-write-at-available-space (threshold variant)
SETUP = (
    *(f"CREATE TABLE {t} (id INT PRIMARY KEY, bal BIGINT NOT NULL)" for t in BANK),
    "CREATE TABLE ledger (id BIGINT PRIMARY KEY, src VARCHAR(16), dst VARCHAR(16), amt INT, mode VARCHAR(12))",
    "CREATE TABLE churn_cols (id INT PRIMARY KEY, v INT)",
    "CREATE TABLE churn_trunc (id INT PRIMARY KEY, v INT)",
    "CREATE TABLE churn_ren (id INT PRIMARY KEY, v INT)",
    "CREATE TABLE churn_part (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) (PARTITION p1 VALUES LESS THAN (100))",
    *(f"INSERT INTO {t} VALUES " + ", ".join(f"({i}, {BALANCE})" for i in range(1, ACCOUNTS + 1)) for t in BANK),
)


class Skipped(Exception):
    """The kind cannot run here (the reason is printed)."""


# ---- the load -----------------------------------------------------------------------------------

@dataclass
class Ledger:
    """Every transfer by what its client saw: acknowledged, unknown (COMMIT raised) or aborted."""

    acked: set[int] = field(default_factory=set)
    unknown: set[int] = field(default_factory=set)
    aborted: set[int] = field(default_factory=set)
    errors: Counter[str] = field(default_factory=Counter)


class Load:
    """The bank threads and the churn writer + DDL threads on one real TiDB, until ``stop()``."""

    def __init__(self, real: RealCluster, seed: int) -> None:
        self.real = real
        self.seed = seed
        self.ledger = Ledger()
        self.churn_writes = 0
        self.ddls: list[str] = []
        self.churn_errors: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._ren = "churn_ren"
        self._part_bound = 100
        self.burst = threading.Event()   # set: the bank threads transfer as fast as they can

    def setup(self) -> None:
        """The database, the bank's accounts, the ledger and the churn tables."""
        self.real.tidb.execute(f"CREATE DATABASE {DB}")
        self.real.tidb.execute(*SETUP, database=DB)

    def start(self) -> None:
        """Start every thread."""
        targets: list[tuple[Callable[..., None], tuple[Any, ...]]] = [
            *((self._bank, (w,)) for w in range(BANK_WORKERS)), (self._churn, ()), (self._ddl, ())]
        self._threads = [threading.Thread(target=f, args=a, daemon=True, name=f"load-{i}")
                         for i, (f, a) in enumerate(targets)]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Stop every thread and wait for it."""
        self._stop.set()
        for t in self._threads:
            t.join(90)

    def _connect(self) -> Any:
        while not self._stop.is_set():
            try:
                return self.real.tidb.connect(DB)
            except pymysql.err.MySQLError:
                self._stop.wait(0.3)
        return None

    @staticmethod
    def _reset(conn: Any) -> bool:
        """Roll back what the connection holds; False when it is broken (reconnect)."""
        try:
            conn.rollback()
            return True
        except Exception:  # noqa: BLE001 - a broken connection
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass
            return False

    def _bank(self, w: int) -> None:
        rng = random.Random(self.seed * 31 + w)
        conn = self._connect()
        n = 0
        while conn is not None and not self._stop.wait(0 if self.burst.is_set() else 1 / BANK_RATE):
            n += 1
            lid = (w + 1) * 10_000_000 + n
            (ta, ia), (tb, ib) = rng.sample([(t, i) for t in BANK for i in range(1, ACCOUNTS + 1)], 2)
            amt = rng.randint(1, 50)
            mode = rng.choice(["PESSIMISTIC", "OPTIMISTIC"])
            try:
                with conn.cursor() as cur:
                    cur.execute(f"BEGIN {mode}")
                    cur.execute(f"UPDATE {ta} SET bal = bal - {amt} WHERE id = {ia}")
                    cur.execute(f"UPDATE {tb} SET bal = bal + {amt} WHERE id = {ib}")
                    cur.execute(f"INSERT INTO ledger VALUES ({lid}, '{ta}.{ia}', '{tb}.{ib}', {amt}, '{mode}')")
            except Exception as e:  # noqa: BLE001 - before COMMIT: rolled back
                with self._lock:
                    self.ledger.aborted.add(lid)
                    self.ledger.errors[_code(e)] += 1
                if not self._reset(conn):
                    conn = self._connect()
                continue
            try:
                with conn.cursor() as cur:
                    cur.execute("COMMIT")
            except Exception as e:  # noqa: BLE001 - COMMIT raised: committed or not, never twice
                with self._lock:
                    self.ledger.unknown.add(lid)
                    self.ledger.errors[f"commit {_code(e)}"] += 1
                if not self._reset(conn):
                    conn = self._connect()
                continue
            with self._lock:
                self.ledger.acked.add(lid)
        if conn is not None:
            conn.close()

    def _churn(self) -> None:
        rng = random.Random(self.seed * 31 + 100)
        conn = self._connect()
        while conn is not None and not self._stop.is_set():
            table = rng.choice(["churn_cols", "churn_trunc", self._ren, "churn_part"])
            top = self._part_bound if table == "churn_part" else 300
            try:
                with conn.cursor() as cur:
                    cur.execute("BEGIN")
                    for _ in range(rng.randint(1, 3)):
                        k = rng.randrange(top)
                        if rng.random() < 0.75:
                            cur.execute(f"INSERT INTO {table} (id, v) VALUES ({k}, 1) "
                                        "ON DUPLICATE KEY UPDATE v = v + 1")
                        else:
                            cur.execute(f"DELETE FROM {table} WHERE id = {k}")
                    cur.execute("COMMIT")
                self.churn_writes += 1
            except Exception as e:  # noqa: BLE001 - schema changed, table renamed away, a fault
                self.churn_errors[_code(e)] += 1
                if not self._reset(conn):
                    conn = self._connect()
            self._stop.wait(1 / CHURN_RATE)
        if conn is not None:
            conn.close()

    def _ddl(self) -> None:
        rng = random.Random(self.seed * 31 + 200)
        added: list[str] = []
        column = 0
        conn = self._connect()
        while conn is not None and not self._stop.wait(rng.uniform(0.6, 1.5)):
            kind = rng.choice(["add", "drop", "truncate", "rename", "partition"])
            if kind == "drop" and not added:
                kind = "add"
            if kind == "add":
                column += 1
                sql = f"ALTER TABLE churn_cols ADD COLUMN c{column} INT DEFAULT {column}"
            elif kind == "drop":
                sql = f"ALTER TABLE churn_cols DROP COLUMN {added[0]}"
            elif kind == "truncate":
                sql = "TRUNCATE TABLE churn_trunc"
            elif kind == "rename":
                other = "churn_ren2" if self._ren == "churn_ren" else "churn_ren"
                sql = f"RENAME TABLE {self._ren} TO {other}"
            else:
                sql = (f"ALTER TABLE churn_part ADD PARTITION (PARTITION p{self._part_bound // 100 + 1} "
                       f"VALUES LESS THAN ({self._part_bound + 100}))")
            try:
                with conn.cursor() as cur:
                    cur.execute(sql)
            except Exception as e:  # noqa: BLE001 - a fault (the DDL may or may not have run): state re-read
                self.churn_errors[f"ddl {_code(e)}"] += 1
                if not self._reset(conn):
                    conn = self._connect()
                self._reread(added)
                continue
            self.ddls.append(sql)
            if kind == "add":
                added.append(f"c{column}")
            elif kind == "drop":
                added.pop(0)
            elif kind == "rename":
                self._ren = other
            elif kind == "partition":
                self._part_bound += 100
        if conn is not None:
            conn.close()

    def _reread(self, added: list[str]) -> None:
        """After a DDL whose outcome is unknown: the churn tables' state as TiDB has it."""
        try:
            tables = {str(r[0]) for r in self.real.tidb.query(f"SHOW TABLES FROM {DB}")}
            self._ren = "churn_ren2" if "churn_ren2" in tables else "churn_ren"
            cols = [str(r[0]) for r in self.real.tidb.query(f"SHOW COLUMNS FROM {DB}.churn_cols")]
            added[:] = [c for c in cols if re.fullmatch(r"c\d+", c)]
            parts = self.real.tidb.query("SELECT COUNT(*) FROM information_schema.partitions WHERE "
                                         f"table_schema = '{DB}' AND table_name = 'churn_part'")
            self._part_bound = 100 * int(str(parts[0][0]))
        except pymysql.err.MySQLError:
            pass

    def describe(self) -> str:
        """One line: what the load did."""
        lg = self.ledger
        errs = ", ".join(f"{k} x{n}" for k, n in (lg.errors + self.churn_errors).most_common(4))
        return (f"bank {len(lg.acked)} acked/{len(lg.unknown)} unknown/{len(lg.aborted)} aborted, churn "
                f"{self.churn_writes} txns + {len(self.ddls)} DDL" + (f" (errors: {errs})" if errs else ""))


def _code(e: BaseException) -> str:
    """A short name of a client error: its MySQL code, or its type."""
    if isinstance(e, pymysql.err.MySQLError) and e.args and isinstance(e.args[0], int):
        return str(e.args[0])
    return type(e).__name__


# ---- one run ------------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What one run found."""

    index: int
    kind: str
    seed: int
    seconds: float = 0.0
    lost: int = 0
    duplicated: int = 0
    breaks: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str = ""
    upstream_broken: str = ""   # tidb-kill: what TiDB itself lost (its store, not binlake)
    missed: list[str] = field(default_factory=list)   # the fault did not land where it was meant to

    @property
    def passed(self) -> bool:
        return not self.skipped and not (self.lost or self.duplicated or self.breaks or self.problems)

    def line(self, runs: int) -> str:
        """The run's one line."""
        head = f"run {self.index}/{runs} kind={self.kind} seed={self.seed} seconds={self.seconds:.1f}"
        if self.skipped:
            return f"{head} skipped: {self.skipped}"
        return (f"{head} lost={self.lost} duplicated={self.duplicated} invariant_breaks={self.breaks} "
                f"problems={len(self.problems)}" + (" upstream_broken" if self.upstream_broken else "")
                + (" missed" if self.missed else ""))


class Run:
    """One run: its seeded choices, cluster, load, drains and checks."""

    def __init__(self, out: Outcome, root: Path, maria: MariaDBServer, build: TiDBBuild, load_seconds: float) -> None:
        self.out = out
        self.root = root
        self.maria = maria
        self.build = build
        self.rng = random.Random(out.seed)
        self.load_seconds = round(self.rng.uniform(0.8, 1.2) * load_seconds, 1)
        self.real: RealCluster | None = None
        self.load: Load | None = None
        self.outputs: list[str] = []
        self.kafka: KafkaServer | None = None       # kafka-restart: the run's broker
        self.findings: list[tuple[str, int, int, int]] = []   # against_tidb's, until settle()
        self.unknown_held: dict[str, set[int]] = {}   # per sink checked: the unknown transfers it holds

    def note(self, text: str) -> None:
        self.out.notes.append(text)

    def problem(self, text: str) -> None:
        self.out.problems.append(" ".join(text.split())[:400])

    def missed(self, text: str) -> None:
        """The run's fault did not land where it was meant to (the run still checks everything)."""
        self.out.missed.append(text)
        self.note(f"missed: {text}")

    # ---- drains ----
    def iceberg(self) -> DrainerConfig:
        """The Iceberg drainer of the run (``tag-runs`` on)."""
        assert self.real is not None
        o = self.real.options("ice", [DB])
        o.iceberg.tag_runs = True
        return o

    def mysql(self) -> DrainerConfig:
        """The MariaDB drainer of the run."""
        assert self.real is not None
        o = self.real.options("my", [DB], sink="mysql")
        o.syncer.to.dsn = self.maria.dsn
        o.syncer.worker_count = 2
        o.syncer.txn_batch = 5
        return o

    def parquet(self) -> DrainerConfig:
        """The Parquet CDC drainer of the run."""
        assert self.real is not None
        return self.real.options("pq", [DB], sink="parquet")

    def kafka_options(self) -> DrainerConfig:
        """The Kafka drainer of the run (its broker is ``self.kafka``)."""
        assert self.real is not None and self.kafka is not None
        o = self.real.options("kf", [DB], sink="kafka")
        o.syncer.to.kafka_addrs = self.kafka.bootstrap
        o.syncer.to.topic_name = KAFKA_TOPIC
        return o

    def drain(self, options: DrainerConfig) -> int:
        """One in-process drain; returns its checkpoint; after a MySQL one, the bank total checked there."""
        assert self.real is not None
        report = self.real.drain(options)
        self.outputs.append(str(report.get("output", "")))
        checkpoint = int(report["checkpoint_after"])
        if options.syncer.db_type == "mysql":
            self.mysql_bank(checkpoint)
        return checkpoint

    def config_file(self, options: DrainerConfig, name: str) -> Path:
        """A drainer.toml (TiDB Binlog key names) for ``binlake drain --config`` child processes."""
        def q(v: object) -> str:
            return json.dumps(v)
        o = options
        lines = [f"registry = {q(o.registry)}", f"pd-urls = {q(o.pd_urls)}",
                 f"data-dir = {q(str(self.root / (name + '-drainer')))}",
                 *((f"initial-commit-ts = {o.initial_commit_ts}",) if o.initial_commit_ts is not None else ()),
                 "[upstream]", f"status-url = {q(o.upstream.status_url)}", f"dsn = {q(o.upstream.dsn)}",
                 "[syncer]", f"db-type = {q(o.syncer.db_type)}", f"replicate-do-db = {q(o.syncer.replicate_do_db)}",
                 f"worker-count = {o.syncer.worker_count}", f"txn-batch = {o.syncer.txn_batch}",
                 "[syncer.to]", f"dsn = {q(o.syncer.to.dsn)}",
                 *((f"kafka-addrs = {q(o.syncer.to.kafka_addrs)}", f"topic-name = {q(o.syncer.to.topic_name)}")
                   if o.syncer.db_type == "kafka" else ()),
                 "[iceberg]", f"warehouse = {q(o.iceberg.warehouse)}", f"tag-runs = {q(o.iceberg.tag_runs)}",
                 "[spark]", 'master = "local[1]"']
        path = self.root / f"{name}.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def drain_process(self, options: DrainerConfig, name: str, failpoint: str = "",
                      extra: tuple[str, ...] = ()) -> subprocess.Popen[str]:
        """``binlake drain --config`` in a child process (``crashing_cli`` with a failpoint ``NAME=N``)."""
        cmd = ["-m", "tests.drain.crashing_cli", failpoint, "--"] if failpoint else ["-m", "binlake.cli"]
        return subprocess.Popen([sys.executable, *cmd, "drain", "--config", str(self.config_file(options, name)),
                                 "--report", str(self.root / f"{name}.json"), *extra],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=self.root,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})

    def finish(self, proc: subprocess.Popen[str], timeout: float = 600) -> tuple[int, str]:
        """Wait for a child drain; its exit status and output (kept for drains.log)."""
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        self.outputs.append(stdout + stderr)
        return proc.returncode, stderr

    # ---- checks ----
    def ledger_counts(self, where: str, counts: Counter[int]) -> None:
        """Acknowledged ids exactly once, unknown ones at most once, nothing else."""
        assert self.load is not None
        lg = self.load.ledger
        missing = sorted(i for i in lg.acked if counts[i] == 0)
        twice = {i: n for i, n in counts.items() if n > 1}
        phantom = sorted(i for i in counts if i not in lg.acked and i not in lg.unknown)
        self.out.lost += len(missing)
        self.out.duplicated += sum(n - 1 for n in twice.values())
        self.out.breaks += len(phantom)
        if missing:
            self.problem(f"{where}: {len(missing)} acknowledged ledger row(s) missing, first {missing[:3]}")
        if twice:
            self.problem(f"{where}: {len(twice)} ledger row(s) more than once, first {sorted(twice)[:3]}")
        if phantom:
            aborted = sum(1 for i in phantom if i in lg.aborted)
            self.problem(f"{where}: {len(phantom)} ledger row(s) of no acknowledged or unknown transfer "
                         f"({aborted} aborted before COMMIT), first {phantom[:3]}")
        self.unknown_held[where] = {i for i in lg.unknown if counts[i]}
        seen_unknown = len(self.unknown_held[where])
        if lg.unknown:
            self.note(f"{where}: {seen_unknown} of {len(lg.unknown)} unknown transfer(s) present")

    def against_tidb(self, text: str, lost: int = 0, duplicated: int = 0, breaks: int = 0) -> None:
        """A finding measured against TiDB's own state (a verify diff, a bank total): counted by
        :meth:`settle`, unless TiDB itself broke in the run (:meth:`check_upstream`)."""
        self.findings.append((text, lost, duplicated, breaks))

    def lost_by_tidb(self) -> list[int]:
        """``tidb-kill``: the unknown transfers (their COMMIT cut off) that every sink checked holds and
        TiDB itself lacks, with no MVCC record of their ledger row left in TiDB. The pumps resolved
        them as committed from their primary key's write record (``/mvcc/hex``); unistore lost the
        ledger row's lock, which it keeps in memory (:meth:`check_upstream`)."""
        if self.out.kind != "tidb-kill" or not self.unknown_held or self.real is None:
            return []
        held = set.intersection(*self.unknown_held.values())
        ids = {int(str(r[0])) for r in self.real.tidb.query(f"SELECT id FROM {DB}.ledger")}
        lost = []
        for i in sorted(held - ids):
            url = f"{self.real.tidb.status_url}/mvcc/key/{DB}/ledger/{i}"
            with urllib.request.urlopen(url, timeout=5) as resp:
                info = (json.loads(resp.read()).get("value") or {}).get("info") or {}
            if not info.get("writes") and not info.get("lock"):
                lost.append(i)
        return lost

    def settle(self) -> None:
        """Count the findings against TiDB's state, or keep them as notes when TiDB itself broke."""
        lost = self.lost_by_tidb()
        if lost and not self.out.upstream_broken:
            assert self.real is not None   # lost_by_tidb asks the run's TiDB
            self.out.upstream_broken = (
                f"TiDB itself lacks the ledger row of {len(lost)} transfer(s) whose COMMIT was cut off and "
                f"which every sink holds, with no MVCC record of the row left (pumps resolved lost commits: "
                f"{resolved_prewrites(self.real)}), first {lost[:3]}")
            self.note(f"TiDB itself broke after kill -9 (unistore keeps its locks in memory): "
                      f"{self.out.upstream_broken}")
        for text, lost_rows, duplicated, breaks in self.findings:
            if self.out.upstream_broken:
                self.note(f"not counted (TiDB itself broke): {text}")
                continue
            self.out.lost += lost_rows
            self.out.duplicated += duplicated
            self.out.breaks += breaks
            self.problem(text)
        self.findings.clear()

    def verify_result(self, what: str, code: int, text: str) -> None:
        """Count a verify report's missing rows as lost, extra or twice held rows as duplicated."""
        if code == 0:
            return
        diffs = [line.strip() for line in text.splitlines() if line.strip().startswith(("DIFF", "!"))]
        if not diffs:
            self.problem(f"{what}: {text[-300:]}")
        for line in diffs:
            counts = {k: int(v) for k, v in re.findall(r"(missing|extra|duplicates) (\d+)", line)}
            self.against_tidb(f"{what}: {line}", lost=counts.get("missing", 0),
                              duplicated=counts.get("extra", 0) + counts.get("duplicates", 0))

    def check_iceberg(self, options: DrainerConfig, checkpoint: int) -> None:
        """verify at the checkpoint; ledger rows in mirror and changelog; the bank total at every tag."""
        out = io.StringIO()
        self.verify_result(f"iceberg verify at {checkpoint}", run_verify_command(options, checkpoint, out=out),
                           out.getvalue())
        cat = catalog_for(options)
        mirror = cat.load_table(f"{DB}.ledger").scan(selected_fields=("id",)).to_arrow()
        self.ledger_counts("iceberg mirror", Counter(mirror.column("id").to_pylist()))
        log = cat.load_table(f"{DB}.ledger__changelog").scan(selected_fields=("id", "_tidb_op")).to_arrow()
        self.ledger_counts("iceberg changelog", Counter(r["id"] for r in log.to_pylist() if r["_tidb_op"] == "I"))
        tables = {t: cat.load_table(f"{DB}.{t}") for t in BANK}
        current = sum(sum(tbl.scan(selected_fields=("bal",)).to_arrow().column("bal").to_pylist())
                      for tbl in tables.values())
        if current != TOTAL:
            self.against_tidb(f"iceberg mirror: bank total {current} != {TOTAL} at the checkpoint {checkpoint}",
                              breaks=1)
        tags: dict[int, dict[str, int]] = {}
        for t, tbl in tables.items():
            for name, ref in tbl.refs().items():
                if name.startswith(TAG_PREFIX):
                    tags.setdefault(int(name[len(TAG_PREFIX):]), {})[t] = ref.snapshot_id
        checked = 0
        for ts, snaps in sorted(tags.items()):
            if len(snaps) < len(BANK):
                self.note(f"tidb-ts-{ts} on {len(snaps)} of {len(BANK)} bank tables (a killed drain's): not summed")
                continue
            total = sum(sum(tables[t].scan(snapshot_id=s, selected_fields=("bal",)).to_arrow().column("bal")
                            .to_pylist()) for t, s in snaps.items())
            checked += 1
            if total != TOTAL:
                self.against_tidb(f"iceberg tag tidb-ts-{ts}: bank total {total} != {TOTAL}", breaks=1)
        if not checked:
            self.problem("no tidb-ts-* tag on every bank table")
        self.note(f"iceberg: bank total checked at {checked} tag(s)")

    def bank_in_order(self, where: str, changes: list[tuple[int, str, int, str, int]]) -> None:
        """The bank total after every commit ts of ``changes`` ((commit_ts, table, id, op, bal) of the bank
        tables, in commit order) replayed from nothing: once the setup's rows are all there, always
        the initial total."""
        state: dict[tuple[str, int], int] = {}
        reached, checked, off = False, 0, []
        for ts, group in itertools.groupby(changes, key=lambda c: c[0]):
            for _, table, key, op, bal in group:
                if op == "D":
                    state.pop((table, key), None)
                else:
                    state[(table, key)] = bal
            total = sum(state.values())
            reached = reached or total == TOTAL
            if reached:
                checked += 1
                if total != TOTAL:
                    off.append((ts, total))
        if not reached:
            self.against_tidb(f"{where}: the bank total never reached {TOTAL}", breaks=1)
        if off:
            self.against_tidb(f"{where}: bank total off after {len(off)} commit ts, first {off[0]}", breaks=len(off))
        self.note(f"{where}: bank total checked after {checked} commit ts")

    def check_parquet(self, options: DrainerConfig) -> None:
        """Ledger rows in the CDC files; the bank total after every commit ts the files hold."""
        root = options.parquet.dir
        ledger = read_changelog(root, DB, "ledger").select(["id", OP]).to_pylist()
        self.ledger_counts("parquet", Counter(r["id"] for r in ledger if r[OP] == "I"))
        changes = []
        for t in BANK:
            changes += [(r[COMMIT_TS], r[SEQ], t, r["id"], r[OP], r["bal"])
                        for r in read_changelog(root, DB, t).select([COMMIT_TS, SEQ, OP, "id", "bal"]).to_pylist()]
        self.bank_in_order("parquet", [(ts, t, key, op, bal) for ts, _, t, key, op, bal in sorted(changes)])

    def check_kafka(self) -> None:
        """Every transaction once in commit order in the topic; ledger rows; the bank total after every
        message (one message is one transaction)."""
        assert self.kafka is not None
        messages = [sb.Binlog.FromString(v) for v in self.kafka.messages(KAFKA_TOPIC)]
        seen: set[int] = set()
        last, repeated, disorder = 0, 0, 0
        ledger: Counter[int] = Counter()
        changes: list[tuple[int, str, int, str, int]] = []
        for m in messages:
            if m.commit_ts in seen:
                repeated += 1
                continue
            seen.add(m.commit_ts)
            disorder += m.commit_ts < last
            last = max(last, m.commit_ts)
            for tbl in m.dml_data.tables if m.type == sb.DML else ():
                if tbl.schema_name != DB:
                    continue
                names = [c.name for c in tbl.column_info]
                for mut in tbl.mutations:
                    row = dict(zip(names, (column_value(c, json=False) for c in mut.row.columns)))
                    if tbl.table_name == "ledger" and mut.type == sb.Insert:
                        ledger[int(row["id"])] += 1
                    elif tbl.table_name in BANK:
                        changes.append((m.commit_ts, tbl.table_name, int(row["id"]),
                                        "D" if mut.type == sb.Delete else "U", int(row["bal"])))
        self.out.duplicated += repeated
        self.out.breaks += disorder
        if repeated:
            self.problem(f"kafka: {repeated} message(s) repeat a commit ts")
        if disorder:
            self.problem(f"kafka: {disorder} message(s) out of commit order")
        self.note(f"kafka: {len(messages)} message(s)")
        self.ledger_counts("kafka", ledger)
        self.bank_in_order("kafka", changes)

    def mysql_bank(self, checkpoint: int) -> None:
        """The bank total in MariaDB right after a MySQL drain (at its checkpoint)."""
        total = sum(int(str(self.maria.query(f"SELECT COALESCE(SUM(bal), 0) FROM {DB}.{t}")[0][0])) for t in BANK)
        if total != TOTAL:
            self.against_tidb(f"mariadb at checkpoint {checkpoint}: bank total {total} != {TOTAL}", breaks=1)

    def check_mysql(self, options: DrainerConfig, checkpoint: int) -> None:
        """verify --against, ledger rows, checkpoint row."""
        assert self.real is not None
        out = io.StringIO()
        self.verify_result("mysql verify --against", run_verify_command(options, None, out=out,
                                                                        against=self.maria.dsn), out.getvalue())
        self.ledger_counts("mariadb", Counter(int(str(r[0])) for r in self.maria.query(f"SELECT id FROM {DB}.ledger")))
        row = self.maria.query("SELECT checkPoint FROM tidb_binlog.checkpoint WHERE clusterID = "
                               f"{self.real.pd.cluster_id}")
        cp = json.loads(str(row[0][0])) if row else {}
        if cp.get("consistent") is not True or cp.get("commitTS") != checkpoint:
            self.problem(f"mariadb checkpoint row after the final drain at {checkpoint}: {cp or 'none'}")

    def check_upstream(self) -> None:
        """TiDB itself: every acknowledged ledger row, the bank total (else TiDB lost it, not binlake)."""
        assert self.load is not None
        if self.real is not None:
            read_every_table(self.real)
        ids = {int(str(r[0])) for r in self.real.tidb.query(f"SELECT id FROM {DB}.ledger")} if self.real else set()
        gone = self.load.ledger.acked - ids
        broken = [f"TiDB itself lacks {len(gone)} acknowledged ledger row(s)"] if gone else []
        total = sum(int(str(self.real.tidb.query(f"SELECT SUM(bal) FROM {DB}.{t}")[0][0])) for t in BANK) \
            if self.real else TOTAL
        if total != TOTAL:
            broken.append(f"TiDB itself: bank total {total} != {TOTAL}")
        if broken and self.out.kind == "tidb-kill":
            # unistore keeps its locks in memory (written out only when it closes): a kill -9 loses
            # the secondaries of a transaction whose primary had committed, so TiDB breaks atomicity
            self.out.upstream_broken = "; ".join(broken)
            self.note(f"TiDB itself broke after kill -9 (unistore keeps its locks in memory): "
                      f"{self.out.upstream_broken}")
        elif broken:
            self.problem("; ".join(broken))

    # ---- the run ----
    @contextmanager
    def cluster(self, persistent: bool = False, pump_args: tuple[str, ...] = ()) -> Iterator[RealCluster]:
        """The run's real cluster (``real_cluster``'s options), load set up; the load stopped and drain
        outputs kept on the way out."""
        with real_cluster(self.root, self.build, write_timeout=WRITE_TIMEOUT, persistent=persistent,
                          pump_args=pump_args) as real:
            self.real = real
            self.load = Load(real, self.rng.randrange(1 << 30))
            self.load.setup()
            try:
                yield real
            finally:
                self.load.stop()
                self.note(self.load.describe())
                (self.root / "drains.log").write_text("\n\n".join(self.outputs))

    def under_load(self, fault: Callable[[], None]) -> None:
        """The load for ``load_seconds``; the fault at a seeded point, an Iceberg drain (and for half the
        runs a MariaDB drain) at other seeded points, in time order, the load still running after the
        last; then the final drains and checks."""
        assert self.real is not None and self.load is not None
        self.maria.reset(DB)
        ice, my = self.iceberg(), self.mysql()
        span = self.load_seconds
        events: list[tuple[float, str, Callable[[], Any]]] = [
            (self.rng.uniform(0.2, 0.45) * span, "fault", fault),
            (self.rng.uniform(0.1, 0.8) * span, "iceberg drain", lambda: self.drain(ice))]
        if self.rng.random() < 0.5:
            events.append((self.rng.uniform(0.1, 0.8) * span, "mariadb drain", lambda: self.drain(my)))
        if self.kafka is not None:
            kafka = self.kafka_options()
            events.append((self.rng.uniform(0.1, 0.8) * span, "kafka drain", lambda: self.drain(kafka)))
        started = time.monotonic()
        self.load.start()
        try:
            for at, what, action in sorted(events, key=lambda e: e[0]):
                wait = started + at - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self.note(f"{what} at {time.monotonic() - started:.1f}s")
                action()
            # the load outlives every event (a slow drain delays the ones after it) and the span
            time.sleep(max(1.0, started + span - time.monotonic()))
        finally:
            self.load.stop()
        self.note(f"load stopped at {time.monotonic() - started:.1f}s")
        self.check_upstream()
        checkpoint = self.drain(ice)
        self.check_iceberg(ice, checkpoint)
        checkpoint = self.drain(my)
        self.check_mysql(my, checkpoint)
        parquet = self.parquet()
        self.drain(parquet)
        self.check_parquet(parquet)
        if self.kafka is not None:
            self.drain(self.kafka_options())
            self.check_kafka()
        self.settle()


# ---- fault kinds --------------------------------------------------------------------------------

def fault_pump_kill(run: Run) -> None:
    """kill -9 of one pump under load; restarted from its data dir."""
    with run.cluster() as real:
        victim = run.rng.choice(real.pumps)
        down = round(run.rng.uniform(0.5, 3.0), 2)

        def fault() -> None:
            victim.kill()
            time.sleep(down)
            victim.start()
            run.note(f"kill -9 {victim.node_id}, restarted {down}s later")
        run.under_load(fault)


def fault_pump_stop(run: Run) -> None:
    """SIGSTOP of one pump past TiDB's write timeout (TiDB fails over, the prewrite may be on both), SIGCONT."""
    with run.cluster() as real:
        victim = run.rng.choice(real.pumps)
        hold = round(run.rng.uniform(4.0, 7.0), 2)

        def fault() -> None:
            assert victim.proc is not None
            os.killpg(victim.proc.pid, signal.SIGSTOP)
            try:
                time.sleep(hold)
            finally:
                os.killpg(victim.proc.pid, signal.SIGCONT)
            run.note(f"SIGSTOP {victim.node_id} for {hold}s (TiDB's write timeout {WRITE_TIMEOUT})")
        run.under_load(fault)
        run.note(f"{prewrites_on_both(real)} prewrite(s) on both pumps (TiDB's failover re-writes)")


def prewrites_on_both(real: RealCluster) -> int:
    """How many start_ts have a prewrite binlog on more than one pump."""
    held: Counter[int] = Counter()
    for p in real.pumps:
        with ScanClient(p.addr, real.pd.cluster_id) as c:
            held.update({r.start_ts for r in c.scan(0) if r.tp == bl.PREWRITE})
    return sum(1 for n in held.values() if n > 1)


def _drain_kill(run: Run, sink: Callable[[], str], failpoint: Callable[[str], str]) -> None:
    """A child drain into ``sink()`` killed at ``failpoint(sink)`` (``NAME=V``) under load."""
    with run.cluster():
        sink_name = sink()
        options = run.iceberg() if sink_name == "iceberg" else run.mysql()
        point = failpoint(sink_name)

        def fault() -> None:
            code, err = run.finish(run.drain_process(options, f"crash-{sink_name}", failpoint=point))
            if code not in (CRASH_STATUS, 0):
                run.problem(f"the crashing {sink_name} drain exited {code}: {err.strip()[-300:]}")
            run.note(f"{sink_name} drain killed at {point}" if code == CRASH_STATUS
                     else f"{point} did not fire (exit {code})")
            if run.maria.PASSWORD in "".join(run.outputs[-1:]):
                run.problem("the MariaDB password was printed")
        run.under_load(fault)


def fault_drain_kill_iceberg(run: Run) -> None:
    """The Iceberg drain killed after its N-th table commit, under load; the final drain completes."""
    _drain_kill(run, lambda: "iceberg", lambda _: f"sink-commit={run.rng.randint(1, 2 * TABLES_WRITTEN)}")


def fault_drain_kill_mysql(run: Run) -> None:
    """The MariaDB drain killed after its N-th loader flush, under load; the final drain completes."""
    _drain_kill(run, lambda: "mysql", lambda _: f"mysql-flush={run.rng.randint(1, 30)}")


def fault_drain_kill_stage(run: Run) -> None:
    """An Iceberg or MariaDB drain killed when one of its stages ends (``drain-stage``), under load."""
    _drain_kill(run, lambda: run.rng.choice(["iceberg", "mysql"]),
                lambda _: f"drain-stage={run.rng.choice(DRAIN_STAGES)}")


def error_line(stderr: str) -> str:
    """The line of a failed command's output that says why (``binlake …: error: …``), else its last."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()] or [""]
    return next((line for line in reversed(lines) if "error:" in line), lines[-1])[:200]


def _held_drain(run: Run, options: DrainerConfig, name: str, point: str) -> tuple[subprocess.Popen[str], Path] | None:
    """A drain started with ``crashing_cli POINT@PATH`` once it holds at that failpoint: (the process,
    PATH, whose removal lets it go on); None, with the fault counted as missed, when it ended first."""
    hold = run.root / f"{name}-holds"
    hold.unlink(missing_ok=True)
    proc = run.drain_process(options, name, failpoint=f"{point}@{hold}")
    deadline = time.monotonic() + 300
    while proc.poll() is None and not hold.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    if hold.exists():
        return proc, hold
    code, err = run.finish(proc)
    run.missed(f"the {name} drain ended (exit {code}) before its failpoint {point}: no fault injected")
    if code != 0:
        run.problem(f"the {name} drain exited {code}: {err.strip()[-300:]}")
    return None


def _strike(run: Run, proc: subprocess.Popen[str], hold: Path, held: bool, lag: float,
            fault: Callable[[], None]) -> str:
    """``fault()`` while the drain holds (``held``), or ``lag`` seconds after it is let go; how it landed."""
    if held:
        fault()
        hold.unlink()
        return "while the drain held"
    hold.unlink()
    time.sleep(lag)
    running = proc.poll() is None
    fault()
    if not running:
        run.missed(f"the drain had ended {lag}s after it was let go, before the fault")
    return f"{lag}s after the drain was let go" + ("" if running else " (it had ended: missed)")


def fault_mariadb_kill(run: Run) -> None:
    """MariaDB killed (kill -9) in the middle of a MariaDB drain, restarted on its data; the drain
    rides it out, the final drain completes. The drain holds after its loader's first flush (its
    first batch committed): MariaDB dies while it holds, so the next batch or the checkpoint's write
    meets a dead server, or 0-0.3 s after it goes on, so a batch in flight may lose its COMMIT."""
    with run.cluster():
        options = run.mysql()
        held = run.rng.random() < 0.5
        lag = round(run.rng.uniform(0.0, 0.3), 2)
        down = round(run.rng.uniform(0.5, 3.0), 2)

        def fault() -> None:
            started = _held_drain(run, options, "apply", "mysql-flush=1")
            if started is None:
                return
            proc, hold = started
            how = _strike(run, proc, hold, held, lag, run.maria.kill)
            time.sleep(down)
            run.maria.start()
            code, err = run.finish(proc)
            retried = err.count("transient error")
            run.note(f"MariaDB killed {how} after the loader's first flush, restarted {down}s later; "
                     f"the drain retried {retried} time(s) and exited {code}"
                     + (f": {error_line(err)}" if code else ""))
            if code != 0:
                run.problem(f"the MariaDB drain did not ride out MariaDB's restart (exit {code}): "
                            f"{err.strip()[-300:]}")
            elif not retried:
                run.missed("the MariaDB drain met no dead server (it retried nothing): it had done its work")
        run.under_load(fault)


def fault_kafka_restart(run: Run) -> None:
    """The Kafka broker killed (kill -9) or stopped in the middle of a Kafka drain, restarted on its
    data; the drain rides it out or fails naming the brokers, the final drain completes. The drain
    holds before its message N (1-20): the broker goes while it holds, or 0-0.3 s after it goes on."""
    classpath = kafka_classpath()
    if classpath is None:
        raise Skipped("no Kafka broker here (make kafka)")
    crash = run.rng.random() < 0.5
    message = run.rng.randint(1, 20)
    held = run.rng.random() < 0.5
    lag = round(run.rng.uniform(0.0, 0.3), 2)
    down = round(run.rng.uniform(1.0, 4.0), 2)
    with KafkaServer(classpath) as kafka, run.cluster():
        run.kafka = kafka
        options = run.kafka_options()

        def fault() -> None:
            started = _held_drain(run, options, "kafka", f"kafka-produce={message}")
            if started is None:
                return
            proc, hold = started
            how = _strike(run, proc, hold, held, lag, kafka.kill if crash else kafka.stop)
            time.sleep(down)
            kafka.start()
            code, err = run.finish(proc)
            run.note(f"Kafka broker {'killed' if crash else 'stopped'} {how} before message {message}, "
                     f"restarted {down}s later; the drain exited {code}"
                     + (f": {error_line(err)}" if code else ""))
            if code not in (0, 1) or code == 1 and "broker" not in err.lower() and "kafka" not in err.lower():
                run.problem(f"the Kafka drain failed otherwise (exit {code}): {err.strip()[-300:]}")
        run.under_load(fault)


def fault_pd_stop(run: Run) -> None:
    """pdetcd (PD + the pumps' etcd) terminated under load for a few seconds, restarted on its data dir."""
    with run.cluster() as real:
        down = round(run.rng.uniform(2.0, 5.0), 2)

        def fault() -> None:
            real.pd.__exit__(None, None, None)
            time.sleep(down)
            real.pd.__enter__()
            run.note(f"pdetcd stopped for {down}s")
            for p in real.pumps:
                if p.proc is not None and p.proc.poll() is not None:
                    run.problem(f"{p.node_id} exited ({p.proc.returncode}) during the PD outage: {p.log_tail(3)}")
        run.under_load(fault)


def fault_racing_drains(run: Run) -> None:
    """Two Iceberg drains started together on one catalog and range, under load."""
    with run.cluster() as real:
        options = run.iceberg()

        def fault() -> None:
            to_ts = real.settle()
            procs = [run.drain_process(options, f"race-{i}", extra=("--to-ts", str(to_ts))) for i in (1, 2)]
            outcomes = [run.finish(p) for p in procs]
            codes = [c for c, _ in outcomes]
            if 0 not in codes:
                run.problem(f"neither racing drain succeeded: exits {codes}: {outcomes[0][1].strip()[-200:]}")
            for code, err in outcomes:
                if code != 0 and "concurrent run" not in err:
                    run.problem(f"a racing drain failed otherwise (exit {code}): {err.strip()[-300:]}")
            run.note(f"racing drains to {to_ts} exited {codes}")
        run.under_load(fault)


def read_every_table(real: RealCluster) -> None:
    """``SELECT COUNT(*)`` of every table of ``fc``: a reader resolves the locks a dead transaction left."""
    for (table,) in real.tidb.query(f"SHOW TABLES FROM {DB}"):
        real.tidb.query(f"SELECT COUNT(*) FROM {DB}.`{table}`")


def resolved_prewrites(real: RealCluster) -> str:
    """What the pumps' lost-commit resolution decided, from their metrics (``committed=2 ...``)."""
    found: Counter[str] = Counter()
    for p in real.pumps:
        with urllib.request.urlopen(f"{p.status_url}/metrics", timeout=5) as resp:
            for family in text_string_to_metric_families(resp.read().decode()):
                for sample in family.samples:
                    if sample.name == "binlog_pump_storage_resolved_prewrites_total":
                        found[sample.labels["result"]] += int(sample.value)
    return " ".join(f"{k}={n}" for k, n in sorted(found.items())) or "none"


def fault_tidb_kill(run: Run) -> None:
    """kill -9 of tidb-server under load, restarted on its unistore data; its locks read away."""
    config = run.root / "pump.toml"
    config.write_text(f"max-txn-timeout = {TIDB_KILL_TXN_TIMEOUT}\n")
    with run.cluster(persistent=True, pump_args=("--config", str(config))) as real:
        down = round(run.rng.uniform(0.5, 3.0), 2)
        burst = round(run.rng.uniform(0.3, 1.5), 2)

        def fault() -> None:
            tidb = real.tidb
            assert tidb.proc is not None and run.load is not None
            run.load.burst.set()   # many commits in flight: some between TiDB's commit and its commit binlog
            time.sleep(burst)
            os.killpg(tidb.proc.pid, signal.SIGKILL)
            tidb.proc.wait()
            run.load.burst.clear()
            time.sleep(down)
            tidb.__enter__()
            read_every_table(real)
            run.note(f"kill -9 tidb-server after a {burst}s burst of transfers, restarted {down}s later on its data")
        run.under_load(fault)
        run.note(f"pumps resolved lost commits: {resolved_prewrites(real)}")


def fault_disk_full(run: Run) -> None:
    """pump-1's own filesystem filled under load, then freed: below the stop-write threshold or to ENOSPC."""
    variant = run.rng.choice(["threshold", "enospc"])
    hold = round(run.rng.uniform(4.0, 7.0), 2)
    mount = run.root / "pump-1"   # start_pumps' data dir of pump-1
    mount.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={PUMP_FS}", "tmpfs", str(mount)], check=True)
    config = run.root / "pump.toml"
    config.write_text(f"[storage]\nstop-write-at-available-space = {STOP_WRITE_AT if variant == 'threshold' else 0}\n")
    try:
        with run.cluster(pump_args=("--config", str(config))) as real:
            def fault() -> None:
                filler = mount / "filler"
                st = os.statvfs(mount)
                leave = STOP_WRITE_AT // 2 if variant == "threshold" else 16 << 10
                fd = os.open(filler, os.O_CREAT | os.O_WRONLY)
                try:
                    os.posix_fallocate(fd, 0, max(0, st.f_bavail * st.f_frsize - leave))
                finally:
                    os.close(fd)
                time.sleep(hold)
                filler.unlink()
                run.note(f"pump-1's filesystem full ({variant}: {leave >> 10} KiB left) for {hold}s")
                for p in real.pumps:
                    if p.proc is not None and p.proc.poll() is not None:
                        run.problem(f"{p.node_id} exited ({p.proc.returncode}) on a full disk: {p.log_tail(3)}")
            run.under_load(fault)
            errors = sum(1 for line in (run.root / "pump-1.log").read_text(errors="replace").splitlines()
                         if "No space left" in line or "no available space" in line)
            run.note(f"pump-1 logged {errors} line(s) about the full disk")
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


FAULTS: dict[str, Callable[[Run], None]] = {
    "pump-kill": fault_pump_kill, "pump-stop": fault_pump_stop, "drain-kill-iceberg": fault_drain_kill_iceberg,
    "drain-kill-mysql": fault_drain_kill_mysql, "pd-stop": fault_pd_stop, "racing-drains": fault_racing_drains,
    "tidb-kill": fault_tidb_kill, "disk-full": fault_disk_full, "drain-kill-stage": fault_drain_kill_stage,
    "mariadb-kill": fault_mariadb_kill, "kafka-restart": fault_kafka_restart,
}
assert list(FAULTS) == KINDS


# ---- the campaign -------------------------------------------------------------------------------

def plan(runs: int, seed: int, kinds: list[str]) -> list[tuple[int, str, int]]:
    """(run number, kind, seed) of every run: kind ``kinds[i % len]``, seed the i-th draw of ``Random(seed)``."""
    master = random.Random(seed)
    return [(i + 1, kinds[i % len(kinds)], master.randrange(1 << 32)) for i in range(runs)]


def run_one(index: int, kind: str, seed: int, root: Path, maria: MariaDBServer, build: TiDBBuild = NEWEST,
            load_seconds: float = 12.0) -> Outcome:
    """Run one fault in a fresh real cluster under ``root``; every error becomes a problem of the run."""
    out = Outcome(index, kind, seed)
    started = time.monotonic()
    try:
        FAULTS[kind](Run(out, root, maria, build, load_seconds))
    except Skipped as e:
        out.skipped = str(e)
    except (Exception, pytest.fail.Exception) as e:  # noqa: BLE001 - counted as a problem of the run
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb)
                      if f.filename.endswith("faults_real.py")), "")
        out.problems.append(f"error at {where}: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
    out.seconds = time.monotonic() - started
    return out


def campaign(runs: int, seed: int, kinds: list[str], maria: MariaDBServer, base: Path, keep: bool = False,
             only: int = 0, first: int = 1, load_seconds: float = 12.0,
             echo: Callable[[str], None] = print) -> list[Outcome]:
    """Every run of the plan from run ``first`` on (or only run ``only``), each in a directory under
    ``base`` (kept when it failed or ``keep``); ``echo`` gets each run's line and details."""
    outcomes = []
    for index, kind, run_seed in plan(runs, seed, kinds):
        if only and index != only or index < first:
            continue
        root = base / f"run-{index:03d}-{kind}"
        root.mkdir(parents=True)
        out = run_one(index, kind, run_seed, root, maria, load_seconds=load_seconds)
        outcomes.append(out)
        echo(out.line(runs))
        for text in out.notes + [f"PROBLEM {p}" for p in out.problems]:
            echo(f"    {text}")
        if out.passed and not keep or out.skipped:
            remove(root)
        else:
            echo(f"    kept {root}")
    return outcomes


def summary(outcomes: list[Outcome]) -> str:
    """``runs=N faults=kind:n,... lost=L duplicated=D invariant_breaks=B`` (+ problems, skipped)."""
    ran = [o for o in outcomes if not o.skipped]
    kinds = Counter(o.kind for o in ran)
    return (f"runs={len(ran)} faults={','.join(f'{k}:{n}' for k, n in kinds.items())} "
            f"lost={sum(o.lost for o in ran)} duplicated={sum(o.duplicated for o in ran)} "
            f"invariant_breaks={sum(o.breaks for o in ran)} problems={sum(len(o.problems) for o in ran)} "
            f"upstream_broken={sum(1 for o in ran if o.upstream_broken)} missed={sum(1 for o in ran if o.missed)}"
            + (f" skipped={len(outcomes) - len(ran)}" if len(ran) < len(outcomes) else ""))


def main(argv: list[str] | None = None) -> int:
    """Run the campaign; 0 when nothing was lost, duplicated or broken and no run had a problem."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=len(KINDS), help="runs (default: one of each kind)")
    ap.add_argument("--seed", type=int, default=1, help="campaign seed (each run's seed is drawn from it)")
    ap.add_argument("--kinds", default="", help=f"comma-separated subset of: {','.join(KINDS)}")
    ap.add_argument("--only", type=int, default=0, metavar="N", help="run only run N of this campaign (same seed)")
    ap.add_argument("--first", type=int, default=1, metavar="N",
                    help="start at run N of this campaign (the same plan: a stopped campaign goes on)")
    ap.add_argument("--load-seconds", type=float, default=12.0, help="load per run, before the seeded +-20%%")
    ap.add_argument("--keep", action="store_true", help="keep every run's directory (failed runs' are always kept)")
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()] or list(KINDS)
    unknown = [k for k in kinds if k not in FAULTS]
    if unknown:
        ap.error(f"unknown kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    kinds = [k for k in KINDS if k in kinds]
    if args.runs < 1 or not 0 <= args.only <= args.runs or not 1 <= args.first <= args.runs:
        ap.error("--runs must be at least 1, and --only and --first name a run of the campaign")
    def terminated(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt   # unwinds the run: its processes and MariaDB stopped
    signal.signal(signal.SIGTERM, terminated)
    base = scratch_dir("binlake-faults-real-")
    print(f"binlake real-TiDB fault campaign: --runs {args.runs} --seed {args.seed} --first {args.first} "
          f"kinds {','.join(kinds)} "
          f"(tidb-server {NEWEST.line}); run directories under {base}", flush=True)
    started = time.monotonic()
    with MariaDBServer() as maria:
        outcomes = campaign(args.runs, args.seed, kinds, maria, base, keep=args.keep, only=args.only,
                            first=args.first, load_seconds=args.load_seconds, echo=lambda s: print(s, flush=True))
    if not any(base.iterdir()):
        shutil.rmtree(base, ignore_errors=True)
    print(f"{summary(outcomes)} minutes={(time.monotonic() - started) / 60:.1f}", flush=True)
    bad = any(o.lost or o.duplicated or o.breaks or o.problems for o in outcomes)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
