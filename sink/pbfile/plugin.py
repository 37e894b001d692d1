"""The file sink as the commands see it: ``--sink file`` / ``db-type = "file"`` (TiDB's alias ``pb``),
``[syncer.to] dir`` and ``retention-time``."""
from __future__ import annotations

from pathlib import Path

from ingest.config import ConfigError
from sink.base import CheckpointOnly, Sink
from sink.pbfile.config import FileSettings
from sink.plugin import Capabilities, Flag, SinkContext, SinkSpec


class FileSpec(SinkSpec[FileSettings]):
    """TiDB Binlog's file downstream: protobuf files reparo replays, in commit order, exactly once."""

    names = ("file", "pb")
    section = "syncer"
    config = FileSettings
    capabilities = Capabilities(per_transaction=True, table_subsets=False, replays_ddl=True)
    flags = (Flag("--pb-dir", "syncer.to.dir", "file sink: the directory of protobuf files (default: data-dir)",
                  metavar="DIR"),)

    def open(self, ctx: SinkContext[FileSettings]) -> Sink:
        from sink.pbfile.sink import FileSink

        if ctx.cluster_id is None:
            raise ConfigError("the file sink needs the cluster id (--pd-urls or --cluster-id): its files are one "
                              "cluster's")
        directory = Path(ctx.settings.to.dir or ctx.data_dir or ".")
        sink = FileSink(directory, ctx.cluster_id, ctx.settings.to.retention_time, table_filter=ctx.table_filter,
                        event_filter=ctx.event_filter, sync_ddl=ctx.settings.sync_ddl,
                        dry_run=ctx.dry_run)
        return CheckpointOnly(sink.checkpoint()) if ctx.dry_run else sink


SPEC = FileSpec()
