"""The Iceberg warehouse as ``binlake maintain`` and ``binlake check`` see it (:class:`sink.lake.Lake`):
maintenance (``sink.iceberg.maintain``) and the Great Expectations gates (``sink.iceberg.quality``)
over the sink's catalog."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sink.lake import CheckResult, Lake, MaintainOptions, TableDone

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

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
