"""The Iceberg sink: a changelog table and a current-state mirror per upstream table (DESIGN §3.6)."""
