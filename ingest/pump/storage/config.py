"""``[storage]`` of pump.toml: the store's tunables (TiDB Binlog's names and defaults where it has them)."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from ingest.config import Bool, ByteSize, Int, Interval, Seconds, TomlModel, noted
from ingest.pump.storage.recent import DEFAULT_CAPACITY

_LEVELDB = "binlake's pump stores in LevelDB (plyvel) with its own defaults; TiDB's goleveldb tunable is not used"


class KVConfig(TomlModel):
    """``[storage.kv]``: TiDB's goleveldb tunables, accepted (with a warning) so existing pump.toml files load."""

    block_cache_capacity: Any = noted("block-cache-capacity", _LEVELDB)
    block_restart_interval: Any = noted("block-restart-interval", _LEVELDB)
    block_size: Any = noted("block-size", _LEVELDB)
    compaction_l0_trigger: Any = noted("compaction-L0-trigger", _LEVELDB)
    compaction_table_size: Any = noted("compaction-table-size", _LEVELDB)
    compaction_total_size: Any = noted("compaction-total-size", _LEVELDB)
    compaction_total_size_multiplier: Any = noted("compaction-total-size-multiplier", _LEVELDB)
    write_buffer: Any = noted("write-buffer", _LEVELDB)
    write_l0_pause_trigger: Any = noted("write-L0-pause-trigger", _LEVELDB)
    write_l0_slowdown_trigger: Any = noted("write-L0-slowdown-trigger", _LEVELDB)


class StorageConfig(TomlModel):
    """The store's tunables."""

    sync_log: Bool = Field(default=True, alias="sync-log")
    index_queue_size: Int = Field(default=65536, alias="kv_chan_cap", gt=0)
    slow_write_threshold: Seconds = Field(default=1.0, alias="slow_write_threshold")
    stop_write_at_available_space: ByteSize = Field(default=10 << 30, alias="stop-write-at-available-space", ge=0)
    # binlake: while writes from an event loop arrive concurrently (the last group commit held more
    # than one), start at most one group commit per this many seconds, so each holds more calls
    # (fewer syncs and thread wake-ups per call; bench/pump_write.py: 2.6 -> 6.8 binlogs per group
    # commit, ~20 % less pump CPU per call). A lone writer is never held. 0 disables.
    group_commit_interval: Interval = Field(default=0.0005, alias="group-commit-interval")
    # binlake: the newest index entries kept in memory for range scans (29 bytes each; 0 disables).
    scan_cache_entries: Int = Field(default=DEFAULT_CAPACITY, alias="scan-cache-entries", ge=0)
    kv: KVConfig = Field(default_factory=KVConfig)
