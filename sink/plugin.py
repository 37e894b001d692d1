"""What a sink is to the ``drain`` and ``verify`` commands: a registered :class:`SinkSpec`.

A spec names the sink (``--sink`` / ``[syncer] db-type`` values), declares its own
configuration section (a :class:`~ingest.config.TomlModel` with its defaults, composed into
drainer.toml by the drain command), the command-line flags that set keys of that section, what the
sink can do (:class:`Capabilities`), and opens it: :meth:`SinkSpec.open` returns a
:class:`~sink.base.Sink` with its state loaded. Optional hooks recover a sink without the upstream
(:meth:`SinkSpec.recover`), compare what it holds with the upstream (:meth:`SinkSpec.verifier`) and
rebuild the upstream's tables at a ts from the lake in the sink's kind of store (:meth:`SinkSpec.restore_target`),
and give the lake a sink keeps (:meth:`SinkSpec.lake`: what ``maintain``, ``check`` and ``restore`` read).
The specs of the sinks binlake ships are listed in :mod:`sink.registry`, one line each.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ingest.config import TomlModel
from sink.base import Sink
from sink.compare import Expired
from sink.verify_report import VerifyReport
from transform.event_filter import EventFilter
from transform.filters import TableFilter

if TYPE_CHECKING:

    from sink.lake import Lake
    from sink.restore import RestoreTarget

C = TypeVar("C", bound=TomlModel)


@dataclass(frozen=True)
class Capabilities:
    """What a sink can do; the drain and verify commands ask these instead of the sink's name."""

    per_transaction: bool = False       # reads the run's transactions one by one, in commit order
    table_subsets: bool = True          # a run may be restricted to some tables (--tables)
    lake: bool = False                  # keeps a lake (its spec's ``lake``): ``binlake maintain``, ``check`` and
                                        # ``restore`` (which reads the upstream's tables at a ts out of it)
    verify: bool = False                # ``binlake verify`` can compare what it holds with the upstream
    recovery_without_upstream: bool = False   # :meth:`SinkSpec.recover` can run while the upstream is down
    replays_ddl: bool = False           # runs each DDL statement downstream (else it rebuilds tables from rows)
    skips_commit_ts: bool = False       # leaves out [syncer] ignore-txn-commit-ts itself, DDL too (else the drain
                                        # leaves out those transactions and refuses a DDL among them)
    starts_now: bool = False            # never written, it starts at PD's ts of its first run unless
                                        # initial-commit-ts says otherwise (TiDB Binlog's default); else at 0


@dataclass(frozen=True)
class Flag:
    """A command-line flag of ``binlake drain`` (and ``verify`` when ``shared``) that sets ``key``, a
    dotted drainer.toml key of the sink's section. ``kind``: ``value`` (typed by ``type``), ``switch``
    (sets true) or ``pairs`` (repeatable KEY=VALUE, a table)."""

    flag: str
    key: str
    help: str
    kind: str = "value"
    type: Callable[[str], Any] = str
    metavar: str | None = None
    short: str | None = None
    shared: bool = False


@dataclass
class SinkContext(Generic[C]):
    """Everything a sink is opened with: its name as chosen, its config section, the cluster the run
    reads (None while unknown, e.g. without PD), the table filter, whether the run is a dry run
    (which must change nothing: no directory, table or row is created), and the binlog event filter
    (the drain leaves out the row changes it ignores; a sink that replays DDL skips the DDL it ignores)."""

    name: str
    settings: C
    cluster_id: int | None = None
    dry_run: bool = False
    table_filter: TableFilter = field(default_factory=TableFilter)
    data_dir: str = ""
    event_filter: EventFilter = field(default_factory=EventFilter)


@dataclass(frozen=True)
class Recovery:
    """What :meth:`SinkSpec.recover` did (or, in a dry run, would do): ``records`` replayed after
    ``from_ts``, leaving the sink consistent at ``to_ts``, for ``cluster_id``."""

    cluster_id: int
    from_ts: int
    to_ts: int
    records: int


class Verifier(ABC):
    """Compares what a sink holds with the upstream read at a ts."""

    @abstractmethod
    def checkpoint(self) -> int | None:
        """The ts to compare at when none is given (the sink's checkpoint); None before the first run."""

    @abstractmethod
    def compare(self, upstream: Mapping[str, list[dict[str, Any]]], ts: int,
                tables: Sequence[str] | None, expired: Mapping[str, Expired] | None = None) -> VerifyReport:
        """Compare ``upstream`` (table name → rows at ``ts``) with the sink at ``ts``; ``tables`` limits it;
        ``expired``: per table with TTL, the rows the upstream's TTL had expired (``compare_rows``)."""

    def notes(self) -> list[str]:
        """Lines to print before the report (default: none)."""
        return []

    def close(self) -> None:
        """Release connections (default: nothing)."""
        return None


class SinkSpec(ABC, Generic[C]):
    """One sink as the commands see it (see the module doc)."""

    names: tuple[str, ...] = ()           # --sink / db-type values; the first is the canonical one
    section: str = ""                      # its drainer.toml table; "syncer" adds keys to [syncer]
    config: type[C]                        # that table's model
    flags: tuple[Flag, ...] = ()
    capabilities: Capabilities = Capabilities()
    against_schemes: tuple[str, ...] = ()  # ``verify --against SCHEME://…`` compares this sink
    restore_schemes: tuple[str, ...] = ()  # ``restore --into SCHEME://…`` rebuilds tables in this sink's store

    def settings(self, options: TomlModel) -> C:
        """This sink's section of a drainer configuration (its defaults when the section is absent)."""
        found = getattr(options, self.section, None) if self.section else None
        return found if isinstance(found, self.config) else self.config()

    @abstractmethod
    def open(self, ctx: SinkContext[C]) -> Sink:
        """The sink with its state loaded (checkpoint; for a known cluster, refusing another cluster's
        state). A dry run opens it read-only and creates nothing."""

    def recover(self, ctx: SinkContext[C], cause: Exception) -> Recovery | None:
        """Bring the sink to a consistent state without the upstream (``cause`` says why it is out of
        reach); None when there is nothing to recover. Only when ``recovery_without_upstream``."""
        return None

    def restore_target(self, uri: str, settings: C) -> RestoreTarget:
        """The restore target ``uri`` names (its scheme one of :attr:`restore_schemes`); ``settings`` is
        this sink's section of the drainer configuration."""
        raise NotImplementedError(f"the {self.names[0]} sink is no restore target")

    def lake(self, settings: C) -> Lake:
        """What ``binlake maintain``, ``check`` and ``restore`` work on (only when ``lake``)."""
        raise NotImplementedError(f"the {self.names[0]} sink keeps no lake")

    def verifier(self, ctx: SinkContext[C], against: str | None) -> Verifier:
        """What compares this sink with the upstream; ``against`` is a URI of :attr:`against_schemes`."""
        raise NotImplementedError(f"the {self.names[0]} sink has no verifier")
