"""The Iceberg sink: a changelog table and a current-state mirror per upstream table
(docs/architecture.md, Iceberg output)."""
