"""What ``binlake restore`` writes into: a target chosen by the scheme of ``--into``.

A restore rebuilds the upstream's tables as they were at one ts from the lake. The command reads the
lake; a :class:`RestoreTarget` makes the tables (``prepare``), hands Spark's executors a picklable
:class:`RowWriter` that loads rows into them, and records the result (``finish``: the MySQL target's
checkpoint row, the Iceberg target's commits). A sink's spec offers its target by scheme
(``SinkSpec.restore_schemes``, ``SinkSpec.restore_target``): a backend registers its sink and its
restore target with one line of :mod:`sink.registry`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow as pa

from ingest.config import TomlModel
from sink.errors import SinkError
from transform.changes import DDLJob
from transform.codec.model import TableInfo
from transform.filters import TableFilter


class RestoreError(SinkError):
    """A restore cannot start or complete: a malformed target URI, a target holding what it would
    create, a table it cannot rebuild (terminal)."""


@dataclass(frozen=True)
class RestoredTable:
    """A table alive at the restore's ts: its name then (``db.table``) and its TableInfo then."""

    db: str
    info: TableInfo

    @property
    def name(self) -> str:
        """``db.table``."""
        return f"{self.db}.{self.info.name}"


@dataclass(frozen=True)
class RestorePlan:
    """What a restore rebuilds: the upstream at ``ts``, the DDL jobs in effect by then (schema-version
    order, each with the ts it took effect at: its DDL binlog's commit ts, or its ``FinishedTS`` where
    the history lacks it), the tables alive then that the filter selects, the lake's cluster id."""

    ts: int
    jobs: Sequence[DDLJob]
    tables: Sequence[RestoredTable]
    table_filter: TableFilter
    cluster_id: int
    schema_version: int


class WriterSession(ABC):
    """One Spark task's use of a :class:`RowWriter`."""

    @abstractmethod
    def write(self, table: int, rows: pa.Table) -> None:
        """Load ``rows`` (the columns of ``RestorePlan.tables[table]`` at the ts, plus metadata columns
        the target may keep) into that table."""

    @abstractmethod
    def close(self) -> bytes:
        """Finish the task's writes; what the driver needs back (b"" when nothing)."""


class RowWriter(ABC):
    """Picklable: what a Spark task loads rows with."""

    @abstractmethod
    def open(self) -> WriterSession:
        """A session for one task (a connection, file writers)."""


class RestoreTarget(ABC):
    """A place a restore rebuilds tables in."""

    @abstractmethod
    def describe(self) -> str:
        """How reports name the target (no password)."""

    @abstractmethod
    def prepare(self, plan: RestorePlan, replace: bool) -> RowWriter:
        """Create the tables of ``plan`` as they were at its ts, empty; :class:`RestoreError` when the
        target already holds them, unless ``replace`` (then they are dropped first)."""

    @abstractmethod
    def finish(self, plan: RestorePlan, results: Sequence[bytes]) -> list[str]:
        """Complete the restore with what the tasks returned; notes for the report."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""


def target_for(uri: str, options: TomlModel | None = None) -> RestoreTarget:
    """The target ``--into`` names (``mysql://…``, ``tidb://…``, ``iceberg://NAMESPACE``, a registered
    sink's scheme), with its sink's section of ``options`` (the drainer configuration; None: defaults)."""
    from sink.registry import restore_schemes, spec_for_restore

    spec = spec_for_restore(uri)
    if spec is None:
        raise RestoreError(f"--into {urlsplit(uri).scheme or uri!r}: a restore writes into "
                           f"{', '.join(s + '://' for s in restore_schemes())}")
    return spec.restore_target(uri, spec.settings(options) if options is not None else spec.config())
