"""What ``binlake drain --dry-run`` opens for the Iceberg sink: the checkpoint, and the plan a write
of the run would carry out (``sink.iceberg.write_plan``), made against the catalog as it is; it
writes, creates and moves nothing."""
from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.table import Table

from sink.base import CheckpointOnly
from sink.iceberg.plan import Ident
from sink.iceberg.planner import plan_write
from sink.iceberg.tables import DEFAULT_MIRROR_BUCKETS, Tables
from sink.iceberg.write_plan import WritePlan
from transform import changes as ch


class IcebergDryRun(CheckpointOnly):
    """The checkpoint read, and every write planned; ``catalog`` None: the catalog does not exist yet
    (every table would be created)."""

    def __init__(self, catalog: Catalog | None, checkpoint: int | None, mirror_buckets: int = DEFAULT_MIRROR_BUCKETS,
                 table_buckets: Mapping[str, int] | None = None) -> None:
        super().__init__(checkpoint)
        self._catalog = catalog
        self._tables = Tables(catalog or NoopCatalog("dry-run"), mirror_buckets, table_buckets)

    def _load(self, ident: Ident) -> Table | None:
        return self._tables.load(ident) if self._catalog is not None else None

    def plan(self, run: ch.RunBatch) -> WritePlan:
        """What ``IcebergSink.write`` would do to each table of ``run``."""
        return plan_write(run, self._load, self._tables)

    def plan_lines(self, run: ch.RunBatch) -> list[str]:
        return self.plan(run).lines()
