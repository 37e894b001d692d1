"""``conf/upstream.toml``: the emulator's options (TOML keys = the CLI flags' names). Unknown keys are an error."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from typing import Any

from upstream.errors import UpstreamError
from upstream.tuning import DEFAULT_GC_THRESHOLD


PUMP_CLIENT_MODES = ("thread", "process")


@dataclass
class UpstreamOptions:
    """Options of ``binlake upstream``."""

    tso_addr: str = "127.0.0.1:2379"
    status_addr: str = "127.0.0.1:10080"
    registry: str = ""                       # empty: binlog disabled
    cluster_id: int = 6_000_000_000_000_000_001
    servers: int = 1
    clustered_default: bool = False
    ignore_error: bool = False
    workload: str = ""                       # "", "mixed" or "churn"
    rate: float = 100.0                      # transactions per second (0 = as fast as possible)
    duration: float = 0.0                    # seconds of workload (0 = until stopped)
    seed: int = 1
    workers: int = 4
    ddl_interval: float = 5.0                # seconds between workload DDLs (0 = none)
    log_level: str = "info"
    cpu_affinity: str = ""                   # CPUs to pin the process to ("0", "0,2", "1-3"); "" = any
    gc_threshold: int = DEFAULT_GC_THRESHOLD # first-generation GC threshold (0 = CPython's default)
    pump_client: str = "thread"              # "thread": in this process; "process": a child per server


def load_options(path: str | None, overrides: dict[str, Any]) -> UpstreamOptions:
    """Defaults, then the TOML file, then non-None ``overrides`` (keys with dashes or underscores)."""
    known = {f.name for f in fields(UpstreamOptions)}
    values: dict[str, Any] = {}
    if path:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
        for k, v in doc.items():
            name = k.replace("-", "_")
            if name not in known:
                raise UpstreamError(f"{path}: unknown key {k!r}")
            values[name] = v
    for k, v in overrides.items():
        name = k.replace("-", "_")
        if v is not None and name in known:
            values[name] = v
    opts = UpstreamOptions(**values)
    if opts.pump_client not in PUMP_CLIENT_MODES:
        raise UpstreamError(f"pump-client {opts.pump_client!r}: expected one of {', '.join(PUMP_CLIENT_MODES)}")
    return opts
