"""Kafka sink: row changes from 2 real pumps -> one in-process ``binlake drain`` (db-type kafka) -> a
real broker (Apache Kafka in KRaft mode on 127.0.0.1, ``tests.servers.KafkaServer``, the jars
``make kafka`` downloads), beside a plain producer of the same messages on the same broker.

Setup (not timed): an emulated cluster (two TiDB servers, ``tests.drain.conftest.cluster_with_pumps``)
with two real pumps, one table ``bench.k (id BIGINT PRIMARY KEY, a INT, b BIGINT, s VARCHAR(64),
t VARCHAR(255))`` and ``--rows`` row changes written through the emulator's SQL path by 4 threads, in
transactions of ``--txn-rows`` (a multi-row INSERT of new keys, and 1 UPDATE by primary key in 5 of
the rows once the thread has keys), so each transaction is one message of the topic. The broker is
warmed up first (its JIT: ``--warmup`` messages of a plain producer, not counted).

Timed: ``binlake.drain.run_drain_command`` of (0, load end] with ``[syncer] db-type = "kafka"`` into a
fresh topic, in this process (``--spark-master local[2]``). The run report's ``sink`` stage is
``KafkaSink.write``: it includes reading the run's transactions in commit order from Spark
(``transform.ordered.ordered_transactions``: the sort of the run's changes and the driver fetching
them), so this script also times, inside ``write``, the ordered stream, the rows' conversion to
Python values (``sink.secondary.python_rows``), the encoding (``sink.secondary.dml_bytes``, and ``encode_ddl``
for a DDL), producing (``Producer.produce``) and the final wait for acknowledgements (``flush``):
the sink's own part is ``write`` less the ordered stream. ``save_checkpoint`` (after the sink
stage) is timed apart.

Baseline (same run, same broker): the topic's messages read back (a read_committed consumer) and
the same bytes produced by a plain confluent_kafka Producer (``enable.idempotence``, acks=all, no
transaction, partition 0, the library's other defaults) into a fresh topic, timed from the first
produce to the end of ``flush``. Ratio = plain-producer seconds / sink seconds (≤ 1 expected;
target ≥ 0.7), over the sink stage and over the sink's own part. Checks: one message per
transaction of the run (and per DDL), in commit order, the report's row changes equal what was
written, the baseline topic's end offset equals the message count.

    .venv/bin/python bench/kafka_sink.py                    # 200,000 row changes in transactions of 10
    .venv/bin/python bench/kafka_sink.py --quick            # 50,000 row changes (~1.5 min)
    .venv/bin/python bench/kafka_sink.py --profile /tmp/kafka-sink.prof   # cProfile of KafkaSink.write
"""
from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import pstats
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import BenchError, machine_line
from bench.drain import _load_avg

ROOT = Path(__file__).resolve().parent.parent
DB = "bench"
TABLE = "k"
RATIO_TARGET = 0.7
LOAD_THREADS = 4
DDL = f"""
CREATE DATABASE {DB};
CREATE TABLE {DB}.{TABLE} (id BIGINT PRIMARY KEY, a INT NOT NULL, b BIGINT, s VARCHAR(64) NOT NULL,
  t VARCHAR(255));
"""


# ---- the load ------------------------------------------------------------------------------------

def _row(key: int, version: int, rng: random.Random) -> str:
    t = "NULL" if key % 7 == 0 else f"'note {key}-{version} {rng.getrandbits(64):x} {rng.getrandbits(64):x}'"
    return f"({key}, {rng.randrange(-2**31, 2**31)}, {rng.getrandbits(62)}, 'name-{key:x}-{version}', {t})"


def load(cluster: Any, rows: int, txn_rows: int, seed: int) -> dict[str, Any]:
    """``rows`` row changes on ``bench.k`` in transactions of ``txn_rows`` by ``LOAD_THREADS`` threads
    (disjoint keys), over both emulated servers; returns the counts per op, transactions, seconds."""
    counts = [{"I": 0, "U": 0} for _ in range(LOAD_THREADS)]
    txns = [0] * LOAD_THREADS
    errors: list[BaseException] = []
    shares = [rows // LOAD_THREADS + (1 if i < rows % LOAD_THREADS else 0) for i in range(LOAD_THREADS)]

    def work(i: int) -> None:
        rng = random.Random(seed * 1_000_003 + i)
        next_key, keys = (i + 1) * 1_000_000_000, list[int]()
        left = shares[i]
        try:
            while left > 0 and not errors:
                n = min(left, txn_rows)
                updates = 1 if len(keys) > 100 and n >= 5 else 0
                inserts = n - updates
                values = []
                for _ in range(inserts):
                    values.append(_row(next_key, 0, rng))
                    keys.append(next_key)
                    next_key += 1
                stmts = [f"INSERT INTO {DB}.{TABLE} VALUES " + ", ".join(values)]
                for _ in range(updates):
                    key = keys[rng.randrange(len(keys) - inserts)]   # not one this transaction inserted
                    stmts.append(f"UPDATE {DB}.{TABLE} SET a = {rng.randrange(1 << 30)}, "
                                 f"s = 'upd-{key:x}-{rng.getrandbits(32):x}' WHERE id = {key}")
                cluster.execute("BEGIN; " + "; ".join(stmts) + "; COMMIT", server=i % len(cluster.servers))
                counts[i]["I"] += inserts
                counts[i]["U"] += updates
                txns[i] += 1
                left -= n
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,), name=f"bench-kafka-load-{i}") for i in range(LOAD_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise BenchError(f"the load failed: {errors[0]!r}")
    if not cluster.flush(120):
        raise BenchError("the load's commit binlogs were not written to the pumps")
    return {"I": sum(c["I"] for c in counts), "U": sum(c["U"] for c in counts), "txns": sum(txns),
            "seconds": time.perf_counter() - t0}


# ---- timing inside KafkaSink.write --------------------------------------------------------------

class Timers:
    """Seconds spent in the parts of ``KafkaSink.write``, by wrapping what it calls (this process only)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {"write": 0.0, "ordered stream": 0.0, "to Python rows": 0.0,
                                          "encode": 0.0, "flush (acks)": 0.0, "save_checkpoint": 0.0}
        self.undo: list[Callable[[], None]] = []

    def _patch(self, owner: Any, name: str, new: Any) -> None:
        old = getattr(owner, name)
        setattr(owner, name, new)
        self.undo.append(lambda: setattr(owner, name, old))

    def _timed(self, owner: Any, name: str, key: str) -> None:
        fn = getattr(owner, name)
        secs = self.seconds

        def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                secs[key] += time.perf_counter() - t0
        self._patch(owner, name, timed)

    def _timed_iter(self, owner: Any, name: str, key: str) -> None:
        fn = getattr(owner, name)
        secs = self.seconds

        def timed(*a: Any, **kw: Any) -> Iterator[Any]:
            it = iter(fn(*a, **kw))
            while True:
                t0 = time.perf_counter()
                try:
                    item = next(it)
                except StopIteration:
                    secs[key] += time.perf_counter() - t0
                    return
                secs[key] += time.perf_counter() - t0
                yield item
        self._patch(owner, name, timed)

    def install(self, profile: cProfile.Profile | None) -> None:
        import sink.kafka.sink as ks
        import sink.per_txn as pt

        self._timed_iter(pt, "ordered_transactions", "ordered stream")
        self._timed(pt, "python_rows", "to Python rows")
        self._timed(ks, "dml_bytes", "encode")
        self._timed(ks, "encode_ddl", "encode")
        self._timed(ks.KafkaSink, "_settle", "flush (acks)")
        self._timed(ks.KafkaSink, "save_checkpoint", "save_checkpoint")
        write = ks.KafkaSink.write
        secs = self.seconds

        def timed_write(sink: Any, run: Any) -> Any:
            t0 = time.perf_counter()
            if profile is not None:
                profile.enable()
            try:
                return write(sink, run)
            finally:
                if profile is not None:
                    profile.disable()
                secs["write"] += time.perf_counter() - t0
        self._patch(ks.KafkaSink, "write", timed_write)

    def remove(self) -> None:
        for undo in reversed(self.undo):
            undo()


# ---- the topic and the baseline -----------------------------------------------------------------

def read_topic(bootstrap: str, topic: str) -> list[bytes]:
    """Every message value of partition 0 of ``topic``, as a read_committed consumer reads them."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-kafka-{time.monotonic_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 0})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[bytes] = []
        position, deadline = 0, time.monotonic() + 300
        while position < high:
            if time.monotonic() > deadline:
                raise BenchError(f"read {position} of {high} messages of {topic} within 300 s")
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is not None:
                    raise BenchError(f"reading {topic}: {msg.error()}")
                out.append(msg.value() or b"")
                position = (msg.offset() or 0) + 1
            if position < high:
                [tp] = consumer.position([TopicPartition(topic, 0)])
                position = max(position, tp.offset)
        return out
    finally:
        consumer.close()


def plain_produce(bootstrap: str, admin: Any, topic: str, messages: list[bytes]) -> float:
    """The baseline: ``messages`` produced to partition 0 of a fresh ``topic`` by an idempotent,
    acks=all producer without transactions; seconds from the first produce to the end of flush."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "log_level": 0})
    producer.list_topics(topic, timeout=30)     # connected, metadata known: not timed
    failed: list[Any] = []

    def acked(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    t0 = time.perf_counter()
    for value in messages:
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=acked)
                producer.poll(0)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(60)
    seconds = time.perf_counter() - t0
    if left or failed:
        raise BenchError(f"baseline: {left} messages unsent, {len(failed)} failed ({failed[:1]})")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-kafka-check", "log_level": 0})
    try:
        high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()
    if high != len(messages):
        raise BenchError(f"baseline: end offset {high} of {topic}, expected {len(messages)}")
    return seconds


def check_messages(messages: list[bytes], rows: dict[str, int], txns: int) -> tuple[int, int]:
    """The topic holds one message per DML transaction (and one per DDL), in commit order, with the
    row changes written; returns (DML messages, DDL messages)."""
    from schemas import secondary_binlog_pb2 as sb

    dml = ddl = 0
    got = {sb.Insert: 0, sb.Update: 0, sb.Delete: 0}
    last = 0
    for value in messages:
        b = sb.Binlog.FromString(value)
        if b.commit_ts <= last:
            raise BenchError(f"message commit ts {b.commit_ts} not after the previous one {last}")
        last = b.commit_ts
        if b.type == sb.DDL:
            ddl += 1
            continue
        dml += 1
        for t in b.dml_data.tables:
            for m in t.mutations:
                got[m.type] += 1
    if dml != txns or (got[sb.Insert], got[sb.Update], got[sb.Delete]) != (rows["I"], rows["U"], 0):
        raise BenchError(f"the topic holds {dml} DML messages ({got}), the load wrote {txns} transactions "
                         f"({rows})")
    return dml, ddl


# ---- main ----------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000, help="row changes (default 200000)")
    ap.add_argument("--txn-rows", type=int, default=10, help="row changes per transaction (default 10)")
    ap.add_argument("--quick", action="store_true", help="50,000 row changes (about 2 minutes)")
    ap.add_argument("--warmup", type=int, default=20_000, help="broker warm-up messages, not counted")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--profile", type=Path, help="cProfile KafkaSink.write into this file (and print its top)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (pumps, drainer data)")
    args = ap.parse_args(argv)
    rows = 50_000 if args.quick else args.rows
    if rows < 1 or args.txn_rows < 1:
        ap.error("--rows and --txn-rows must be >= 1")

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from binlake.drain import run_drain_command
    from binlake.drain_config import DrainerConfig, SparkSection, UpstreamSection
    from tests.drain.conftest import cluster_with_pumps
    from tests.servers import KafkaServer, kafka_classpath
    from tests.upstream.binlogs import wait_watermarks

    classpath = kafka_classpath()
    if classpath is None:
        sys.exit("the Kafka broker's jars are not in .peers/kafka: run `make kafka`")
    print(f"kafka  {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M UTC}  {machine_line()}  load average {_load_avg()}")
    work = Path(tempfile.mkdtemp(prefix="binlake-bench-kafka-"))
    try:
        with KafkaServer(classpath) as broker, cluster_with_pumps(work) as (cluster, pumps, registry):
            admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
            warm = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                             "log_level": 0})
            for _ in range(args.warmup):
                while True:
                    try:
                        warm.produce("bench-warmup", random.randbytes(300), partition=0)
                        warm.poll(0)
                        break
                    except BufferError:
                        warm.poll(0.05)
            warm.flush(60)
            cluster.execute(DDL)
            print(f"  broker on {broker.bootstrap} (warmed up with {args.warmup:,} messages); emulator + 2 pumps; "
                  f"work dir {work}", flush=True)
            loaded = load(cluster, rows, args.txn_rows, args.seed)
            to_ts = cluster.ts()
            wait_watermarks(pumps, cluster.cluster_id, to_ts, timeout=120)
            print(f"  load: {rows:,} row changes (I {loaded['I']:,}, U {loaded['U']:,}) in {loaded['txns']:,} "
                  f"transactions in {loaded['seconds']:.1f} s (not timed)", flush=True)

            topic = f"bench-sink-{random.getrandbits(32):08x}"
            options = DrainerConfig(registry=registry, pd_urls=cluster.tso_url, data_dir=str(work / "drainer"),
                                    upstream=UpstreamSection(status_url=cluster.status_url, dsn=cluster.mysql_dsn),
                                    spark=SparkSection(master="local[2]"))
            syncer: Any = options.syncer    # [syncer.to] is the chosen sink's section
            syncer.db_type = "kafka"
            syncer.to.kafka_addrs = broker.bootstrap
            syncer.to.topic_name = topic
            timers = Timers()
            profile = cProfile.Profile() if args.profile else None
            timers.install(profile)
            out = io.StringIO()
            la0 = _load_avg()
            try:
                report = run_drain_command(options, to_ts=to_ts, out=out)
            except BaseException:
                print(out.getvalue()[-5000:])
                raise
            finally:
                timers.remove()
            la1 = _load_avg()
            stages = report.stages
            t = timers.seconds
            messages = read_topic(broker.bootstrap, topic)
            dml, ddl = check_messages(messages, loaded, loaded["txns"])
            nbytes = sum(len(m) for m in messages)
            plain = plain_produce(broker.bootstrap, admin, f"bench-plain-{random.getrandbits(32):08x}", messages)

        sink_s = stages["sink"]
        own = t["write"] - t["ordered stream"]
        produce = own - t["to Python rows"] - t["encode"] - t["flush (acks)"]
        print(f"\n  drain (load average {la0} before, {la1} after): seconds per stage: "
              + "  ".join(f"{k} {v:.2f}" for k, v in stages.items()))
        print(f"  inside KafkaSink.write ({t['write']:.2f} s): ordered stream from Spark {t['ordered stream']:.2f} s, "
              f"to Python rows {t['to Python rows']:.2f} s, encode {t['encode']:.2f} s, produce + the rest "
              f"{produce:.2f} s, flush (acks) {t['flush (acks)']:.2f} s; save_checkpoint "
              f"{t['save_checkpoint']:.2f} s (after the sink stage)")
        print(f"  topic: {len(messages):,} messages ({dml:,} transactions, {ddl} DDL), {nbytes / 2**20:.1f} MiB, "
              f"{nbytes / max(len(messages), 1):.0f} B per message; checked: commit order, one message per "
              f"transaction, row changes per op")
        print(f"\nSUMMARY kafka ({rows:,} row changes in transactions of {args.txn_rows}, one table of 5 columns):")
        print(f"  sink stage (KafkaSink.write, incl. the Spark sort and fetch of the ordered stream): {sink_s:.2f} s "
              f"= {rows / sink_s:,.0f} row changes/s, {len(messages) / sink_s:,.0f} msg/s")
        print(f"  sink's own part (write less the ordered stream): {own:.2f} s = {rows / own:,.0f} row changes/s")
        print(f"  plain producer (idempotent, acks=all, same {len(messages):,} messages): {plain:.2f} s "
              f"= {rows / plain:,.0f} row changes/s, {len(messages) / plain:,.0f} msg/s")
        for what, secs in (("sink stage", sink_s), ("sink's own part", own)):
            ratio = plain / secs
            print(f"  ratio plain / {what} {ratio:.2f} (target >= {RATIO_TARGET}: "
                  f"{'met' if ratio >= RATIO_TARGET else 'MISSED'})")
        if profile is not None and args.profile is not None:
            profile.dump_stats(str(args.profile))
            buf = io.StringIO()
            pstats.Stats(profile, stream=buf).sort_stats("tottime").print_stats(20)
            print(f"\n  cProfile of KafkaSink.write (tottime, top 20; all in {args.profile}):")
            print(buf.getvalue())
        return 0
    finally:
        if args.keep:
            print(f"  kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
