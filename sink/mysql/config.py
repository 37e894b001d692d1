"""The MySQL sink's keys of drainer.toml: ``[syncer]`` loader settings, ``[syncer.to]``
(:mod:`sink.syncer_to`: the downstream and its checkpoint table) and ``[syncer.relay]``, with TiDB
Binlog's names and defaults."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from ingest.config import Bool, ByteSize, Int, Str, TomlModel
from sink.syncer_to import ToSection

DEFAULT_MAX_FILE_SIZE = 10 * 1024 * 1024   # TiDB Binlog's relay log file size


def _ints(value: Any) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"expected an array of commit ts numbers, got {value!r}")
    return list(value)


class RelaySection(TomlModel):
    """``[syncer.relay]``: the MySQL sink's relay log (off while ``log-dir`` is empty)."""

    log_dir: Str = Field(default="", alias="log-dir")
    max_file_size: ByteSize = Field(default=DEFAULT_MAX_FILE_SIZE, alias="max-file-size", gt=0)


class MySQLSettings(TomlModel):
    """The MySQL sink's keys of ``[syncer]`` (beside the generic db-type and table filters)."""

    txn_batch: Int = Field(default=20, alias="txn-batch", ge=1)
    worker_count: Int = Field(default=16, alias="worker-count", ge=1)
    safe_mode: Bool = Field(default=False, alias="safe-mode")
    # TiDB Binlog's: false runs no DDL on the downstream (its tables are managed there; the checkpoint moves on)
    sync_ddl: Bool = Field(default=True, alias="sync-ddl")
    # TiDB Binlog's: the upstream's sql_mode, set on every downstream session (unless [syncer.to.params] has one)
    sql_mode: Str = Field(default="", alias="sql-mode")
    # TiDB Binlog's two-way replication: each applied transaction carries this channel's mark
    # (sink.mysql.loopback), and transactions carrying it are left out of the run (transform.loopback)
    loopback_control: Bool = Field(default=False, alias="loopback-control")
    channel_id: Int = Field(default=0, alias="channel-id")
    ignore_txn_commit_ts: Annotated[list[int], BeforeValidator(_ints)] = Field(default_factory=list,
                                                                                alias="ignore-txn-commit-ts")
    to: ToSection = Field(default_factory=ToSection)
    relay: RelaySection = Field(default_factory=RelaySection)
