"""Drainer end to end: row changes from 2 real pumps -> one ``binlake drain`` (local Spark) -> Iceberg.

Setup (not timed): an emulated TiDB cluster (``upstream.cluster.Cluster``: TSO, ``/ddl/history``)
creates 4 tables through its SQL (so their CREATE TABLE DDL binlogs and history jobs are real), and
two real ``binlake pump`` processes register in a file registry. The DML binlogs are then synthesized
here, as TiDB would write them, because the emulator's SQL path runs only ~450 txn/s: one load
process per pump encodes rows with ``transform.codec.rows.encode_row`` into transactions of 100-200 row
changes (about 60% inserts, 30% updates, 10% deletes, over one or two tables), and writes a prewrite
binlog (``PrewriteValue`` at the tables' schema version) then a commit binlog per transaction, with
timestamps from the emulator's TSO. Once both watermarks pass the last commit, the drain is timed.

Timed: ``binlake drain`` as a fresh process (the CLI, ``--spark-master local[2]``) into a fresh
SQLite catalog + local warehouse; its run report gives the per-stage seconds. End-to-end rows/s are
over the report's ``total`` (plan, DDL history, Spark start, pull, pair, decode, collect, sink).

Baseline (same run): the write floor, pyiceberg creating fresh tables with the same schemas and
partition specs in a new catalog and appending the run's final Arrow tables (each changelog and
mirror as read back after the drain). Checks: per table, changelog row counts per op and mirror row
counts equal what was generated, and a few generated row images equal their mirror rows.

Memory: the peak RSS of the drain's Python driver, of its JVM and of Spark's Python workers, sampled
every 0.2 s; every drain runs with ``spark.driver.memory=1g`` (``--driver-memory``). Several
``--rows`` sizes drain one cumulative load (ranges (0, ts1], (0, ts2], … each into a fresh warehouse)
and compare time and driver memory with the smallest.

    .venv/bin/python bench/drain.py                   # 1,000,000 row changes over 4 tables
    .venv/bin/python bench/drain.py --rows 1M,3M,10M  # one 10M load, three drains, ratios to 1M
    .venv/bin/python bench/drain.py --small           # an incremental run of 1,000 row changes, cold
    .venv/bin/python bench/drain.py --pull-binlogs    # also through TiDB's PullBinlogs, side by side

``--pull-binlogs``: after each PumpScan drain, the same two pumps are restarted with ``pump-scan =
false`` (as TiDB Binlog's Go pump, they serve only ``/binlog.Pump/PullBinlogs``) and the same range
is drained again into a fresh warehouse, once with one pull task per pump and once with
``--splits-per-pump 4`` (each sub-range task seeks to its start, as the pump's index is keyed by ts:
no re-read). The pumps are restarted with PumpScan before the next size. Printed side by side: the
pull stage and the end-to-end row changes/s, and their ratios to the PumpScan drain (the baseline).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import queue
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow.compute as pc

from bench._common import BenchError, machine_line, wait_watermark
from transform.codec import mysqltypes as mt

ROOT = Path(__file__).resolve().parent.parent
DB = "bench"
RATE_TARGET = 50_000.0     # row changes/s end to end at the largest size
TIME_SLACK = 1.05          # the largest run may take 1.05x its share of rows more time than the smallest
RSS_TARGET = 1.3           # the driver's peak RSS at the largest size over the smallest's
SMALL_TARGET = 8.0         # --small: the incremental run's process wall, seconds (issue 45)
UTC = dt.UTC
CLIENT_OPTIONS = {"check_interval": 0.5, "watch_interval": 0.3, "commit_retry_interval": 0.2,
                  "retry_interval": 0.05, "write_timeout": 10.0}

DDL = f"""
CREATE DATABASE {DB};
CREATE TABLE {DB}.orders (id BIGINT PRIMARY KEY, user_id INT NOT NULL, seq BIGINT UNSIGNED NOT NULL,
  price DECIMAL(12,2) NOT NULL, name VARCHAR(64) NOT NULL, note VARCHAR(255), created DATETIME(6) NOT NULL,
  updated TIMESTAMP NULL, doc JSON, status ENUM('new','paid','shipped','cancelled','returned') NOT NULL,
  qty SMALLINT, score DOUBLE);
CREATE TABLE {DB}.users (id BIGINT PRIMARY KEY, email VARCHAR(128) NOT NULL, age TINYINT UNSIGNED,
  balance DECIMAL(18,4) NOT NULL, tier ENUM('free','pro','team') NOT NULL, signup DATETIME NOT NULL,
  last_seen TIMESTAMP(3) NULL, prefs JSON, country CHAR(2), visits INT NOT NULL, flags BIGINT, bio VARCHAR(512));
CREATE TABLE {DB}.events (id BIGINT PRIMARY KEY, kind ENUM('click','view','buy','leave') NOT NULL,
  user_id BIGINT NOT NULL, amount DECIMAL(10,2), at DATETIME(3) NOT NULL, received TIMESTAMP(6) NULL,
  payload JSON, source VARCHAR(32) NOT NULL, weight FLOAT, tries SMALLINT UNSIGNED NOT NULL, tag VARCHAR(16),
  big BIGINT UNSIGNED);
CREATE TABLE {DB}.metrics (host VARCHAR(64) NOT NULL, at DATETIME(3) NOT NULL, cpu DOUBLE, mem BIGINT UNSIGNED,
  load1 DECIMAL(6,2), disk INT, net BIGINT, status ENUM('ok','warn','crit') NOT NULL, labels JSON,
  region CHAR(8), sampled TIMESTAMP NULL, note VARCHAR(100));
"""
TABLES = ("orders", "users", "events", "metrics")


# ---- row images -----------------------------------------------------------------------------

def _mix(*parts: int) -> int:
    """A 64-bit hash of some ints (splitmix64 steps): deterministic values per (key, version, column)."""
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = (x ^ (p & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x


_WORDS = ("alpha", "beta", "gamma", "delta", "café", "naïve", "東京", "zeta", "omega", "kappa")


def _value(col: Any, h: int) -> Any:
    """A value of ``col``'s type from hash ``h`` (about 1 in 5 values NULL in nullable columns)."""
    if not col.type.flag & mt.NOT_NULL_FLAG and h % 5 == 0:
        return None
    h >>= 3
    tp = col.tp
    if tp in mt.INT_TYPES:
        bits = col.mysql_type.int_bits
        if col.unsigned:
            return h % (1 << bits)
        return h % (1 << bits) - (1 << (bits - 1))
    if tp in (mt.TYPE_FLOAT, mt.TYPE_DOUBLE):
        return (h % 1_000_000) / 64.0  # exact in float32 too
    if tp == mt.TYPE_NEWDECIMAL:
        prec, scale = col.type.flen, max(col.type.decimal, 0)
        v = Decimal(h % 10 ** (prec - 1)).scaleb(-scale)
        return -v if h & 1 << 60 else v
    if tp in (mt.TYPE_DATETIME, mt.TYPE_TIMESTAMP):
        fsp = max(col.type.decimal, 0)
        us = h % 10 ** 14 // 10 ** (6 - fsp) * 10 ** (6 - fsp)
        base = dt.datetime(2021, 1, 1, tzinfo=UTC) if tp == mt.TYPE_TIMESTAMP else dt.datetime(2020, 1, 1)
        return base + dt.timedelta(microseconds=us)
    if tp == mt.TYPE_JSON:
        return json.dumps({"n": h % 1000, "sku": f"S{h % 999_983}", "tags": list(_WORDS[h % 7:h % 7 + h % 3])},
                          sort_keys=True)
    if tp == mt.TYPE_ENUM:
        return col.type.elems[h % len(col.type.elems)]
    width = col.type.flen if col.type.flen > 0 else 32
    text = f"{_WORDS[h % 10]}-{h % 10 ** 12:x}"
    if tp == mt.TYPE_STRING:
        return text[:width]
    return (text * (1 + h % 3))[:min(width, 8 + h % 40)]


def row_image(table: Any, key: int, version: int) -> dict[str, Any]:
    """The image of ``key`` after its ``version``-th write (the PK column, if any, holds ``key``)."""
    out = {}
    for c in table.columns:
        out[c.name] = key if table.pk_is_handle and c is table.pk_handle_column else _value(c, _mix(key, version, c.id))
    return out


# ---- load processes (one per pump) ------------------------------------------------------------

class _Keys:
    """The live keys of one table in one load process: O(1) insert, random pick and removal."""

    def __init__(self) -> None:
        self.keys: list[int] = []
        self.pos: dict[int, int] = {}
        self.version: dict[int, int] = {}

    def add(self, key: int) -> None:
        """A new live key at version 0."""
        self.pos[key] = len(self.keys)
        self.keys.append(key)
        self.version[key] = 0

    def remove(self, key: int) -> None:
        """Forget a deleted key."""
        i = self.pos.pop(key)
        last = self.keys.pop()
        if last != key:
            self.keys[i] = last
            self.pos[last] = i
        del self.version[key]


def _load_main(index: int, addr: str, tso_url: str, cluster_id: int, tables: list[Any], schema_version: int,
               phases: list[int], seed: int, results: Any, go: Any, inserts: list[float]) -> None:
    """Generate and write ``phases[i]`` row changes per phase to one pump, ``inserts[i]`` of them
    inserts; report after each phase."""
    from ingest.binlog import marshal_gogo
    from ingest.tso import TSOClient
    from schemas import binlog_pb2
    from upstream.keys import int_record_key
    from upstream.local import PumpWriter
    from upstream.rowcodec import encode_row

    rng = random.Random(seed * 1_000_003 + index)
    tso = TSOClient(tso_url, cluster_id)
    writer = PumpWriter(addr, cluster_id)
    live = [_Keys() for _ in tables]
    counts = [{"I": 0, "U": 0, "D": 0} for _ in tables]
    next_key = [1_000_000_000 * (index + 1)] * len(tables)
    max_commit = 0
    lock = threading.Lock()
    inflight = threading.BoundedSemaphore(24)
    errors: list[BaseException] = []
    seq_code = {"insert": 0, "update": 1, "delete": 4}

    turn = threading.Condition()
    next_commit = 0  # transactions take their commit_ts in generation order (see send)

    def send(n: int, pre: binlog_pb2.Binlog, data: bytes) -> None:
        # Prewrites go out concurrently; commit_ts are then taken in generation order, so a txn
        # that changes a key commits after every earlier txn of this process (which TiDB's locks
        # guarantee for transactions on the same key). Keys of the two processes are disjoint.
        nonlocal max_commit, next_commit
        try:
            writer.write(data, timeout=120)
            with turn:
                turn.wait_for(lambda: next_commit == n or bool(errors))
                if errors:
                    return
                commit_ts = tso.get_ts()
                next_commit += 1
                turn.notify_all()
            com = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=pre.start_ts, commit_ts=commit_ts,
                                    prewrite_key=pre.prewrite_key)
            writer.write(marshal_gogo(com), timeout=120)
            with lock:
                max_commit = max(max_commit, commit_ts)
        except BaseException as e:  # noqa: BLE001 - reported by the phase loop
            errors.append(e)
            with turn:
                turn.notify_all()
        finally:
            inflight.release()

    pool = ThreadPoolExecutor(max_workers=12, thread_name_prefix=f"bench-write-{index}")
    all_rows = all_txns = 0
    for phase, target in enumerate(phases):
        t0 = time.perf_counter()
        done = txns = nbytes = 0
        insert_share = inserts[phase]
        update_share = insert_share + (1 - insert_share) * 0.75
        futures: list[Future[None]] = []
        while done < target and not errors:
            size = min(target - done, rng.randint(100, 200))
            picked = rng.sample(range(len(tables)), rng.choice((1, 1, 2)))
            pv = binlog_pb2.PrewriteValue(schema_version=schema_version)
            first_key = None
            for n_t, ti in enumerate(picked):
                table, keys = tables[ti], live[ti]
                share = size if n_t == len(picked) - 1 else size // len(picked)
                size -= share
                tm = pv.mutations.add()
                tm.table_id = table.id
                touched: set[int] = set()
                rowid = not table.pk_is_handle  # keyed by _tidb_rowid: pass the handle explicitly
                for _ in range(share):
                    r = rng.random()
                    key = keys.keys[rng.randrange(len(keys.keys))] if len(keys.keys) > 1000 else None
                    if key is None or key in touched or r < insert_share:
                        key = next_key[ti]
                        next_key[ti] += 1
                        keys.add(key)
                        data = encode_row(table, "insert", None, row_image(table, key, 0),
                                          key if rowid else None)
                        tm.inserted_rows.append(data)
                        kind, op = "insert", "I"
                    elif r < update_share:
                        v = keys.version[key]
                        data = encode_row(table, "update", row_image(table, key, v), row_image(table, key, v + 1),
                                          key if rowid else None)
                        keys.version[key] = v + 1
                        tm.updated_rows.append(data)
                        kind, op = "update", "U"
                    else:
                        data = encode_row(table, "delete", row_image(table, key, keys.version[key]), None,
                                          key if rowid else None)
                        keys.remove(key)
                        tm.deleted_rows.append(data)
                        kind, op = "delete", "D"
                    touched.add(key)
                    tm.sequence.append(seq_code[kind])
                    counts[ti][op] += 1
                    first_key = first_key if first_key is not None else (table.id, key)
                done += share
            inflight.acquire()
            pre = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=tso.get_ts(),
                                    prewrite_key=int_record_key(*first_key),
                                    prewrite_value=pv.SerializeToString())
            data = marshal_gogo(pre)
            futures.append(pool.submit(send, all_txns + txns, pre, data))
            nbytes += len(data)
            txns += 1
        for f in futures:
            f.result()
        if errors:
            results.put({"index": index, "error": f"{type(errors[0]).__name__}: {errors[0]}"})
            return
        all_rows += done
        all_txns += txns
        samples = {}
        for ti, table in enumerate(tables):
            picks = rng.sample(live[ti].keys, min(3, len(live[ti].keys)))
            samples[table.name] = [(k, live[ti].version[k]) for k in picks]
        results.put({"index": index, "phase": phase, "txns": all_txns, "bytes": nbytes, "rows": all_rows,
                     "seconds": time.perf_counter() - t0, "max_commit": max_commit,
                     "counts": [dict(c) for c in counts], "live": [len(k.keys) for k in live], "samples": samples})
        if phase + 1 < len(phases):
            go.wait()
            go.clear()
    pool.shutdown()
    writer.close()
    tso.close()


class Env:
    """The emulated cluster with 4 tables and two pump processes in a temp dir."""

    def __init__(self, root: Path) -> None:
        from upstream.cluster import Cluster
        from upstream.local import PumpProcess

        self.root = root
        self.registry = f"file://{root / 'registry.json'}"
        self.cluster = Cluster(registry=self.registry, servers=1, pump_client_options=CLIENT_OPTIONS)
        self.pumps = [PumpProcess(data_dir=root / f"pump-{i}", pd_url=self.cluster.tso_url, registry=self.registry,
                                  node_id=f"pump-{i}", extra_args=["--gen-binlog-interval", "0.3",
                                                                   "--heartbeat-interval", "0.3"])
                      for i in (1, 2)]
        for p in self.pumps:
            p.start(wait=True, timeout=60)
        self.cluster.execute(DDL)
        if not self.cluster.flush(60):
            raise BenchError("the DDL binlogs were not written to the pumps")
        self.tables = [self.cluster.table(DB, name) for name in TABLES]
        self.schema_version = self.cluster.catalog.current().version

    def close(self) -> None:
        """Stop the pumps and the emulator."""
        for p in self.pumps:
            p.terminate(timeout=20)
        self.cluster.close()


@contextmanager
def cluster(prefix: str, keep: bool) -> Iterator[tuple[Path, Env]]:
    """A work dir holding the emulated cluster and its two pumps (:class:`Env`); both go afterwards,
    the directory too unless ``keep``."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    env = None
    try:
        t0 = time.perf_counter()
        env = Env(root)
        print(f"  emulator + 2 pumps + 4 tables (schema version {env.schema_version}) in "
              f"{time.perf_counter() - t0:.1f} s; work dir {root}", flush=True)
        yield root, env
    finally:
        if env is not None:
            env.close()
        if keep:
            print(f"  kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def generate(env: Env, phases: list[int], seed: int, inserts: list[float] | None = None) -> list[dict[str, Any]]:
    """Write the phases' row changes through both pumps; per phase: the boundary ts, counts, samples.

    ``inserts[i]`` is phase i's share of inserts (default 0.6); updates and deletes share the rest
    3 to 1 (30 % and 10 % by default)."""
    inserts = inserts if inserts is not None else [0.6] * len(phases)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    gos = [ctx.Event() for _ in env.pumps]
    shares = [[n // 2 + (n % 2 if i == 0 else 0) for n in phases] for i in range(len(env.pumps))]
    procs = [ctx.Process(target=_load_main, name=f"bench-drain-load-{i}", daemon=True,
                         args=(i, p.addr, env.cluster.tso_url, env.cluster.cluster_id, env.tables,
                               env.schema_version, shares[i], seed, results, gos[i], inserts))
             for i, p in enumerate(env.pumps)]
    out = []
    try:
        for p in procs:
            p.start()
        for phase, n in enumerate(phases):
            got = []
            while len(got) < len(procs):
                try:
                    got.append(results.get(timeout=5))
                except queue.Empty:
                    dead = [p for p in procs if p.exitcode not in (None, 0)]
                    if dead:
                        raise BenchError(f"{dead[0].name} died with exit code {dead[0].exitcode}") from None
                    continue
                if "error" in got[-1]:
                    raise BenchError(f"load process {got[-1]['index']}: {got[-1]['error']}")
            boundary = env.cluster.ts()  # every commit of this phase is below it, the next phase's above
            counts = [{op: sum(g["counts"][ti][op] for g in got) for op in "IUD"} for ti in range(len(TABLES))]
            live = [sum(g["live"][ti] for g in got) for ti in range(len(TABLES))]
            samples = {name: [s for g in got for s in g["samples"][name]] for name in TABLES}
            secs = max(g["seconds"] for g in got)
            out.append({"to_ts": boundary, "rows": sum(g["rows"] for g in got), "txns": sum(g["txns"] for g in got),
                        "bytes": sum(g["bytes"] for g in got), "counts": counts, "live": live, "samples": samples,
                        "max_commit": max(g["max_commit"] for g in got), "seconds": secs})
            print(f"  load phase {phase + 1}: {n:,} more row changes ({out[-1]['rows']:,} in {out[-1]['txns']:,} "
                  f"transactions so far), "
                  f"{out[-1]['bytes'] / 2**20:.0f} MiB of prewrite binlogs, written to 2 pumps in {secs:.0f} s "
                  f"(not timed)", flush=True)
            for g in gos:
                g.set()
        for p in procs:
            p.join(60)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    last = out[-1]["max_commit"]
    for p in env.pumps:
        wait_watermark(p.addr, last, timeout=600)
    return out


# ---- the drain and the baseline ---------------------------------------------------------------

class _TreeSampler:
    """CPU seconds of a process and all its descendants (driver, JVM, Spark's Python workers), and
    the peak resident memory of the driver's Python process, of the JVM and of the Python workers
    together, sampled every 0.2 s (exited processes keep their last sample)."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.seen: dict[tuple[int, float], tuple[str, float]] = {}
        self.peak = {"driver": 0, "jvm": 0, "workers": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                procs = [self.root] + self.root.children(recursive=True)
            except psutil.Error:
                procs = []
            rss = {"driver": 0, "jvm": 0, "workers": 0}
            for p in procs:
                try:
                    t = p.cpu_times()
                    kind = "driver" if p.pid == self.root.pid else "jvm" if p.name() == "java" else "workers"
                    self.seen[(p.pid, p.create_time())] = (kind, t.user + t.system)
                    rss[kind] += p.memory_info().rss
                except psutil.Error:
                    pass
            for k, v in rss.items():
                self.peak[k] = max(self.peak[k], v)
            self._stop.wait(0.2)

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()

    def seconds(self, kind: str | None = None) -> float:
        """CPU seconds seen, summed over every process of the tree (or those of one ``kind``)."""
        return sum(sec for k, sec in self.seen.values() if kind in (None, k))


def drain(env: Env, warehouse: Path, to_ts: int, log: Path, driver_memory: str,
          profile: Path | None = None, extra: tuple[str, ...] = ()) -> tuple[dict[str, Any], float, _TreeSampler]:
    """``binlake drain`` of (0, to_ts] as a fresh process with ``spark.driver.memory``; (run report,
    wall seconds from exec to exit, the CPU and memory samples of the process tree). With
    ``profile``, py-spy samples the whole tree (driver and Spark's Python workers) into a raw
    folded-stack file there (py-spy is then the sampled root: the driver's RSS is not measured)."""
    report = warehouse.parent / f"{warehouse.name}-report.json"
    cmd = [sys.executable, "-m", "binlake.cli", "drain", "--registry", env.registry,
           "--pd-urls", env.cluster.tso_url, "--upstream-status-url", env.cluster.status_url,
           "--warehouse", str(warehouse), "--spark-master", "local[2]", "--to-ts", str(to_ts),
           "--report", str(report), "--spark-conf", f"spark.driver.memory={driver_memory}", *extra]
    if profile is not None:
        cmd = ["py-spy", "record", "--subprocesses", "--idle", "--format", "raw", "--rate", "20",
               "-o", str(profile), "--"] + cmd
    wall, sampled = run_sampled(cmd, log)
    return json.loads(report.read_text()), wall, sampled


def run_sampled(cmd: list[str], log: Path) -> tuple[float, _TreeSampler]:
    """Run ``cmd`` (a ``binlake drain``) from the repository, its output to ``log``: (wall seconds from
    exec to exit, the CPU and memory samples of its process tree); a BenchError with the log's error
    lines and tail when it fails."""
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        sampled = _TreeSampler(proc.pid)
        code = proc.wait()
        sampled.stop()
    wall = time.perf_counter() - t0
    if code != 0:
        lines = log.read_text(errors="replace").splitlines()
        causes = [x for x in lines if any(w in x for w in ("Error", "Exception", "Killed", "FAILED"))][:12]
        tail = "\n".join(causes + ["..."] + lines[-30:])
        raise BenchError(f"binlake drain exited with {code}:\n{tail}")
    return wall, sampled


def check(env: Env, warehouse: Path, report: dict[str, Any], phase: dict[str, Any],
          since: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compare the catalog with what was generated up to ``phase`` (the run's report with what was
    generated after ``since``, when the run continued a drain of that phase); return the final Arrow
    tables per identifier."""
    from sink.iceberg.catalog import open_catalog

    catalog = open_catalog(str(warehouse))
    by_name = {t["table"]: t for t in report["tables"]}
    tables: dict[str, Any] = {}
    problems = []
    for ti, name in enumerate(TABLES):
        ident = f"{DB}.{name}"
        want = phase["counts"][ti]
        got = by_name.get(ident, {}).get("rows", {})
        before = since["counts"][ti] if since else {op: 0 for op in "IUD"}
        if any(int(got.get(op, 0)) != want[op] - before[op] for op in "IUD"):
            problems.append(f"{ident}: report rows {got} != generated {want}")
        log = catalog.load_table(ident + "__changelog").scan().to_arrow()
        mirror = catalog.load_table(ident).scan().to_arrow()
        tables[ident + "__changelog"], tables[ident] = log, mirror
        ops = log.column("_tidb_op").value_counts().to_pylist()
        have = {d["values"]: d["counts"] for d in ops}
        if any(have.get(op, 0) != want[op] for op in "IUD"):
            problems.append(f"{ident}__changelog: ops {have} != generated {want}")
        if mirror.num_rows != phase["live"][ti]:
            problems.append(f"{ident}: mirror has {mirror.num_rows} rows, generated {phase['live'][ti]} live keys")
        info = env.tables[ti]
        key_col = info.pk_handle_column.name if info.pk_is_handle else "_tidb_rowid"
        for key, version in phase["samples"][name]:
            rows = mirror.filter(pc.equal(mirror.column(key_col), key)).to_pylist()
            want_row = row_image(info, key, version)
            if len(rows) != 1 or any(not _same(want_row[c], rows[0][c]) for c in want_row):
                problems.append(f"{ident} key {key}: mirror row {rows[:1]} != generated {want_row}")
    if problems:
        raise BenchError("the drain's output does not match the generated changes:\n  " + "\n  ".join(problems))
    return tables


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, str) and want.startswith("{"):
        return json.loads(want) == json.loads(got)
    if isinstance(want, dt.datetime) and isinstance(got, dt.datetime) and (want.tzinfo is None) != (got.tzinfo is None):
        return want.replace(tzinfo=None) == got.replace(tzinfo=None)
    return bool(want == got)


def write_floor(src_warehouse: Path, dst_warehouse: Path, tables: dict[str, Any]) -> tuple[float, float]:
    """Create each table afresh (same schema and spec) and append its Arrow table; (total s, append s)."""
    from sink.iceberg.catalog import open_catalog

    src = open_catalog(str(src_warehouse))
    dst = open_catalog(str(dst_warehouse))
    dst.create_namespace_if_not_exists(DB)
    total = appends = 0.0
    for ident, data in tables.items():
        meta = src.load_table(ident)
        t0 = time.perf_counter()
        tbl = dst.create_table((DB, ident.split(".", 1)[1]), meta.schema(), partition_spec=meta.spec(),
                               properties={"format-version": "2"})
        t1 = time.perf_counter()
        tbl.append(data)
        t2 = time.perf_counter()
        total += t2 - t0
        appends += t2 - t1
    return total, appends


# ---- main ---------------------------------------------------------------------------------------

def _load_avg() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def _stages(report: dict[str, Any]) -> str:
    names = ("plan", "history", "in-process", "spark-start", "pull", "pair", "decode", "collect", "sink", "total")
    return "  ".join(f"{k} {report['stages'][k]:.2f}" for k in names if k in report["stages"])


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def restart_pumps(env: Env, pump_scan: bool, to_ts: int) -> None:
    """Restart both pumps on their data dirs, serving PumpScan or not, and wait until the registry
    watermark they publish (what a plan reads of a pump without PumpScan) reaches ``to_ts``."""
    from ingest.registry import load_registry
    from ingest.registry.base import PUMP

    for p in env.pumps:
        p.terminate(timeout=20)
        p.extra_args = [a for a in p.extra_args if a not in ("--pump-scan", "false")]
        if not pump_scan:
            p.extra_args += ["--pump-scan", "false"]
        p.start(wait=True, timeout=60)
    deadline = time.monotonic() + 60
    registry = load_registry(env.registry)
    try:
        while min(n.max_commit_ts for n in registry.list_nodes(PUMP)) < to_ts:
            if time.monotonic() > deadline:
                raise BenchError(f"the restarted pumps' registry watermark did not reach {to_ts}")
            time.sleep(0.1)
    finally:
        registry.close()


def pull_binlogs(env: Env, root: Path, label: str, phase: dict[str, Any], driver_memory: str,
                 scan: dict[str, Any]) -> str:
    """The same range drained through PullBinlogs (1 and 4 tasks per pump), checked like the scan's;
    the side-by-side lines."""
    restart_pumps(env, pump_scan=False, to_ts=phase["to_ts"])
    runs: list[tuple[str, dict[str, Any]]] = [("PumpScan, 1 task per pump", scan["report"])]
    try:
        for splits in (1, 4):
            name = f"{label}-pull{splits}"
            report, _, _ = drain(env, root / f"wh-{name}", phase["to_ts"], root / f"drain-{name}.log", driver_memory,
                                 extra=("--splits-per-pump", str(splits)))
            got = {p["protocol"] for p in report["pumps"]}
            if got != {"PullBinlogs"}:
                raise BenchError(f"the drain read the pumps through {got}, not PullBinlogs")
            check(env, root / f"wh-{name}", report, phase)
            runs.append((f"PullBinlogs, {splits} task{'s' if splits > 1 else ''} per pump", report))
    finally:
        restart_pumps(env, pump_scan=True, to_ts=phase["to_ts"])
    rows = phase["rows"]
    base = scan["report"]["stages"]
    lines = [f"  [{label}] PumpScan vs PullBinlogs on the same {rows:,} row changes (same pumps, restarted with "
             f"pump-scan = false; every run checked as above):"]
    for name, report in runs:
        st = report["stages"]
        lines.append(f"    {name:<30} pull {st['pull']:6.1f} s ({rows / st['pull']:9,.0f} row changes/s, "
                     f"{st['pull'] / base['pull']:.2f}x the scan's); total {st['total']:6.1f} s "
                     f"({rows / st['total']:8,.0f}/s end to end, {base['total'] / st['total']:.2f}x the scan's rate)")
    return "\n".join(lines)


def run_one(env: Env, root: Path, label: str, phase: dict[str, Any], driver_memory: str,
            profile: Path | None) -> dict[str, Any]:
    """One timed drain of ``(0, phase.to_ts]`` plus its checks and the write floor."""
    wh = root / f"wh-{label}"
    la0 = _load_avg()
    report, wall, sampled = drain(env, wh, phase["to_ts"], root / f"drain-{label}.log", driver_memory,
                                  profile / f"drain-{label}.txt" if profile else None)
    la1 = _load_avg()
    cpu, peak = sampled.seconds(), sampled.peak
    print(f"  [{phase['rows']:,} row changes] drain done: {_stages(report)}", flush=True)
    tables = check(env, wh, report, phase)
    floor, appends = write_floor(wh, root / f"floor-{label}", tables)
    st = report["stages"]
    rows = phase["rows"]
    total = st["total"]
    no_spark = total - st.get("spark-start", 0.0)
    out_rows = sum(t.num_rows for t in tables.values())
    print(f"\n  [{label}] {rows:,} row changes, {phase['txns']:,} transactions, 4 tables, 2 pumps "
          f"(load average {la0} before, {la1} after)")
    print(f"    seconds per stage: {_stages(report)}")
    print(f"    end to end: {rows / total:,.0f} row changes/s over 'total' ({total:.1f} s incl. Spark start); "
          f"{rows / no_spark:,.0f}/s without Spark start; process wall {wall:.1f} s, CPU {cpu:.1f} s "
          f"({cpu / wall:.2f} cores busy on average, of 2): driver {sampled.seconds('driver'):.1f} s, "
          f"JVM {sampled.seconds('jvm'):.1f} s, Python workers {sampled.seconds('workers'):.1f} s")
    print(f"    peak RSS (sampled every 0.2 s): Python driver {_mib(peak['driver'])}, JVM {_mib(peak['jvm'])} "
          f"(spark.driver.memory={driver_memory}), Spark's Python workers together {_mib(peak['workers'])}")
    print(f"    baseline write floor (pyiceberg create + append of the final {len(tables)} Arrow tables, "
          f"{out_rows:,} rows): {floor:.2f} s ({appends:.2f} s appends) = {rows / floor:,.0f} row changes/s")
    print(f"    ratio drain total / write floor: {total / floor:.1f}x; sink stage / write floor: "
          f"{st.get('sink', 0.0) / floor:.1f}x")
    print(f"    check: per-op changelog counts, mirror row counts and {sum(len(v) for v in phase['samples'].values())} "
          f"sampled mirror rows match the generated changes")
    return {"label": label, "rows": rows, "report": report, "wall": wall, "floor": floor, "appends": appends,
            "load": (la0, la1), "peak": peak}


NO_ARCHIVE = ("--spark-conf", "spark.driver.extraJavaOptions=-Xshare:auto")   # names -Xshare: binlake adds no archive
ON_SPARK = ("--in-process-below", "0")   # a small range on Spark all the same


def small_runs(env: Env, root: Path, loads: list[dict[str, Any]], driver_memory: str) -> int:
    """``--small``: warehouses drained to the first load's end (not timed), then each drained
    incrementally over the second load as a fresh process: on Spark without the class-data archive
    (the baseline: Spark's JVM as it starts by default), on Spark with it, and as binlake runs it by
    default (in the drain's own process, no Spark: the range is below ``[spark] in-process-below``);
    per stage, the ratio, the target."""
    from transform.spark_archive import archive_path, build

    archive = archive_path()
    if archive is None:
        raise BenchError("no java on PATH")
    if not archive.exists():
        t0 = time.perf_counter()
        if not build(archive):
            raise BenchError(f"the class-data archive was not built: {archive.with_suffix('.log')}")
        print(f"  class-data archive built in {time.perf_counter() - t0:.1f} s: {archive}", flush=True)
    first, second = loads
    variants = (("spark", (*ON_SPARK, *NO_ARCHIVE)), ("spark+archive", ON_SPARK), ("in process", ()))
    for name, _ in variants:
        drain(env, root / f"wh-{name}", first["to_ts"], root / f"drain-{name}-1.log", driver_memory)
    walls = {}
    for name, extra in variants:
        la = _load_avg()
        report, wall, sampled = drain(env, root / f"wh-{name}", second["to_ts"], root / f"drain-{name}-2.log",
                                      driver_memory, extra=extra)
        if (report["spark"] is None) != (name == "in process"):
            raise BenchError(f"the {name} run was computed {'in process' if report['spark'] is None else 'on Spark'}")
        check(env, root / f"wh-{name}", report, second, since=first)
        st = report["stages"]
        walls[name] = wall
        print(f"  [{name}] incremental drain of {second['rows'] - first['rows']:,} row changes "
              f"({report['from_ts']}, {report['to_ts']}]: process wall {wall:.2f} s = imports and exit "
              f"{wall - st['total']:.2f} + {_stages(report)}; CPU: driver {sampled.seconds('driver'):.1f} s, "
              f"JVM {sampled.seconds('jvm'):.1f} s, Python workers {sampled.seconds('workers'):.1f} s "
              f"(load average {la}); checked", flush=True)
    here = walls["in process"]
    ok = here <= SMALL_TARGET
    print(f"\nSUMMARY drain --small: an incremental run of {second['rows'] - first['rows']:,} row changes in "
          f"{here:.2f} s wall for the fresh `binlake drain` process as it runs by default (in process, no Spark); "
          f"baseline (Spark, no class-data archive) {walls['spark']:.2f} s; ratio {here / walls['spark']:.2f}; "
          f"target <= {SMALL_TARGET:.0f} s: {'met' if ok else 'MISSED'} (on Spark with the archive: "
          f"{walls['spark+archive']:.2f} s, ratio {walls['spark+archive'] / walls['spark']:.2f})")
    return 0


def _label(rows: int) -> str:
    return f"{rows // 1000}k" if rows < 1_000_000 else f"{rows / 1e6:g}M"


def _sizes(text: str) -> list[int]:
    """``1000000,3000000,10000000`` (also ``1M,3M,10M``) → increasing row counts."""
    out = []
    for part in text.split(","):
        part = part.strip().upper()
        scale = 1_000_000 if part.endswith("M") else 1_000 if part.endswith("K") else 1
        out.append(int(float(part.rstrip("MK")) * scale))
    if out != sorted(set(out)) or out[0] <= 0:
        raise argparse.ArgumentTypeError(f"--rows wants increasing positive sizes, got {text!r}")
    return out


def _summary(results: list[dict[str, Any]]) -> str:
    """The rate of every run; against the smallest run: time and driver RSS ratios (with targets)."""
    first = results[0]
    st = first["report"]["stages"]
    lines = []
    for r in results:
        total = r["report"]["stages"]["total"]
        lines.append(f"  {r['rows']:>12,} row changes: {total:7.1f} s = {r['rows'] / total:8,.0f}/s end to end; "
                     f"peak RSS driver {_mib(r['peak']['driver'])}, JVM {_mib(r['peak']['jvm'])}; "
                     f"write floor {r['floor']:.1f} s (ratio {total / r['floor']:.1f}x)")
    last = results[-1]
    if len(results) > 1:
        size = last["rows"] / first["rows"]
        t = last["report"]["stages"]["total"] / st["total"]
        mem = last["peak"]["driver"] / max(first["peak"]["driver"], 1)
        rate = last["rows"] / last["report"]["stages"]["total"]
        lines.append(f"  {last['label']} vs {first['label']} ({size:g}x the rows): {t:.2f}x the time "
                     f"(target <= {size * TIME_SLACK:.1f}x: {'met' if t <= size * TIME_SLACK else 'MISSED'}), "
                     f"driver peak RSS {mem:.2f}x (target <= {RSS_TARGET}x: {'met' if mem <= RSS_TARGET else 'MISSED'})"
                     f"; {rate:,.0f}/s at {last['label']} (target >= {RATE_TARGET:,.0f}/s: "
                     f"{'met' if rate >= RATE_TARGET else 'MISSED'})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=_sizes, default=[1_000_000],
                    help="row changes per run, comma-separated for several runs over one cumulative load "
                         "(default 1000000; e.g. 1M,3M,10M)")
    ap.add_argument("--tables", type=int, default=4, choices=[4], help="tables (fixed: 4)")
    ap.add_argument("--small", action="store_true",
                    help="an incremental run of 1,000 row changes, without and with the class-data archive")
    ap.add_argument("--driver-memory", default="1g", help="spark.driver.memory of the drains (default 1g)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (pumps, warehouses, logs)")
    ap.add_argument("--profile", type=Path, help="py-spy the drain process tree into this directory (slower)")
    ap.add_argument("--pull-binlogs", action="store_true",
                    help="also drain each range through TiDB's PullBinlogs (pumps restarted without PumpScan)")
    args = ap.parse_args(argv)
    sizes = [1_000, 2_000] if args.small else args.rows
    phases = [b - a for a, b in zip([0, *sizes], sizes)]

    print(f"drain  {dt.datetime.now(UTC):%Y-%m-%d %H:%M UTC}  {machine_line()}  load average {_load_avg()}")
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    with cluster("binlake-bench-drain-", args.keep) as (root, env):
        loads = generate(env, phases, args.seed)
        if args.small:
            return small_runs(env, root, loads, args.driver_memory)
        results = []
        side_by_side = []
        for n, load in zip(sizes, loads):
            results.append(run_one(env, root, _label(n), load, args.driver_memory, args.profile))
            if args.pull_binlogs:
                side_by_side.append(pull_binlogs(env, root, _label(n), load, args.driver_memory, results[-1]))
                print(side_by_side[-1], flush=True)
        print()
        if side_by_side:
            print("SUMMARY drain --pull-binlogs:\n" + "\n".join(side_by_side))
        print("SUMMARY drain (spark.driver.memory=" + args.driver_memory + "):\n" + _summary(results))
        return 0


if __name__ == "__main__":
    sys.exit(main())
