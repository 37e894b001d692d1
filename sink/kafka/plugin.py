"""The Kafka sink as the commands see it: ``--sink kafka`` / ``db-type = "kafka"``, the kafka keys of
``[syncer.to]`` (:mod:`sink.kafka.config`)."""
from __future__ import annotations

from ingest.config import ConfigError
from sink.base import CheckpointOnly, Sink
from sink.kafka.config import KafkaOptions, KafkaSettings
from sink.plugin import Capabilities, Flag, SinkContext, SinkSpec


class KafkaSpec(SinkSpec[KafkaSettings]):
    """TiDB Binlog's kafka downstream: one message per transaction in commit order, exactly once."""

    names = ("kafka",)
    section = "syncer"
    config = KafkaSettings
    capabilities = Capabilities(per_transaction=True, table_subsets=False, replays_ddl=True)
    flags = (
        Flag("--kafka-addrs", "syncer.to.kafka-addrs", "Kafka sink: the brokers (host:port,…)", metavar="ADDRS"),
        Flag("--topic-name", "syncer.to.topic-name", "Kafka sink: the topic (default <cluster-id>_obinlog)"),
    )

    def open(self, ctx: SinkContext[KafkaSettings]) -> Sink:
        try:
            from sink.kafka.sink import KafkaSink
        except ModuleNotFoundError as e:
            raise ConfigError(f"db-type kafka needs confluent-kafka ({e}): pip install 'binlake[kafka]'") from None

        if ctx.cluster_id is None:
            raise ConfigError("the Kafka sink needs the cluster id (--pd-urls or --cluster-id): it names the topic "
                              "and the checkpoint")
        sink = KafkaSink(KafkaOptions.of(ctx.settings.to, ctx.cluster_id), ctx.cluster_id,
                         table_filter=ctx.table_filter, event_filter=ctx.event_filter,
                         sync_ddl=ctx.settings.sync_ddl)
        return CheckpointOnly(sink.checkpoint()) if ctx.dry_run else sink


SPEC = KafkaSpec()
