"""Named errors of the upstream emulator.

Every error a client can cause is an :class:`UpstreamError`; its ``code``/``text`` follow TiDB's
``[class:code]message`` spelling where TiDB has one.
"""
from __future__ import annotations


class UpstreamError(Exception):
    """Base class of every error the emulator raises on purpose."""


class UnsupportedSQL(UpstreamError):
    """A statement (or a construct inside one) the emulator does not implement; the message names it."""

    def __init__(self, construct: str, statement: str = "") -> None:
        self.construct = construct
        self.statement = statement
        super().__init__(f"unsupported SQL: {construct}" + (f" in {statement[:120]!r}" if statement else ""))


class SQLError(UpstreamError):
    """A statement that is well-formed but invalid here (unknown table, duplicate key, bad value)."""


class TxnAborted(UpstreamError):
    """The transaction failed during two-phase commit and was rolled back (a Rollback binlog was sent
    when its prewrite binlog had been stored)."""

    def __init__(self, message: str, start_ts: int = 0) -> None:
        self.start_ts = start_ts
        super().__init__(message)


class WriteConflict(TxnAborted):
    """Another transaction wrote (or holds a lock on) a key this one writes, after its start ts."""


class SchemaChanged(TxnAborted):
    """A DDL changed a table the transaction wrote between its start and its commit."""


class BinlogWriteFailed(TxnAborted):
    """The prewrite binlog could not be stored by any pump (TiDB's ErrCritical)."""


class ServerCrashed(UpstreamError):
    """Fault injection: the server "crashed" after the KV commit and before sending the commit binlog.

    The transaction IS committed (``commit_ts``); its pump must resolve it through ``/mvcc/hex``."""

    def __init__(self, start_ts: int, commit_ts: int) -> None:
        self.start_ts = start_ts
        self.commit_ts = commit_ts
        super().__init__(f"server crashed after committing txn {start_ts} at {commit_ts}, "
                         f"before its commit binlog was sent")
