"""The file sink's keys of drainer.toml: ``[syncer.to]`` ``dir`` and ``retention-time``."""
from __future__ import annotations

from pydantic import Field

from ingest.config import Bool, TomlModel
from sink.syncer_to import ToSection

SEGMENT_SIZE = 512 * 1024 * 1024    # TiDB Binlog's binlogger: a new file past 512 MiB


class FileSettings(TomlModel):
    """The file sink's part of ``[syncer]``: ``[syncer.to]`` and ``sync-ddl`` (false: no DDL record)."""

    sync_ddl: Bool = Field(default=True, alias="sync-ddl")
    to: ToSection = Field(default_factory=ToSection)
