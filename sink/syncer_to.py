"""The ``[syncer]`` keys of drainer.toml that every db-type TiDB Binlog has (:class:`SyncerKeys`), with
``[syncer.to]``: the downstream (a MySQL/TiDB database with its checkpoint table, Kafka brokers, a
directory of protobuf files), with TiDB Binlog's names and defaults. The sinks that replay
transactions (``sink.mysql``, ``sink.kafka``, ``sink.pbfile``) add their sections to ``[syncer]``
on top of :class:`SyncerKeys`; binlake's own ``[syncer]`` has them too, so the drain command reads
them typed whatever the sink."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from ingest.config import Bool, ConfigError, Duration, Int, Str, TomlModel, noted, refused, settings_table
from ingest.encrypt import decrypt
from ingest.security import SecurityConfig

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
    """``[syncer.to]``: the MySQL/TiDB downstream (TiDB Binlog's keys), or ``dsn`` (``--to-dsn``); the
    Kafka brokers and topic of db-type kafka."""

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
    # db-type file: the directory of protobuf files (else the drainer's data-dir), kept retention-time days
    dir: Str = ""
    retention_time: Int = Field(default=0, alias="retention-time", ge=0)
    # db-type kafka (sink.kafka.config reads them with TiDB Binlog's defaults for what is unset)
    zookeeper_addrs: Str = Field(default="", alias="zookeeper-addrs")
    kafka_addrs: Str = Field(default="", alias="kafka-addrs")
    kafka_version: Str = noted("kafka-version", "binlake's Kafka client asks the brokers which protocol versions "
                               "they speak (Kafka 0.10 and later; the idempotent producer needs 0.11); not used",
                               default="", matches="")
    kafka_max_messages: Int = Field(default=0, alias="kafka-max-messages")
    kafka_max_message_size: Int = Field(default=0, alias="kafka-max-message-size")
    kafka_client_id: Str = Field(default="", alias="kafka-client-id")
    topic_name: Str = Field(default="", alias="topic-name")
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


def _ints(value: Any) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"expected an array of commit ts numbers, got {value!r}")
    return list(value)


class SyncerKeys(TomlModel):
    """TiDB Binlog's ``[syncer]`` keys of every db-type that binlake reads: ``sync-ddl`` (false: no DDL
    downstream, for the sinks that replay it), two-way replication's ``loopback-control`` and
    ``channel-id`` (each applied transaction carries the channel's mark, ``sink.mysql.loopback``, and
    transactions carrying it are left out of the run, ``transform.loopback``), the transactions
    ``ignore-txn-commit-ts`` leaves out, and ``[syncer.to]``."""

    sync_ddl: Bool = Field(default=True, alias="sync-ddl")
    loopback_control: Bool = Field(default=False, alias="loopback-control")
    channel_id: Int = Field(default=0, alias="channel-id")
    ignore_txn_commit_ts: Annotated[list[int], BeforeValidator(_ints)] = Field(default_factory=list,
                                                                                alias="ignore-txn-commit-ts")
    to: ToSection = Field(default_factory=ToSection)
