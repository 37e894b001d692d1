"""Sinks: where a Drainer run's row changes go (Iceberg tables, Parquet CDC files, MySQL/TiDB, Kafka,
TiDB Binlog's protobuf files), each a plugin registered in ``registry``, and what reads and keeps
their stores: ``lake`` (maintain, check, restore's source), ``restore`` (restore targets), ``verify_report``."""
