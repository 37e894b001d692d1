"""The protobuf-file sink: TiDB Binlog's db-type ``file`` (alias ``pb``), the files reparo replays."""
