"""The MySQL sink's keys of drainer.toml: ``[syncer]`` loader settings, ``[syncer.to]``
(:mod:`sink.syncer_to`: the downstream and its checkpoint table) and ``[syncer.relay]``, with TiDB
Binlog's names and defaults."""
from __future__ import annotations

from pydantic import Field

from ingest.config import Bool, ByteSize, Int, Str, TomlModel
from sink.syncer_to import SyncerKeys

DEFAULT_MAX_FILE_SIZE = 10 * 1024 * 1024   # TiDB Binlog's relay log file size


class RelaySection(TomlModel):
    """``[syncer.relay]``: the MySQL sink's relay log (off while ``log-dir`` is empty)."""

    log_dir: Str = Field(default="", alias="log-dir")
    max_file_size: ByteSize = Field(default=DEFAULT_MAX_FILE_SIZE, alias="max-file-size", gt=0)


class MySQLSettings(SyncerKeys):
    """The MySQL sink's keys of ``[syncer]`` (beside the generic db-type and table filters, and
    :class:`~sink.syncer_to.SyncerKeys`)."""

    txn_batch: Int = Field(default=20, alias="txn-batch", ge=1)
    worker_count: Int = Field(default=16, alias="worker-count", ge=1)
    safe_mode: Bool = Field(default=False, alias="safe-mode")
    # TiDB Binlog's: the upstream's sql_mode, set on every downstream session (unless [syncer.to.params] has one)
    sql_mode: Str = Field(default="", alias="sql-mode")
    relay: RelaySection = Field(default_factory=RelaySection)
