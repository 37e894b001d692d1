"""pump.toml: a pump's configuration, TiDB Binlog's key names where the option exists.

Flags of ``binlake pump`` override the file (see ``ingest.config.load_config``).
"""
from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from ingest.config import Bool, GCRetention, Int, Seconds, Str, TomlModel, UrlList
from ingest.pump.storage.config import StorageConfig
from ingest.security import SecurityConfig

MAX_MESSAGE_SIZE = (1 << 31) - 1 - (4 << 20)  # TiDB: MaxInt - 4 MiB, capped to gRPC's int32 limit


SOCKET_PATH_MAX = 107  # bytes of a unix socket address (sun_path holds 108 with the terminating NUL)


def parse_socket(value: Any) -> str:
    """TiDB Binlog's ``socket``: ``unix:///abs/path``, gRPC's ``unix:path`` or a plain path (what TiDB's
    ``binlog-socket`` names) → the path; "" → "" (no socket)."""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    text = value.strip()
    if not text:
        return ""
    if text.startswith("unix://"):
        path = text.removeprefix("unix://")
        if path and not path.startswith("/"):
            raise ValueError(f"{text!r}: expected unix:///absolute/path (three slashes), unix:path or a path")
    elif text.startswith("unix:"):
        path = text.removeprefix("unix:")
    elif "://" in text:
        raise ValueError(f"{text!r} is not a unix socket: expected unix:///path or a path")
    else:
        path = text
    if not path:
        raise ValueError(f"{text!r} names no path")
    if len(os.fsencode(os.path.abspath(path))) > SOCKET_PATH_MAX:
        raise ValueError(f"{text!r}: the path is longer than {SOCKET_PATH_MAX} bytes, the limit of a unix "
                         f"socket address; choose a shorter one")
    return path


UnixSocket = Annotated[str, BeforeValidator(parse_socket)]


class PumpConfig(TomlModel):
    """A pump's configuration."""

    addr: Str = "127.0.0.1:8250"
    advertise_addr: Str = Field(default="", alias="advertise-addr")        # default: addr
    socket: UnixSocket = ""                                   # gRPC on this unix socket too (TiDB's binlog-socket)
    status_addr: Str = Field(default="127.0.0.1:8251", alias="status-addr")  # binlake: HTTP API on its own port
    data_dir: Str = Field(default="data.pump", alias="data-dir")
    pd_urls: UrlList = Field(default="http://127.0.0.1:2379", alias="pd-urls")
    registry: Str = ""   # binlake: file://PATH or etcd://HOST:PORT; "": PD's etcd at pd-urls, as TiDB Binlog's pump
    node_id: Str = Field(default="", alias="node-id")
    cluster_id: Int = Field(default=0, alias="cluster-id", ge=0)           # binlake: 0 = from PD (GetMembers)
    heartbeat_interval: Seconds = Field(default=2.0, alias="heartbeat-interval")
    gen_binlog_interval: Seconds = Field(default=3.0, alias="gen-binlog-interval")
    gc_retention: GCRetention = Field(default=7 * 86400.0, alias="gc")       # days or a duration; seconds here
    # binlake: TiDB's status API (lost commits); "": a TiDB alive in the registry (PD's etcd: ingest.topology)
    upstream_status_url: Str = Field(default="", alias="upstream-status-url")
    max_txn_timeout: Seconds = Field(default=600.0, alias="max-txn-timeout")  # binlake (TiDB's maxTxnTimeoutSecond)
    max_message_size: Int = Field(default=MAX_MESSAGE_SIZE, alias="max-message-size", gt=0)
    # binlake: serve binlake.v1.PumpScan beside TiDB's binlog.Pump; false leaves only TiDB's protocol, as
    # TiDB Binlog's pump serves it (drainers then read this pump through PullBinlogs)
    pump_scan: Bool = Field(default=True, alias="pump-scan")
    log_file: Str = Field(default="", alias="log-file")
    log_level: Str = Field(default="info", alias="log-level")
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)

    @property
    def registry_uri(self) -> str:
        """``registry``, else PD's etcd at ``pd-urls`` (where TiDB finds its pumps)."""
        return self.registry or self.pd_urls

    @property
    def advertise(self) -> str:
        """The address registered for clients: advertise-addr, else addr."""
        return self.advertise_addr or self.addr

    def validate_config(self) -> None:
        if self.advertise.split(":")[0] in ("", "0.0.0.0"):
            raise ValueError(f"advertise-addr {self.advertise!r} must name a reachable host, not 0.0.0.0")
