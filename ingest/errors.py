"""Named errors of the ingest stage."""
from __future__ import annotations


class IngestError(Exception):
    """Base class of every error raised by ``ingest``."""


class MalformedBinlog(IngestError):
    """A payload does not decode as a ``binlog.Binlog``."""


class NotOnline(IngestError):
    """A prewrite arrived while the pump is not online."""


class DiskFull(IngestError):
    """Free disk space is below ``stop-write-at-available-space``."""


class StorageLocked(IngestError):
    """Another process holds the data directory's lock."""


class DataDirError(IngestError):
    """The data directory cannot be used: not writable, another cluster's, or its index is corrupted."""


class StorageClosed(IngestError):
    """The storage was closed while a request was waiting."""


class CorruptRecord(IngestError):
    """A value-log record failed its magic or CRC32C check."""


class MalformedBatch(IngestError):
    """A range-scan RecordBatch does not hold what its columns describe."""


class RegistryError(IngestError):
    """The registry could not be read or written."""


class NodeNotFound(RegistryError):
    """No node with that id is registered."""


class TSOError(IngestError):
    """The PD timestamp oracle could not be reached or answered an error."""


class CtlError(IngestError):
    """A ``binlake ctl`` command failed: a node refused or could not be reached, or bad arguments."""
