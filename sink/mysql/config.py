"""The MySQL sink's keys of drainer.toml: ``[syncer]`` loader settings, ``[syncer.to]`` (the
downstream and its checkpoint table) and ``[syncer.relay]``, with TiDB Binlog's names and defaults."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from ingest.config import Bool, ByteSize, ConfigError, Duration, Int, Str, TomlModel, noted, refused, settings_table
from ingest.encrypt import decrypt
from ingest.security import SecurityConfig

DEFAULT_MAX_FILE_SIZE = 10 * 1024 * 1024   # TiDB Binlog's relay log file size


def _ints(value: Any) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"expected an array of commit ts numbers, got {value!r}")
    return list(value)


_KAFKA = "used by db-type kafka only (binlake has no Kafka output yet); not used"
_FILE = "used by db-type file only (binlake has no protobuf file output yet); not used"
_ORACLE = "used by db-type oracle only, which binlake does not support; not used"


CHECKPOINT_ELSEWHERE = ("mysql", "tidb")   # [syncer.to.checkpoint] type: the checkpoint in its own database
_CHECKPOINT_DB_KEYS = ("host", "port", "user", "password", "encrypted_password")


class CheckpointSection(TomlModel):
    """``[syncer.to.checkpoint]``: where the MySQL sink keeps its checkpoint row, as TiDB Binlog does:
    on the downstream (``type`` empty, the default), or with ``type = "mysql"``/``"tidb"`` in the
    database ``host``, ``port``, ``user``, ``password`` name, over ``security`` (TiDB Binlog's
    defaults: 127.0.0.1, 3306, root, no password)."""

    type: Str = ""
    schema_: Str = Field(default="tidb_binlog", alias="schema")
    table: Str = "checkpoint"
    host: Str = ""
    port: Int = Field(default=0, ge=0, le=65535)
    user: Str = ""
    password: Str = Field(default="", repr=False)
    encrypted_password: Str = Field(default="", repr=False)   # decrypted as [syncer.to]'s is
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    oracle_service_name: Str = noted("oracle-service-name", _ORACLE, default="", matches="")
    oracle_connect_string: Str = noted("oracle-connect-string", _ORACLE, default="", matches="")

    def validate_config(self) -> None:
        if self.type not in ("", *CHECKPOINT_ELSEWHERE):
            raise ValueError(f"[syncer.to.checkpoint] type = {self.type!r} is not supported: the checkpoint is on "
                             f"the downstream (no type) or in a MySQL/TiDB database (\"mysql\", \"tidb\")")

    @property
    def elsewhere(self) -> bool:
        """True when the checkpoint has a database of its own (``type`` mysql or tidb)."""
        return self.type in CHECKPOINT_ELSEWHERE

    def secret(self) -> str:
        """The checkpoint database's password: ``encrypted_password`` decrypted, else ``password``."""
        return decrypt(self.encrypted_password) if self.encrypted_password else self.password

    def notes(self) -> list[tuple[str, Any, str]]:
        if self.elsewhere:
            return []
        return [(key, getattr(self, key), "used with type = \"mysql\" or \"tidb\" only (TiDB Binlog ignores it too "
                                          "without a type): the checkpoint is on the downstream")
                for key in _CHECKPOINT_DB_KEYS if key in self.model_fields_set]


class ToSection(TomlModel):
    """``[syncer.to]``: the MySQL/TiDB downstream (TiDB Binlog's keys), or ``dsn`` (``--to-dsn``)."""

    dsn: Str = ""                       # mysql://USER:PASS@HOST:PORT; over host/port/user/password
    host: Str = "127.0.0.1"
    port: Int = Field(default=3306, ge=1, le=65535)
    user: Str = "root"
    password: Str = Field(default="", repr=False)
    # TiDB Binlog's: base64 of AES-CFB under BINLOG_SECRET_KEY (ingest.encrypt); over password when set
    encrypted_password: Str = Field(default="", repr=False)
    password_file: Str = Field(default="", alias="password-file")   # the password in a file (kept out of configs)
    read_timeout: Duration = Field(default=60.0, alias="read-timeout")   # "1m" (TiDB's form) or seconds
    merge: Bool = False                 # TiDB Binlog's merge mode: net change per primary key per flush
    sync_mode: Int = refused("sync-mode", "only 1 (SyncFullColumn) is built: binlake writes every column and "
                                          "keeps the session's sql_mode", default=1, matches=1)
    params: Annotated[dict[str, str], BeforeValidator(lambda v: settings_table(v, "session variables"))] = \
        Field(default_factory=dict)
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection)
    # TLS to the downstream, verified (CA and host name); without it, TLS when the server offers it, unchecked
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    # other db-types' keys, which TiDB Binlog's files carry beside these
    dir: Str = noted("dir", _FILE, default="", matches="")
    retention_time: Int = noted("retention-time", _FILE, default=0, matches=0)
    zookeeper_addrs: Str = noted("zookeeper-addrs", _KAFKA, default="", matches="")
    kafka_addrs: Str = noted("kafka-addrs", _KAFKA, default="", matches="")
    kafka_version: Str = noted("kafka-version", _KAFKA, default="", matches="")
    kafka_max_messages: Int = noted("kafka-max-messages", _KAFKA, default=0, matches=0)
    kafka_max_message_size: Int = noted("kafka-max-message-size", _KAFKA, default=0, matches=0)
    kafka_client_id: Str = noted("kafka-client-id", _KAFKA, default="", matches="")
    topic_name: Str = noted("topic-name", _KAFKA, default="", matches="")
    oracle_service_name: Str = noted("oracle-service-name", _ORACLE, default="", matches="")
    oracle_connect_string: Str = noted("oracle-connect-string", _ORACLE, default="", matches="")

    def validate_config(self) -> None:
        if self.password_file and (self.password or self.encrypted_password):
            raise ValueError("password-file and password/encrypted_password are both set: keep one")

    def secret(self) -> str:
        """The password: ``encrypted_password`` decrypted (TiDB Binlog ignores ``password`` then), else
        ``password``, else the first line of ``password-file`` (read now)."""
        if self.encrypted_password:
            return decrypt(self.encrypted_password)
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
