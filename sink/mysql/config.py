"""The MySQL sink's keys of drainer.toml: ``[syncer]`` loader settings, ``[syncer.to]`` (the
downstream and its checkpoint table) and ``[syncer.relay]``, with TiDB Binlog's names and defaults."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from ingest.config import Bool, ByteSize, ConfigError, Int, Seconds, Str, TomlModel, settings_table

DEFAULT_MAX_FILE_SIZE = 10 * 1024 * 1024   # TiDB Binlog's relay log file size


def _ints(value: Any) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"expected an array of commit ts numbers, got {value!r}")
    return list(value)


class CheckpointSection(TomlModel):
    """``[syncer.to.checkpoint]``: where the MySQL sink keeps its checkpoint row on the downstream."""

    schema_: Str = Field(default="tidb_binlog", alias="schema")
    table: Str = "checkpoint"


class ToSection(TomlModel):
    """``[syncer.to]``: the MySQL/TiDB downstream (TiDB Binlog's keys), or ``dsn`` (``--to-dsn``)."""

    dsn: Str = ""                       # mysql://USER:PASS@HOST:PORT; over host/port/user/password
    host: Str = "127.0.0.1"
    port: Int = Field(default=3306, ge=1, le=65535)
    user: Str = "root"
    password: Str = Field(default="", repr=False)
    password_file: Str = Field(default="", alias="password-file")   # the password in a file (kept out of configs)
    read_timeout: Seconds = Field(default=60.0, alias="read-timeout")
    merge: Bool = False                 # TiDB Binlog's merge mode: net change per primary key per flush
    params: Annotated[dict[str, str], BeforeValidator(lambda v: settings_table(v, "session variables"))] = \
        Field(default_factory=dict)
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection)

    def validate_config(self) -> None:
        if self.password_file and self.password:
            raise ValueError("password and password-file are both set: keep one")

    def secret(self) -> str:
        """The password: ``password``, else the first line of ``password-file`` (read now)."""
        if not self.password_file:
            return self.password
        try:
            lines = Path(self.password_file).read_text().splitlines()
        except OSError as e:
            raise ConfigError(f"[syncer.to] password-file: cannot read it ({e.strerror})") from None
        return lines[0] if lines else ""


class RelaySection(TomlModel):
    """``[syncer.relay]``: the MySQL sink's relay log (off while ``log-dir`` is empty)."""

    log_dir: Str = Field(default="", alias="log-dir")
    max_file_size: ByteSize = Field(default=DEFAULT_MAX_FILE_SIZE, alias="max-file-size", gt=0)


class MySQLSettings(TomlModel):
    """The MySQL sink's keys of ``[syncer]`` (beside the generic db-type and table filters)."""

    txn_batch: Int = Field(default=20, alias="txn-batch", ge=1)
    worker_count: Int = Field(default=16, alias="worker-count", ge=1)
    safe_mode: Bool = Field(default=False, alias="safe-mode")
    ignore_txn_commit_ts: Annotated[list[int], BeforeValidator(_ints)] = Field(default_factory=list,
                                                                                alias="ignore-txn-commit-ts")
    to: ToSection = Field(default_factory=ToSection)
    relay: RelaySection = Field(default_factory=RelaySection)
