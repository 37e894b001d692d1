"""Pump storage: value log (vlog), LevelDB index (index), pairing/watermark (sorter), facade (storage)."""
from ingest.pump.storage.config import StorageConfig
from ingest.pump.storage.index import Entry
from ingest.pump.storage.storage import Storage
from ingest.pump.storage.vlog import Pointer

__all__ = ["Entry", "Pointer", "Storage", "StorageConfig"]
