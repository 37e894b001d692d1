"""The Parquet CDC sink as the commands see it: ``--sink parquet`` (TiDB Binlog's ``pb`` too) and ``[parquet]``."""
from __future__ import annotations

from pydantic import Field

from ingest.config import Str, TomlModel
from sink.base import Sink
from sink.plugin import Capabilities, Flag, SinkContext, SinkSpec


class ParquetSettings(TomlModel):
    """``[parquet]``: the root directory of the Parquet CDC files."""

    dir: Str = Field(default="cdc")


class ParquetSpec(SinkSpec[ParquetSettings]):
    """Changelog rows as Parquet files per table and day, a manifest per table, a checkpoint file."""

    names = ("parquet",)
    section = "parquet"
    config = ParquetSettings
    capabilities = Capabilities()
    flags = (Flag("--parquet-dir", "parquet.dir", "root directory of the Parquet sink"),)

    def open(self, ctx: SinkContext[ParquetSettings]) -> Sink:
        from sink.parquet.files import ParquetSink

        sink = ParquetSink(ctx.settings.dir)
        if ctx.cluster_id is not None:
            sink.check_cluster(ctx.cluster_id)
        return sink


SPEC = ParquetSpec()
