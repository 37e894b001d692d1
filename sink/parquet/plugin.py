"""The Parquet CDC sink as the commands see it: ``--sink parquet`` (TiDB Binlog's ``pb`` too) and ``[parquet]``."""
from __future__ import annotations

import re

from pydantic import Field, field_validator

from ingest.config import Str, TomlModel
from sink.base import Sink
from sink.plugin import Capabilities, Flag, SinkContext, SinkSpec

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class ParquetSettings(TomlModel):
    """``[parquet]``: the root directory of the Parquet CDC files, on a local or mounted filesystem."""

    dir: Str = Field(default="cdc")

    @field_validator("dir")
    @classmethod
    def _local(cls, value: str) -> str:
        """A path or ``file://`` URI; object storage is refused with what to use instead."""
        if value.startswith("file://"):
            return value[len("file://"):]
        if _URI.match(value):
            raise ValueError(
                f"{value!r} is not a filesystem path: the Parquet sink commits each run with an flock and "
                f"renames (its exactly-once protocol), which object storage does not offer; write to "
                f"object storage with the Iceberg sink ([iceberg] warehouse = \"s3://bucket/path\"), or give "
                f"the Parquet sink a filesystem that has both (a local disk, NFS)")
        return value


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
