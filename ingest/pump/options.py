"""Everything a Pump is started with; filled from pump.toml and flags by ``binlake.config``."""
from __future__ import annotations

from dataclasses import dataclass, field

from ingest.pump.storage import StorageOptions

MAX_MESSAGE_SIZE = (1 << 31) - 1 - (4 << 20)  # TiDB: MaxInt - 4 MiB, capped to gRPC's int32 limit


@dataclass
class SecurityOptions:
    """TLS files; mutual TLS when ``ssl_ca`` is set."""

    ssl_ca: str = ""
    ssl_cert: str = ""
    ssl_key: str = ""
    cert_allowed_cn: list[str] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        """True when a certificate and key are configured."""
        return bool(self.ssl_cert and self.ssl_key)


@dataclass
class PumpOptions:
    """A pump's configuration (TiDB Binlog's pump.toml names in comments)."""

    addr: str = "127.0.0.1:8250"                 # addr
    advertise_addr: str = ""                     # advertise-addr (default: addr)
    status_addr: str = "127.0.0.1:8251"          # status-addr (binlake: HTTP API on its own port)
    data_dir: str = "data.pump"                  # data-dir
    pd_urls: str = "http://127.0.0.1:2379"       # pd-urls
    registry: str = "file://registry.json"       # registry (binlake): file://PATH or etcd://HOST:PORT
    node_id: str = ""                            # node-id
    cluster_id: int = 0                          # cluster-id (binlake): 0 = from PD's TSO header
    heartbeat_interval: float = 2.0              # heartbeat-interval (s)
    gen_binlog_interval: float = 3.0             # gen-binlog-interval (s)
    gc_retention: float = 7 * 86400.0            # gc (days or a duration), in seconds
    upstream_status_url: str = ""                # upstream-status-url (binlake): TiDB status API
    max_txn_timeout: float = 600.0               # max-txn-timeout (binlake; TiDB's maxTxnTimeoutSecond)
    max_message_size: int = MAX_MESSAGE_SIZE     # max-message-size
    log_file: str = ""                           # log-file
    log_level: str = "info"                      # log-level
    security: SecurityOptions = field(default_factory=SecurityOptions)
    storage: StorageOptions = field(default_factory=StorageOptions)

    @property
    def advertise(self) -> str:
        """The address registered for clients: advertise-addr, else addr."""
        return self.advertise_addr or self.addr
