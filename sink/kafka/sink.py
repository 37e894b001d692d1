"""TiDB Binlog's Kafka output, exactly once.

Every upstream transaction in the run becomes one message on partition 0 of the topic, in commit order,
key nil, its value one secondary binlog (:mod:`sink.secondary`) as TiDB Binlog's drainer writes it; a DDL
is its own message carrying the query TiDB ran. TiDB's consumers (``tidb-binlog/driver/reader``,
TiDB Binlog's arbiter) read them unchanged.

Where TiDB Binlog delivers at least once (its checkpoint lags what the broker acknowledged, so a
crash repeats messages), binlake's checkpoint is the topic itself: the commit ts of the last message
on partition 0. The producer is idempotent (``enable.idempotence``: in order, no duplicate, no gap), so
whatever a run killed at any point left in the topic is a prefix of what it sent, and the next run
continues after the last message there: each transaction is in the topic once, for every consumer.
binlake writes no Kafka transaction on purpose: a transaction's commit marker would be the topic's
last offset, and TiDB's reader, seeking a commit ts, waits for a message at that offset (arbiter's
restart hangs). For ranges without a message, the consumer group ``binlake-<cluster-id>-<topic>`` keeps
the ts a run completed in its committed offset's metadata, written after every message of the run is
acknowledged. A run's messages must land at consecutive offsets from the topic's end: another producer
writing to the topic meanwhile stops the run.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as _NewTopic
from google.protobuf.message import DecodeError

from schemas import secondary_binlog_pb2 as sb
from sink.base import Sink, TableReport
from sink.errors import SinkError
from sink.kafka.config import KafkaOptions
from sink.per_txn import DDLFilters, floor_of, transactions
from sink.secondary import dml_bytes, encode_ddl
from transform import changes as ch
from transform import failpoints
from transform.event_filter import EventFilter
from transform.filters import TableFilter

log = logging.getLogger(__name__)

FORMAT = 1                      # of the checkpoint's metadata
ACK_TIMEOUT = 30.0              # seconds the brokers may take to acknowledge (TiDB Binlog waits 30 s too)
REQUEST_TIMEOUT = 30.0          # seconds for the checkpoint and the topic's end


_LOADING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            KafkaError.COORDINATOR_NOT_AVAILABLE)   # a group coordinator still starting


class KafkaSinkError(SinkError):
    """The brokers could not be reached, or refused or did not acknowledge what a run wrote; the next run
    continues after the topic's last message (transient: a follower retries)."""

    transient = True


class KafkaStateError(SinkError):
    """What the brokers hold cannot be this sink's: a checkpoint of another cluster or not binlake's, a
    transaction larger than a message may be."""


def _fail(what: str, options: KafkaOptions, e: BaseException) -> KafkaSinkError:
    err = e.args[0] if isinstance(e, KafkaException) and e.args else e
    return KafkaSinkError(f"{what} (brokers {options.addrs}, topic {options.topic}): {err}")


class KafkaSink(Sink):
    """One cluster's transactions into ``options.topic`` (see the module doc)."""

    def __init__(self, options: KafkaOptions, cluster_id: int, table_filter: TableFilter | None = None,
                 event_filter: EventFilter | None = None, sync_ddl: bool = True) -> None:
        self.options = options
        self.cluster_id = cluster_id
        self.filters = DDLFilters(table_filter or TableFilter(), event_filter or EventFilter(), sync_ddl)
        self.group = f"binlake-{cluster_id}-{options.topic}"
        self.producer: Producer | None = None
        self.end = 0                         # the topic's end offset: where the next message lands
        self.loaded = self._read_checkpoint()

    # ------------------------------------------------------------------ checkpoint

    def _client(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.options.addrs, "client.id": self.options.client_id}

    def _consumer(self) -> Consumer:
        return Consumer({**self._client(), "group.id": self.group, "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted"})

    def _read_checkpoint(self) -> int | None:
        """The later of the commit ts of the topic's last message and the one the group recorded (None:
        neither); sets :attr:`end`."""
        found = [ts for ts in (self._tail_ts(), self._group_ts()) if ts is not None]
        return max(found) if found else None

    def _with_coordinator(self, what: str, call: Callable[[float], Any]) -> Any:
        """``call(timeout)``, retried while a new broker's group coordinator is still loading."""
        deadline = time.monotonic() + REQUEST_TIMEOUT
        while True:
            try:
                return call(max(1.0, deadline - time.monotonic()))
            except KafkaException as e:
                err = e.args[0] if e.args else None
                if not (isinstance(err, KafkaError) and (err.retriable() or err.code() in _LOADING)) \
                        or time.monotonic() > deadline:
                    raise _fail(what, self.options, e) from None
                time.sleep(0.5)

    def _group_ts(self) -> int | None:
        consumer = self._consumer()

        def committed(timeout: float) -> TopicPartition:
            [tp] = consumer.committed([TopicPartition(self.options.topic, 0)], timeout=timeout)
            if tp.error is not None:
                raise KafkaException(tp.error)
            return tp

        try:
            tp = self._with_coordinator(f"cannot read the checkpoint of consumer group {self.group}", committed)
        finally:
            consumer.close()
        if tp.offset < 0:
            return None
        try:
            doc = json.loads(tp.metadata or "")
            ts, cluster = int(doc["commit_ts"]), int(doc["cluster_id"])
        except (ValueError, KeyError, TypeError):
            raise KafkaStateError(f"consumer group {self.group} has offset {tp.offset} on {self.options.topic} "
                                  f"but no binlake checkpoint in its metadata ({tp.metadata!r})") from None
        if cluster != self.cluster_id:
            raise KafkaStateError(f"consumer group {self.group} holds the checkpoint of cluster {cluster}, "
                                  f"not {self.cluster_id}")
        return ts

    def _tail_ts(self) -> int | None:
        """The commit ts of the last message on partition 0 (None: no message, or no topic yet); sets
        :attr:`end`. Reads back from the end, further each time only markers are found."""
        consumer = self._consumer()
        part = TopicPartition(self.options.topic, 0)
        try:
            try:
                low, high = consumer.get_watermark_offsets(part, timeout=REQUEST_TIMEOUT)
            except KafkaException as e:
                if e.args and isinstance(e.args[0], KafkaError) and \
                        e.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                    self.end = 0
                    return None
                raise _fail("cannot read the topic's end", self.options, e) from None
            self.end = high
            window = 1
            while high > low:
                start = max(low, high - window)
                last = self._last_message(consumer, start, high)
                if last is not None:
                    try:
                        return int(sb.Binlog.FromString(last).commit_ts)
                    except DecodeError:
                        raise KafkaStateError(f"the last message of {self.options.topic} (before offset {high}) "
                                              f"is not a TiDB Binlog message: the topic is not binlake's") from None
                if start == low:
                    return None
                window *= 16
            return None
        finally:
            consumer.close()

    def _last_message(self, consumer: Consumer, start: int, end: int) -> bytes | None:
        """The value of the last message at offsets [start, end) (None: only markers there)."""
        consumer.assign([TopicPartition(self.options.topic, 0, start)])
        last: bytes | None = None
        position = start
        deadline = time.monotonic() + REQUEST_TIMEOUT
        while position < end:
            if time.monotonic() > deadline:
                raise KafkaSinkError(f"cannot read offsets {start}..{end} of {self.options.topic} within "
                                     f"{REQUEST_TIMEOUT:.0f} s (brokers {self.options.addrs})")
            msg = consumer.poll(0.2)
            if msg is None:
                [tp] = consumer.position([TopicPartition(self.options.topic, 0)])
                position = max(position, tp.offset)
                continue
            if msg.error() is not None:
                raise _fail("cannot read the topic's end", self.options, KafkaException(msg.error()))
            last, position = msg.value(), (msg.offset() or 0) + 1
        return last

    def checkpoint(self) -> int | None:
        return self.loaded

    # ------------------------------------------------------------------ writing

    def _open_producer(self) -> Producer:
        """The run's idempotent producer, the topic created when missing."""
        self._ensure_topic()
        self.producer = Producer({
            **self._client(), "enable.idempotence": True, "acks": "all",
            "batch.num.messages": self.options.max_messages, "message.max.bytes": self.options.max_message_size,
            "message.timeout.ms": int(ACK_TIMEOUT * 1000), "linger.ms": 5, "queue.buffering.max.kbytes": 262_144})
        return self.producer

    def _ensure_topic(self) -> None:
        """Create the topic with one partition when it is missing (TiDB Binlog leaves that to the
        broker's auto-creation)."""
        admin = AdminClient(self._client())
        try:
            if self.options.topic in admin.list_topics(timeout=REQUEST_TIMEOUT).topics:
                return
            admin.create_topics([_NewTopic(self.options.topic, 1)])[self.options.topic].result(REQUEST_TIMEOUT)
        except KafkaException as e:
            if e.args and isinstance(e.args[0], KafkaError) and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            raise _fail("cannot create the topic", self.options, e) from None

    def write(self, run: ch.RunBatch) -> list[TableReport]:
        """Produce every transaction and DDL of ``run`` after the checkpoint, in commit order; returns once
        the brokers acknowledged every message."""
        floor = floor_of(run, self.loaded, "the topic")
        if floor is None:
            return []
        producer = self._open_producer()
        reports: dict[str, TableReport] = {}
        failed: list[tuple[int, str, KafkaError | None]] = []
        expected = [self.end]                # where the next acknowledged message must be

        def acked(err: KafkaError | None, msg: Message) -> None:
            if failed:
                return
            if err is not None:
                failed.append((sb.Binlog.FromString(msg.value() or b"").commit_ts, "", err))
            elif msg.offset() != expected[0]:
                failed.append((sb.Binlog.FromString(msg.value() or b"").commit_ts,
                               f"it landed at offset {msg.offset()}, not {expected[0]}: another producer writes "
                               f"to {self.options.topic} (one drainer per topic)", None))
            else:
                expected[0] += 1

        produced = 0
        last = floor
        try:
            for txn in transactions(run, floor, self.filters, reports):
                began = time.perf_counter()
                data = (dml_bytes(txn.commit_ts, txn.pieces) if txn.pieces is not None else
                        encode_ddl(txn.commit_ts, *txn.ddl).SerializeToString() if txn.ddl else None)
                if data is not None:
                    produced += 1
                    failpoints.inject("kafka-produce", produced)
                    self._produce(producer, data, txn.commit_ts, acked)
                    if produced % 1000 == 0:
                        producer.poll(0)          # delivery reports: a failure stops the run early
                    if failed:
                        break
                    last = txn.commit_ts
                self.observer.executed(time.perf_counter() - began)
            self._settle(producer, failed)
        except BaseException:
            self._drop()
            raise
        self.end = expected[0]
        self.loaded = max(self.loaded or 0, last) if produced else self.loaded
        failpoints.inject("kafka-acked", 1)
        return [reports[k] for k in sorted(reports)]

    def _produce(self, producer: Producer, data: bytes, commit_ts: int,
                 acked: Callable[[KafkaError | None, Message], None]) -> None:
        if len(data) > self.options.max_message_size:
            producer.flush(ACK_TIMEOUT)   # the transactions before it are sent: the topic stops right before it
            raise KafkaStateError(f"the transaction committed at {commit_ts} is a message of {len(data)} bytes, over "
                                  f"kafka-max-message-size ({self.options.max_message_size}); TiDB Binlog's "
                                  f"consumers cannot read a transaction split over messages, so raise the limit "
                                  f"(and the topic's max.message.bytes) or split the transaction upstream")
        while True:
            try:
                producer.produce(self.options.topic, data, partition=0, on_delivery=acked)
                return
            except BufferError:
                producer.poll(0.05)   # the client's queue is full: let deliveries drain it

    def _settle(self, producer: Producer, failed: list[tuple[int, str, KafkaError | None]]) -> None:
        """Wait until every message produced is acknowledged; raise the first failure."""
        left = producer.flush(ACK_TIMEOUT + 5)
        timed_out = bool(failed) and failed[0][2] is not None and failed[0][2].code() == KafkaError._MSG_TIMED_OUT
        if failed and not timed_out:
            ts, why, err = failed[0]
            if err is not None:
                why = err.str() + (" (raise the topic's max.message.bytes)"
                                   if err.code() == KafkaError.MSG_SIZE_TOO_LARGE else "")
            raise KafkaSinkError(f"the brokers did not take the transaction committed at {ts}: {why}; the topic is "
                                 f"complete up to the message before it and the next run continues from there "
                                 f"(brokers {self.options.addrs}, topic {self.options.topic})")
        if left or timed_out:
            raise KafkaSinkError(f"messages not acknowledged within {ACK_TIMEOUT:.0f} s by the brokers at "
                                 f"{self.options.addrs}: is Kafka up? The next run continues after the last message "
                                 f"the topic {self.options.topic} holds")

    def _drop(self) -> None:
        """Forget what the producer has not sent (a failed run: the next one continues from the topic)."""
        if self.producer is not None:
            self.producer.purge()
            self.producer.flush(0)
            self.producer = None

    def save_checkpoint(self, run: ch.RunBatch) -> None:
        """Record ``run.to_ts`` in the consumer group (the run's messages are acknowledged)."""
        meta = json.dumps({"commit_ts": run.to_ts, "cluster_id": self.cluster_id, "format": FORMAT})
        consumer = self._consumer()
        offsets = [TopicPartition(self.options.topic, 0, self.end, metadata=meta)]
        try:
            self._with_coordinator(f"cannot record the checkpoint in consumer group {self.group}",
                                   lambda _: consumer.commit(offsets=offsets, asynchronous=False))
        finally:
            consumer.close()
        self.loaded = run.to_ts
        failpoints.inject("kafka-checkpoint", 1)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(5)
            self.producer = None
