"""The Iceberg tables of the sink as catalog objects: loaded, created with their partition specs, and
moved by the run's RENAME TABLE and DROP TABLE before anything is written (each step idempotent: a
crashed run's re-run finds it done and goes on).

- A new changelog ``<db>.<table>__changelog`` is partitioned by day of ``_tidb_commit_time``; a new
  mirror ``<db>.<table>`` by ``bucket(N, first key column)`` (``mirror_buckets``, per table
  ``table_buckets``): a run rewrites only the buckets its keys fall in.
- RENAME TABLE renames both Iceberg tables; a target that still holds another table (names swapped
  within one run) is refused.
- DROP TABLE keeps the mirror as ``<table>__dropped_<ts>`` (its snapshots still answer ``verify --ts``
  before the drop) and the changelog as ``<table>__changelog_dropped_<ts>``, so the name is free for
  a table created or renamed into it later. Renames and drops are recorded in the ``_binlake``
  namespace (``sink.iceberg.lineage``).
"""
from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, DayTransform

from sink import changelog as fmt
from sink.errors import SinkError
from sink.iceberg import lineage
from sink.iceberg import schema as ks
from sink.iceberg.checkpoint import MetaNamespace, ensure_namespace
from sink.iceberg.plan import Ident, Rename, TablePlan, progress
from transform import changes as ch
from transform.codec.model import TableInfo

DEFAULT_MIRROR_BUCKETS = 16   # a new mirror is partitioned by bucket(16, first key column)


class Tables:
    """The sink's tables in one catalog."""

    def __init__(self, catalog: Catalog, mirror_buckets: int = DEFAULT_MIRROR_BUCKETS,
                 table_buckets: Mapping[str, int] | None = None) -> None:
        self.catalog = catalog
        self.mirror_buckets = mirror_buckets
        self.table_buckets = dict(table_buckets or {})

    def load(self, ident: Ident) -> Table | None:
        try:
            return self.catalog.load_table(ident)
        except NoSuchTableError:
            return None

    def load_or_create(self, ident: Ident, info: TableInfo, version: int, changelog: bool) -> Table:
        return self.load(ident) or self.create(ident, info, version, changelog)

    def create(self, ident: Ident, info: TableInfo, version: int, changelog: bool) -> Table:
        """A new changelog (partitioned by day of ``_tidb_commit_time``) or mirror (by a bucket of its
        first key column)."""
        ensure_namespace(self.catalog, ident[0])
        props = ks.table_properties(info, version)
        props["format-version"] = "2"
        if changelog:
            schema = ks.changelog_schema(info)
            day = schema.find_field(ch.COMMIT_TIME).field_id
            spec = PartitionSpec(PartitionField(day, 1000, DayTransform(), "commit_day"))
        else:
            schema = ks.mirror_schema(info)
            buckets = self.table_buckets.get(".".join(ident), self.mirror_buckets)
            spec = bucket_spec(schema, ks.key_columns(info)[0], buckets)
        return self.catalog.create_table_if_not_exists(ident, schema, partition_spec=spec, properties=props)

    # -- the run's catalog moves -----------------------------------------------------------------

    def move(self, plan: TablePlan, run: ch.RunBatch, meta: MetaNamespace) -> None:
        """The RENAME TABLEs into the plan's name, their lineage records, and what a DROP sets aside."""
        for r in plan.renames:
            self.rename(r)
        for m in plan.moves:
            meta.record(m)
        if plan.drop is not None:
            self._set_aside(plan, run, meta)

    def rename(self, r: Rename) -> None:
        for suffix in ("", fmt.CHANGELOG_SUFFIX):
            src, dst = (r.old[0], r.old[1] + suffix), (r.new[0], r.new[1] + suffix)
            if self.load(src) is None:
                continue  # done by an earlier (crashed) attempt, or never written
            if self.load(dst) is not None:
                raise SinkError(f"RENAME TABLE {'.'.join(r.old)} TO {'.'.join(r.new)}: the Iceberg table "
                                f"{'.'.join(dst)} still holds another table (names swapped within one run?); "
                                f"drain up to the commit before this rename first (--to-ts), or rename "
                                f"{'.'.join(dst)} out of the way")
            ensure_namespace(self.catalog, dst[0])
            self.catalog.rename_table(src, dst)

    def _set_aside(self, plan: TablePlan, run: ch.RunBatch, meta: MetaNamespace) -> None:
        """DROP TABLE: the mirror to ``kept`` (recorded), the changelog to ``aside``; an end without a
        DROP drops the mirror. A table already at the run's ``to_ts``, or recording an id that takes
        the name later in the run, is the name's next table (a crashed attempt got that far) and stays."""
        drop = plan.drop
        assert drop is not None
        mirror = self.load(plan.mirror)
        ours = mirror is not None and not progress(mirror.properties, run)[0] and drop.moves(mirror.properties)
        if drop.kept is not None and drop.drop_ts is not None:
            if ours and self.load(drop.kept) is None:
                self.catalog.rename_table(plan.mirror, drop.kept)
            if self.load(drop.kept) is not None:
                meta.record(lineage.Move(drop.drop_ts, ".".join(plan.mirror), ".".join(drop.kept), lineage.DROP))
        elif ours:
            self.catalog.drop_table(plan.mirror)
        if drop.aside is not None:
            live_log = (plan.group.db, fmt.changelog_name(plan.group.name))
            log = self.load(live_log)
            if log is not None and drop.moves(log.properties) and self.load(drop.aside) is None:
                self.catalog.rename_table(live_log, drop.aside)


def bucket_spec(schema: Schema, column: str, buckets: int) -> PartitionSpec:
    """``bucket(buckets, column)``, or no partitioning for one bucket or a type Iceberg cannot bucket."""
    source = schema.find_field(column)
    if buckets <= 1 or not BucketTransform(buckets).can_transform(source.field_type):
        return UNPARTITIONED_PARTITION_SPEC
    return PartitionSpec(PartitionField(source.field_id, 1000, BucketTransform(buckets), f"{column}_bucket"))
