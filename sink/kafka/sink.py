"""TiDB Binlog's Kafka output, exactly once.

Every upstream transaction in the run becomes one message on partition 0 of the topic, in commit order,
key nil, its value one secondary binlog (:mod:`sink.secondary`) as TiDB Binlog's drainer writes it; a DDL
is its own message carrying the query TiDB ran. TiDB's consumers (``tidb-binlog/driver/reader``,
TiDB Binlog's arbiter) read them unchanged.

Where TiDB Binlog delivers at least once (its checkpoint lags what the broker acknowledged, so a
crash repeats messages), binlake writes with Kafka's transactional producer: the messages of a batch
of transactions and the checkpoint are committed in one Kafka transaction. The checkpoint is the
committed offset of consumer group ``binlake-<cluster-id>-<topic>`` on partition 0, whose metadata
holds the commit ts the topic is complete up to. The transactional id is the same name: opening a run
fences every earlier producer of it (a run killed while producing: Kafka aborts its open transaction),
then the run reads the checkpoint again and resends what follows it. So a run killed at any point and
run again leaves each transaction in the topic once for a consumer reading with
``isolation.level = read_committed``; an aborted batch stays in the log, marked aborted, and a consumer
reading uncommitted messages (sarama's default, which TiDB's reader keeps) sees it.
"""
from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as _NewTopic

from schemas import secondary_binlog_pb2 as sb
from sink.base import Sink, TableReport
from sink.errors import SinkError
from sink.kafka.config import KafkaOptions
from sink.secondary import Table, encode_ddl, encode_dml, python_rows
from transform import changes as ch
from transform import failpoints
from transform.event_filter import EventFilter, ddl_event
from transform.filters import TableFilter
from transform.ordered import PerBundle, ordered_transactions

log = logging.getLogger(__name__)

FORMAT = 1                      # of the checkpoint's metadata
TXN_BYTES = 64 << 20            # bytes per Kafka transaction
ACK_TIMEOUT = 30.0              # seconds the brokers may take to acknowledge (TiDB Binlog waits 30 s too)
REQUEST_TIMEOUT = 30.0          # seconds for the checkpoint, the topic and a transaction's commit


_LOADING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            KafkaError.COORDINATOR_NOT_AVAILABLE)   # a group coordinator still starting


class KafkaSinkError(SinkError):
    """The brokers could not be reached, or refused or did not acknowledge what a run wrote; nothing
    past the checkpoint counts, and the next run resends it (transient: a follower retries)."""

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
        self.table_filter = table_filter or TableFilter()
        self.event_filter = event_filter or EventFilter()
        self.sync_ddl = sync_ddl
        self.group = f"binlake-{cluster_id}-{options.topic}"
        self.producer: Producer | None = None
        self.commits = 0                     # Kafka transactions this run committed
        self.offset = 0                      # the next offset after what the checkpoint covers
        self.loaded = self._read_checkpoint()
        self._notes: list[str] = []

    # ------------------------------------------------------------------ checkpoint

    def _client(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.options.addrs, "client.id": self.options.client_id,
                "broker.version.fallback": self.options.version}

    def _read_checkpoint(self) -> int | None:
        """The commit ts the group's committed offset records (None: nothing committed yet); sets
        :attr:`offset`."""
        consumer = Consumer({**self._client(), "group.id": self.group, "enable.auto.commit": False,
                             "isolation.level": "read_committed"})
        deadline = time.monotonic() + REQUEST_TIMEOUT
        try:
            while True:    # a new broker's group coordinator answers NOT_COORDINATOR until it has loaded
                try:
                    [tp] = consumer.committed([TopicPartition(self.options.topic, 0)],
                                              timeout=max(1.0, deadline - time.monotonic()))
                    if tp.error is not None:
                        raise KafkaException(tp.error)
                    break
                except KafkaException as e:
                    err = e.args[0] if e.args else None
                    if not (isinstance(err, KafkaError) and (err.retriable() or err.code() in _LOADING)) \
                            or time.monotonic() > deadline:
                        raise _fail(f"cannot read the checkpoint of consumer group {self.group}",
                                    self.options, e) from None
                    time.sleep(0.5)
        finally:
            consumer.close()
        if tp.offset < 0:
            return None
        self.offset = tp.offset
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

    def checkpoint(self) -> int | None:
        return self.loaded

    def _commit(self, commit_ts: int) -> None:
        """Commit the open Kafka transaction with the checkpoint at ``commit_ts`` and begin the next."""
        assert self.producer is not None
        meta = json.dumps({"commit_ts": commit_ts, "cluster_id": self.cluster_id, "format": FORMAT})
        try:
            self.producer.send_offsets_to_transaction(
                [TopicPartition(self.options.topic, 0, self.offset, metadata=meta)],
                self._group_metadata, REQUEST_TIMEOUT)
            self.producer.commit_transaction(REQUEST_TIMEOUT)
        except KafkaException as e:
            raise _fail(f"cannot commit the transactions up to {commit_ts}", self.options, e) from None
        self.loaded = commit_ts
        self.producer.begin_transaction()

    # ------------------------------------------------------------------ writing

    def _open_producer(self) -> None:
        """The run's transactional producer, every earlier one of this group fenced; the checkpoint
        read again behind the fence (a run that was still producing may have moved it)."""
        self._ensure_topic()
        producer = Producer({
            **self._client(), "transactional.id": self.group, "enable.idempotence": True, "acks": "all",
            "batch.num.messages": self.options.max_messages,
            "message.max.bytes": self.options.max_message_size,
            "message.timeout.ms": int(ACK_TIMEOUT * 1000), "transaction.timeout.ms": 60_000,
            "linger.ms": 5, "queue.buffering.max.kbytes": 262_144})
        try:
            producer.init_transactions(REQUEST_TIMEOUT)
        except KafkaException as e:
            raise _fail(f"cannot open transactional producer {self.group}", self.options, e) from None
        before = self.loaded
        self.loaded = self._read_checkpoint()
        if self.loaded != before:
            raise KafkaSinkError(f"the checkpoint of {self.group} moved from {before} to {self.loaded} while this "
                                 f"run started: another run of this cluster and topic is writing")
        consumer = Consumer({**self._client(), "group.id": self.group, "enable.auto.commit": False})
        self._group_metadata = consumer.consumer_group_metadata()
        consumer.close()
        producer.begin_transaction()
        self.producer = producer

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
        """Produce every transaction and DDL of ``run`` after the checkpoint, in commit order, committing
        them with the checkpoint every ``kafka-txn-messages`` messages or ``TXN_BYTES`` bytes."""
        start = self.loaded
        if start is not None and run.from_ts > start:
            raise SinkError(f"the run ({run.from_ts}, {run.to_ts}] does not continue the topic's checkpoint "
                            f"{start}: transactions in ({start}, {run.from_ts}] would be missing")
        floor = start if start is not None else run.from_ts
        if run.to_ts <= floor:
            return []
        self._open_producer()
        assert self.producer is not None
        producer = self.producer
        targets = {(tid, s.schema_version): Table.of(s.db or tc.db, s.table)
                   for tid, tc in run.tables.items() for s in tc.segments}
        rows_of = PerBundle(lambda tid, v, rows: python_rows(targets[(tid, v)], rows))
        reports: dict[str, TableReport] = {}
        failed: list[tuple[int, KafkaError]] = []
        delivered = [self.offset]

        def acked(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                delivered[0] = max(delivered[0], (msg.offset() or 0) + 1)
            elif not failed:
                failed.append((sb.Binlog.FromString(msg.value() or b"").commit_ts, err))

        messages = size = produced = 0
        last = floor
        try:
            for txn in ordered_transactions(run):
                if txn.commit_ts <= floor:
                    continue
                began = time.perf_counter()
                if txn.ddl is not None:
                    binlog = self._ddl(txn.ddl, reports)
                else:
                    pieces = [(targets[(p.table_id, p.schema_version)], rows_of(p)) for p in txn.tables]
                    for target, rows in pieces:
                        counts = (reports.get(f"{target.db}.{target.name}")
                                  or reports.setdefault(f"{target.db}.{target.name}",
                                                        TableReport(table=f"{target.db}.{target.name}"))).rows
                        for op, n in Counter(r[0] for r in rows).items():
                            counts[op] = counts.get(op, 0) + n
                    binlog = encode_dml(txn.commit_ts, pieces)
                if binlog is not None:
                    data = binlog.SerializeToString()
                    produced += 1
                    failpoints.inject("kafka-produce", produced)
                    self._produce(producer, data, txn.commit_ts, acked)
                    messages, size = messages + 1, size + len(data)
                last = txn.commit_ts
                if messages >= self.options.txn_messages or size >= TXN_BYTES:
                    self._settle(producer, failed, delivered, last)
                    messages = size = 0
                self.observer.executed(time.perf_counter() - began)
            self._settle(producer, failed, delivered, last)
        except BaseException:
            self._abort()
            raise
        return [reports[k] for k in sorted(reports)]

    def _produce(self, producer: Producer, data: bytes, commit_ts: int,
                 acked: Callable[[KafkaError | None, Message], None]) -> None:
        if len(data) > self.options.max_message_size:
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

    def _settle(self, producer: Producer, failed: list[tuple[int, KafkaError]], delivered: list[int],
                last: int) -> None:
        """Wait for every message produced so far to be acknowledged, then commit them with the
        checkpoint at ``last``."""
        left = producer.flush(ACK_TIMEOUT + 5)
        if failed and failed[0][1].code() == KafkaError._MSG_TIMED_OUT:
            left = max(left, 1)
        elif failed:
            ts, err = failed[0]
            hint = (" (raise the topic's max.message.bytes)" if err.code() == KafkaError.MSG_SIZE_TOO_LARGE else "")
            raise KafkaSinkError(f"the brokers refused the transaction committed at {ts}: {err.str()}{hint}; "
                                 f"nothing after checkpoint {self.loaded} is committed and the next run resends it "
                                 f"(brokers {self.options.addrs}, topic {self.options.topic})")
        if left:
            raise KafkaSinkError(f"messages not acknowledged within {ACK_TIMEOUT:.0f} s by the brokers at "
                                 f"{self.options.addrs}: is Kafka up? Nothing after checkpoint {self.loaded} is "
                                 f"committed and the next run resends it")
        self.offset = delivered[0]
        if last != self.loaded:
            self.commits += 1
            failpoints.inject("kafka-before-commit", self.commits)
            self._commit(last)
            failpoints.inject("kafka-commit", self.commits)

    def _abort(self) -> None:
        if self.producer is None:
            return
        try:
            self.producer.abort_transaction(5)
        except KafkaException as e:
            log.warning("could not abort the Kafka transaction (the next run fences it): %s", e)
        self.producer = None

    def _ddl(self, ddl: ch.DDLJob, reports: dict[str, TableReport]) -> sb.Binlog | None:
        """The DDL's message (TiDB's query, under the names TiDB Binlog gives the job); None when the
        table filter or a binlog-filter-rule leaves it out, or ``sync-ddl`` is false."""
        job = ddl.job
        if not self.sync_ddl:
            log.info("DDL at %d not sent (sync-ddl = false): %s", ddl.commit_ts, job.query)
            return None
        db, table = ddl.names or (job.schema_name, job.table_name)
        allowed = self.table_filter.allows(db, table) if table else self.table_filter.allows_schema(db)
        rule = self.event_filter.rule_for(db, table, ddl_event(job.query), job.query) if self.event_filter else None
        if not allowed or rule is not None:
            log.info("DDL at %d left out (%s): %s", ddl.commit_ts, rule.label if rule else "table filter", job.query)
            return None
        name = f"{db}.{table}" if table else db
        reports.setdefault(name, TableReport(table=name)).ddl.append(job.query)
        return encode_ddl(ddl.commit_ts, db, table, job.query)

    def save_checkpoint(self, run: ch.RunBatch) -> None:
        """Commit the checkpoint at ``run.to_ts`` (no message: the rest of the range had none)."""
        if self.loaded is not None and self.loaded >= run.to_ts:
            return
        if self.producer is None:
            self._open_producer()
        try:
            self._commit(run.to_ts)
        except BaseException:
            self._abort()
            raise

    def notes(self) -> list[str]:
        return list(self._notes)

    def close(self) -> None:
        if self.producer is not None:
            self._abort()
