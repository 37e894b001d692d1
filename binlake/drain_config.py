"""drainer.toml: TiDB Binlog's drainer key names where they exist, binlake's sink keys beside them.

Unknown keys are errors; flags override the file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from binlake.config import Key, _bool, _int, _string, _string_list, _url_list, apply_settings, load_toml
from ingest.errors import ConfigError
from transform.filters import DEFAULT_IGNORE_SCHEMAS, TableFilter

SINKS = ("iceberg", "parquet")


def _sink(value: Any) -> str:
    text = _string(value).lower()
    if text == "pb":
        text = "parquet"
    if text not in SINKS:
        raise ConfigError(f"sink {value!r} is not one of {', '.join(SINKS)}")
    return text


def _db_tables(value: Any) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        raise ConfigError(f"expected an array of {{db-name, tbl-name}} tables, got {value!r}")
    out = []
    for item in value:
        if not isinstance(item, dict) or set(item) - {"db-name", "tbl-name"} or "db-name" not in item:
            raise ConfigError(f"each entry needs db-name and tbl-name, got {item!r}")
        out.append((str(item["db-name"]), str(item.get("tbl-name", ""))))
    return out


def parse_tables(text: str) -> list[tuple[str, str]]:
    """``db.t,db2.t2`` → [(db, t), …]; ConfigError naming a malformed entry."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        db, dot, table = part.partition(".")
        if not dot or not db or not table:
            raise ConfigError(f"--tables entry {part!r} is not db.table")
        out.append((db, table))
    return out


@dataclass
class DrainerOptions:
    """Everything ``binlake drain`` / ``binlake verify`` need."""

    registry: str = "file://registry.json"
    node_id: str = "binlake-drain"
    pd_urls: str = ""
    cluster_id: int = 0
    data_dir: str = "data.drainer"
    initial_commit_ts: int = 0
    upstream_status_url: str = ""
    sink: str = "iceberg"
    catalog_uri: str = ""
    warehouse: str = "warehouse"
    tag_runs: bool = False
    parquet_dir: str = "cdc"
    spark_master: str = "local[*]"
    splits_per_pump: int = 1
    replicate_do_db: list[str] = field(default_factory=list)
    replicate_do_table: list[tuple[str, str]] = field(default_factory=list)
    ignore_schemas: list[str] = field(default_factory=lambda: list(DEFAULT_IGNORE_SCHEMAS))
    ignore_table: list[tuple[str, str]] = field(default_factory=list)
    tables: list[tuple[str, str]] = field(default_factory=list)
    log_level: str = "info"

    def table_filter(self) -> TableFilter:
        """The filter these options describe."""
        return TableFilter(tuple(self.replicate_do_db), tuple(self.replicate_do_table),
                           tuple(self.ignore_schemas), tuple(self.ignore_table), tuple(self.tables))


DRAINER_KEYS: dict[str, Key] = {
    "registry": Key("registry", _string),
    "node-id": Key("node_id", _string),
    "pd-urls": Key("pd_urls", _url_list),
    "cluster-id": Key("cluster_id", _int),
    "data-dir": Key("data_dir", _string),
    "initial-commit-ts": Key("initial_commit_ts", _int),
    "log-level": Key("log_level", _string),
    "upstream.status-url": Key("upstream_status_url", _string),
    "syncer.db-type": Key("sink", _sink),
    "syncer.replicate-do-db": Key("replicate_do_db", _string_list),
    "syncer.replicate-do-table": Key("replicate_do_table", _db_tables),
    "syncer.ignore-schemas": Key("ignore_schemas", _string_list),
    "syncer.ignore-table": Key("ignore_table", _db_tables),
    "iceberg.catalog-uri": Key("catalog_uri", _string),
    "iceberg.warehouse": Key("warehouse", _string),
    "iceberg.tag-runs": Key("tag_runs", _bool),
    "parquet.dir": Key("parquet_dir", _string),
    "spark.master": Key("spark_master", _string),
    "spark.splits-per-pump": Key("splits_per_pump", _int),
    # flag-only keys
    "tables": Key("tables", parse_tables),
}


def load_drainer_options(config: str | Path | None, overrides: Mapping[str, Any]) -> DrainerOptions:
    """Defaults, then the TOML file, then non-None flag ``overrides`` (TOML key names)."""
    options = DrainerOptions()
    if config:
        apply_settings(options, load_toml(config), DRAINER_KEYS, str(config))
    apply_settings(options, {k: v for k, v in overrides.items() if v is not None}, DRAINER_KEYS, "command line")
    if options.initial_commit_ts < 0:
        raise ConfigError("initial-commit-ts must be >= 0 (binlake drains what the pumps hold from that ts)")
    return options
