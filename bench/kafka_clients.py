"""Python Kafka clients producing to a real broker: Apache Kafka in KRaft mode on 127.0.0.1
(``tests.servers.KafkaServer``, the jars ``make kafka`` downloads), the candidates for the Kafka sink.

Each client that is importable writes the same ``--messages`` values of ``--size`` bytes (random, so
incompressible; no key) to partition 0 of a topic of its own, twice: a plain producer with acks=all
(the baseline), then a transactional one (``transactional.id``: begin, ``--txn-size`` messages,
commit). Every other setting is the library's default. A run counts from creating the producer to
the last commit (or flush), after a warm-up that is not counted (the broker's JIT, its transaction
state topic), and is checked: the partition's end offset moved by the messages plus one commit
marker per transaction. ``CPU`` is the benchmark process's CPU time (the client's threads included).

    .venv/bin/python bench/kafka_clients.py                       # 200,000 x 300 B, transactions of 1,000
    .venv/bin/python bench/kafka_clients.py --messages 20000 --clients confluent-kafka

binlake pins confluent-kafka only; to compare the others, run this with a Python that has them too.
Baseline: each client's plain produce. Ratio: its transactional msgs/s over that baseline.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.servers import KafkaServer, kafka_classpath

# produce(bootstrap, topic, messages, txn_size, transactional_id): txn_size 0 is the plain producer
Produce = Callable[[str, str, list[bytes], int, str], None]


def confluent_produce(bootstrap: str, topic: str, messages: list[bytes], txn_size: int, txn_id: str) -> None:
    """confluent-kafka (librdkafka): ``produce`` into the local queue, ``poll`` when it is full."""
    from confluent_kafka import Producer

    conf: dict[str, str | int] = {"bootstrap.servers": bootstrap, "acks": "all"}
    if txn_size:
        conf["transactional.id"] = txn_id
    producer = Producer(conf)
    if txn_size:
        producer.init_transactions(30)
    step = txn_size or len(messages)
    for start in range(0, len(messages), step):
        if txn_size:
            producer.begin_transaction()
        for value in messages[start:start + step]:
            while True:
                try:
                    producer.produce(topic, value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
        if txn_size:
            producer.commit_transaction(30)
    if producer.flush(30):
        raise RuntimeError("confluent-kafka: messages left unsent after flush")


def kafka_python_produce(bootstrap: str, topic: str, messages: list[bytes], txn_size: int, txn_id: str) -> None:
    """kafka-python (pure Python, a sender thread); kafka-python-ng installs the same ``kafka`` package."""
    from kafka import KafkaProducer

    if txn_size and not hasattr(KafkaProducer, "init_transactions"):
        raise NotImplementedError("no transactional producer")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                             **({"transactional_id": txn_id} if txn_size else {}))
    try:
        if txn_size:
            producer.init_transactions()
        step = txn_size or len(messages)
        for start in range(0, len(messages), step):
            if txn_size:
                producer.begin_transaction()
            for value in messages[start:start + step]:
                producer.send(topic, value, partition=0)
            if txn_size:
                producer.commit_transaction()
        producer.flush(30)
    finally:
        producer.close(30)


def aiokafka_produce(bootstrap: str, topic: str, messages: list[bytes], txn_size: int, txn_id: str) -> None:
    """aiokafka (asyncio) on a fresh event loop: ``send`` enqueues, ``commit_transaction``/``flush`` wait."""
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                    **({"transactional_id": txn_id} if txn_size else {}))
        await producer.start()
        try:
            step = txn_size or len(messages)
            for start in range(0, len(messages), step):
                if txn_size:
                    await producer.begin_transaction()
                for value in messages[start:start + step]:
                    await producer.send(topic, value, partition=0)
                if txn_size:
                    await producer.commit_transaction()
            await producer.flush()
        finally:
            await producer.stop()

    asyncio.run(run())


CLIENTS: dict[str, tuple[str, str, Produce]] = {   # name → (import name, distributions, produce)
    "confluent-kafka": ("confluent_kafka", "confluent-kafka", confluent_produce),
    "kafka-python": ("kafka", "kafka-python kafka-python-ng", kafka_python_produce),
    "aiokafka": ("aiokafka", "aiokafka", aiokafka_produce),
}


@dataclass
class Run:
    """One timed produce: wall-clock seconds and the process's CPU seconds."""
    seconds: float
    cpu: float


def installed(name: str) -> str | None:
    """The installed distribution and version of client ``name``, or None when it does not import."""
    module, dists, _ = CLIENTS[name]
    try:
        importlib.import_module(module)
    except ImportError:
        return None
    for dist in dists.split():
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return module


def end_offset(bootstrap: str, topic: str) -> int:
    """The high watermark of partition 0 of ``topic``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-kafka-clients", "log_level": 0})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def measure(server: KafkaServer, admin: AdminClient, name: str, messages: list[bytes], txn_size: int) -> Run:
    """One produce of ``messages`` by client ``name`` into a new topic, checked by its end offset."""
    topic = f"bench-{name}-{'txn' if txn_size else 'plain'}-{random.getrandbits(32):08x}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    produce = CLIENTS[name][2]
    wall, cpu = time.perf_counter(), time.process_time()
    produce(server.bootstrap, topic, messages, txn_size, f"{topic}-txn")
    run = Run(time.perf_counter() - wall, time.process_time() - cpu)
    markers = -(-len(messages) // txn_size) if txn_size else 0
    got, want = end_offset(server.bootstrap, topic), len(messages) + markers
    if got != want:
        raise RuntimeError(f"{name}: end offset {got} after the run, expected {want}")
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=300, help="bytes per message")
    ap.add_argument("--txn-size", type=int, default=1000, help="messages per transaction")
    ap.add_argument("--clients", default=",".join(CLIENTS), help=f"comma-separated, of: {', '.join(CLIENTS)}")
    args = ap.parse_args()
    names = [n.strip() for n in args.clients.split(",") if n.strip()]
    unknown = [n for n in names if n not in CLIENTS]
    if unknown or args.messages < 1 or args.size < 1 or args.txn_size < 1:
        ap.error(f"unknown clients {unknown}" if unknown else "--messages, --size and --txn-size must be >= 1")
    classpath = kafka_classpath()
    if classpath is None:
        sys.exit("the Kafka broker's jars are not in .peers/kafka: run `make kafka`")
    data = random.Random(7).randbytes(args.messages * args.size)
    messages = [data[i * args.size:(i + 1) * args.size] for i in range(args.messages)]
    print(f"{args.messages:,} messages x {args.size} B to one partition; transactions of {args.txn_size:,}; "
          f"Python {sys.version.split()[0]}")
    print(f"{'client':<28}{'plain msg/s':>12}{'CPU s':>8}{'txn msg/s':>12}{'CPU s':>8}{'ratio':>8}")
    with KafkaServer(classpath) as server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap, "log_level": 0})
        # warm-up, not counted: the broker's JIT, and the transaction state topic its first transaction creates
        for txn_size in (0, args.txn_size):
            measure(server, admin, "confluent-kafka", messages[:20_000], txn_size)
        for name in names:
            version = installed(name)
            if version is None:
                print(f"{name:<28}not installed")
                continue
            plain = measure(server, admin, name, messages, 0)
            line = f"{version:<28}{args.messages / plain.seconds:>12,.0f}{plain.cpu:>8.1f}"
            try:
                txn = measure(server, admin, name, messages, args.txn_size)
            except NotImplementedError as e:
                print(f"{line}  {e}")
                continue
            print(f"{line}{args.messages / txn.seconds:>12,.0f}{txn.cpu:>8.1f}"
                  f"{plain.seconds / txn.seconds:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
