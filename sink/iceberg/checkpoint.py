"""The Iceberg sink's own state in the catalog: the ``_binlake`` namespace's properties.

- ``checkpoint.to-ts``, ``checkpoint.batch-id``, ``checkpoint.cluster-id``: the last run every table
  of which committed (saved only after they all did), and the cluster the catalog belongs to.
- ``lineage.<ts>.<db.table>``: where a table's mirror went at a RENAME TABLE or DROP TABLE
  (``sink.iceberg.lineage``).
"""
from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError

from sink.errors import SinkError
from sink.iceberg import lineage
from sink.iceberg.lineage import META_NAMESPACE
from transform.changes import RunBatch

TO_TS = "checkpoint.to-ts"
BATCH_ID = "checkpoint.batch-id"
CLUSTER_ID = "checkpoint.cluster-id"


class CheckpointError(SinkError):
    """The stored checkpoint is unreadable or belongs to another cluster."""


def checkpoint_from(props: Mapping[str, str]) -> int | None:
    """The checkpoint ``to_ts`` the namespace properties ``props`` hold; None before the first run."""
    raw = props.get(TO_TS)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise CheckpointError(f"namespace {META_NAMESPACE} property {TO_TS} = {raw!r} is not a ts") from None


def ensure_namespace(catalog: Catalog, name: str) -> None:
    """Create the namespace unless it exists. pyiceberg's SQL catalog checks, then inserts: a drain
    racing this one can insert first, and the loser's insert fails on the catalog's unique key (the
    namespace exists then, which is all this asks). What the loser gets depends on the catalog and
    its database (a unique-key violation, SQLite's "database is locked", …), so any error is re-raised
    unless the namespace exists afterwards."""
    try:
        catalog.create_namespace_if_not_exists(name)
    except Exception:
        if not catalog.namespace_exists(name):
            raise


class MetaNamespace:
    """The ``_binlake`` namespace of one catalog; ``read_only`` reads a missing one as empty instead
    of creating it (a dry run, verify)."""

    def __init__(self, catalog: Catalog, read_only: bool = False) -> None:
        self.catalog = catalog
        self.read_only = read_only

    def properties(self) -> dict[str, str]:
        """Its properties (the namespace is created when missing, unless read-only)."""
        if self.read_only:
            try:
                return dict(self.catalog.load_namespace_properties(META_NAMESPACE))
            except NoSuchNamespaceError:
                return {}
        ensure_namespace(self.catalog, META_NAMESPACE)
        return dict(self.catalog.load_namespace_properties(META_NAMESPACE))

    def checkpoint(self) -> int | None:
        return checkpoint_from(self.properties())

    def check_cluster(self, cluster_id: int) -> None:
        """Refuse to mix clusters in one catalog."""
        have = self.properties().get(CLUSTER_ID)
        if have is not None and int(have) != cluster_id:
            raise CheckpointError(f"the catalog's checkpoint belongs to cluster {have}, this run reads cluster "
                                  f"{cluster_id}; use another warehouse/catalog")

    def save_checkpoint(self, run: RunBatch) -> None:
        self.catalog.update_namespace_properties(META_NAMESPACE, updates={
            TO_TS: str(run.to_ts), BATCH_ID: run.batch_id, CLUSTER_ID: str(run.cluster_id)})

    def record(self, move: lineage.Move) -> None:
        """Record a rename or drop of a table's mirror (once: recording it again changes nothing)."""
        key, value = move.to_property()
        if self.properties().get(key) != value:
            self.catalog.update_namespace_properties(META_NAMESPACE, updates={key: value})
