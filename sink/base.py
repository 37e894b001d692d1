"""The sink contract: take one run's :class:`transform.changes.RunBatch`, exactly once per table,
and keep the run checkpoint (the ``to_ts`` up to which every table is complete)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from transform.changes import RunBatch


@dataclass
class TableReport:
    """What a sink did to one upstream table in one run."""

    table: str                                           # "db.table"
    rows: dict[str, int] = field(default_factory=dict)   # op letter -> row changes written
    skipped: str = ""                                     # why the table was skipped ("" if written)
    ddl: list[str] = field(default_factory=list)          # DDLs applied (their queries)

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly dict for the run report."""
        return {"table": self.table, "rows": dict(self.rows), "skipped": self.skipped, "ddl": list(self.ddl)}


class Sink(ABC):
    """A destination for row changes. ``write`` is idempotent per table: a table whose stored
    markers show the run's range already written is skipped (``TableReport.skipped``)."""

    kind: str = ""
    # True for a sink that reads the run's transactions one by one (``transform.ordered``): the run's
    # frame then holds a record per transaction and table
    per_transaction: bool = False

    @abstractmethod
    def checkpoint(self) -> int | None:
        """The ``to_ts`` of the last run every table of which is written; None before the first run."""

    @abstractmethod
    def write(self, run: RunBatch) -> list[TableReport]:
        """Write every table of ``run``; each table commits atomically."""

    @abstractmethod
    def save_checkpoint(self, run: RunBatch) -> None:
        """Record that ``run.to_ts`` is complete (called only after :meth:`write` succeeded)."""

    # Optional hooks: not abstract on purpose, a sink overrides only those it needs.

    def check_cluster(self, cluster_id: int) -> None:
        """Raise when what the sink already holds came from another cluster (default: no check)."""
        return None

    def notes(self) -> list[str]:
        """What the last :meth:`write` wants the run report to say (default: nothing)."""
        return []

    def close(self) -> None:
        """Release connections (default: nothing to release)."""
        return None
