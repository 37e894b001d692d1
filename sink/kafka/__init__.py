"""The Kafka sink: TiDB Binlog's Kafka output, one secondary binlog per transaction, exactly once."""
