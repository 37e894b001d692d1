"""pump.toml: a pump's configuration, TiDB Binlog's key names where the option exists.

Flags of ``binlake pump`` override the file (see ``ingest.config.load_config``).
"""
from __future__ import annotations

from pydantic import Field

from ingest.config import GCRetention, Int, Seconds, Str, TomlModel, UrlList
from ingest.pump.storage.config import StorageConfig
from ingest.security import SecurityConfig

MAX_MESSAGE_SIZE = (1 << 31) - 1 - (4 << 20)  # TiDB: MaxInt - 4 MiB, capped to gRPC's int32 limit


class PumpConfig(TomlModel):
    """A pump's configuration."""

    addr: Str = "127.0.0.1:8250"
    advertise_addr: Str = Field(default="", alias="advertise-addr")        # default: addr
    status_addr: Str = Field(default="127.0.0.1:8251", alias="status-addr")  # binlake: HTTP API on its own port
    data_dir: Str = Field(default="data.pump", alias="data-dir")
    pd_urls: UrlList = Field(default="http://127.0.0.1:2379", alias="pd-urls")
    registry: Str = "file://registry.json"                         # binlake: file://PATH or etcd://HOST:PORT
    node_id: Str = Field(default="", alias="node-id")
    cluster_id: Int = Field(default=0, alias="cluster-id", ge=0)           # binlake: 0 = from PD (GetMembers)
    heartbeat_interval: Seconds = Field(default=2.0, alias="heartbeat-interval")
    gen_binlog_interval: Seconds = Field(default=3.0, alias="gen-binlog-interval")
    gc_retention: GCRetention = Field(default=7 * 86400.0, alias="gc")       # days or a duration; seconds here
    upstream_status_url: Str = Field(default="", alias="upstream-status-url")  # binlake: TiDB status API
    max_txn_timeout: Seconds = Field(default=600.0, alias="max-txn-timeout")  # binlake (TiDB's maxTxnTimeoutSecond)
    max_message_size: Int = Field(default=MAX_MESSAGE_SIZE, alias="max-message-size", gt=0)
    log_file: Str = Field(default="", alias="log-file")
    log_level: Str = Field(default="info", alias="log-level")
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)

    @property
    def advertise(self) -> str:
        """The address registered for clients: advertise-addr, else addr."""
        return self.advertise_addr or self.addr

    def validate_config(self) -> None:
        if self.advertise.split(":")[0] in ("", "0.0.0.0"):
            raise ValueError(f"advertise-addr {self.advertise!r} must name a reachable host, not 0.0.0.0")
