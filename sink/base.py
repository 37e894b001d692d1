"""The sink contract: take one run's :class:`transform.changes.RunBatch`, exactly once per table,
and keep the run checkpoint (the ``to_ts`` up to which every table is complete); tell a
:class:`SinkObserver` what writing took (the drainer's metrics)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from sink.errors import SinkError

if TYPE_CHECKING:
    from transform.changes import RunBatch
    from transform.history import SchemaHistory


class TableReport(BaseModel):
    """What a sink did to one upstream table in one run (a part of the run report)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    table: str = Field(description='"db.table"')
    rows: dict[str, int] = Field(default_factory=dict, description="op letter (I, U, D) -> row changes written")
    skipped: str = Field(default="", description='why the table was skipped ("" if written)')
    ddl: list[str] = Field(default_factory=list, description="DDLs applied (their queries)")


class SinkObserver:
    """Hears what a sink's :meth:`Sink.write` took (TiDB Binlog's drainer measures the same); this
    base class hears nothing. Methods may be called from the sink's worker threads."""

    def executed(self, seconds: float) -> None:
        """One item was handed to the downstream in ``seconds``. The MySQL sink's items are each
        upstream transaction (its DMLs given to the loader, with the wait for the batch in flight when
        that hand-over flushes, and any DDL that had to run before it) and each DDL binlog (the flush
        before it and its execution); a lake sink's one item is the whole run (its Spark pass and
        every table's commit)."""

    def queried(self, kind: str, seconds: float) -> None:
        """One downstream statement (``kind`` ``exec``), commit (``commit``) or loopback mark
        (``update_mark_table``) of the MySQL sink's workers took ``seconds``."""

    def dispatched(self, sizes: Sequence[int]) -> None:
        """A flush of the MySQL sink handed ``sizes[i]`` DMLs to worker ``i``."""


class Sink(ABC):
    """A destination for row changes. ``write`` is idempotent per table: a table whose stored
    markers show the run's range already written is skipped (``TableReport.skipped``). ``observer``
    hears what writing took (set it before :meth:`write`)."""

    observer: SinkObserver = SinkObserver()

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

    def notes(self) -> list[str]:
        """What the last :meth:`write` wants the run report to say (default: nothing)."""
        return []

    def record_history(self, history: SchemaHistory, run: RunBatch) -> None:
        """Keep the DDL jobs ``run`` applied (and those before its range the sink lacks), before its
        checkpoint moves: a sink that keeps a lake reads its history from there (default: nothing)."""
        return None

    def close(self) -> None:
        """Release connections (default: nothing to release)."""
        return None


@runtime_checkable
class PlansWrites(Protocol):
    """A sink that can say, writing nothing, what :meth:`Sink.write` would do to each table of a run
    (a dry run computes the run and prints it)."""

    def plan_lines(self, run: RunBatch) -> list[str]:
        """What writing ``run`` would do, one or a few lines per table; nothing is written or created."""
        ...


class CheckpointOnly(Sink):
    """What a dry run opens: the checkpoint a sink holds, read without creating anything; writing
    is refused."""

    def __init__(self, checkpoint: int | None) -> None:
        self._checkpoint = checkpoint

    def checkpoint(self) -> int | None:
        return self._checkpoint

    def write(self, run: RunBatch) -> list[TableReport]:
        raise SinkError("a dry run writes nothing")

    def save_checkpoint(self, run: RunBatch) -> None:
        raise SinkError("a dry run writes nothing")
