"""Sinks: where a Drainer run's row changes go (Iceberg tables, Parquet CDC files, MySQL)."""
