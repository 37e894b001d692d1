"""The Iceberg sink's finished plan of one run (:class:`WritePlan`): per upstream table, every
decision the run makes about its Iceberg tables, taken against the catalog as planning read it
(``sink.iceberg.planner`` makes it; ``sink.iceberg.tables`` and ``sink.iceberg.execute`` carry it out
without deciding anything again).

- :class:`TableWrite`: one :class:`~sink.iceberg.plan.TablePlan` (the run's metadata: ids, renames,
  drops) with the catalog steps its moves take, its changelog's write and its mirror's merge (None
  when the table is left alone, with the reason).
- :class:`ChangelogWrite` / :class:`MirrorWrite`: the table as it was planned against (its metadata
  location; None: it is created), the ts its rows start after, the transaction's schema and spec
  updates (``sink.iceberg.steps``), and for a mirror the TRUNCATE reset, the moved bucket, the
  merge's buckets, key epochs, backfill and the files it reads. An evolution Iceberg cannot follow is
  planned as ``refused``: the executor raises it at the table's commit, in its turn.
- A table whose metadata location differs at execution from the planned one was written by someone
  else in between: :class:`TableMovedError` (a concurrent run), never a silent re-plan.

``WritePlan.lines()`` is what ``binlake drain --dry-run`` prints for the Iceberg sink.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyiceberg.manifest import DataFile
from pyiceberg.types import IcebergType

from sink.iceberg import lineage, tasks
from sink.iceberg.commit import ConcurrentRunError
from sink.iceberg.plan import Ident, TablePlan
from sink.iceberg.steps import SchemaUpdate, SpecUpdate, Update


class TableMovedError(ConcurrentRunError):
    """A table is not what the run's plan was made against (another writer committed, created,
    renamed or dropped it in between): the run stops before writing it; a re-run plans again."""


def _name(ident: Ident) -> str:
    return ".".join(ident)


# ---------------------------------------------------------------------------------------------
# catalog moves

@dataclass(frozen=True)
class RenameTable:
    """Rename ``src`` (at metadata location ``expect``) to ``dst`` (absent)."""

    src: Ident
    dst: Ident
    expect: str

    def __str__(self) -> str:
        return f"rename {_name(self.src)} -> {_name(self.dst)}"


@dataclass(frozen=True)
class DropTable:
    """Drop ``ident`` (at metadata location ``expect``): a table ended without a DROP TABLE."""

    ident: Ident
    expect: str

    def __str__(self) -> str:
        return f"drop {_name(self.ident)}"


@dataclass(frozen=True)
class RecordMove:
    """Record a rename or drop in the ``_binlake`` namespace (idempotent)."""

    move: lineage.Move

    def __str__(self) -> str:
        return f"record {self.move.kind} {self.move.old} -> {self.move.new} at {self.move.ts}"


@dataclass(frozen=True)
class RefuseRename:
    """A RENAME TABLE whose target still holds another table: the run fails here, unless ``src`` or
    ``dst`` is no longer at the metadata location it was planned at (``src_expect``, ``dst_expect``):
    then another run moved them meanwhile, and the run fails as a concurrent one."""

    src: Ident
    src_expect: str
    dst: Ident
    dst_expect: str
    message: str

    def __str__(self) -> str:
        return f"refused: {self.message}"


CatalogStep = RenameTable | DropTable | RecordMove | RefuseRename


# ---------------------------------------------------------------------------------------------
# the tables' writes

def _updates(updates: tuple[Update, ...]) -> str:
    parts: list[str] = []
    for u in updates:
        if isinstance(u, SchemaUpdate):
            parts.extend(str(e) for e in u.edits)
        elif isinstance(u, SpecUpdate):
            parts.append(f"spec -{u.remove}" if u.remove else f"spec +bucket({u.add[1]}, {u.add[0]})" if u.add else "")
    return "; ".join(p for p in parts if p)


@dataclass(frozen=True)
class ChangelogWrite:
    """A changelog's part of the run: rows of ``segments`` after ``since`` appended."""

    ident: Ident
    expect: str | None                  # metadata location planned against; None: the table is created
    since: int
    segments: tasks.SegmentMap
    sources: frozenset[int]             # the table ids whose rows it takes
    updates: tuple[Update, ...] = ()
    refused: Exception | None = None    # the evolution Iceberg cannot follow (raised at the commit)

    def describe(self) -> str:
        what = "create, " if self.expect is None else ""
        if self.refused is not None:
            return f"{what}refused: {self.refused}"
        evolve = f", evolve: {_updates(self.updates)}" if self.updates else ""
        return f"{what}append rows after {self.since}{evolve}"


@dataclass(frozen=True)
class MirrorWrite:
    """A mirror's part of the run: the live id's changes after ``after`` merged per key bucket."""

    ident: Ident
    expect: str | None
    since: int                          # the mirror's progress within the run
    live_id: int
    reset: int | None                   # emptied at this TRUNCATE ts (0: it held another table id)
    respec: int | None                  # the bucket column moves to the new first key (its bucket count)
    keys: tuple[str, ...] = ()
    segments: tasks.SegmentMap | None = None
    buckets: int = 1
    bucket_type: IcebergType | None = None
    epochs: bool = False                # the run changes the key: merged in one task, epoch by epoch
    epoch_keys: Mapping[tuple[int, int], str] = field(default_factory=dict)
    backfill: bool = False              # every file rewritten (a default to fill, a rewritten column)
    files: tuple[DataFile, ...] = ()    # every file of the mirror as planned (all go after a reset)
    existing: Mapping[int, tuple[DataFile, ...]] = field(default_factory=dict)   # bucket → files the merge reads
    deletes: Mapping[str, tuple[DataFile, ...]] = field(default_factory=dict)   # data file path → its delete files
    merge_on_read: bool = False         # replaced rows go as position deletes (``sink.iceberg.tasks``)
    fold: bool = False                  # merge-on-read folds each bucket's small files and delete files
    old_map: Mapping[str, str] = field(default_factory=dict)   # TiDB column id → name before the run
    updates: tuple[Update, ...] = ()
    refused: Exception | None = None

    @property
    def after(self) -> int:
        """The ts the merged changes start after: the progress, or a later TRUNCATE."""
        return max(self.since, self.reset) if self.reset is not None else self.since

    def describe(self) -> str:
        what = "create, " if self.expect is None else ""
        if self.refused is not None:
            return f"{what}refused: {self.refused}"
        how = [f"merge changes after {self.after}"]
        if self.reset is not None:
            how.append(f"reset at {self.reset}" if self.reset else "reset (it held another table id)")
        if self.respec:
            how.append(f"bucket moves to {self.keys[0]}")
        how.append("key epochs in one task" if self.epochs else f"{self.buckets} bucket(s)")
        if not self.files:
            how.append("no files yet")
        elif self.reset is not None:
            how.append(f"all {len(self.files)} file(s) removed")
        else:
            how.append(f"{len(self.files)} file(s) in {len(self.existing)} bucket(s)")
        if self.backfill:
            how.append("backfill: every file rewritten")
        elif self.files and self.reset is None:
            how.append(("merge-on-read, folding" if self.fold else "merge-on-read") if self.merge_on_read
                       else "copy-on-write")
        if self.deletes:
            how.append(f"{len({d.file_path for ds in self.deletes.values() for d in ds})} delete file(s)")
        if self.updates:
            how.append(f"evolve: {_updates(self.updates)}")
        return what + ", ".join(how)


@dataclass(frozen=True)
class TableWrite:
    """One :class:`TablePlan` carried out: its catalog steps, then its changelog and mirror writes."""

    plan: TablePlan
    moves: tuple[CatalogStep, ...] = ()
    changelog: ChangelogWrite | None = None
    mirror: MirrorWrite | None = None
    changelog_skip: str = ""            # why the changelog is left alone ("": written, or nothing to write)
    mirror_skip: str = ""

    @property
    def skipped(self) -> str:
        """Why the table was left alone, as the run report says it ("" when something is written)."""
        if self.plan.live is None:
            return self.changelog_skip
        return self.changelog_skip if self.changelog_skip and self.mirror_skip else ""

    def lines(self) -> list[str]:
        """The table in a few lines: name and version, its moves, what happens to changelog and mirror."""
        p = self.plan
        head = f"{p.table} (schema version {p.version})"
        if p.info is None:
            head += ": dropped, no rows or DDL to write"
        elif self.skipped:
            head += f": skipped ({self.skipped})"
        out = [head]
        out.extend(f"  {m}" for m in self.moves)
        if p.info is None:
            return out
        log = self.changelog.describe() if self.changelog else f"skipped ({self.changelog_skip})"
        out.append(f"  changelog {_name(p.changelog)}: {log}")
        if p.live is None:
            out.append(f"  mirror {_name(p.mirror)}: none (the table ended in the range)")
        else:
            mirror = self.mirror.describe() if self.mirror else f"skipped ({self.mirror_skip})"
            out.append(f"  mirror {_name(p.mirror)}: {mirror}")
        return out


@dataclass(frozen=True)
class WritePlan:
    """Every table of one run (``(from_ts, to_ts]``), in the order the sink works on them."""

    from_ts: int
    to_ts: int
    tables: tuple[TableWrite, ...]

    def lines(self) -> list[str]:
        """The human-readable plan: a heading, then each table's lines."""
        out = [f"iceberg write plan ({self.from_ts}, {self.to_ts}]: {len(self.tables)} table(s)"]
        for t in self.tables:
            out.extend(f"  {line}" for line in t.lines())
        return out

    def describe(self) -> str:
        return "\n".join(self.lines())
