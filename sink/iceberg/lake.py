"""The Iceberg warehouse as ``binlake maintain``, ``check`` and ``restore`` see it (:class:`sink.lake.Lake`):
maintenance (``sink.iceberg.maintain``), the Great Expectations gates (``sink.iceberg.quality``) and
the tables at a ts (``sink.iceberg.pit`` locates them, ``sink.iceberg.pit_tasks`` loads them) over
the sink's catalog."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sink.lake import CheckResult, Lake, MaintainOptions, PointInTime, TableDone

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

    from sink.iceberg.pit import TableAt
    from sink.restore import RestorePlan, RowWriter
    from transform.history import SchemaHistory


class IcebergLake(Lake):
    """The tables of one catalog."""

    def __init__(self, catalog: Catalog, warehouse: str) -> None:
        self.catalog = catalog
        self.warehouse = warehouse

    def describe(self) -> str:
        return f"warehouse {self.warehouse}"

    def checkpoint(self) -> int | None:
        from sink.iceberg.checkpoint import MetaNamespace

        return MetaNamespace(self.catalog, read_only=True).checkpoint()

    def maintain(self, spark: Callable[[], SparkSession], options: MaintainOptions,
                 tables: Sequence[tuple[str, str]], progress: Callable[[TableDone], None]) -> dict[str, Any]:
        from sink.iceberg.maintain import maintain

        return maintain(self.catalog, spark, options, tables, progress).to_json()

    def check_run(self, spark: SparkSession, report: Mapping[str, Any], history: SchemaHistory | None,
                  out_dir: Path, tables: list[str] | None) -> CheckResult:
        from sink.iceberg import quality

        return quality.check_run(self.catalog, spark, report, history, out_dir, tables)

    def cluster_id(self) -> int | None:
        from sink.iceberg.checkpoint import CLUSTER_ID, MetaNamespace

        found = MetaNamespace(self.catalog, read_only=True).properties().get(CLUSTER_ID)
        return int(found) if found else None

    def ddl_history(self) -> SchemaHistory | None:
        from sink.iceberg import ddl_history

        recorded = ddl_history.read(self.catalog)
        return ddl_history.history(recorded) if recorded is not None else None

    def check_restorable(self, ts: int) -> None:
        from sink.iceberg.pit import lake_range

        lake_range(self.catalog).check(ts)

    def point_in_time(self, plan: RestorePlan, began: Sequence[int], history: SchemaHistory) -> PointInTime:
        from sink.iceberg import lineage
        from sink.iceberg.checkpoint import MetaNamespace
        from sink.iceberg.pit import lost_columns, table_at

        moves = lineage.moves(MetaNamespace(self.catalog, read_only=True).properties())
        located = []
        for t, start in zip(plan.tables, began):
            at = table_at(self.catalog, moves, t.name, t.info, plan.ts, start, history)
            located.append(dataclasses.replace(at, notes=[*at.notes, *lost_columns(history, at)]))
        return IcebergPointInTime(located)


class IcebergPointInTime(PointInTime):
    """Mirror base files and changelog tails, read on Spark's executors."""

    def __init__(self, tables: list[TableAt]) -> None:
        self.tables = tables
        self._located = tables

    def load(self, spark: SparkSession, writer: RowWriter) -> tuple[dict[int, int], list[bytes]]:
        from sink.iceberg.pit_tasks import load_tables

        return load_tables(spark, self._located, writer)

    def input_bytes(self) -> int:
        return sum(task.file.file_size_in_bytes for t in self._located for source in (t.base, t.tail)
                   if source is not None for task in source.tasks)

    def load_here(self, writer: RowWriter, workers: int) -> tuple[dict[int, int], list[bytes]]:
        from sink.iceberg.pit_tasks import load_tables_here

        return load_tables_here(self._located, writer, workers)
