"""TiDB Binlog's drainer beside binlake's on the same pumps and binlogs: one load, each output.

Setup (not timed): a real cluster as the real-TiDB tier starts it (``tests/realtidb/conftest.py``
``real_cluster``: pdetcd as PD and etcd, two binlake pumps, a tidb-server build of ``make peers`` on
unistore). A TiDB-shaped load through TiDB's SQL (pymysql, ``--writers`` threads on keys of their
own) into database ``bench``: 4 tables (``orders``: an integer primary key; ``users``: a nonclustered
varchar key and a unique email; ``events``: a composite primary key and a JSON column; ``metrics``:
no key), transactions of 1 to 200 row changes over one or two tables (60 % inserts as multi-row
INSERTs, 30 % updates, 10 % deletes of the writer's live keys), and two DDL under the load (ADD
COLUMN, ADD INDEX). The range: from the cluster's start to the pumps' watermark after the load.

Timed, per output, into a fresh downstream, each drainer from one ``drainer.toml`` (TiDB Binlog's
format, which binlake reads too):

- ``mysql``: TiDB Binlog's default (``worker-count`` 16, ``txn-batch`` 20, safe mode off);
  ``mysql-merge``: the same with ``[syncer.to] merge = true``. MariaDB (Debian's) downstream.
- ``go``: TiDB Binlog's drainer v8.3.0 (``--go-drainer PATH``, built by
  ``bench/peers/go-drainer/build.sh``), from ``initial-commit-ts`` 0 until its checkpoint in the
  downstream passes the range's end (saved every 3 s, so its wall ends when MariaDB's row counters,
  ``Handler_write``/``_update``/``_delete``, last moved before that, its checkpoint row's writes
  aside); ``binlake``: ``binlake drain`` of the range as a fresh process, to its exit.
- per drainer: row changes/s (the load's row changes over the wall from exec to the range applied),
  CPU seconds per row change (the process tree), peak RSS; then every table of the downstream is
  compared with TiDB's, row for row.

Baseline: the Go drainer when given (binlake / Go); always, the floor: the final rows bulk-loaded
into fresh copies of the tables with 1,000-row INSERTs (``bench/mysql_apply.py``'s).

    make peers && bench/peers/go-drainer/build.sh /path/to/tidb-binlog /tmp/peersrc/drainer
    flock /tmp/binlake-bench.lock .venv/bin/python bench/vs_drainer.py --go-drainer /tmp/peersrc/drainer
    flock /tmp/binlake-bench.lock .venv/bin/python bench/vs_drainer.py      # binlake and its floors alone
"""
from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import BenchError, machine_line
from bench.drain import DB, ROOT, UTC, _load_avg, _TreeSampler
from bench.mysql_apply import bulk_load
from tests.realtidb.conftest import RealCluster, real_cluster
from tests.realtidb.peers import remove, scratch_dir
from tests.realtidb.versions import BY_LINE, NEWEST
from tests.servers import MariaDBServer
from upstream.local import free_port

OUTPUTS = ("mysql", "mysql-merge")
TABLES = ("orders", "users", "events", "metrics")
SCHEMA = (
    f"CREATE DATABASE {DB}",
    f"CREATE TABLE {DB}.orders (id BIGINT PRIMARY KEY, customer INT NOT NULL, amount DECIMAL(12,2), "
    "status VARCHAR(16), created DATETIME(6), KEY (customer))",
    f"CREATE TABLE {DB}.users (name VARCHAR(64) NOT NULL, email VARCHAR(128) NOT NULL, score DOUBLE, bio TEXT, "
    "PRIMARY KEY (name) /*T![clustered_index] NONCLUSTERED */, UNIQUE KEY (email))",
    f"CREATE TABLE {DB}.events (user_id INT NOT NULL, seq INT NOT NULL, kind VARCHAR(16), payload JSON, "
    "PRIMARY KEY (user_id, seq))",
    f"CREATE TABLE {DB}.metrics (host VARCHAR(32), ts BIGINT, value DOUBLE)",
)
DDL_UNDER_LOAD = (f"ALTER TABLE {DB}.orders ADD COLUMN note VARCHAR(32) DEFAULT 'none'",
                  f"ALTER TABLE {DB}.users ADD INDEX by_score (score)")
DONE_TIMEOUT = 1800.0   # seconds a drainer may take over the range


# ---- the load ---------------------------------------------------------------------------------

def _values(table: str, key: int, version: int, rng: random.Random) -> tuple[Any, ...]:
    """One row of ``table`` for ``key`` (its key columns first)."""
    if table == "orders":
        created = dt.datetime(2026, 1, 1) + dt.timedelta(seconds=key + version)
        return (key, key % 997, decimal.Decimal(f"{rng.randint(0, 10**8)}.{rng.randint(0, 99):02d}"),
                rng.choice(("new", "paid", "sent", "void")), created)
    if table == "users":
        return (f"user-{key}", f"u{key}-{version}@example.com", rng.random() * 100, "b" * rng.randint(0, 200))
    if table == "events":
        return (key // 16, key % 16, rng.choice(("click", "view", "buy")), json.dumps({"v": version, "k": key}))
    return (f"host-{key % 50}", key, rng.random())


_INSERT = {"orders": "(id, customer, amount, status, created)", "users": "(name, email, score, bio)",
           "events": "(user_id, seq, kind, payload)", "metrics": "(host, ts, value)"}
_WHERE = {"orders": ("id = %s", lambda v: v[:1]), "users": ("name = %s", lambda v: v[:1]),
          "events": ("user_id = %s AND seq = %s", lambda v: v[:2]),
          "metrics": ("host = %s AND ts = %s", lambda v: v[:2])}
_SET = {"orders": ("amount = %s, status = %s", lambda v: v[2:4]), "users": ("email = %s, score = %s", lambda v: v[1:3]),
        "events": ("kind = %s, payload = %s", lambda v: v[2:4]), "metrics": ("value = %s", lambda v: v[2:3])}


@dataclass
class Load:
    """What the writers did: row changes and transactions acknowledged, errors by kind."""

    row_changes: int = 0
    transactions: int = 0
    seconds: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Writer:
    """One load thread: transactions of 1-200 row changes on keys ``≡ w (mod writers)``."""

    def __init__(self, w: int, writers: int, seed: int) -> None:
        self.rng = random.Random(seed * 7919 + w)
        self.writers = writers
        self.live: dict[str, list[int]] = {t: [] for t in TABLES}
        self.next_key = {t: w for t in TABLES}
        self.version = 0

    def _table(self, cur: Any, table: str, share: int) -> int:
        """``share`` row changes of one table in the open transaction; the rows changed."""
        rng, keys = self.rng, self.live[table]
        inserts: list[tuple[Any, ...]] = []
        touched: set[int] = set()
        changes = 0
        for _ in range(share):
            r = rng.random()
            if r < 0.6 or len(keys) < 50:
                key = self.next_key[table]
                self.next_key[table] += self.writers
                inserts.append(_values(table, key, self.version, rng))
                keys.append(key)
                touched.add(key)
                continue
            i = rng.randrange(len(keys))
            if keys[i] in touched:
                continue
            touched.add(keys[i])
            row = _values(table, keys[i], self.version, rng)
            where, where_of = _WHERE[table]
            if r < 0.9:
                assign, set_of = _SET[table]
                cur.execute(f"UPDATE {table} SET {assign} WHERE {where}", (*set_of(row), *where_of(row)))
            else:
                cur.execute(f"DELETE FROM {table} WHERE {where}", where_of(row))
                keys[i] = keys[-1]
                keys.pop()
            changes += cur.rowcount
        if inserts:
            marks = ", ".join(["(" + ", ".join(["%s"] * len(inserts[0])) + ")"] * len(inserts))
            cur.execute(f"INSERT INTO {table} {_INSERT[table]} VALUES {marks}", [v for row in inserts for v in row])
            changes += cur.rowcount
        return changes

    def transaction(self, cur: Any, size: int) -> int:
        """One committed transaction of up to ``size`` row changes over one or two tables; the rows
        changed (0 when TiDB refused it: a DDL changed the schema under it)."""
        picked = self.rng.sample(TABLES, self.rng.choice((1, 1, 2)))
        self.version += 1
        saved = {t: list(self.live[t]) for t in picked}
        cur.execute("BEGIN")
        try:
            changes = sum(self._table(cur, t, size // len(picked) + (size % len(picked) if n == 0 else 0))
                          for n, t in enumerate(picked))
            cur.execute("COMMIT")
            return changes
        except pymysql.MySQLError:
            cur.execute("ROLLBACK")
            self.live.update(saved)
            raise


def _write(cluster: RealCluster, w: int, writers: int, target: int, seed: int, load: Load) -> None:
    """Writer ``w``'s transactions until ``target`` row changes."""
    writer = _Writer(w, writers, seed)
    conn = cluster.tidb.connect(DB)
    done = 0
    try:
        with conn.cursor() as cur:
            while done < target:
                try:
                    changes = writer.transaction(cur, min(writer.rng.randint(1, 200), target - done))
                except pymysql.MySQLError as e:
                    with load.lock:
                        load.errors[str(e)[:80]] += 1
                        if sum(load.errors.values()) > 100:
                            raise BenchError(f"writer {w}: over 100 transactions failed: {load.errors}") from e
                    continue
                done += max(changes, 1)
                with load.lock:
                    load.row_changes += changes
                    load.transactions += 1
    finally:
        conn.close()


def run_load(cluster: RealCluster, rows: int, writers: int, seed: int) -> Load:
    """The schema, then ``rows`` row changes from ``writers`` threads with the DDL under the load."""
    cluster.tidb.execute(*SCHEMA)
    load = Load()
    failures: list[BaseException] = []

    def run(w: int) -> None:
        try:
            _write(cluster, w, writers, rows // writers, seed, load)
        except BaseException as e:   # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=run, args=(w,), name=f"vs-writer-{w}") for w in range(writers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for statement in DDL_UNDER_LOAD:
        while load.row_changes < rows * (DDL_UNDER_LOAD.index(statement) + 1) // (len(DDL_UNDER_LOAD) + 1) \
                and any(t.is_alive() for t in threads):
            time.sleep(0.05)
        cluster.tidb.execute(statement)
    for t in threads:
        t.join()
    load.seconds = time.perf_counter() - t0
    if failures:
        raise BenchError(f"the load failed: {failures[0]}")
    return load


# ---- the drainers -----------------------------------------------------------------------------

def drainer_toml(path: Path, maria: MariaDBServer, data_dir: Path, pd_url: str, merge: bool, addr: str) -> Path:
    """One drainer.toml for both drainers: TiDB Binlog's keys, MariaDB downstream, database ``bench``."""
    path.write_text(f"""addr = "{addr}"
data-dir = "{data_dir}"
pd-urls = "{pd_url}"
initial-commit-ts = 0
log-level = "warn"

[syncer]
db-type = "mysql"
worker-count = 16
txn-batch = 20
safe-mode = false
replicate-do-db = ["{DB}"]

[syncer.to]
host = "127.0.0.1"
port = {maria.port}
user = "{maria.USER}"
password = "{maria.PASSWORD}"
merge = {"true" if merge else "false"}
""")
    return path


class Applied:
    """MariaDB's row counters (``Handler_write`` + ``_update`` + ``_delete``) sampled every 50 ms: when a drainer
    that saves its checkpoint every few seconds (TiDB Binlog's: 3 s) had in fact applied the range."""

    def __init__(self, maria: MariaDBServer) -> None:
        self.conn: Any = maria.connect()
        self.samples: list[tuple[float, int]] = [(time.perf_counter(), self._rows())]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-applied", daemon=True)
        self._thread.start()

    def _rows(self) -> int:
        with self.conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN "
                        "('Handler_write', 'Handler_update', 'Handler_delete')")
            return sum(int(v) for _, v in cur.fetchall())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), self._rows()))
            self._stop.wait(0.05)

    def stop(self) -> None:
        """Stop sampling (again: nothing)."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self.conn.close()

    def done_at(self, slack: int) -> float:
        """Stop sampling; the first time the counters came within ``slack`` rows (the checkpoint's own
        writes) of their last value."""
        self.stop()
        last = self.samples[-1][1]
        return next(t for t, n in self.samples if n >= last - slack)


def _checkpoint_ts(maria: MariaDBServer) -> int:
    try:
        rows = maria.query("SELECT checkPoint FROM tidb_binlog.checkpoint")
    except Exception:   # noqa: BLE001 - not created yet
        return 0
    return max((int(json.loads(r[0]).get("commitTS", 0)) for r in rows), default=0)


@dataclass
class Run:
    """One drainer over the range: wall seconds, CPU seconds of its process tree, peak RSS bytes."""

    drainer: str
    output: str
    wall: float
    cpu: float
    rss: int


def go_drain(binary: Path, toml: Path, cluster: RealCluster, maria: MariaDBServer, end_ts: int, log: Path,
             output: str) -> Run:
    """TiDB Binlog's drainer from ts 0 until its checkpoint in MariaDB passes ``end_ts``."""
    env = {**os.environ, "BINLAKE_TIDB_STATUS_URL": cluster.tidb.status_url}
    applied = Applied(maria)
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        proc = subprocess.Popen([str(binary), "-config", str(toml), "-log-file", str(log.with_suffix(".go.log"))],
                                stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    sampled = _TreeSampler(proc.pid)
    try:
        while _checkpoint_ts(maria) < end_ts:
            if proc.poll() is not None:
                raise BenchError(f"TiDB Binlog's drainer exited with {proc.returncode}:\n"
                                 + log.read_text(errors="replace")[-3000:])
            if time.perf_counter() - t0 > DONE_TIMEOUT:
                raise BenchError(f"TiDB Binlog's drainer did not reach ts {end_ts} in {DONE_TIMEOUT:.0f} s")
            time.sleep(0.05)
        # the checkpoint is saved every 3 s: the range was applied when the rows stopped changing
        # (a save writes the one checkpoint row: a replace, counted as up to 2 rows)
        wall = max(applied.done_at(slack=4) - t0, 0.0)
    finally:
        applied.stop()
        sampled.stop()
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return Run("go", output, wall, sampled.seconds(), sum(sampled.peak.values()))


def binlake_drain(toml: Path, cluster: RealCluster, end_ts: int, log: Path, output: str) -> Run:
    """``binlake drain`` of (0, end_ts] as a fresh process, configured by the same drainer.toml."""
    report = log.with_suffix(".report.json")
    cmd = [sys.executable, "-m", "binlake.cli", "drain", "--config", str(toml), "--registry", cluster.registry,
           "--upstream-status-url", cluster.tidb.status_url, "--to-ts", str(end_ts), "--report", str(report),
           "--spark-master", "local[2]"]
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        sampled = _TreeSampler(proc.pid)
        code = proc.wait()
        sampled.stop()
    wall = time.perf_counter() - t0
    if code != 0:
        raise BenchError(f"binlake drain exited with {code}:\n" + log.read_text(errors="replace")[-3000:])
    return Run("binlake", output, wall, sampled.seconds(), sum(sampled.peak.values()))


# ---- checks -----------------------------------------------------------------------------------

def _canon(v: Any) -> Any:
    """A value as both servers' text protocols can agree on it."""
    if isinstance(v, float):
        return float(f"{v:.6g}")
    if isinstance(v, decimal.Decimal):
        return v.normalize()
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, str) and v.startswith("{"):
        try:
            return json.dumps(json.loads(v), sort_keys=True)
        except ValueError:
            return v
    return v


def table_rows(conn: Any, table: str) -> tuple[list[str], Counter[tuple[Any, ...]]]:
    """Column names and the multiset of canonical rows of ``bench.table``."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{DB}`.`{table}`")
        cols = [d[0] for d in cur.description]
        rows = Counter(tuple(_canon(v) for v in r) for r in cur.fetchall())
    return cols, rows


def same_as_upstream(cluster: RealCluster, maria: MariaDBServer, who: str) -> int:
    """Compare every table of the downstream with TiDB's; the rows compared (a BenchError on a difference)."""
    up, down = cluster.tidb.connect(), cast(Any, maria.connect())
    compared = 0
    try:
        for table in TABLES:
            want_cols, want = table_rows(up, table)
            got_cols, got = table_rows(down, table)
            if want_cols != got_cols or want != got:
                missing, extra = want - got, got - want
                raise BenchError(f"{who}: {DB}.{table} differs from TiDB's: columns {got_cols} vs {want_cols}, "
                                 f"{sum(missing.values())} rows missing (first {list(missing)[:2]}), "
                                 f"{sum(extra.values())} extra (first {list(extra)[:2]})")
            compared += sum(want.values())
    finally:
        up.close()
        down.close()
    return compared


def floor(maria: MariaDBServer) -> tuple[float, int]:
    """The final rows (read back from the downstream) bulk-loaded into fresh copies: (seconds, rows)."""
    from sink.mysql.target import MySQLTarget

    dsn = f"mysql://{maria.USER}:{maria.PASSWORD}@127.0.0.1:{maria.port}/"
    conn = MySQLTarget.from_dsn(dsn).connect()
    try:
        tables = {}
        with conn.cursor() as cur:
            for name in TABLES:
                cur.execute(f"SELECT * FROM `{DB}`.`{name}`")
                tables[name] = ([d[0] for d in cur.description], list(cur.fetchall()))
        conn.commit()
        return bulk_load(conn, tables)
    finally:
        conn.close()


# ---- main -------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--go-drainer", type=Path, default=None, help="TiDB Binlog's drainer binary (build.sh's)")
    ap.add_argument("--rows", type=int, default=100_000, help="row changes of the load (default 100000)")
    ap.add_argument("--writers", type=int, default=4, help="load threads (default 4)")
    ap.add_argument("--outputs", default=",".join(OUTPUTS), help=f"comma-separated, of {', '.join(OUTPUTS)}")
    ap.add_argument("--tidb", default=NEWEST.line, choices=sorted(BY_LINE), help="tidb-server build (default newest)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    args = ap.parse_args(argv)
    outputs = [o for o in args.outputs.split(",") if o]
    unknown = sorted(set(outputs) - set(OUTPUTS))
    if unknown:
        ap.error(f"unknown outputs {unknown}; known: {', '.join(OUTPUTS)}")
    if args.go_drainer is not None and not os.access(args.go_drainer, os.X_OK):
        ap.error(f"--go-drainer {args.go_drainer} is not an executable file")
    print(f"vs drainer  {dt.datetime.now(UTC):%Y-%m-%d %H:%M UTC}  {machine_line()}  load average {_load_avg()}  "
          f"tidb-server {args.tidb}", flush=True)
    root = scratch_dir("binlake-bench-vs-")
    runs: list[Run] = []
    floors: dict[str, float] = {}
    try:
        with real_cluster(root, BY_LINE[args.tidb]) as cluster, MariaDBServer() as maria:
            load = run_load(cluster, args.rows, args.writers, args.seed)
            end_ts = cluster.settle()
            print(f"  load: {load.row_changes:,} row changes in {load.transactions:,} transactions, "
                  f"{load.seconds:.1f} s (not timed); range (0, {end_ts}]", flush=True)
            for output in outputs:
                drainers = (["go"] if args.go_drainer else []) + ["binlake"]
                for who in drainers:
                    maria.reset(DB)
                    work = root / f"{output}-{who}"
                    work.mkdir()
                    toml = drainer_toml(work / "drainer.toml", maria, work / "data.drainer", cluster.pd.url,
                                        output == "mysql-merge", f"127.0.0.1:{free_port()}")
                    log = work / "drainer.log"
                    run = (go_drain(args.go_drainer, toml, cluster, maria, end_ts, log, output) if who == "go"
                           else binlake_drain(toml, cluster, end_ts, log, output))
                    compared = same_as_upstream(cluster, maria, f"{who} {output}")
                    runs.append(run)
                    print(f"  {output:12s} {who:8s} {load.row_changes / run.wall:9,.0f} row changes/s  "
                          f"wall {run.wall:6.1f} s  CPU {run.cpu / load.row_changes * 1e6:7.1f} µs per row change  "
                          f"peak RSS {run.rss / 2**20:6.0f} MiB  ({compared:,} rows equal TiDB's)", flush=True)
                if output not in floors:
                    secs = statistics.median(floor(maria)[0] for _ in range(3))
                    floors[output] = secs
            print()
            print(summary(runs, floors, load.row_changes))
    finally:
        if not args.keep:
            remove(root)
        else:
            print(f"  kept {root}")
    return 0


def summary(runs: list[Run], floors: dict[str, float], rows: int) -> str:
    """The SUMMARY block: per output, each drainer's rate, binlake / Go and binlake / the floor."""
    lines = [f"SUMMARY vs drainer ({rows:,} row changes):"]
    for output in dict.fromkeys(r.output for r in runs):
        by = {r.drainer: r for r in runs if r.output == output}
        b = by["binlake"]
        line = (f"  {output:12s} binlake {rows / b.wall:,.0f}/s, {b.cpu / rows * 1e6:.1f} µs CPU per row change; "
                f"floor (bulk INSERT of the final rows) {floors[output]:.2f} s: binlake / floor "
                f"{floors[output] / b.wall:.2f}")
        if "go" in by:
            g = by["go"]
            line += (f"; Go {rows / g.wall:,.0f}/s, {g.cpu / rows * 1e6:.1f} µs; binlake / Go rate "
                     f"{g.wall / b.wall:.2f}, CPU {b.cpu / g.cpu:.2f}")
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
