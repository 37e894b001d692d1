"""upstream.toml: the emulator's options (TOML keys = the flags of ``binlake-emulator serve``; flags
override the file, unknown keys are an error; ``ingest.config.load_config``)."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from ingest.config import Bool, Int, Str, TomlModel
from upstream.tuning import DEFAULT_GC_THRESHOLD

PUMP_CLIENT_MODES = ("thread", "process")
WORKLOADS = ("", "mixed", "churn")


def _one_of(choices: tuple[str, ...]) -> BeforeValidator:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(repr(c) if not c else c for c in choices)}, got {value!r}")
        return str(value)
    return BeforeValidator(check)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {value!r}")
    if value < 0:
        raise ValueError(f"expected a number >= 0, got {value!r}")
    return float(value)


Number = Annotated[float, BeforeValidator(_number)]


class UpstreamConfig(TomlModel):
    """Options of ``binlake-emulator serve``."""

    tso_addr: Str = Field("127.0.0.1:2379", alias="tso-addr")
    status_addr: Str = Field("127.0.0.1:10080", alias="status-addr")
    mysql_addr: Str = Field("127.0.0.1:4000", alias="mysql-addr")   # MySQL protocol port; empty: none
    registry: Str = ""                                   # empty: binlog disabled
    cluster_id: Int = Field(6_000_000_000_000_000_001, alias="cluster-id", gt=0)
    servers: Int = Field(1, ge=1)
    clustered_default: Bool = Field(False, alias="clustered-default")
    ignore_error: Bool = Field(False, alias="ignore-error")
    workload: Annotated[str, _one_of(WORKLOADS)] = ""
    rate: Number = 100.0                                 # transactions per second (0 = as fast as possible)
    duration: Number = 0.0                               # seconds of workload (0 = until stopped)
    seed: Int = 1
    workers: Int = Field(4, ge=1)
    ddl_interval: Number = Field(5.0, alias="ddl-interval")  # seconds between workload DDLs (0 = none)
    log_level: Str = Field("info", alias="log-level")
    cpu_affinity: Str = Field("", alias="cpu-affinity")   # CPUs to pin the process to ("0", "0,2", "1-3")
    gc_threshold: Int = Field(DEFAULT_GC_THRESHOLD, alias="gc-threshold", ge=0)  # 0 = CPython's default
    pump_client: Annotated[str, _one_of(PUMP_CLIENT_MODES)] = Field("thread", alias="pump-client")
