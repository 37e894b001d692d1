"""The file sink's keys of drainer.toml: ``[syncer.to]`` ``dir`` and ``retention-time``."""
from __future__ import annotations

from sink.syncer_to import SyncerKeys

SEGMENT_SIZE = 512 * 1024 * 1024    # TiDB Binlog's binlogger: a new file past 512 MiB


class FileSettings(SyncerKeys):
    """The file sink's part of ``[syncer]``: :class:`~sink.syncer_to.SyncerKeys` (``[syncer.to]``
    ``dir`` and ``retention-time``; ``sync-ddl`` false: no DDL record)."""
