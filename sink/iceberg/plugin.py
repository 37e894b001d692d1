"""The Iceberg sink as the commands see it: ``--sink iceberg`` (the default), ``[iceberg]``, the
maintenance commands, and ``verify`` against the mirrors."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BeforeValidator, Field

from ingest.config import Bool, ConfigError, Int, Str, TomlModel, settings_table
from sink.base import Sink
from sink.compare import Expired
from sink.plugin import Capabilities, Flag, SinkContext, SinkSpec, Verifier
from sink.verify_report import VerifyReport

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from sink.lake import Lake
    from sink.restore import RestoreTarget


class IcebergSettings(TomlModel):
    """``[iceberg]``: the catalog and warehouse, and how tables are laid out."""

    catalog_uri: Str = Field(default="", alias="catalog-uri")   # default: sqlite beside a local warehouse
    warehouse: Str = "warehouse"
    tag_runs: Bool = Field(default=False, alias="tag-runs")      # tag each table's snapshot tidb-ts-<to_ts>
    # a new mirror is partitioned by bucket(N, first key column): a run rewrites only the files of the
    # buckets its keys fall in; [iceberg.table-buckets] "db.table" = N overrides it per table
    mirror_buckets: Int = Field(default=16, alias="mirror-buckets", ge=1)
    table_buckets: dict[str, Int] = Field(default_factory=dict, alias="table-buckets")
    # [iceberg.properties] and every --catalog-property KEY=VALUE: pyiceberg catalog and FileIO
    # properties, e.g. s3.endpoint, s3.region (credentials also come from the AWS environment)
    properties: Annotated[dict[str, str], BeforeValidator(lambda v: settings_table(v, "catalog properties"))] = \
        Field(default_factory=dict)


def catalog_of(settings: IcebergSettings) -> Catalog:
    """The ``[iceberg]`` catalog: warehouse, catalog URI and ``[iceberg.properties]``."""
    from sink.iceberg.catalog import open_catalog

    return open_catalog(settings.warehouse, settings.catalog_uri or None, **settings.properties)


def _catalog_if_present(settings: IcebergSettings) -> Catalog | None:
    """The catalog, or None when it is the default SQLite file of a local warehouse that does not
    exist yet (opening it would create it)."""
    from sink.iceberg.catalog import default_catalog_uri, warehouse_location

    location = warehouse_location(settings.warehouse)
    if not settings.catalog_uri and location.startswith("file://"):
        if not Path(default_catalog_uri(location).removeprefix("sqlite:///")).exists():
            return None
    return catalog_of(settings)


class MirrorVerifier(Verifier):
    """The Iceberg mirrors at the snapshot marked with the ts."""

    def __init__(self, settings: IcebergSettings) -> None:
        self.catalog = catalog_of(settings)

    def checkpoint(self) -> int | None:
        from sink.iceberg.checkpoint import MetaNamespace

        return MetaNamespace(self.catalog, read_only=True).checkpoint()

    def compare(self, upstream: Mapping[str, list[dict[str, Any]]], ts: int,
                tables: Sequence[str] | None, expired: Mapping[str, Expired] | None = None) -> VerifyReport:
        from sink.iceberg.verify import verify_mirrors

        return verify_mirrors(self.catalog, dict(upstream), ts, list(tables) if tables else None, expired=expired)


class IcebergSpec(SinkSpec[IcebergSettings]):
    """A changelog table (append) and a mirror (merged per key bucket) per upstream table."""

    names = ("iceberg",)
    section = "iceberg"
    config = IcebergSettings
    capabilities = Capabilities(lake=True, verify=True)
    restore_schemes = ("iceberg",)
    flags = (
        Flag("--catalog-uri", "iceberg.catalog-uri", "pyiceberg catalog URI (default sqlite beside the warehouse)",
             shared=True),
        Flag("--warehouse", "iceberg.warehouse", "Iceberg warehouse path or URI", shared=True),
        Flag("--catalog-property", "iceberg.properties", "a pyiceberg catalog/FileIO property, e.g. "
             "s3.endpoint=URL (repeatable; over [iceberg.properties])", kind="pairs", shared=True),
        Flag("--tag-runs", "iceberg.tag-runs", "tag every table's snapshot tidb-ts-<to_ts> (time travel by "
             "upstream ts)", kind="switch"),
    )

    def open(self, ctx: SinkContext[IcebergSettings]) -> Sink:
        s = ctx.settings
        if ctx.dry_run:
            from sink.iceberg.checkpoint import MetaNamespace
            from sink.iceberg.dry_run import IcebergDryRun

            catalog = _catalog_if_present(s)
            if catalog is None:
                return IcebergDryRun(None, None, s.mirror_buckets, s.table_buckets)
            meta = MetaNamespace(catalog, read_only=True)
            if ctx.cluster_id is not None:
                meta.check_cluster(ctx.cluster_id)
            return IcebergDryRun(catalog, meta.checkpoint(), s.mirror_buckets, s.table_buckets)
        from sink.iceberg.catalog import warehouse_location
        from sink.iceberg.s3_credentials import check_s3_credentials
        from sink.iceberg.writer import IcebergSink

        if not s.catalog_uri.startswith(("http://", "https://")):   # a REST catalog writes its own metadata
            check_s3_credentials(warehouse_location(s.warehouse), s.properties, "the driver")
        sink = IcebergSink(catalog_of(s), tag_runs=s.tag_runs, mirror_buckets=s.mirror_buckets,
                           table_buckets=s.table_buckets)
        if ctx.cluster_id is not None:
            sink.check_cluster(ctx.cluster_id)
        return sink

    def restore_target(self, uri: str, settings: IcebergSettings) -> RestoreTarget:
        """``iceberg://NAMESPACE``: a new namespace of the ``[iceberg]`` catalog (the lake's own)."""
        from sink.iceberg.restore import IcebergRestore

        return IcebergRestore.from_uri(uri, catalog_of(settings))

    def lake(self, settings: IcebergSettings) -> Lake:
        from sink.iceberg.lake import IcebergLake

        return IcebergLake(catalog_of(settings), settings.warehouse)

    def verifier(self, ctx: SinkContext[IcebergSettings], against: str | None) -> Verifier:
        if against:
            raise ConfigError(f"--against {against!r}: the Iceberg mirrors are compared without it")
        return MirrorVerifier(ctx.settings)


SPEC = IcebergSpec()


def catalog_for(options: TomlModel) -> Catalog:
    """The catalog of a drainer configuration's ``[iceberg]`` section."""
    return catalog_of(SPEC.settings(options))
