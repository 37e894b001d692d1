"""The Kafka sink's keys of drainer.toml: ``[syncer.to]``'s kafka keys (:mod:`sink.syncer_to`), read
with TiDB Binlog's defaults for what is unset."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ingest.config import ConfigError
from sink.syncer_to import SyncerKeys, ToSection

DEFAULT_ADDRS = "127.0.0.1:9092"            # TiDB Binlog's, after the environment's KAFKA_ADDRS
DEFAULT_MAX_MESSAGES = 1024
DEFAULT_MAX_MESSAGE_SIZE = 1 << 30
CLIENT_MAX_MESSAGE_SIZE = 1_000_000_000     # librdkafka's ceiling of message.max.bytes


class KafkaSettings(SyncerKeys):
    """The Kafka sink's part of ``[syncer]``: :class:`~sink.syncer_to.SyncerKeys` (the kafka keys of
    ``[syncer.to]``; ``sync-ddl`` false: no DDL message)."""


@dataclass(frozen=True)
class KafkaOptions:
    """``[syncer.to]`` resolved for one cluster: the brokers, the topic, the client's settings."""

    addrs: str
    topic: str
    max_messages: int
    max_message_size: int
    client_id: str

    @classmethod
    def of(cls, to: ToSection, cluster_id: int) -> KafkaOptions:
        """TiDB Binlog's reading of the keys: ``kafka-addrs`` (else $KAFKA_ADDRS, else 127.0.0.1:9092),
        ``topic-name`` (else ``<cluster-id>_obinlog``), ``kafka-max-messages`` (1024),
        ``kafka-max-message-size`` (1 GiB), ``kafka-client-id``. ``zookeeper-addrs`` is refused;
        ``kafka-version`` is noted as not used (:class:`~sink.syncer_to.ToSection`)."""
        if to.zookeeper_addrs:
            raise ConfigError("[syncer.to] zookeeper-addrs: binlake does not look the brokers up in ZooKeeper "
                              "(Kafka 4 has none, and TiDB Binlog only reads kafka-addrs from it); set kafka-addrs")
        size = to.kafka_max_message_size if to.kafka_max_message_size > 0 else DEFAULT_MAX_MESSAGE_SIZE
        return cls(addrs=to.kafka_addrs or os.environ.get("KAFKA_ADDRS", "") or DEFAULT_ADDRS,
                   topic=to.topic_name or f"{cluster_id}_obinlog",
                   max_messages=to.kafka_max_messages if to.kafka_max_messages > 0 else DEFAULT_MAX_MESSAGES,
                   max_message_size=min(size, CLIENT_MAX_MESSAGE_SIZE),
                   client_id=to.kafka_client_id or "binlake-drainer")
