"""What a run does to the Iceberg tables, decided without a catalog or Spark.

:func:`plan_run` reads the run's metadata (``RunBatch.tables``: table ids, segments, DDL events)
and returns one :class:`TablePlan` per upstream table name, in the order the sink works on them:

- Table ids are grouped per name: TRUNCATE gives a table a new id, and both ids are one lineage
  written to the same Iceberg tables (:func:`groups`).
- A name dropped and taken again in the range (DROP then CREATE, or RENAME … TO it) is two plans,
  the dropped table's first: it sets the name's tables aside before the new ones are created.
- A table renamed away from a name comes before the table that takes the name
  (``RENAME TABLE a TO b`` then ``CREATE TABLE a``, :func:`vacated_first`).

A plan says which RENAME TABLEs move its Iceberg tables into its name (:class:`Rename`), which
lineage moves to record, what a DROP sets aside (:class:`Drop`), the changelog it appends to (every
table with a TableInfo) and the mirror it merges into (a table alive at the end of the range).

The decisions that depend on what the catalog holds are functions of a table's properties and
metadata (data, no I/O): how far a table already is (:func:`progress`), whether the mirror starts
over (:func:`reset_ts`), whether its bucket column moves (:func:`moving_bucket`), how many buckets
the merge routes to (:func:`merge_buckets`), whether every file is rewritten (:func:`needs_backfill`).
``sink.iceberg.planner`` takes them against the catalog, once per run, into the run's
``sink.iceberg.write_plan.WritePlan``; nothing that executes the plan calls them.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import IcebergType

from sink import changelog as fmt
from sink.iceberg import lineage
from sink.iceberg import schema as ks
from transform import changes as ch
from transform.codec.model import TableInfo
from transform.history import DROP_SCHEMA, DROP_TABLE, RENAME_TABLE, TRUNCATE_TABLE

Ident = tuple[str, str]
ENDING = (DROP_SCHEMA, DROP_TABLE, TRUNCATE_TABLE)   # DDLs after which a table id has no rows
DROPS = (DROP_TABLE, DROP_SCHEMA)


@dataclass
class Group:
    """The table ids of a run that go to one upstream table name's Iceberg tables."""

    db: str
    name: str
    parts: list[ch.TableChanges] = field(default_factory=list)

    @property
    def live(self) -> ch.TableChanges | None:
        """The id alive at the end of the range (the newest one), None when every id ended."""
        alive = [p for p in self.parts if p.final is not None]
        return max(alive, key=lambda p: max((e.commit_ts for e in p.events), default=0)) if alive else None

    @property
    def events(self) -> list[ch.DDLEvent]:
        """The DDL events of every id, in commit order."""
        return sorted((e for p in self.parts for e in p.events), key=lambda e: e.commit_ts)


@dataclass(frozen=True)
class Rename:
    """RENAME TABLE ``old`` TO ``new``: both Iceberg tables (mirror and changelog) of ``old`` move."""

    old: Ident
    new: Ident


@dataclass(frozen=True)
class Drop:
    """What the end of a table in the range does to its name's Iceberg tables: DROP TABLE at
    ``drop_ts`` keeps the mirror as ``kept`` and the changelog as ``aside`` (the name is free for a
    table created or renamed into it later); an end without a DROP (``drop_ts`` None) drops the mirror.

    ``successors`` are the ids that take the name later in the range: a table recording one of them
    is already the new table (a crashed attempt created it) and stays where it is."""

    drop_ts: int | None
    kept: Ident | None
    aside: Ident | None
    successors: frozenset[int] = frozenset()

    def moves(self, properties: Mapping[str, str]) -> bool:
        """True when the table with these properties is the dropped one (not its successor)."""
        return properties.get(fmt.TABLE_ID_KEY) not in {str(i) for i in self.successors}


@dataclass(frozen=True)
class TablePlan:
    """One upstream table's share of the run (see the module doc)."""

    group: Group
    renames: list[Rename]               # RENAME TABLE into this name, in commit order
    moves: list[lineage.Move]           # renames to record in the ``_binlake`` namespace
    drop: Drop | None                   # the table ended in the range
    info: TableInfo | None              # the TableInfo the tables take (None: dropped with no rows or DDL to write)
    version: int                        # the newest schema version of the rows and DDL

    @property
    def table(self) -> str:
        """``db.table``: the name the run report gives."""
        return f"{self.group.db}.{self.group.name}"

    @property
    def mirror(self) -> Ident:
        return self.group.db, self.group.name

    @property
    def changelog(self) -> Ident:
        """The changelog the rows go to: set aside already when the table was dropped."""
        if self.drop is not None and self.drop.aside is not None:
            return self.drop.aside
        return self.group.db, fmt.changelog_name(self.group.name)

    @property
    def live(self) -> ch.TableChanges | None:
        """The id whose changes the mirror merges (None: the table was dropped, only the changelog is written)."""
        return self.group.live

    @property
    def events(self) -> list[ch.DDLEvent]:
        return self.group.events

    @property
    def source_ids(self) -> set[int]:
        """The table ids whose rows the changelog takes."""
        return {p.table_id for p in self.group.parts}


def plan_run(run: ch.RunBatch) -> list[TablePlan]:
    """The run's tables in the order the sink works on them (see the module doc)."""
    out: list[TablePlan] = []
    for g in vacated_first(groups(run)):
        dropped = [p for p in g.parts if p.final is None and drop_ts(p) is not None]
        if dropped and len(dropped) < len(g.parts):
            # the name was dropped and taken again in this range: the dropped table first, then the
            # new one starts from a free name
            rest = [p for p in g.parts if p not in dropped]
            out.append(_table_plan(Group(g.db, g.name, dropped), frozenset(p.table_id for p in rest)))
            out.append(_table_plan(Group(g.db, g.name, rest)))
        else:
            out.append(_table_plan(g))
    return out


def groups(run: ch.RunBatch) -> dict[Ident, Group]:
    """The run's table ids per upstream name; the ids a TRUNCATE chains are one group, named as its first id."""
    parent: dict[int, int] = {}

    def root(tid: int) -> int:
        while tid in parent:
            tid = parent[tid]
        return tid

    for tc in run.tables.values():
        for e in tc.events:
            if e.job.type == TRUNCATE_TABLE and e.table is not None and e.table.id != e.job.table_id:
                parent[e.job.table_id] = e.table.id
    lineages: dict[int, list[ch.TableChanges]] = {}
    for tc in run.tables.values():
        lineages.setdefault(root(tc.table_id), []).append(tc)
    out: dict[Ident, Group] = {}
    for head, parts in lineages.items():
        named = next((p for p in parts if p.table_id == head), parts[0])
        out.setdefault((named.db, named.name), Group(named.db, named.name)).parts.extend(parts)
    return out


def vacated_first(groups: Mapping[Ident, Group]) -> list[Group]:
    """The groups in name order, except that a group renamed away from a name comes before the group
    that takes the name in the same run (``RENAME TABLE a TO b`` then ``CREATE TABLE a``): the Iceberg
    tables of ``a`` must move before the new ``a``'s are created. A cycle (names swapped) keeps name
    order; the rename then finds its target taken and refuses."""
    vacated_by: dict[Ident, list[Ident]] = {}
    for key, g in sorted(groups.items()):
        for e in g.events:
            if e.job.type == RENAME_TABLE and e.before and e.before != key:
                vacated_by.setdefault(e.before, []).append(key)
    order: list[Group] = []
    done: set[Ident] = set()

    def visit(key: Ident, path: set[Ident]) -> None:
        if key in done or key in path:
            return
        path.add(key)
        for other in vacated_by.get(key, ()):
            visit(other, path)
        done.add(key)
        order.append(groups[key])

    for key in sorted(groups):
        visit(key, set())
    return order


def _table_plan(g: Group, successors: frozenset[int] = frozenset()) -> TablePlan:
    name = (g.db, g.name)
    renames = [Rename(e.before, name) for e in g.events
               if e.job.type == RENAME_TABLE and e.before and e.before != name]
    live = g.live
    drop = None
    if live is None:
        ts = max((t for t in map(drop_ts, g.parts) if t is not None), default=None)
        drop = Drop(ts, (g.db, lineage.dropped_mirror(g.name, ts)) if ts is not None else None,
                    (g.db, fmt.dropped_changelog_name(g.name, ts)) if ts is not None else None, successors)
    return TablePlan(g, renames, _renames_to_record(g), drop, live.final if live else latest_info(g), version(g))


def _renames_to_record(g: Group) -> list[lineage.Move]:
    """Each RENAME TABLE of the group's ids: the name before it and the one after (the name before the
    next DDL of that id, or the group's name)."""
    out = []
    for part in g.parts:
        events = sorted(part.events, key=lambda e: e.commit_ts)
        for i, e in enumerate(events):
            if e.job.type != RENAME_TABLE or not e.before:
                continue
            after = next((n.before for n in events[i + 1:] if n.before), (g.db, g.name))
            if after != e.before:
                out.append(lineage.Move(e.commit_ts, ".".join(e.before), ".".join(after), lineage.RENAME))
    return out


def drop_ts(tc: ch.TableChanges) -> int | None:
    """Commit ts of the DROP TABLE / DROP DATABASE that ended this table id in the range, if any."""
    return max((e.commit_ts for e in tc.events if e.job.type in DROPS), default=None)


def version(g: Group) -> int:
    """The newest schema version of the group's rows and DDL."""
    versions = [s.schema_version for p in g.parts for s in p.segments] + [e.job.binlog.schema_version for e in g.events]
    return max(versions, default=0)


def latest_info(g: Group) -> TableInfo | None:
    """The newest TableInfo of the group's rows or DDL (a dropped table's last shape)."""
    for tc in sorted(g.parts, key=lambda p: -max([0] + [s.schema_version for s in p.segments])):
        if tc.segments:
            return tc.segments[-1].table
        for e in reversed(tc.events):
            if e.table is not None:
                return e.table
    return None


# ---------------------------------------------------------------------------------------------
# decisions on what a table holds

def progress(properties: Mapping[str, str], run: ch.RunBatch) -> tuple[str, int]:
    """(why to skip the table or "", the ts the table is complete up to within the run).

    A table a crashed run already committed (its ``binlake.to-ts`` inside the range) only takes the
    changes after that ts."""
    raw = properties.get(fmt.TO_TS_KEY)
    done = int(raw) if raw is not None else 0
    if done >= run.to_ts:
        return f"already at to_ts={done}", run.to_ts
    return "", max(done, run.from_ts)


def reset_ts(plan: TablePlan, properties: Mapping[str, str], has_snapshot: bool, since: int,
             run: ch.RunBatch) -> int | None:
    """Commit ts of the last TRUNCATE (or DROP of another id) the mirror must be emptied at; 0 when it
    holds another, ended, table id; None when it keeps its rows (also when a crashed run already
    emptied it at that TRUNCATE: its progress is past it)."""
    live = plan.live
    assert live is not None
    ends = [e.commit_ts for p in plan.group.parts for e in p.events if e.job.type in ENDING]
    stored = properties.get(fmt.TABLE_ID_KEY)
    if ends:
        reset = max(ends)
    elif stored not in (None, str(live.table_id)) and has_snapshot and not went_on(stored, live.table_id, run):
        reset = 0   # the mirror holds another (ended) table id: start over
    else:
        return None
    return None if reset <= since and since > run.from_ts else reset


def went_on(stored: str | None, table_id: int, run: ch.RunBatch) -> bool:
    """True when the table id a table records (``stored``) went on as ``table_id`` in ``run`` (ALTER
    TABLE … PARTITION BY, REMOVE PARTITIONING): the same table, rows and column ids kept."""
    if stored is None or not stored.isdigit() or int(stored) == table_id:
        return False
    return run.went_on_as(int(stored)) == table_id


def bucket_field(spec: PartitionSpec) -> PartitionField | None:
    """The mirror's bucket partition field, if it has one."""
    return next((f for f in spec.fields if isinstance(f.transform, BucketTransform)), None)


def moving_bucket(spec: PartitionSpec, schema: Schema, properties: Mapping[str, str], final: TableInfo) -> int | None:
    """The mirror's bucket count when its bucket column will not be ``final``'s first key column
    (ADD/DROP PRIMARY KEY moved the key; its column may be dropped): the spec then moves in the run's
    transaction. None when the spec stays."""
    bucket = bucket_field(spec)
    if bucket is None or not isinstance(bucket.transform, BucketTransform):
        return None
    source = schema.find_column_name(bucket.source_id)
    first = ks.key_columns(final)[0]
    if first == ch.ROWID:
        keeps = source == ch.ROWID
    else:
        same = properties.get(fmt.TABLE_ID_KEY) == str(final.id)
        stored = ks.stored_columns(dict(properties)) if same else {}
        col = next(c for c in final.columns if c.name == first)
        keeps = stored.get(str(col.id), first) == source
    return None if keeps else bucket.transform.num_buckets


def merge_buckets(metadata: TableMetadata, first_key: str) -> tuple[int, IcebergType | None]:
    """(buckets the merge routes to, the Iceberg type they hash) for a mirror with this metadata: its
    bucket count when it buckets ``first_key``, else one bucket."""
    source = metadata.schema().find_field(first_key)
    bucket = bucket_field(metadata.spec())
    if bucket is None or bucket.source_id != source.field_id:
        return 1, None
    assert isinstance(bucket.transform, BucketTransform)
    return bucket.transform.num_buckets, source.field_type


def needs_backfill(properties: Mapping[str, str], info: TableInfo, retyped: tuple[ks.Retype, ...] = ()) -> bool:
    """True when ``info`` adds (by column id) a column whose origin default is not NULL, or one that a
    DDL rewrote from a column the mirror holds (its rows take the converted values)."""
    if properties.get(fmt.TABLE_ID_KEY) != str(info.id):
        return False
    old = ks.stored_columns(dict(properties))
    return (any(str(c.id) not in old and ks.default_value(c).is_valid for c in info.columns)
            or bool(ks.retype_chains(old, info, retyped)))
