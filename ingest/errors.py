"""Named errors of the ingest stage (kinds: ``schemas.errors``; terminal unless marked transient)."""
from __future__ import annotations

from schemas.errors import BinlakeError


class IngestError(BinlakeError):
    """Base class of every error raised by ``ingest``."""


class MalformedBinlog(IngestError):
    """A payload does not decode as a ``binlog.Binlog``."""


class NotOnline(IngestError):
    """A prewrite arrived while the pump is not online."""

    transient = True


class DiskFull(IngestError):
    """Free disk space is below ``stop-write-at-available-space`` (GC frees space: transient)."""

    transient = True


class StorageLocked(IngestError):
    """Another process holds the data directory's lock (it may let go: transient)."""

    transient = True


class DataDirError(IngestError):
    """The data directory cannot be used: not writable, another cluster's, or its index is corrupted."""


class IndexUnavailable(IngestError):
    """A write to the pump's LevelDB index failed (ENOSPC, an I/O error), or the index cannot be
    reopened after one yet (too little free space, or the open failed). Writes are retried; a read
    caught by the reopen gives up after a while (transient)."""

    transient = True


class StorageClosed(IngestError):
    """The storage was closed while a request was waiting (the pump is stopping: transient)."""

    transient = True


class CorruptRecord(IngestError):
    """A value-log record failed its magic or CRC32C check."""


class MalformedBatch(IngestError):
    """A range-scan RecordBatch does not hold what its columns describe."""


class RegistryError(IngestError):
    """The registry could not be read or written (transient: mostly etcd or the file unreachable; a
    corrupt entry raises it too)."""

    transient = True


class NodeNotFound(RegistryError):
    """No node with that id is registered."""

    transient = False


class TSOError(IngestError):
    """The PD timestamp oracle could not be reached or answered an error."""

    transient = True


class CtlError(IngestError):
    """A ``binlake ctl`` command failed: a node refused or could not be reached, or bad arguments."""
