"""What the Iceberg sink takes from pyiceberg beyond its public API, in one place, checked against one
version (``CHECKED_VERSION``, the pin in ``constraints.txt``; ``tests/sink/test_pyiceberg_adapter.py``
fails when the installed pyiceberg is another one, so a bump re-checks both points):

- :func:`data_files`: Arrow rows as data files of a table as a transaction will commit it, written
  where the rows are (a Spark executor). pyiceberg does this with ``_dataframe_to_data_files``, a
  private function (its public writes also commit).
- :func:`commit_files`: one snapshot that adds and removes data files AND position delete files.
  pyiceberg writes data manifests only (its overwrite would even rewrite a delete manifest it
  touches as a data manifest), so this is a snapshot producer of binlake's own on pyiceberg's
  ``_SnapshotProducer`` (manifest list, summary, sequence numbers and refs stay pyiceberg's). As
  Java Iceberg's, it leaves out the parent's manifests that hold no live file, and it merges the
  manifests it rewrites, so the manifest list does not grow with every run that removes files.
"""
from __future__ import annotations

import uuid

import pyarrow as pa
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    ManifestWriterV2,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _SnapshotProducer

CHECKED_VERSION = "0.12.0"


def data_files(metadata: TableMetadata, rows: pa.Table, io: FileIO) -> list[DataFile]:
    """``rows`` (in the schema of ``metadata``) as new Parquet data files under the table's location,
    split by partition and target file size; each carries the spec id it is committed under (the
    default spec of ``metadata``)."""
    if not rows.num_rows:
        return []
    files = list(_dataframe_to_data_files(metadata, rows, io, write_uuid=uuid.uuid4()))
    for f in files:
        f.spec_id = metadata.default_spec_id
    return files


class _DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class _FileChanges(_SnapshotProducer["_FileChanges"]):
    """An OVERWRITE snapshot adding ``add`` (data and delete files) and removing ``remove`` (data and
    delete files, every one of which must be live in the parent snapshot)."""

    def __init__(self, tx: Transaction, properties: dict[str, str], add: list[DataFile], remove: list[DataFile]
                 ) -> None:
        super().__init__(Operation.OVERWRITE, tx, tx._table.io, snapshot_properties=properties)
        self._added_data_files = list(add)          # both kinds: the summary counts each by its content
        self._deleted_data_files = set(remove)
        self._removed_paths = {f.file_path for f in remove}

    def _writer(self, spec: PartitionSpec, content: ManifestContent) -> ManifestWriter:
        cls = _DeleteManifestWriter if content == ManifestContent.DELETES else ManifestWriterV2
        return cls(spec, self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression)

    def _added(self) -> list[ManifestFile]:
        groups: dict[tuple[ManifestContent, int], list[DataFile]] = {}
        for f in self._added_data_files:
            content = ManifestContent.DATA if f.content == DataFileContent.DATA else ManifestContent.DELETES
            groups.setdefault((content, f.spec_id), []).append(f)
        out = []
        for (content, spec_id), files in sorted(groups.items()):
            with self._writer(self.spec(spec_id), content) as writer:
                for f in files:
                    writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                                                       sequence_number=None, file_sequence_number=None, data_file=f))
            out.append(writer.to_manifest_file())
        return out

    def _existing_manifests(self) -> list[ManifestFile]:
        """The parent's manifests that hold live files (one holding only DELETED entries of an earlier
        commit goes, as Java Iceberg drops it); those naming a removed file rewritten together, one
        manifest per (spec, content), the removed files as DELETED, the rest as EXISTING."""
        snapshot = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) \
            if self._parent_snapshot_id is not None else None
        manifests = [m for m in (snapshot.manifests(self._io) if snapshot is not None else [])
                     if m.has_added_files() or m.has_existing_files()]
        if not self._removed_paths:
            return manifests   # nothing removed: every live manifest stays, unread
        out: list[ManifestFile] = []
        rewrite: dict[tuple[int, ManifestContent], list[ManifestEntry]] = {}
        for manifest in manifests:
            entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
            if any(e.data_file.file_path in self._removed_paths for e in entries):
                rewrite.setdefault((manifest.partition_spec_id, manifest.content), []).extend(entries)
            else:
                out.append(manifest)
        found: set[str] = set()
        for (spec_id, content), entries in sorted(rewrite.items()):
            with self._writer(self.spec(spec_id), content) as writer:
                for e in entries:
                    if e.data_file.file_path in self._removed_paths:
                        found.add(e.data_file.file_path)
                        writer.delete(e)
                    else:
                        writer.existing(e)
            out.append(writer.to_manifest_file())
        missing = self._removed_paths - found
        if missing:
            raise ValueError(f"Missing required files to delete: {', '.join(sorted(missing))}")
        return out

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []   # written in the rewritten manifests, as Java Iceberg writes them

    def _manifests(self) -> list[ManifestFile]:
        return self._added() + self._existing_manifests()


def commit_files(tx: Transaction, properties: dict[str, str], add: list[DataFile], remove: list[DataFile]) -> None:
    """Stage in ``tx`` one OVERWRITE snapshot (summary ``properties``) that adds ``add`` and removes
    ``remove``, each a data file or a position delete file; ValueError when a file to remove is not
    live in the table's current snapshot."""
    _FileChanges(tx, properties, add, remove).commit()
