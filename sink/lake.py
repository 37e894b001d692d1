"""The store a sink writes, as the commands that read and keep it see it: a sink whose capabilities
say ``lake`` gives a :class:`Lake` through its spec (:meth:`sink.plugin.SinkSpec.lake`).
``binlake maintain`` and ``binlake check`` work on it, and ``binlake restore`` reads the upstream's
tables at a ts out of it (:meth:`Lake.point_in_time`), so none of them names a backend.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sink.restore import RestorePlan, RowWriter
    from transform.history import SchemaHistory

DAY_MS = 86_400_000
DEFAULT_RETENTION_MS = 7 * DAY_MS
DEFAULT_TAG_RETENTION_MS = 30 * DAY_MS
DEFAULT_ORPHAN_AGE_MS = 3 * DAY_MS


@dataclass(frozen=True)
class MaintainOptions:
    """What to keep. Ages are milliseconds; ``now_ms`` (default: the clock when maintenance starts)
    is the time they are measured from."""

    retention_ms: int = DEFAULT_RETENTION_MS
    tag_retention_ms: int = DEFAULT_TAG_RETENTION_MS
    orphan_age_ms: int = DEFAULT_ORPHAN_AGE_MS
    dry_run: bool = False
    now_ms: int | None = None


class TableDone(Protocol):
    """One table's maintenance, as ``progress`` receives it."""

    def format(self, dry_run: bool = False) -> str:
        """One line for the command's output."""


class CheckResult(Protocol):
    """The quality gates of one run."""

    @property
    def ok(self) -> bool:
        """Every expectation held."""

    def format(self) -> str:
        """The summary the command prints."""


class LocatedTable(Protocol):
    """One table of a restore as the lake holds it at the restore's ts."""

    @property
    def name(self) -> str:
        """``db.table`` at the ts."""

    def origin(self) -> str:
        """Where its rows come from, for the report (e.g. ``mirror at T + changelog (a, T]``)."""

    @property
    def base_ts(self) -> int | None:
        """The run end of the stored state its rows start from (None: it starts empty)."""

    @property
    def tail_from(self) -> int | None:
        """Changes in ``(tail_from, ts]`` are applied over the base (None: none are)."""

    @property
    def notes(self) -> list[str]:
        """What the report says about it beside the count (how it was restored, what it lacks)."""


class PointInTime(ABC):
    """The tables of one restore plan located in the lake (:meth:`Lake.point_in_time`)."""

    tables: Sequence[LocatedTable]

    @abstractmethod
    def load(self, spark: SparkSession, writer: RowWriter) -> tuple[dict[int, int], list[bytes]]:
        """Every table's rows at the ts written with ``writer`` by Spark's executors: rows per index
        of :attr:`tables`, and what each task's writer session returned."""

    @abstractmethod
    def input_bytes(self) -> int:
        """The bytes of the lake's files a load reads."""

    @abstractmethod
    def load_here(self, writer: RowWriter, workers: int) -> tuple[dict[int, int], list[bytes]]:
        """:meth:`load` without Spark, in this process on ``workers`` threads (for a small load)."""


class Lake(ABC):
    """The operations on what one sink wrote (see the module doc)."""

    @abstractmethod
    def describe(self) -> str:
        """Where it is, as the commands print it."""

    @abstractmethod
    def checkpoint(self) -> int | None:
        """The ts the sink holds everything up to (None before the first run)."""

    @abstractmethod
    def maintain(self, spark: Callable[[], SparkSession], options: MaintainOptions,
                 tables: Sequence[tuple[str, str]], progress: Callable[[TableDone], None]) -> dict[str, Any]:
        """Expire, compact and clean every table the sink wrote (or those of the upstream ``tables``);
        ``spark()`` is asked for only when there is something to rewrite; the report (JSON)."""

    @abstractmethod
    def check_run(self, spark: SparkSession, report: Mapping[str, Any], history: SchemaHistory | None,
                  out_dir: Path, tables: list[str] | None) -> CheckResult:
        """The quality gates of the run ``report`` describes, their results saved in ``out_dir``;
        ``tables`` (``db.table``) limits them. ImportError when the gates' library is missing."""

    @abstractmethod
    def cluster_id(self) -> int | None:
        """The upstream cluster the lake holds (None before the first run)."""

    @abstractmethod
    def ddl_history(self) -> SchemaHistory | None:
        """The upstream's DDL history as the lake holds it, every job up to its checkpoint placed at
        its DDL binlog's commit ts (:meth:`sink.base.Sink.record_history`); None when the lake holds
        none (it was written before the sink recorded one)."""

    @abstractmethod
    def check_restorable(self, ts: int) -> None:
        """A :class:`~sink.errors.SinkError` naming the lake's range unless it can restore ``ts``."""

    @abstractmethod
    def point_in_time(self, plan: RestorePlan, began: Sequence[int], history: SchemaHistory) -> PointInTime:
        """Where the rows of ``plan.tables`` at ``plan.ts`` are; ``began[i]`` is the position of the DDL
        that created table ``i``'s id (0 when the history has none)."""
