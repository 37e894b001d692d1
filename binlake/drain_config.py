"""drainer.toml: ``binlake drain`` / ``binlake verify``. TiDB Binlog's drainer key names where the
option exists, binlake's sink and Spark keys beside them; flags override the file
(``ingest.config.load_config``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BeforeValidator, Field, create_model

from ingest.config import Bool, Int, Str, StringList, TomlModel, UrlList, noted, refused, settings_table
from ingest.security import SecurityConfig
from sink.plugin import SinkContext, SinkSpec
from sink.registry import UnknownSinkError, canonical, spec_for, specs
from sink.syncer_to import SyncerKeys
from transform.event_filter import EventFilter
from transform.filters import DEFAULT_IGNORE_SCHEMAS, TableFilter

# TiDB Binlog's db-types binlake has no output for
_NOT_BUILT = {"oracle": "binlake does not write to Oracle"}
# (kafka-version is noted for every db-type: sink.syncer_to.ToSection)
KAFKA_KEYS = ("zookeeper-addrs", "kafka-addrs", "kafka-max-messages", "kafka-max-message-size", "kafka-client-id",
              "topic-name")
FILE_KEYS = ("dir", "retention-time")
_DISPATCH = "the MySQL sink always spreads a run's transactions over worker-count workers"
_DETECT = "the MySQL sink always detects causality (a row's changes stay on one worker)"
_HISTORY = "binlake reads every table definition from the upstream's DDL history ([upstream] status-url)"


def _sink(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    if value.lower() in _NOT_BUILT:
        raise ValueError(f"db-type {value!r} is not supported: {_NOT_BUILT[value.lower()]}")
    try:
        return canonical(value)
    except UnknownSinkError as e:
        raise ValueError(str(e)) from None


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


def _spark_conf(value: Any) -> dict[str, str]:
    return settings_table(value, "Spark settings", "spark.")


DBTables = Annotated[list[tuple[str, str]], BeforeValidator(_db_tables)]


class UpstreamSection(TomlModel):
    """``[upstream]``: the TiDB status API (DDL history) and TiDB's MySQL port (what ``verify`` reads
    at a ts with ``@@tidb_snapshot``)."""

    status_url: Str = Field(default="", alias="status-url")
    dsn: Str = ""                       # mysql://USER:PASS@HOST:4000
    security: SecurityConfig = Field(default_factory=SecurityConfig)   # [upstream.security]: verified TLS to dsn


class FilterRuleSection(TomlModel):
    """``[syncer.binlog-filter-rule.NAME]``: the event types and DDL queries left out on the tables
    of every ``[[syncer.table-migrate-rule]]`` that names it (``transform.event_filter``)."""

    ignore_event: list[str] = Field(default_factory=list, alias="ignore-event")
    ignore_sql: list[str] = Field(default_factory=list, alias="ignore-sql")


class SourceSection(TomlModel):
    """A table-migrate-rule's ``source``: schema and table patterns (``*``, ``?``, ``[…]``)."""

    schema_: Str = Field(default="", alias="schema")
    table: Str = ""


class MigrateRuleSection(TomlModel):
    """``[[syncer.table-migrate-rule]]``: the tables (``source``) the ``binlog-filter-rule`` names
    apply to. ``target`` routes tables to other names, which TiDB Binlog does for db-type oracle only."""

    binlog_filter_rule: list[str] = Field(default_factory=list, alias="binlog-filter-rule")
    source: SourceSection = Field(default_factory=SourceSection)
    target: dict[str, Any] | None = refused("target", "routing tables to other names is not built yet",
                                            default=None, matches=None)


class SyncerSection(SyncerKeys):
    """``[syncer]``: the sink, TiDB Binlog's table filters and the keys of every db-type
    (:class:`~sink.syncer_to.SyncerKeys`). A sink whose spec's section is ``syncer`` (the MySQL sink:
    TiDB Binlog's loader keys) adds its keys here."""

    db_type: Annotated[str, BeforeValidator(_sink)] = Field(default="iceberg", alias="db-type")
    replicate_do_db: StringList = Field(default_factory=list, alias="replicate-do-db")
    replicate_do_table: DBTables = Field(default_factory=list, alias="replicate-do-table")
    ignore_schemas: StringList = Field(default_factory=lambda: list(DEFAULT_IGNORE_SCHEMAS), alias="ignore-schemas")
    ignore_table: DBTables = Field(default_factory=list, alias="ignore-table")
    # TiDB Binlog's other [syncer] keys
    enable_dispatch: Bool = noted("enable-dispatch", _DISPATCH, default=True, matches=True)
    disable_dispatch: Bool = noted("disable-dispatch", _DISPATCH, default=False, matches=False)
    enable_detect: Bool = noted("enable-detect", _DETECT, default=True, matches=True)
    disable_detect: Bool = noted("disable-detect", _DETECT, default=False, matches=False)
    load_schema_snapshot: Bool = noted("load-schema-snapshot", _HISTORY, default=False, matches=False)
    load_table_infos: Bool = noted("load-table-infos", _HISTORY, default=False, matches=False)   # v7.1's name
    # TiDB Binlog's binlog event filter: named rules, applied to tables by the migrate rules naming them
    case_sensitive: Bool = Field(default=False, alias="case-sensitive")
    table_migrate_rule: list[MigrateRuleSection] = Field(default_factory=list, alias="table-migrate-rule")
    binlog_filter_rule: dict[str, FilterRuleSection] = Field(default_factory=dict, alias="binlog-filter-rule")


class SparkSection(TomlModel):
    """``[spark]``: where the run's Spark stages execute. ``conf`` (``[spark.conf]``, and every
    ``--spark-conf KEY=VALUE``) is passed to Spark verbatim, over binlake's defaults
    (``transform.spark``: they apply to ``local[...]`` masters only)."""

    master: Str = "local[*]"
    app_name: Str = Field(default="binlake-drain", alias="app-name")
    splits_per_pump: Int = Field(default=1, alias="splits-per-pump", ge=1)   # min pull tasks per pump (ts sub-ranges)
    # the driver JVM maps binlake's class-data archive of Spark (transform.spark_archive): a faster start
    class_archive: Bool = Field(default=True, alias="class-archive")
    # a drain whose pulled binlogs, or a restore whose lake files, total at most this many bytes runs in
    # the command's own process, without Spark (its start costs more than such a run); 0: always on Spark
    in_process_below: Int = Field(default=64 << 20, alias="in-process-below", ge=0)
    conf: Annotated[dict[str, str], BeforeValidator(_spark_conf)] = Field(default_factory=dict)


class DrainerBase(TomlModel):
    """Everything ``binlake drain`` / ``binlake verify`` need but the sinks' own sections (see
    :func:`drainer_model`)."""

    registry: Str = ""   # where the pumps register; "": PD's etcd at pd-urls (TiDB Binlog's), else file://registry.json
    node_id: Str = Field(default="binlake-drain", alias="node-id")
    addr: Str = "127.0.0.1:8249"                       # --follow: gRPC Cistern (Notify from pumps)
    advertise_addr: Str = Field(default="", alias="advertise-addr")   # default: addr
    status_addr: Str = Field(default="127.0.0.1:8259", alias="status-addr")   # --follow: HTTP /status, /metrics
    metrics_addr: Str = Field(default="", alias="metrics-addr")   # Prometheus Pushgateway (TiDB Binlog's key)
    pd_urls: UrlList = Field(default="", alias="pd-urls")
    cluster_id: Int = Field(default=0, alias="cluster-id", ge=0)
    data_dir: Str = Field(default="data.drainer", alias="data-dir")
    # where a sink never written starts: a ts, or -1 for PD's ts at the first run; unset, the sink's own
    # default (``Capabilities.starts_now``: -1 for MySQL and TiDB, as TiDB Binlog; 0 for the lake)
    initial_commit_ts: Int | None = Field(default=None, alias="initial-commit-ts", ge=-1)
    compressor: Annotated[str, BeforeValidator(_compressor)] = ""   # PullBinlogs streams: "" or "gzip" (TiDB's key)
    log_level: Str = Field(default="info", alias="log-level")
    log_file: Str = Field(default="", alias="log-file")
    # --follow (TiDB Binlog's meanings there): seconds between ranges, each of which re-reads the pumps
    # the registry lists (--interval overrides it); minutes without rows applied after which /status
    # says Synced. A batch run reads the registry when it starts and is synced when it ends.
    detect_interval: Int = Field(default=5, alias="detect-interval", ge=1)
    synced_check_time: Int = Field(default=5, alias="synced-check-time", ge=0)
    # --follow: stop (registry state paused, exit 1) after this many runs in a row failed with errors that
    # are not binlake's (bugs); 0: never. binlake's transient errors are retried with backoff regardless.
    max_failed_runs: Int = Field(default=10, alias="max-failed-runs", ge=0)
    tables: Annotated[list[tuple[str, str]], BeforeValidator(parse_tables)] = Field(default_factory=list)
    upstream: UpstreamSection = Field(default_factory=UpstreamSection)
    syncer: SyncerSection = Field(default_factory=SyncerSection)
    spark: SparkSection = Field(default_factory=SparkSection)
    security: SecurityConfig = Field(default_factory=SecurityConfig)   # TLS towards pumps, for Notify and /status

    def validate_config(self) -> None:
        self.table_filter()   # a filter pattern that is not a regex is refused now, not at the first table
        events = self.event_filter()   # so is a binlog-filter-rule TiDB Binlog would refuse
        caps = self.sink_spec().capabilities
        ddl_rules = [] if caps.replays_ddl else events.ddl_rules()
        if ddl_rules:
            rule = ddl_rules[0]
            raise ValueError(f"[syncer] {rule.label} can leave out DDL (ignore-event {list(rule.events)}, "
                             f"ignore-sql {list(rule.sql)}): that is for db-type mysql, tidb, kafka and file; a "
                             f"{self.syncer.db_type} sink's tables follow the upstream's DDL history (its rules "
                             f"may leave out insert, update and delete)")
        if not self.syncer.sync_ddl and not caps.replays_ddl:
            raise ValueError(f"[syncer] sync-ddl = false is for db-type mysql, tidb, kafka and file: a "
                             f"{self.syncer.db_type} sink's tables follow the upstream's DDL history")

    def notes(self) -> list[tuple[str, Any, str]]:
        to = self.syncer.to
        sink = self.sink_spec().names[0]
        out: list[tuple[str, Any, str]] = []
        if to.checkpoint.type and sink not in ("mysql", "tidb"):
            out.append(("syncer.to.checkpoint.type", to.checkpoint.type,
                        f"a {self.syncer.db_type} sink keeps its checkpoint with its data, whatever this says"))
        for owner, keys in (("kafka", KAFKA_KEYS), ("file", FILE_KEYS)):
            if sink != owner:
                out += [(f"syncer.to.{name}", getattr(to, name.replace("-", "_")),
                         f"used by db-type {owner} only; not used")
                        for name in keys if name.replace("-", "_") in to.model_fields_set]
        return out

    @property
    def registry_uri(self) -> str:
        """``registry``, else PD's etcd at ``pd-urls`` (where TiDB Binlog's pumps register), else
        ``file://registry.json``."""
        return self.registry or self.pd_urls or "file://registry.json"

    def table_filter(self) -> TableFilter:
        """The filter these options describe."""
        s = self.syncer
        return TableFilter(tuple(s.replicate_do_db), tuple(s.replicate_do_table), tuple(s.ignore_schemas),
                           tuple(s.ignore_table), tuple(self.tables))

    def event_filter(self) -> EventFilter:
        """TiDB Binlog's binlog event filter these options describe (``FilterRuleError``, a
        ``ValueError``, for a rule TiDB Binlog would refuse)."""
        s = self.syncer
        rules = {name: (r.ignore_event, r.ignore_sql) for name, r in s.binlog_filter_rule.items()}
        attached = [(m.source.schema_, m.source.table, m.binlog_filter_rule) for m in s.table_migrate_rule]
        return EventFilter.from_config(rules, attached, s.case_sensitive)

    def first_ts(self) -> int:
        """``initial-commit-ts``, or the sink's default when it is not set (see the field)."""
        if self.initial_commit_ts is not None:
            return self.initial_commit_ts
        return -1 if self.sink_spec().capabilities.starts_now else 0

    def sink_spec(self) -> SinkSpec[Any]:
        """The spec of the sink ``[syncer] db-type`` names."""
        return spec_for(self.syncer.db_type)

    def sink_context(self, cluster_id: int | None = None, dry_run: bool = False,
                     spec: SinkSpec[Any] | None = None) -> SinkContext[Any]:
        """What the configured sink (or ``spec``'s) is opened with."""
        spec = spec or self.sink_spec()
        name = self.syncer.db_type if self.syncer.db_type in spec.names else spec.names[0]
        return SinkContext(name, spec.settings(self), cluster_id, dry_run, self.table_filter(), self.data_dir,
                           self.event_filter())


_composed: dict[tuple[int, ...], type[DrainerBase]] = {}


def drainer_model() -> type[DrainerBase]:
    """:class:`DrainerBase` with every registered sink's section: a top-level table of its own, or
    (section ``syncer``) keys added to ``[syncer]``. Built once per set of registered sinks."""
    registered = specs()
    key = tuple(id(s) for s in registered)
    if key not in _composed:
        syncer_bases = tuple(s.config for s in registered if s.section == "syncer")
        syncer: type[TomlModel] = (create_model("SyncerSection", __base__=(SyncerSection, *syncer_bases))
                                   if syncer_bases else SyncerSection)
        fields: dict[str, Any] = {"syncer": (syncer, Field(default_factory=syncer))}
        for s in registered:
            if s.section and s.section != "syncer" and s.section not in fields:
                fields[s.section.replace("-", "_")] = (s.config, Field(default_factory=s.config, alias=s.section))
        _composed[key] = create_model("DrainerConfig", __base__=DrainerBase, **fields)
    return _composed[key]


if TYPE_CHECKING:
    DrainerConfig = DrainerBase
else:
    DrainerConfig = drainer_model()
