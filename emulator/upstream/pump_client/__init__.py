"""TiDB's pump client: writes binlogs to the pumps a registry lists (prewrite anywhere, commit where the prewrite went).

``PumpsClient`` is what TiDB embeds (tidb-tools ``pump_client``); the upstream emulator uses it for 2PC.
"""
from __future__ import annotations

from upstream.pump_client.channel import MAX_MESSAGE, TRANSPORTS
from upstream.pump_client.client import (
    CHECK_INTERVAL,
    COMMIT_BINLOG_TIMEOUT,
    COMMIT_RETRY_INTERVAL,
    DEFAULT_BINLOG_WRITE_TIMEOUT,
    NO_AVAILABLE_PUMP,
    NO_PUMP_FOUND,
    RETRY_INTERVAL,
    WATCH_INTERVAL,
    PumpsClient,
)
from upstream.pump_client.node import DEFAULT_MAX_ERR_NUMS, PumpNode, PumpWriteError
from upstream.pump_client.selector import HASH, RANGE, HashSelector, RangeSelector, Selector, hash_ts, new_selector

__all__ = [
    "CHECK_INTERVAL", "COMMIT_BINLOG_TIMEOUT", "COMMIT_RETRY_INTERVAL", "DEFAULT_BINLOG_WRITE_TIMEOUT",
    "DEFAULT_MAX_ERR_NUMS", "HASH", "MAX_MESSAGE", "NO_AVAILABLE_PUMP", "NO_PUMP_FOUND", "RANGE",
    "RETRY_INTERVAL", "TRANSPORTS", "WATCH_INTERVAL", "HashSelector", "PumpNode", "PumpWriteError", "PumpsClient",
    "RangeSelector", "Selector", "hash_ts", "new_selector",
]
