"""Named errors of TiDB's pump client (the messages are TiDB's where TiDB has one)."""
from __future__ import annotations


class PumpClientError(Exception):
    """The pump client (TiDB's side of WriteBinlog) could not do what it was asked."""


class NoPumpFound(PumpClientError):
    """The registry lists no pump at all (TiDB: "no pump found in pd")."""


class NoAvailablePump(PumpClientError):
    """No pump is available to take a prewrite (TiDB: "no avaliable pump to write binlog")."""


class BinlogTooLarge(PumpClientError):
    """A pump refused a binlog as larger than its max message size; never retried elsewhere."""


class WriteBinlogFailed(PumpClientError):
    """A prewrite binlog could not be written to any pump (TiDB: "write binlog failed, the last error …")."""


class PumpClientClosed(PumpClientError):
    """The pump client was closed before or during the write."""
