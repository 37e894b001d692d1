"""``binlake restore --into iceberg://NAMESPACE``: the upstream's tables at a ts as Iceberg tables of
their own, in the lake's catalog: ``NAMESPACE.<db>.<table>`` (a namespace per upstream database under
``NAMESPACE``), for readers who want "the database as of T" without time-travel syntax.

Each table has the mirror's layout at the ts (``sink.iceberg.schema.mirror_schema``: the columns, the
key as identifier fields, ``_tidb_rowid`` for a table without a primary key, the commit ts and time
of each row's last change), unpartitioned, and one snapshot carrying the run markers of a run
``(ts, ts]`` with batch id ``restore-<ts>``. ``NAMESPACE`` must not exist yet (``--replace`` drops
its tables first).
"""
from __future__ import annotations

import pickle
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.manifest import DataFile

from sink.iceberg import lineage
from sink.iceberg import schema as ks
from sink.iceberg.tasks import FileWriter, pack_files, unpack_files
from sink.restore import RestoreError, RestorePlan, RestoreTarget, RowWriter, WriterSession
from transform.changes import RunMarkers


class _Session(WriterSession):
    def __init__(self, writer: IcebergRowWriter) -> None:
        self.writer = writer
        self.files: dict[int, list[DataFile]] = defaultdict(list)

    def write(self, table: int, rows: pa.Table) -> None:
        w = self.writer.tables[table]
        self.files[table] += w.write(ks.conform(rows, w.metadata.schema()))

    def close(self) -> bytes:
        return pickle.dumps({t: pack_files(f) for t, f in self.files.items()}) if self.files else b""


@dataclass(frozen=True)
class IcebergRowWriter(RowWriter):
    """Writes rows as data files of the restored tables (committed by the driver)."""

    tables: dict[int, FileWriter] = field(default_factory=dict)

    def open(self) -> WriterSession:
        return _Session(self)


class IcebergRestore(RestoreTarget):
    """A new namespace of the lake's catalog."""

    def __init__(self, catalog: Catalog, namespace: str) -> None:
        self.catalog = catalog
        self.namespace = namespace
        self.idents: dict[int, tuple[str, ...]] = {}

    @classmethod
    def from_uri(cls, uri: str, lake: Catalog) -> IcebergRestore:
        """A new namespace of ``lake``, named by ``iceberg://NAMESPACE``."""
        parts = urlsplit(uri)
        name = (parts.netloc + parts.path).strip("/")
        if not name or "/" in name or "." in name or name.startswith(lineage.META_NAMESPACE):
            raise RestoreError(f"--into {uri!r}: give iceberg://NAMESPACE, one new namespace name "
                               f"(no dots or slashes, not {lineage.META_NAMESPACE})")
        return cls(lake, name)

    def describe(self) -> str:
        return f"iceberg://{self.namespace}"

    def _clear(self, replace: bool) -> None:
        root = (self.namespace,)
        try:
            children = self.catalog.list_namespaces(root)
        except NoSuchNamespaceError:
            return
        if not replace:
            raise RestoreError(f"namespace {self.namespace} exists already: restore into a new one, or give "
                               f"--replace to drop its tables first")
        for ns in [*children, root]:
            for ident in self.catalog.list_tables(ns):
                self.catalog.drop_table(ident)
            if ns != root:
                self.catalog.drop_namespace(ns)

    def prepare(self, plan: RestorePlan, replace: bool) -> RowWriter:
        self._clear(replace)
        self.catalog.create_namespace_if_not_exists((self.namespace,))
        writers = {}
        for i, t in enumerate(plan.tables):
            ns = (self.namespace, t.db)
            self.catalog.create_namespace_if_not_exists(ns)
            props = ks.table_properties(t.info, plan.schema_version)
            tbl = self.catalog.create_table((*ns, t.info.name), ks.mirror_schema(t.info), properties=props)
            self.idents[i] = (*ns, t.info.name)
            writers[i] = FileWriter(tbl.metadata, dict(tbl.io.properties))
        return IcebergRowWriter(writers)

    def finish(self, plan: RestorePlan, results: Sequence[bytes]) -> list[str]:
        files: dict[int, list[DataFile]] = defaultdict(list)
        for blob in results:
            for index, packed in pickle.loads(blob).items():
                files[index] += unpack_files(packed)
        markers = RunMarkers(plan.ts, plan.ts, f"restore-{plan.ts}", str(plan.cluster_id)).summary()
        for index, ident in self.idents.items():
            tbl = self.catalog.load_table(ident)
            with tbl.transaction() as tx, tx.update_snapshot(snapshot_properties=markers).fast_append() as app:
                for f in files.get(index, []):
                    app.append_data_file(f)
        return [f"{len(self.idents)} table(s) under namespace {self.namespace}"]

    def close(self) -> None:
        """Nothing to release: the catalog is the lake's."""
