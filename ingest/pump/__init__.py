"""The Pump daemon: durable binlog storage, serving TiDB's Pump API and binlake's range scans."""
