"""The Kafka broker the Kafka sink is tested against (``kafka_server``: Apache Kafka in KRaft mode, the jars
``make kafka`` downloads) with binlake's client, confluent-kafka: transactions commit and abort for real
(a read_committed consumer sees the committed messages only, while the aborted ones are in the log),
and the broker keeps them across a ``stop()``/``start()``."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.servers import KafkaServer

pytestmark = pytest.mark.integration

END = b"end"   # the last message of every test topic, committed alone: the consumers read up to it


def new_topic(server: KafkaServer) -> str:
    """A new topic of one partition."""
    topic = f"smoke-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    return topic


def transactional_producer(server: KafkaServer, topic: str) -> Producer:
    """A producer with a transactional id of its own, its transactions initialised."""
    producer = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": f"{topic}-producer"})
    producer.init_transactions(30)
    return producer


def transaction(producer: Producer, topic: str, values: list[bytes], commit: bool) -> None:
    """Produce ``values`` to partition 0 in one transaction, then commit or abort it."""
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)   # the aborted messages reach the log first: a consumer could see them
        producer.abort_transaction(30)


def read_to_end(server: KafkaServer, topic: str, isolation: str) -> list[bytes]:
    """The values of partition 0 from its beginning up to ``END`` (excluded) at ``isolation``."""
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"{topic}-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            value = msg.value()
            assert value is not None
            if value == END:
                return values
            values.append(value)
    finally:
        consumer.close()
    raise AssertionError(f"{END!r} not read from {topic} at {isolation} within 60 s; read {values}")


def test_read_committed_sees_committed_transactions_only(kafka_server: KafkaServer) -> None:
    topic = new_topic(kafka_server)
    producer = transactional_producer(kafka_server, topic)
    transaction(producer, topic, [b"a1", b"a2", b"a3"], commit=True)
    transaction(producer, topic, [b"b1", b"b2"], commit=False)
    transaction(producer, topic, [b"c1"], commit=True)
    transaction(producer, topic, [END], commit=True)

    assert read_to_end(kafka_server, topic, "read_committed") == [b"a1", b"a2", b"a3", b"c1"]
    # the aborted messages were written: read_committed above left them out
    assert read_to_end(kafka_server, topic, "read_uncommitted") == [b"a1", b"a2", b"a3", b"b1", b"b2", b"c1"]


def test_a_restarted_broker_keeps_its_messages_and_takes_new_transactions(kafka_server: KafkaServer) -> None:
    topic = new_topic(kafka_server)
    transaction(transactional_producer(kafka_server, topic), topic, [b"before"], commit=True)
    bootstrap = kafka_server.bootstrap

    kafka_server.stop()
    kafka_server.start()

    assert kafka_server.bootstrap == bootstrap
    producer = transactional_producer(kafka_server, topic)
    transaction(producer, topic, [b"lost"], commit=False)
    transaction(producer, topic, [b"after"], commit=True)
    transaction(producer, topic, [END], commit=True)
    assert read_to_end(kafka_server, topic, "read_committed") == [b"before", b"after"]
