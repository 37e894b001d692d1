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
format, which binlake reads too; ``worker-count`` 16, ``txn-batch`` 20, safe mode off):

- ``mysql``: MariaDB (Debian's), TiDB Binlog's default mode; ``mysql-merge``: ``[syncer.to] merge
  = true``. Checked: every table equals TiDB's, row for row. Floor: the final rows bulk-loaded into
  fresh copies with 1,000-row INSERTs (``bench/mysql_apply.py``'s).
- ``kafka``: a topic per drainer on a local broker (``make kafka``). Checked: the messages equal the
  Go drainer's, parsed (binlake alone: one per transaction and DDL). Floor: a plain idempotent
  producer of binlake's messages.
- ``file``: protobuf binlog files, a directory per drainer. Checked as Kafka. Floor: the same frames
  written to one file and fsynced.
- ``go``: TiDB Binlog's drainer v8.3.0 (``--go-drainer PATH``, built by
  ``bench/peers/go-drainer/build.sh``), from ``initial-commit-ts`` 0 until its checkpoint passes the
  range's end; as it saves that every 3 s, its wall ends when its output last grew before (MariaDB's
  ``Handler_write``/``_update``/``_delete``, its checkpoint row's writes aside; the topic's end
  offset; the files' bytes). ``binlake``: ``binlake drain`` of the range as a fresh process, to its exit.
- per drainer: row changes/s (the load's row changes over the wall from exec to the range written),
  CPU seconds per row change (the process tree), peak RSS.

Baseline: the Go drainer when given (binlake / Go); always, each output's floor.

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
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import BenchError, machine_line
from bench.drain import DB, UTC, _load_avg, _TreeSampler, run_sampled
from bench.mysql_apply import bulk_load, read_tables
from tests.realtidb.conftest import RealCluster, real_cluster
from tests.realtidb.peers import remove, scratch_dir
from tests.realtidb.versions import BY_LINE, NEWEST
from tests.servers import KafkaServer, MariaDBServer, kafka_classpath
from upstream.local import free_port

OUTPUTS = ("mysql", "mysql-merge", "kafka", "file")
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


# ---- the outputs ------------------------------------------------------------------------------

class Progress:
    """``probe()`` (a count the drainer's output grows: rows MariaDB changed, messages, file bytes)
    sampled every 50 ms: when a drainer that saves its checkpoint every few seconds (TiDB Binlog's:
    3 s) had in fact written the range."""

    def __init__(self, probe: Any) -> None:
        self.probe = probe
        self.samples: list[tuple[float, int]] = [(time.perf_counter(), probe())]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), self.probe()))
            self._stop.wait(0.05)

    def stop(self) -> None:
        """Stop sampling (again: nothing)."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()

    def done_at(self, slack: int) -> float:
        """Stop sampling; the first time the count came within ``slack`` (the checkpoint's own
        writes) of its last value."""
        self.stop()
        self.samples.append((time.perf_counter(), self.probe()))
        last = self.samples[-1][1]
        return next(t for t, n in self.samples if n >= last - slack)


class Output:
    """One output kind: its drainer.toml keys, a fresh downstream per drainer, the count that shows
    progress, TiDB Binlog's checkpoint, the check and the floor."""

    name = ""
    slack = 0    # the progress count's part the checkpoint writes

    def __init__(self, work: Path) -> None:
        self.work = work

    def syncer(self, who: str) -> str:
        """``[syncer]`` db-type and ``[syncer.to]`` keys for drainer ``who``."""
        raise NotImplementedError

    def reset(self) -> None:
        """An empty downstream for the next drainer."""

    def probe(self, who: str) -> int:
        """The count drainer ``who``'s writing grows."""
        raise NotImplementedError

    def go_checkpoint(self, data_dir: Path) -> int:
        """TiDB Binlog's saved checkpoint ts (its file checkpoint in ``data_dir``; 0 before one)."""
        try:
            text = (data_dir / "savepoint").read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            if line.startswith("commitTS"):
                return int(line.split("=")[1])
        return 0

    def check(self, cluster: RealCluster, who: str, drainers: list[str], load: Load) -> int:
        """Check drainer ``who``'s output (against TiDB, or the other drainer's); the items checked."""
        raise NotImplementedError

    def floor(self) -> float:
        """Seconds of the output's floor for the same data."""
        raise NotImplementedError


class MySQLOutput(Output):
    """MariaDB, TiDB Binlog's default mode (``merge``: its merge mode); the floor: the final rows
    bulk-loaded with 1,000-row INSERTs (``bench/mysql_apply.py``'s)."""

    slack = 4    # a checkpoint save replaces its one row

    def __init__(self, work: Path, maria: MariaDBServer, merge: bool) -> None:
        super().__init__(work)
        self.maria, self.merge = maria, merge
        self.name = "mysql-merge" if merge else "mysql"
        self.conn: Any = maria.connect()

    def syncer(self, who: str) -> str:
        m = self.maria
        return (f'db-type = "mysql"\n\n[syncer.to]\nhost = "127.0.0.1"\nport = {m.port}\nuser = "{m.USER}"\n'
                f'password = "{m.PASSWORD}"\nmerge = {"true" if self.merge else "false"}\n')

    def reset(self) -> None:
        self.maria.reset(DB)

    def probe(self, who: str) -> int:
        with self.conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN "
                        "('Handler_write', 'Handler_update', 'Handler_delete')")
            return sum(int(v) for _, v in cur.fetchall())

    def go_checkpoint(self, data_dir: Path) -> int:
        try:
            rows = self.maria.query("SELECT checkPoint FROM tidb_binlog.checkpoint")
        except Exception:   # noqa: BLE001 - not created yet
            return 0
        return max((int(json.loads(r[0]).get("commitTS", 0)) for r in rows), default=0)

    def check(self, cluster: RealCluster, who: str, drainers: list[str], load: Load) -> int:
        return same_as_upstream(cluster, self.maria, f"{who} {self.name}")

    def floor(self) -> float:
        from sink.mysql.target import MySQLTarget

        dsn = f"mysql://{self.maria.USER}:{self.maria.PASSWORD}@127.0.0.1:{self.maria.port}/"
        conn = MySQLTarget.from_dsn(dsn).connect()
        try:
            return bulk_load(conn, read_tables(conn, list(TABLES)))[0]
        finally:
            conn.close()


class KafkaOutput(Output):
    """A topic per drainer on a local Kafka broker; checked message for message against the other
    drainer's (else counted: a message per transaction and DDL); the floor: a plain idempotent
    producer of the same messages."""

    name = "kafka"

    def __init__(self, work: Path, kafka: Any) -> None:
        super().__init__(work)
        self.kafka = kafka
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "bench-vs-probe"})

    def topic(self, who: str) -> str:
        return f"bench-vs-{who}"

    def syncer(self, who: str) -> str:
        return (f'db-type = "kafka"\n\n[syncer.to]\nkafka-addrs = "{self.kafka.bootstrap}"\n'
                f'kafka-version = "2.4.0"\ntopic-name = "{self.topic(who)}"\n')

    def probe(self, who: str) -> int:
        from confluent_kafka import TopicPartition

        try:
            return int(self.consumer.get_watermark_offsets(TopicPartition(self.topic(who), 0), timeout=5)[1])
        except Exception:   # noqa: BLE001 - no topic yet
            return 0

    def messages(self, who: str) -> list[bytes]:
        return list(self.kafka.messages(self.topic(who)))

    def check(self, cluster: RealCluster, who: str, drainers: list[str], load: Load) -> int:
        return _same_records(self.name, {d: self.messages(d) for d in drainers if d == who or d == "go"},
                             who, load, _secondary)

    def floor(self) -> float:
        from confluent_kafka import Producer

        messages = self.messages("binlake")
        producer = Producer({"bootstrap.servers": self.kafka.bootstrap, "enable.idempotence": True,
                             "linger.ms": 5, "message.max.bytes": 1_000_000_000})
        producer.produce("bench-vs-floor", b"warm-up")   # the topic created and the producer id taken, untimed
        producer.flush()
        t0 = time.perf_counter()
        for m in messages:
            while True:
                try:
                    producer.produce("bench-vs-floor", m)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush()
        return time.perf_counter() - t0


class FileOutput(Output):
    """TiDB Binlog's protobuf binlog files, a directory per drainer; checked record for record
    against the other drainer's (else counted); the floor: the same frames written to one file and
    fsynced."""

    name = "file"

    def dir(self, who: str) -> Path:
        return self.work / f"pb-{who}"

    def syncer(self, who: str) -> str:
        return f'db-type = "file"\n\n[syncer.to]\ndir = "{self.dir(who)}"\n'

    def probe(self, who: str) -> int:
        try:
            return sum(p.stat().st_size for p in self.dir(who).glob("binlog-*"))
        except OSError:
            return 0

    def records(self, who: str) -> list[bytes]:
        from sink.binlogfile import read_records

        files = sorted(self.dir(who).glob("binlog-*"))
        return [r for i, f in enumerate(files) for r in read_records(f, last=i == len(files) - 1)]

    def check(self, cluster: RealCluster, who: str, drainers: list[str], load: Load) -> int:
        return _same_records(self.name, {d: self.records(d) for d in drainers if d == who or d == "go"},
                             who, load, _pb_binlog)

    def floor(self) -> float:
        data = b"".join(p.read_bytes() for p in sorted(self.dir("binlake").glob("binlog-*")))
        target = self.work / "floor.bin"
        t0 = time.perf_counter()
        with open(target, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return time.perf_counter() - t0


def _in_table_order(message: Any, items: str) -> Any:
    """``message`` with its ``dml_data.<items>`` (a Kafka message's tables, a file record's events)
    in table name order, stable, so each table's rows keep theirs: TiDB Binlog's drainer keeps the
    order TiDB's prewrite lists a transaction's tables in (not table id order), binlake's gives
    table id order."""
    field = getattr(message.dml_data, items)
    ordered = sorted(field, key=lambda t: (t.schema_name, t.table_name))
    del field[:]
    field.extend(ordered)
    return message


def _secondary(raw: bytes) -> Any:
    from schemas import secondary_binlog_pb2

    return _in_table_order(secondary_binlog_pb2.Binlog.FromString(raw), "tables")


def _pb_binlog(raw: bytes) -> Any:
    from schemas import pb_binlog_pb2

    return _in_table_order(pb_binlog_pb2.Binlog.FromString(raw), "events")


def _same_records(output: str, by: dict[str, list[bytes]], who: str, load: Load, parse: Any) -> int:
    """Drainer ``who``'s records equal the Go drainer's, parsed (when both ran), else number a record
    per transaction and DDL of the load; the records checked."""
    mine = by[who]
    if "go" not in by or who == "go":
        want = load.transactions + len(SCHEMA) + len(DDL_UNDER_LOAD)
        if "go" not in by and len(mine) != want:
            raise BenchError(f"{who} {output}: {len(mine)} records, the load committed {want} transactions and DDL")
        return len(mine)
    theirs = by["go"]
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a != b and parse(a) != parse(b):   # equal bytes, or equal with a transaction's tables in one order
            raise BenchError(f"{who} {output}: record {i} differs from TiDB Binlog's:\n{parse(a)}\nvs\n{parse(b)}")
    if len(mine) != len(theirs):
        raise BenchError(f"{who} {output}: {len(mine)} records, TiDB Binlog's drainer wrote {len(theirs)}")
    return len(mine)


# ---- the drainers -----------------------------------------------------------------------------

def drainer_toml(path: Path, output: Output, who: str, data_dir: Path, pd_url: str, addr: str) -> Path:
    """One drainer.toml for either drainer: TiDB Binlog's keys, database ``bench``, ``output``'s syncer."""
    path.write_text(f"""addr = "{addr}"
data-dir = "{data_dir}"
pd-urls = "{pd_url}"
initial-commit-ts = 0
log-level = "warn"

[syncer]
worker-count = 16
txn-batch = 20
safe-mode = false
replicate-do-db = ["{DB}"]
{output.syncer(who)}""")
    return path


@dataclass
class Run:
    """One drainer over the range: wall seconds, CPU seconds of its process tree, peak RSS bytes."""

    drainer: str
    output: str
    wall: float
    cpu: float
    rss: int


def go_drain(binary: Path, toml: Path, output: Output, cluster: RealCluster, end_ts: int, work: Path) -> Run:
    """TiDB Binlog's drainer from ts 0 until its checkpoint passes ``end_ts``; its wall ends where its
    output last grew before that (the checkpoint is saved every 3 s)."""
    env = {**os.environ, "BINLAKE_TIDB_STATUS_URL": cluster.tidb.status_url}
    log = work / "drainer.log"
    progress = Progress(lambda: output.probe("go"))
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        proc = subprocess.Popen([str(binary), "-config", str(toml), "-log-file", str(work / "drainer.go.log")],
                                stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    sampled = _TreeSampler(proc.pid)
    try:
        while output.go_checkpoint(work / "data.drainer") < end_ts:
            if proc.poll() is not None:
                go_log = work / "drainer.go.log"
                raise BenchError(f"TiDB Binlog's drainer exited with {proc.returncode}:\n"
                                 + log.read_text(errors="replace")[-1500:]
                                 + (go_log.read_text(errors="replace")[-3000:] if go_log.exists() else ""))
            if time.perf_counter() - t0 > DONE_TIMEOUT:
                raise BenchError(f"TiDB Binlog's drainer did not reach ts {end_ts} in {DONE_TIMEOUT:.0f} s")
            time.sleep(0.05)
        wall = max(progress.done_at(output.slack) - t0, 0.0)
    finally:
        progress.stop()
        sampled.stop()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return Run("go", output.name, wall, sampled.seconds(), sum(sampled.peak.values()))


def binlake_drain(toml: Path, output: Output, cluster: RealCluster, end_ts: int, work: Path) -> Run:
    """``binlake drain`` of (0, end_ts] as a fresh process, configured by the same drainer.toml."""
    log, report = work / "drainer.log", work / "report.json"
    cmd = [sys.executable, "-m", "binlake.cli", "drain", "--config", str(toml), "--registry", cluster.registry,
           "--upstream-status-url", cluster.tidb.status_url, "--to-ts", str(end_ts), "--report", str(report),
           "--spark-master", "local[2]"]
    wall, sampled = run_sampled(cmd, log)
    return Run("binlake", output.name, wall, sampled.seconds(), sum(sampled.peak.values()))


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
    names = [o for o in args.outputs.split(",") if o]
    unknown = sorted(set(names) - set(OUTPUTS))
    if unknown:
        ap.error(f"unknown outputs {unknown}; known: {', '.join(OUTPUTS)}")
    if args.go_drainer is not None and not os.access(args.go_drainer, os.X_OK):
        ap.error(f"--go-drainer {args.go_drainer} is not an executable file")
    print(f"vs drainer  {dt.datetime.now(UTC):%Y-%m-%d %H:%M UTC}  {machine_line()}  load average {_load_avg()}  "
          f"tidb-server {args.tidb}", flush=True)
    root = scratch_dir("binlake-bench-vs-")
    runs: list[Run] = []
    floors: dict[str, float] = {}
    drainers = (["go"] if args.go_drainer else []) + ["binlake"]
    try:
        with ExitStack() as stack:
            cluster = stack.enter_context(real_cluster(root, BY_LINE[args.tidb]))
            outputs = _outputs(names, root, stack)
            load = run_load(cluster, args.rows, args.writers, args.seed)
            end_ts = cluster.settle()
            print(f"  load: {load.row_changes:,} row changes in {load.transactions:,} transactions, "
                  f"{load.seconds:.1f} s (not timed); range (0, {end_ts}]", flush=True)
            for output in outputs:
                for who in drainers:
                    output.reset()
                    work = root / f"{output.name}-{who}"
                    work.mkdir()
                    toml = drainer_toml(work / "drainer.toml", output, who, work / "data.drainer", cluster.pd.url,
                                        f"127.0.0.1:{free_port()}")
                    run = (go_drain(args.go_drainer, toml, output, cluster, end_ts, work) if who == "go"
                           else binlake_drain(toml, output, cluster, end_ts, work))
                    checked = output.check(cluster, who, drainers, load)
                    runs.append(run)
                    print(f"  {output.name:12s} {who:8s} {load.row_changes / run.wall:9,.0f} row changes/s  "
                          f"wall {run.wall:6.1f} s  CPU {run.cpu / load.row_changes * 1e6:7.1f} µs per row change  "
                          f"peak RSS {run.rss / 2**20:6.0f} MiB  ({checked:,} checked)", flush=True)
                floors[output.name] = statistics.median(output.floor() for _ in range(3))
            print()
            print(summary(runs, floors, load.row_changes))
    finally:
        if not args.keep:
            remove(root)
        else:
            print(f"  kept {root}")
    return 0


def _outputs(names: list[str], root: Path, stack: ExitStack) -> list[Output]:
    """The outputs asked for, their servers started on ``stack``."""
    out: list[Output] = []
    maria = kafka = None
    for name in names:
        if name.startswith("mysql"):
            maria = maria or stack.enter_context(MariaDBServer())
            out.append(MySQLOutput(root, maria, merge=name == "mysql-merge"))
        elif name == "kafka":
            classpath = kafka_classpath()
            if classpath is None:
                raise BenchError("no Kafka broker: run make kafka")
            # TiDB Binlog asks brokers for message.max.bytes and replica.fetch.max.bytes of 1 GiB: its
            # producer sends batches of up to kafka-max-messages (1024) messages whatever their size
            kafka = kafka or stack.enter_context(KafkaServer(classpath, extra={
                "message.max.bytes": str(1 << 30), "replica.fetch.max.bytes": str(1 << 30)}))
            out.append(KafkaOutput(root, kafka))
        else:
            out.append(FileOutput(root))
    return out


def summary(runs: list[Run], floors: dict[str, float], rows: int) -> str:
    """The SUMMARY block: per output, each drainer's rate, binlake / Go and binlake / the floor (the
output's: bulk INSERT of the final rows, a plain producer, one write of the same frames)."""
    lines = [f"SUMMARY vs drainer ({rows:,} row changes):"]
    for output in dict.fromkeys(r.output for r in runs):
        by = {r.drainer: r for r in runs if r.output == output}
        b = by["binlake"]
        line = (f"  {output:12s} binlake {rows / b.wall:,.0f}/s, {b.cpu / rows * 1e6:.1f} µs CPU per row change; "
                f"floor {floors[output]:.2f} s: binlake / floor "
                f"{floors[output] / b.wall:.2f}")
        if "go" in by:
            g = by["go"]
            line += (f"; Go {rows / g.wall:,.0f}/s, {g.cpu / rows * 1e6:.1f} µs; binlake / Go rate "
                     f"{g.wall / b.wall:.2f}, CPU {b.cpu / g.cpu:.2f}")
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
