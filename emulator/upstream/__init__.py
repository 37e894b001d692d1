"""The TiDB stand-in: PD-compatible TSO, TiDB-compatible status API, SQL with TiDB row encoding."""
