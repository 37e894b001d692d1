"""The Iceberg tables of the sink as catalog objects: loaded, created with their partition specs, and
moved by the catalog steps a run's plan decided (``sink.iceberg.write_plan``: renames, drops,
lineage records), before anything is written.

- A new changelog ``<db>.<table>__changelog`` is partitioned by day of ``_tidb_commit_time``; a new
  mirror ``<db>.<table>`` by ``bucket(N, first key column)`` (``mirror_buckets``, per table
  ``table_buckets``): a run rewrites only the buckets its keys fall in (:meth:`Tables.new_table`,
  which planning also asks what a creation would make).
- A planned step finds the tables as they were planned (its source at the planned metadata
  location, its target free), else it raises :class:`~sink.iceberg.write_plan.TableMovedError`; a
  refused rename (its target still holds another table) raises ``SinkError`` in its turn, once both
  tables are found where they were planned (else ``TableMovedError``: another run moved them).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, DayTransform

from sink.errors import SinkError
from sink.iceberg import position_deletes as deletes
from sink.iceberg import schema as ks
from sink.iceberg.checkpoint import MetaNamespace, ensure_namespace
from sink.iceberg.plan import Ident
from sink.iceberg.write_plan import CatalogStep, DropTable, RecordMove, RefuseRename, RenameTable, TableMovedError
from transform import changes as ch
from transform.codec.model import TableInfo

DEFAULT_MIRROR_BUCKETS = 16   # a new mirror is partitioned by bucket(16, first key column)


@dataclass(frozen=True)
class NewTable:
    """What creating a table makes: its schema, partition spec and properties."""

    schema: Schema
    spec: PartitionSpec
    properties: dict[str, str]


class Layout(Protocol):
    """What a table the sink creates would be (planning asks it of tables that do not exist yet)."""

    def new_table(self, ident: Ident, info: TableInfo, version: int, changelog: bool) -> NewTable:
        """The table creating ``ident`` for ``info`` would make."""
        ...


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

    def new_table(self, ident: Ident, info: TableInfo, version: int, changelog: bool) -> NewTable:
        """A changelog partitioned by day of ``_tidb_commit_time``, or a mirror by a bucket of its
        first key column whose merges write position deletes (``write.merge.mode=merge-on-read``)."""
        props = ks.table_properties(info, version)
        props["format-version"] = "2"
        if changelog:
            schema = ks.changelog_schema(info)
            day = schema.find_field(ch.COMMIT_TIME).field_id
            return NewTable(schema, PartitionSpec(PartitionField(day, 1000, DayTransform(), "commit_day")), props)
        schema = ks.mirror_schema(info)
        buckets = self.table_buckets.get(".".join(ident), self.mirror_buckets)
        props[deletes.MODE_KEY] = deletes.MERGE_ON_READ
        return NewTable(schema, bucket_spec(schema, ks.key_columns(info)[0], buckets), props)

    def open(self, ident: Ident, expect: str | None, info: TableInfo, version: int, changelog: bool) -> Table:
        """The table as planned: at metadata location ``expect``, or created when ``expect`` is None."""
        tbl = self.load(ident)
        if expect is None:
            if tbl is not None:
                raise _moved(ident, "created")
            new = self.new_table(ident, info, version, changelog)
            ensure_namespace(self.catalog, ident[0])
            return self.catalog.create_table_if_not_exists(ident, new.schema, partition_spec=new.spec,
                                                           properties=new.properties)
        if tbl is None or tbl.metadata_location != expect:
            raise _moved(ident, "dropped or renamed" if tbl is None else "committed to")
        return tbl

    # -- the run's catalog moves -----------------------------------------------------------------

    def move(self, steps: tuple[CatalogStep, ...], meta: MetaNamespace) -> None:
        """A table's planned catalog steps, in order."""
        for step in steps:
            if isinstance(step, RefuseRename):
                self._expect(step.src, step.src_expect)   # moved by another run since: a concurrent run
                self._expect(step.dst, step.dst_expect)
                raise SinkError(step.message)
            if isinstance(step, RecordMove):
                meta.record(step.move)
            elif isinstance(step, RenameTable):
                self._expect(step.src, step.expect)
                if self.load(step.dst) is not None:
                    raise _moved(step.dst, "created")
                ensure_namespace(self.catalog, step.dst[0])
                self.catalog.rename_table(step.src, step.dst)
            elif isinstance(step, DropTable):
                self._expect(step.ident, step.expect)
                self.catalog.drop_table(step.ident)

    def _expect(self, ident: Ident, location: str) -> None:
        tbl = self.load(ident)
        if tbl is None or tbl.metadata_location != location:
            raise _moved(ident, "dropped or renamed" if tbl is None else "committed to")


def _moved(ident: Ident, how: str) -> TableMovedError:
    return TableMovedError(f"table {'.'.join(ident)}: another writer {how} it after this run planned it: "
                           f"concurrent run; nothing of this run was written to it, a re-run plans again")


def bucket_spec(schema: Schema, column: str, buckets: int) -> PartitionSpec:
    """``bucket(buckets, column)``, or no partitioning for one bucket or a type Iceberg cannot bucket."""
    source = schema.find_field(column)
    if buckets <= 1 or not BucketTransform(buckets).can_transform(source.field_type):
        return UNPARTITIONED_PARTITION_SPEC
    return PartitionSpec(PartitionField(source.field_id, 1000, BucketTransform(buckets), f"{column}_bucket"))
