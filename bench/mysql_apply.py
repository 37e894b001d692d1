"""MySQL sink: row changes from 2 real pumps -> ``binlake drain --sink mysql`` (16 workers) -> MariaDB.

Setup (not timed): Debian's MariaDB on a throwaway data dir (``tests.servers.MariaDBServer``), and
``bench/drain.py``'s upstream: the emulated cluster, its 4 tables (``orders``, ``users``, ``events``
keyed by a BIGINT primary key; ``metrics`` without any key, as TiDB keys it by ``_tidb_rowid``) and
two real pumps (``Env``), loaded with ``generate``: ``--rows`` row changes (about 60% inserts, 30%
updates, 10% deletes) in transactions of 100-200 changes, written through both pumps.

Timed (apply): one ``binlake drain --sink mysql --worker-count 16 --txn-batch 20`` of (0, load end]
as a fresh process (``--spark-master local[2]``) into the empty MariaDB: it creates the database
and tables from the DDL history (safe mode off: the downstream has no checkpoint, and the check
below refuses a run whose report says it ran in safe mode), then applies every row change. Two
figures, both row changes / seconds: over the run report's ``total`` (the run as the user sees it:
plan, DDL history, Spark start, pull, pair, decode, sink), and over its ``sink`` stage alone (the
transactions sorted on Spark and read by the driver one partition at a time, DML built, applied by
the 16 workers, checkpoint written). The CPU seconds of the drain's process tree and of mariadbd, and
MariaDB's status counters (statements, commits, fsyncs, index lookups, rows read by full table scans,
row lock waits, deadlocks) are taken over the run. ``--keyed-only`` leaves ``metrics`` out of the
timed run (``[syncer] ignore-table``; figures, checks and baseline over the 3 keyed tables): with no
key downstream, each of its UPDATEs and DELETEs (``WHERE`` on every column, as TiDB Binlog does)
scans the table and locks what it scans.

Baseline (same run, same MariaDB): the final rows, read back from MariaDB after the checks,
bulk-loaded into fresh copies of the tables (``CREATE TABLE … LIKE``, another database) with
multi-row INSERTs of 1,000 rows per statement from one connection, a commit per statement; rows/s =
final rows / seconds of those INSERTs, the median of ``BASELINE_REPEATS`` loads (one load takes
about a second, and single loads varied by 40% on this machine). Ratio = sink row changes/s over
baseline rows/s (target >= 0.5).

Checks: the run report's row changes per table and op equal what was generated; no safe-mode note;
the checkpoint row is consistent at the run's to_ts; each table's downstream row count equals the
generated live keys; a few sampled generated row images equal their downstream rows.

Follow (lag): ``binlake drain --follow --interval 1 --sink mysql`` (same worker count) continues
from that checkpoint as a separate process. Once its first range (Spark start) is applied, a steady
load runs on the emulator's SQL path for ``--follow-seconds``: ``upstream.workload.Workload`` (4
workers, ``--rate`` transactions/s of 5 row changes) plus ``--markers`` per second single-row
INSERTs into ``bench.lag`` whose commit_ts the load records. A poller reads ``bench.lag`` on MariaDB
every 50 ms; lag = first seen − commit time (the commit_ts physical part, ms since the epoch), as
p50/p90/p99/max over every marker and over those committed after ``--warmup`` seconds of load (the
follower's first loaded ranges are slower, and their backlog takes a few ranges to drain). The
follower's own run reports give the time per range. Check: after SIGTERM, ``verify`` (key by key)
of the workload's tables and ``bench.lag`` against the emulator's snapshot at the final checkpoint.

    .venv/bin/python bench/mysql_apply.py                        # 200,000 row changes, 90 s of follow load
    .venv/bin/python bench/mysql_apply.py --keyed-only --follow-seconds 0   # the apply without `metrics`
    .venv/bin/python bench/mysql_apply.py --small                # 5,000 row changes, 10 s of follow load
    .venv/bin/python bench/mysql_apply.py --merge                # the same with TiDB Binlog's merge mode
    .venv/bin/python bench/mysql_apply.py --relay                # the timed apply also writes the relay log
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import BenchError, cpu_seconds, machine_line, percentile, wait_watermark
from bench.drain import DB, TABLES, UTC, Env, _load_avg, _same, _TreeSampler, generate, row_image

ROOT = Path(__file__).resolve().parent.parent
RATIO_TARGET = 0.5          # sink row changes/s over the bulk-load baseline's rows/s
LAG_TARGET = 10.0           # p99 of commit-to-visible seconds in follow mode
BASELINE_ROWS = 1_000       # rows per multi-row INSERT of the baseline
BASELINE_REPEATS = 3        # baseline loads per run; the median counts
BASELINE_DB = "bench_baseline"
LAG_TABLE = "lag"
KEYLESS = "metrics"         # bench/drain.py's table without a primary key (TiDB keys it by _tidb_rowid)


def _mysql(dsn: str) -> Any:
    """A connection as the sink makes them (autocommit off, utf8mb4, UTC session time zone)."""
    from sink.mysql.target import MySQLTarget

    return MySQLTarget.from_dsn(dsn).connect()


def _upstream_args(env: Env) -> list[str]:
    return ["--registry", env.registry, "--pd-urls", env.cluster.tso_url,
            "--upstream-status-url", env.cluster.status_url]


def _sink_args(dsn: str, args: argparse.Namespace) -> list[str]:
    return ["--sink", "mysql", "--to-dsn", dsn, "--initial-commit-ts", "0", "--worker-count", str(args.worker_count),
            "--txn-batch", str(args.txn_batch), "--spark-master", "local[2]", *(["--merge"] if args.merge else [])]


def code_state() -> str:
    """The git HEAD, whether ``sink/mysql`` differs from it, and a digest of ``sink/mysql/*.py`` (the
    code under test), to tie a result to a code state."""
    import hashlib

    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=False)
        return r.stdout.strip() if r.returncode == 0 else "?"

    h = hashlib.sha256()
    for path in sorted((ROOT / "sink" / "mysql").glob("*.py")):
        h.update(path.name.encode() + path.read_bytes())
    dirty = " + uncommitted changes" if git("status", "--porcelain", "--", "sink/mysql") else ""
    return f"HEAD {git('rev-parse', '--short', 'HEAD')}{dirty}, sink/mysql@{h.hexdigest()[:10]}"


def _child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


# ---- the timed apply ----------------------------------------------------------------------------

def drain_mysql(env: Env, dsn: str, maria_pid: int, work: Path, to_ts: int, args: argparse.Namespace,
                tables: list[str], profile: Path | None
                ) -> tuple[dict[str, Any], float, _TreeSampler, float, dict[str, int]]:
    """``binlake drain --sink mysql`` of (0, to_ts] as a fresh process, ``tables`` of the bench's in
    scope (the others ignored); (run report, wall seconds, CPU and memory samples of its process tree,
    CPU seconds mariadbd used meanwhile, the change of MariaDB's status counters). With ``profile``,
    py-spy samples the drain's process tree into a raw folded-stack file."""
    report = work / "apply-report.json"
    log = work / "apply.log"
    cmd = [sys.executable, "-m", "binlake.cli", "drain", *_upstream_args(env), *_sink_args(dsn, args),
           "--to-ts", str(to_ts), "--report", str(report)]
    toml = []
    if len(tables) < len(TABLES):   # TiDB Binlog's [syncer] ignore-table for the others
        ignored = ", ".join(f'{{db-name = "{DB}", tbl-name = "{t}"}}' for t in TABLES if t not in tables)
        toml.append(f"[syncer]\nignore-table = [{ignored}]\n")
    if args.relay:
        toml.append(f'[syncer.relay]\nlog-dir = "{work / "relay"}"\n')
    if toml:
        conf = work / "apply-drainer.toml"
        conf.write_text("".join(toml))
        cmd += ["--config", str(conf)]
    if profile is not None:
        spy = Path(sys.executable).with_name("py-spy")
        cmd = [str(spy) if spy.exists() else "py-spy", "record", "--subprocesses", "--idle", "--format", "raw",
               "--rate", "50", "-o", str(profile), "--", *cmd]
    maria0, status0 = cpu_seconds(maria_pid), server_status(dsn)
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=work, env=_child_env())
        sampled = _TreeSampler(proc.pid)
        code = proc.wait()
        sampled.stop()
    wall = time.perf_counter() - t0
    maria_cpu = cpu_seconds(maria_pid) - maria0
    status = {k: v - status0.get(k, 0) for k, v in server_status(dsn).items()}
    if code != 0:
        lines = log.read_text(errors="replace").splitlines()
        raise BenchError(f"binlake drain --sink mysql exited with {code}:\n" + "\n".join(lines[-40:]))
    return json.loads(report.read_text()), wall, sampled, maria_cpu, status


_STATUS = ("Com_insert", "Com_update", "Com_delete", "Com_commit", "Handler_read_key", "Handler_read_rnd_next",
           "Innodb_data_fsyncs", "Innodb_row_lock_waits", "Innodb_row_lock_time", "Innodb_deadlocks")


def server_status(dsn: str) -> dict[str, int]:
    """Some of MariaDB's global status counters (statements, commits, index lookups, rows read by full
    table scans, fsyncs, row lock waits and their milliseconds, deadlocks)."""
    conn = _mysql(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN (" + ", ".join(["%s"] * len(_STATUS)) + ")",
                        _STATUS)
            return {k: int(v) for k, v in cur.fetchall()}
    finally:
        conn.close()


def _close(want: Any, got: Any) -> bool:
    """``bench.drain._same``, and FLOAT columns at the 6 digits MySQL's text protocol sends."""
    if isinstance(want, float) and isinstance(got, float):
        return math.isclose(want, got, rel_tol=1e-5, abs_tol=1e-9)
    return _same(want, got)


def read_tables(conn: Any, names: list[str]) -> dict[str, tuple[list[str], list[tuple[Any, ...]]]]:
    """The bench tables ``names`` on the downstream: (column names, rows)."""
    out = {}
    with conn.cursor() as cur:
        for name in names:
            cur.execute(f"SELECT * FROM `{DB}`.`{name}`")
            out[name] = ([d[0] for d in cur.description], list(cur.fetchall()))
    conn.commit()
    return out


def check_apply(env: Env, conn: Any, report: dict[str, Any], phase: dict[str, Any],
                tables: dict[str, tuple[list[str], list[tuple[Any, ...]]]], cluster_id: int) -> int:
    """Compare the run report and the downstream's ``tables`` (those in scope, as read back) with what
    was generated; return the sampled rows compared."""
    problems = []
    extra = sorted(set(t["table"] for t in report["tables"] if "." in t["table"]) - {f"{DB}.{n}" for n in tables})
    if extra:
        problems.append(f"the run wrote tables it should have ignored: {extra}")
    by_name = {t["table"]: t for t in report["tables"]}
    notes = report.get("notes", [])
    if any("safe mode" in n for n in notes):
        problems.append(f"the timed run applied in safe mode: {notes}")
    with conn.cursor() as cur:
        cur.execute("SELECT checkPoint FROM tidb_binlog.checkpoint WHERE clusterID = %s", (cluster_id,))
        row = cur.fetchone()
    conn.commit()
    cp = json.loads(row[0]) if row else {}
    if not (cp.get("consistent") is True and cp.get("commitTS") == report["to_ts"]):
        problems.append(f"checkpoint row {cp} is not consistent at the run's to_ts {report['to_ts']}")
    compared = 0
    for name in tables:
        ti = TABLES.index(name)
        ident = f"{DB}.{name}"
        want = phase["counts"][ti]
        got = by_name.get(ident, {}).get("rows", {})
        if any(int(got.get(op, 0)) != want[op] for op in "IUD"):
            problems.append(f"{ident}: report rows {got} != generated {want}")
        cols, rows = tables[name]
        if len(rows) != phase["live"][ti]:
            problems.append(f"{ident}: {len(rows)} rows downstream, generated {phase['live'][ti]} live keys")
        info = env.tables[ti]
        for key, version in phase["samples"][name]:
            image = row_image(info, key, version)
            if info.pk_is_handle:
                key_col = cols.index(info.pk_handle_column.name)
                found = [r for r in rows if r[key_col] == key]
            else:   # keyed by _tidb_rowid upstream, which the downstream does not have: match the whole row
                found = [r for r in rows if all(_close(image[c], v) for c, v in zip(cols, r))][:1]
            if len(found) != 1 or any(not _close(image[c], v) for c, v in zip(cols, found[0])):
                problems.append(f"{ident} key {key}: downstream {found[:1]} != generated {image}")
            compared += 1
    if problems:
        raise BenchError("the MySQL sink's output does not match the generated changes:\n  " + "\n  ".join(problems))
    return compared


def bulk_load(conn: Any, tables: dict[str, tuple[list[str], list[tuple[Any, ...]]]]) -> tuple[float, int]:
    """The baseline: fresh copies of the tables, each filled with multi-row INSERTs of ``BASELINE_ROWS``
    rows (a commit per statement); (seconds of the INSERTs, rows)."""
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{BASELINE_DB}`")
        cur.execute(f"CREATE DATABASE `{BASELINE_DB}` CHARACTER SET utf8mb4")
        for name in tables:
            cur.execute(f"CREATE TABLE `{BASELINE_DB}`.`{name}` LIKE `{DB}`.`{name}`")
    conn.commit()
    seconds, total = 0.0, 0
    with conn.cursor() as cur:
        for name, (cols, rows) in tables.items():
            head = f"INSERT INTO `{BASELINE_DB}`.`{name}` ({', '.join(f'`{c}`' for c in cols)}) VALUES "
            marks = "(" + ", ".join(["%s"] * len(cols)) + ")"
            t0 = time.perf_counter()
            for i in range(0, len(rows), BASELINE_ROWS):
                chunk = rows[i:i + BASELINE_ROWS]
                cur.execute(head + ", ".join([marks] * len(chunk)), [v for r in chunk for v in r])
                conn.commit()
            seconds += time.perf_counter() - t0
            total += len(rows)
            cur.execute(f"SELECT COUNT(*) FROM `{BASELINE_DB}`.`{name}`")
            if cur.fetchone()[0] != len(rows):
                raise BenchError(f"baseline: {BASELINE_DB}.{name} does not hold the {len(rows)} rows loaded")
    conn.commit()
    return seconds, total


# ---- follow mode: commit-to-visible lag ---------------------------------------------------------

class LagProbe:
    """Marker INSERTs on the emulator (their commit_ts recorded) and a poller on MariaDB noting when
    each becomes visible there."""

    def __init__(self, env: Env, dsn: str, per_second: float) -> None:
        self.env = env
        self.dsn = dsn
        self.per_second = per_second
        self.commit_ts: dict[int, int] = {}
        self.seen_at: dict[int, float] = {}
        self.errors: list[str] = []
        self.stop_markers = threading.Event()
        self.stop_polling = threading.Event()
        self._markers = threading.Thread(target=self._mark, name="bench-markers", daemon=True)
        self._poller = threading.Thread(target=self._poll, name="bench-poller", daemon=True)

    def start(self) -> None:
        self._poller.start()
        self._markers.start()

    def _mark(self) -> None:
        started, n = time.monotonic(), 0
        while not self.stop_markers.is_set():
            n += 1
            try:
                res = self.env.cluster.execute(f"INSERT INTO {LAG_TABLE} VALUES ({n}, {int(time.time() * 1000)})",
                                               db=DB)
                self.commit_ts[n] = int(res[0].commit_ts)
            except Exception as e:  # noqa: BLE001 - counted and shown; the load goes on
                self.errors.append(f"marker {n}: {type(e).__name__}: {e}")
            wait = started + n / self.per_second - time.monotonic()
            if wait > 0:
                self.stop_markers.wait(wait)

    def _poll(self) -> None:
        import pymysql

        conn = _mysql(self.dsn)
        conn.autocommit(True)
        try:
            while not self.stop_polling.is_set():
                try:
                    with conn.cursor() as cur:
                        cur.execute(f"SELECT id FROM `{DB}`.`{LAG_TABLE}`")
                        now = time.time()
                        for (i,) in cur.fetchall():
                            self.seen_at.setdefault(int(i), now)
                except pymysql.err.ProgrammingError:   # the follower has not created the table yet
                    pass
                self.stop_polling.wait(0.05)
        finally:
            conn.close()

    def stop_marking(self) -> None:
        """No more markers (the poller goes on)."""
        self.stop_markers.set()
        self._markers.join(30)

    def all_seen(self) -> bool:
        return all(i in self.seen_at for i in list(self.commit_ts))

    def lags(self, since: float = 0.0) -> list[float]:
        """Seconds from each marker's commit (commit_ts physical ms) to its first sighting downstream, for
        the markers committed at or after wall time ``since``; ascending."""
        return sorted(self.seen_at[i] - (ts >> 18) / 1000 for i, ts in self.commit_ts.items()
                      if i in self.seen_at and (ts >> 18) / 1000 >= since)

    def close(self) -> None:
        self.stop_marking()
        self.stop_polling.set()
        self._poller.join(30)


def _last_ts(status_addr: str) -> int:
    try:
        with urllib.request.urlopen(f"http://{status_addr}/status", timeout=5) as r:
            return int(json.loads(r.read())["LastTS"])
    except (urllib.error.URLError, OSError, ValueError, KeyError):
        return -1


def _wait(cond: Any, timeout: float, what: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            raise BenchError(f"the follower exited ({proc.returncode}) waiting for {what}:\n"
                             + log.read_text(errors="replace")[-3000:])
        if time.monotonic() > deadline:
            raise BenchError(f"{what} did not happen in {timeout:.0f} s")
        time.sleep(0.1)


_STAGES = re.compile(r"seconds per stage: (.*)$")


def _run_stages(log: Path) -> list[dict[str, float]]:
    """The ``seconds per stage`` of every range the follower applied."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = _STAGES.search(line)
        if m:
            out.append({k: float(v) for k, v in (p.rsplit(" ", 1) for p in m.group(1).split(", "))})
    return out


def follow_lag(env: Env, dsn: str, work: Path, args: argparse.Namespace, seconds: float) -> dict[str, Any]:
    """The follower under a steady emulator load; lag figures, per-range stages and the verify result."""
    from sink.mysql.verify import verify_downstream
    from upstream.client import StatusClient
    from upstream.local import free_port
    from upstream.workload import Workload

    wl = Workload(env.cluster, seed=args.seed, ddl_interval=0)
    wl.setup()
    env.cluster.execute(f"CREATE TABLE {LAG_TABLE} (id BIGINT PRIMARY KEY, sent BIGINT NOT NULL)", db=DB)
    if not env.cluster.flush(60):
        raise BenchError("the follow phase's DDL binlogs were not written to the pumps")
    ready = env.cluster.ts()
    addr, status = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    log = work / "follow.log"
    cmd = [sys.executable, "-m", "binlake.cli", "drain", "--follow", "--interval", str(args.interval),
           *_upstream_args(env), *_sink_args(dsn, args), "--addr", addr, "--status-addr", status]
    probe = LagProbe(env, dsn, args.markers)
    stats: list[Any] = []
    load = threading.Thread(target=lambda: stats.append(wl.run(rate=args.rate, duration=seconds, workers=4)),
                            name="bench-workload", daemon=True)
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=work, env=_child_env())
        try:
            t0 = time.perf_counter()
            _wait(lambda: _last_ts(status) >= ready and bool(_run_stages(log)), 300, "the follower's first range",
                  proc, log)
            first = len(_run_stages(log))
            print(f"  follower up, first range applied after {time.perf_counter() - t0:.1f} s; "
                  f"{seconds:.0f} s of load: workload {args.rate:g} txn/s x 5 row changes + "
                  f"{args.markers:g} marker txn/s (load average {_load_avg()})", flush=True)
            la0 = _load_avg()
            load_start = time.time()
            load.start()
            probe.start()
            load.join(seconds + 120)
            probe.stop_marking()
            la1 = _load_avg()
            if not env.cluster.flush(60):
                raise BenchError("the load's commit binlogs were not written to the pumps")
            end = env.cluster.ts()
            _wait(probe.all_seen, 180, "every marker visible downstream", proc, log)
            _wait(lambda: _last_ts(status) >= end, 180, "the follower's checkpoint past the load", proc, log)
        finally:
            probe.close()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait(10)
    output = log.read_text(errors="replace")
    if code != 0 or "registry state paused" not in output:
        raise BenchError(f"the follower did not stop cleanly ({code}):\n{output[-3000:]}")
    if not stats or stats[0].errors or probe.errors:
        raise BenchError(f"the follow load failed: {stats[0].errors[:3] if stats else 'no stats'} {probe.errors[:3]}")
    conn = _mysql(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT checkPoint FROM tidb_binlog.checkpoint WHERE clusterID = %s", (env.cluster.cluster_id,))
            cp = json.loads(cur.fetchone()[0])
        conn.commit()
        if cp.get("consistent") is not True or cp["commitTS"] < end:
            raise BenchError(f"the follower's final checkpoint {cp} is not consistent past {end}")
        snap = StatusClient(env.cluster.status_url).snapshot(cp["commitTS"])
        wanted = {k: v for k, v in snap.items() if k.startswith("test.") or k == f"{DB}.{LAG_TABLE}"}
        report = verify_downstream(conn, wanted, cp["commitTS"])
    finally:
        conn.close()
    if not report.ok:
        raise BenchError("the follower's downstream differs from the upstream:\n" + report.format())
    runs = _run_stages(log)[first:]
    return {"lags": probe.lags(), "steady": probe.lags(load_start + args.warmup) if args.warmup else None,
            "warmup": args.warmup, "markers": len(probe.commit_ts), "stats": stats[0], "runs": runs,
            "load": (la0, la1), "verified": sum(t.compared for t in report.tables), "tables": len(report.tables),
            "interval": args.interval}


# ---- main ---------------------------------------------------------------------------------------

def _stages(report: dict[str, Any]) -> str:
    return "  ".join(f"{k} {v:.2f}" for k, v in report["stages"].items())


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _lag_lines(r: dict[str, Any]) -> list[str]:
    """The lag percentiles over the whole load, and over the load after its warm-up seconds."""
    out = []
    for lags, what in ((r["lags"], "the whole load"), (r["steady"], f"the load after its first {r['warmup']:g} s")):
        if lags is None:
            continue
        if not lags:
            out.append(f"follow lag over {what}: no markers")
            continue
        p50, p90, p99 = (percentile(lags, q) for q in (0.5, 0.9, 0.99))
        out.append(f"follow lag (commit -> visible in MariaDB, --interval {r['interval']:g}) over {what}, "
                   f"{len(lags)} markers: p50 {p50:.2f} s, p90 {p90:.2f} s, p99 {p99:.2f} s, max {lags[-1]:.2f} s "
                   f"(target p99 <= {LAG_TARGET:g} s: {_met(p99 <= LAG_TARGET)})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000, help="row changes of the timed apply (default 200000)")
    ap.add_argument("--small", action="store_true", help="5,000 row changes and 10 s of follow load (a quick check)")
    ap.add_argument("--worker-count", type=int, default=16, help="the sink's worker-count (default 16)")
    ap.add_argument("--txn-batch", type=int, default=20, help="the sink's txn-batch (default 20, TiDB Binlog's)")
    ap.add_argument("--follow-seconds", type=float, default=90.0,
                    help="seconds of steady load in follow mode (default 90; 0 skips the follow part)")
    ap.add_argument("--warmup", type=float, default=30.0,
                    help="follow: lag also reported over the markers committed after this many seconds of load "
                         "(default 30; the follower's first loaded ranges are slower; 0 for --small)")
    ap.add_argument("--interval", type=float, default=1.0, help="the follower's --interval (default 1 s)")
    ap.add_argument("--rate", type=float, default=100.0,
                    help="follow load: workload transactions/s of 5 row changes (default 100)")
    ap.add_argument("--markers", type=float, default=10.0, help="follow load: marker transactions/s (default 10)")
    ap.add_argument("--keyed-only", action="store_true",
                    help=f"the timed apply ignores {DB}.{KEYLESS} (no key downstream: its UPDATE/DELETE scan the "
                         f"table) through [syncer] ignore-table; figures, checks and baseline over the other 3 tables")
    ap.add_argument("--merge", action="store_true",
                    help="drain with --merge (TiDB Binlog's merge mode: net change per primary key per flush)")
    ap.add_argument("--relay", action="store_true",
                    help="the timed apply writes the relay log ([syncer.relay] log-dir in the work dir)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", action="store_true", help="keep the work dir (pumps, logs, reports)")
    ap.add_argument("--profile", type=Path, help="py-spy the timed drain's process tree into this directory")
    args = ap.parse_args(argv)
    size = 5_000 if args.small else args.rows
    scope = [t for t in TABLES if not (args.keyed_only and t == KEYLESS)]
    follow_seconds = 10.0 if args.small else args.follow_seconds
    if args.small:
        args.warmup = 0.0

    from tests.servers import MariaDBServer

    print(f"mysql_apply  {dt.datetime.now(UTC):%Y-%m-%d %H:%M UTC}  {machine_line()}  load average {_load_avg()}")
    print(f"  code: {code_state()}")
    work = Path(tempfile.mkdtemp(prefix="binlake-bench-mysql-"))
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    env: Env | None = None
    try:
        with MariaDBServer() as maria:
            assert maria.proc is not None
            dsn = maria.dsn
            t0 = time.perf_counter()
            env = Env(work)
            print(f"  MariaDB on 127.0.0.1:{maria.port}; emulator + 2 pumps + 4 tables in "
                  f"{time.perf_counter() - t0:.1f} s; work dir {work}", flush=True)
            phase = generate(env, [size], args.seed)[0]
            ops = {op: sum(phase["counts"][TABLES.index(t)][op] for t in scope) for op in "IUD"}
            rows = sum(ops.values())   # the row changes the timed run applies
            for p in env.pumps:
                wait_watermark(p.addr, phase["to_ts"], timeout=120)

            la0 = _load_avg()
            report, wall, sampled, maria_cpu, status = drain_mysql(
                env, dsn, maria.proc.pid, work, phase["to_ts"], args, scope,
                args.profile / "apply.txt" if args.profile else None)
            la1 = _load_avg()
            st = report["stages"]
            total, sink = st["total"], st["sink"]
            print(f"  [apply] {rows:,} row changes in {phase['txns']:,} transactions: {_stages(report)}", flush=True)
            conn = _mysql(dsn)
            try:
                tables = read_tables(conn, scope)
                compared = check_apply(env, conn, report, phase, tables, env.cluster.cluster_id)
                loads = [bulk_load(conn, tables) for _ in range(BASELINE_REPEATS)]
                base_rows = loads[0][1]
                base_times = sorted(t for t, _ in loads)
                base_s = base_times[len(base_times) // 2]
            finally:
                conn.close()
            cpu = sampled.seconds()
            rate_total, rate_sink, rate_base = rows / total, rows / sink, base_rows / base_s
            retries = (work / "apply.log").read_text(errors="replace").count("transient error")
            print(f"\n  [apply] {rows:,} row changes ({', '.join(f'{k} {v:,}' for k, v in ops.items())}) on "
                  f"{len(scope)} tables ({', '.join(scope)}), worker-count {args.worker_count}, "
                  f"txn-batch {args.txn_batch}, safe mode off "
                  f"(load average {la0} before, {la1} after)")
            print(f"    seconds per stage: {_stages(report)}")
            print(f"    sink: {rate_total:,.0f} row changes/s over the run's total ({total:.1f} s, process wall "
                  f"{wall:.1f} s); {rate_sink:,.0f}/s over the sink stage ({sink:.1f} s)")
            print(f"    CPU during the run: drain driver {sampled.seconds('driver'):.1f} s, JVM "
                  f"{sampled.seconds('jvm'):.1f} s, Spark's Python workers {sampled.seconds('workers'):.1f} s, "
                  f"mariadbd {maria_cpu:.1f} s ({(cpu + maria_cpu) / wall:.2f} of 2 cores busy on average)")
            print(f"    MariaDB during the run: {status['Com_insert']:,} INSERT, {status['Com_update']:,} UPDATE, "
                  f"{status['Com_delete']:,} DELETE statements, {status['Com_commit']:,} commits, "
                  f"{status['Innodb_data_fsyncs']:,} fsyncs, {status['Handler_read_key']:,} index lookups, "
                  f"{status['Handler_read_rnd_next']:,} rows read by full table scans; "
                  f"{status['Innodb_row_lock_waits']:,} row lock waits "
                  f"({status['Innodb_row_lock_time'] / 1000:,.1f} s), "
                  f"{status['Innodb_deadlocks']:,} deadlocks; {retries:,} transactions retried by the sink")
            print(f"    baseline: {base_rows:,} final rows bulk-loaded with {BASELINE_ROWS:,}-row INSERTs in "
                  f"{' / '.join(f'{t:.2f}' for t in base_times)} s, median {base_s:.2f} s = {rate_base:,.0f} rows/s")
            print(f"    check: report rows per op, checkpoint consistent at to_ts, no safe mode, downstream row "
                  f"counts and {compared} sampled rows match the generated changes")
            if args.relay:
                kept = sorted((work / "relay").glob("binlog-*"))
                if not kept:
                    raise BenchError("--relay: the run left no relay-log file (the newest one stays)")
                print(f"    relay log: {len(kept)} file(s) of {sum(f.stat().st_size for f in kept) / 2**20:.1f} MiB "
                      f"kept after the run (applied files are purged, the newest stays)")

            lag = None
            if follow_seconds > 0:
                print(flush=True)
                lag = follow_lag(env, dsn, work, args, follow_seconds)
                runs = lag["runs"]
                run_totals = [r.get("total", 0.0) for r in runs]
                totals = sorted(run_totals)
                st_names = [k for k in runs[0] if k != "total"] if runs else []
                means = {k: sum(r.get(k, 0.0) for r in runs) / len(runs) for k in st_names}
                s = lag["stats"]
                print(f"  [follow] load: {s.committed:,} workload txns ({s.tps:.0f}/s, {s.rows:,} row changes) and "
                      f"{lag['markers']:,} markers in {s.seconds:.0f} s (load average {lag['load'][0]} before, "
                      f"{lag['load'][1]} after)")
                print(f"    {len(runs)} ranges applied during the load: run total p50 {percentile(totals, 0.5):.2f} s, "
                      f"max {totals[-1] if totals else float('nan'):.2f} s; mean seconds per stage: "
                      + "  ".join(f"{k} {v:.2f}" for k, v in means.items()))
                print(f"    run totals in order (s): {' '.join(f'{t:.1f}' for t in run_totals)}")
                for line in _lag_lines(lag):
                    print(f"    {line}")
                print(f"    check: verify of {lag['tables']} tables ({lag['verified']:,} rows compared key by key) "
                      f"against the emulator's snapshot at the final checkpoint: no differences")

            ratio_total, ratio_sink = rate_total / rate_base, rate_sink / rate_base
            print(f"\nSUMMARY mysql_apply ({rows:,} row changes on {len(scope)} tables, "
                  f"worker-count {args.worker_count}, txn-batch {args.txn_batch}, safe mode off"
                  f"{', merge mode' if args.merge else ''}{', relay log' if args.relay else ''}):")
            print(f"  sink {rate_total:,.0f} row changes/s over the whole run ({total:.1f} s), {rate_sink:,.0f}/s "
                  f"over its sink stage ({sink:.1f} s); baseline multi-row INSERT {rate_base:,.0f} rows/s "
                  f"({base_rows:,} rows, {base_s:.2f} s)")
            print(f"  ratio whole run / baseline {ratio_total:.2f} (target >= {RATIO_TARGET}: "
                  f"{_met(ratio_total >= RATIO_TARGET)}); sink stage / baseline {ratio_sink:.2f} "
                  f"(target >= {RATIO_TARGET}: {_met(ratio_sink >= RATIO_TARGET)})")
            if lag is not None:
                for line in _lag_lines(lag):
                    print(f"  {line}")
        return 0
    finally:
        if env is not None:
            env.close()
        if args.keep:
            print(f"  kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)



if __name__ == "__main__":
    sys.exit(main())
