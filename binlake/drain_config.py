"""drainer.toml: ``binlake drain`` / ``binlake verify``. TiDB Binlog's drainer key names where the
option exists, binlake's sink and Spark keys beside them; flags override the file
(``ingest.config.load_config``)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from ingest.config import Bool, ByteSize, ConfigError, Int, Seconds, Str, StringList, TomlModel, UrlList
from ingest.security import SecurityConfig
from transform.filters import DEFAULT_IGNORE_SCHEMAS, TableFilter

SINKS = ("iceberg", "parquet", "mysql", "tidb")


def _sink(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    text = "parquet" if value.lower() == "pb" else value.lower()
    if text not in SINKS:
        raise ValueError(f"sink {value!r} is not one of {', '.join(SINKS)}")
    return text


def _compressor(value: Any) -> str:
    if value not in ("", "gzip"):
        raise ValueError(f"compressor {value!r}: expected \"gzip\" or \"\" (none), as TiDB Binlog's drainer")
    return str(value)


def _db_tables(value: Any) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        raise ValueError(f"expected an array of {{db-name, tbl-name}} tables, got {value!r}")
    out = []
    for item in value:
        if isinstance(item, tuple) and len(item) == 2:
            out.append((str(item[0]), str(item[1])))
            continue
        if not isinstance(item, dict) or set(item) - {"db-name", "tbl-name"} or "db-name" not in item:
            raise ValueError(f"each entry needs db-name and tbl-name, got {item!r}")
        out.append((str(item["db-name"]), str(item.get("tbl-name", ""))))
    return out


def parse_tables(text: Any) -> list[tuple[str, str]]:
    """``db.t,db2.t2`` → [(db, t), …]; ``ValueError`` naming a malformed entry."""
    if isinstance(text, list):
        return [(str(d), str(t)) for d, t in text]
    if not isinstance(text, str):
        raise ValueError(f"expected db.table names, got {text!r}")
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        db, dot, table = part.partition(".")
        if not dot or not db or not table:
            raise ValueError(f"--tables entry {part!r} is not db.table")
        out.append((db, table))
    return out


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML reads an unquoted ``s3.endpoint = …`` as nested tables: join their keys back with dots."""
    out: dict[str, Any] = {}
    for key, v in table.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = v
    return out


def _settings(value: Any, what: str, prefix: str = "") -> dict[str, str]:
    """A TOML table of scalar settings as strings (booleans lower-case), keys starting with ``prefix``."""
    if not isinstance(value, dict):
        raise ValueError(f"expected a table of {what}, got {value!r}")
    out = {}
    for key, v in _flatten(value).items():
        if not key.startswith(prefix):
            raise ValueError(f"{key!r} is not a {what[:-1]} (keys start with {prefix!r})")
        if isinstance(v, list) or v is None:
            raise ValueError(f"{key}: expected a string, number or boolean, got {v!r}")
        out[str(key)] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


def _spark_conf(value: Any) -> dict[str, str]:
    return _settings(value, "Spark settings", "spark.")


def _catalog_properties(value: Any) -> dict[str, str]:
    return _settings(value, "catalog properties")


DBTables = Annotated[list[tuple[str, str]], BeforeValidator(_db_tables)]


class UpstreamSection(TomlModel):
    """``[upstream]``: the TiDB status API (DDL history) and TiDB's MySQL port (what ``verify`` reads
    at a ts with ``@@tidb_snapshot``)."""

    status_url: Str = Field(default="", alias="status-url")
    dsn: Str = ""                       # mysql://USER:PASS@HOST:4000


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
    params: Annotated[dict[str, str], BeforeValidator(lambda v: _settings(v, "session variables"))] = \
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
    max_file_size: ByteSize = Field(default=10 * 1024 * 1024, alias="max-file-size", gt=0)


class SyncerSection(TomlModel):
    """``[syncer]``: the sink, TiDB Binlog's table filters and the MySQL loader's settings."""

    db_type: Annotated[str, BeforeValidator(_sink)] = Field(default="iceberg", alias="db-type")
    txn_batch: Int = Field(default=20, alias="txn-batch", ge=1)
    worker_count: Int = Field(default=16, alias="worker-count", ge=1)
    safe_mode: Bool = Field(default=False, alias="safe-mode")
    ignore_txn_commit_ts: Annotated[list[int], BeforeValidator(_ints)] = Field(default_factory=list,
                                                                                alias="ignore-txn-commit-ts")
    to: ToSection = Field(default_factory=ToSection)
    relay: RelaySection = Field(default_factory=RelaySection)
    replicate_do_db: StringList = Field(default_factory=list, alias="replicate-do-db")
    replicate_do_table: DBTables = Field(default_factory=list, alias="replicate-do-table")
    ignore_schemas: StringList = Field(default_factory=lambda: list(DEFAULT_IGNORE_SCHEMAS), alias="ignore-schemas")
    ignore_table: DBTables = Field(default_factory=list, alias="ignore-table")


class IcebergSection(TomlModel):
    """``[iceberg]``: the catalog and warehouse."""

    catalog_uri: Str = Field(default="", alias="catalog-uri")   # default: sqlite beside a local warehouse
    warehouse: Str = "warehouse"
    tag_runs: Bool = Field(default=False, alias="tag-runs")      # tag each table's snapshot tidb-ts-<to_ts>
    # a new mirror is partitioned by bucket(N, first key column): a run rewrites only the files of the
    # buckets its keys fall in; [iceberg.table-buckets] "db.table" = N overrides it per table
    mirror_buckets: Int = Field(default=16, alias="mirror-buckets", ge=1)
    table_buckets: dict[str, Int] = Field(default_factory=dict, alias="table-buckets")
    # [iceberg.properties] and every --catalog-property KEY=VALUE: pyiceberg catalog and FileIO
    # properties, e.g. s3.endpoint, s3.region (credentials also come from the AWS environment)
    properties: Annotated[dict[str, str], BeforeValidator(_catalog_properties)] = Field(default_factory=dict)


class ParquetSection(TomlModel):
    """``[parquet]``: the root directory of the Parquet CDC files."""

    dir: Str = "cdc"


class SparkSection(TomlModel):
    """``[spark]``: where the run's Spark stages execute. ``conf`` (``[spark.conf]``, and every
    ``--spark-conf KEY=VALUE``) is passed to Spark verbatim, over binlake's defaults
    (``transform.spark``: they apply to ``local[...]`` masters only)."""

    master: Str = "local[*]"
    app_name: Str = Field(default="binlake-drain", alias="app-name")
    splits_per_pump: Int = Field(default=1, alias="splits-per-pump", ge=1)   # min pull tasks per pump (ts sub-ranges)
    conf: Annotated[dict[str, str], BeforeValidator(_spark_conf)] = Field(default_factory=dict)


class DrainerConfig(TomlModel):
    """Everything ``binlake drain`` / ``binlake verify`` need."""

    registry: Str = "file://registry.json"
    node_id: Str = Field(default="binlake-drain", alias="node-id")
    addr: Str = "127.0.0.1:8249"                       # --follow: gRPC Cistern (Notify from pumps)
    advertise_addr: Str = Field(default="", alias="advertise-addr")   # default: addr
    status_addr: Str = Field(default="127.0.0.1:8259", alias="status-addr")   # --follow: HTTP /status, /metrics
    metrics_addr: Str = Field(default="", alias="metrics-addr")   # Prometheus Pushgateway (TiDB Binlog's key)
    pd_urls: UrlList = Field(default="", alias="pd-urls")
    cluster_id: Int = Field(default=0, alias="cluster-id", ge=0)
    data_dir: Str = Field(default="data.drainer", alias="data-dir")
    initial_commit_ts: Int = Field(default=0, alias="initial-commit-ts")
    compressor: Annotated[str, BeforeValidator(_compressor)] = ""   # PullBinlogs streams: "" or "gzip" (TiDB's key)
    log_level: Str = Field(default="info", alias="log-level")
    tables: Annotated[list[tuple[str, str]], BeforeValidator(parse_tables)] = Field(default_factory=list)
    upstream: UpstreamSection = Field(default_factory=UpstreamSection)
    syncer: SyncerSection = Field(default_factory=SyncerSection)
    iceberg: IcebergSection = Field(default_factory=IcebergSection)
    parquet: ParquetSection = Field(default_factory=ParquetSection)
    spark: SparkSection = Field(default_factory=SparkSection)
    security: SecurityConfig = Field(default_factory=SecurityConfig)   # TLS towards pumps, for Notify and /status

    def validate_config(self) -> None:
        if self.initial_commit_ts < 0:
            raise ValueError("initial-commit-ts must be >= 0 (binlake drains what the pumps hold from that ts)")

    def table_filter(self) -> TableFilter:
        """The filter these options describe."""
        s = self.syncer
        return TableFilter(tuple(s.replicate_do_db), tuple(s.replicate_do_table), tuple(s.ignore_schemas),
                           tuple(s.ignore_table), tuple(self.tables))
