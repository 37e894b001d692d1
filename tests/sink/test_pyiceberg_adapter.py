"""``sink.iceberg.pyiceberg_adapter``: the pyiceberg internals the sink uses, pinned to the version in
constraints.txt. A pyiceberg bump fails the first test: re-check the adapter (the private
``_dataframe_to_data_files`` it wraps, ``ExecutorFactory``'s pool) and whether the manifest evaluator
race is still there (the last test), then move ``CHECKED_VERSION``."""
from __future__ import annotations

import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyiceberg
import pytest
from pyiceberg.exceptions import ValidationException
from pyiceberg.expressions import visitors
from pyiceberg.manifest import ManifestFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.utils.concurrent import ExecutorFactory

from sink.iceberg.catalog import open_catalog
from sink.iceberg.pyiceberg_adapter import CHECKED_VERSION, data_files, executor_workers, one_worker

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))


def test_the_installed_pyiceberg_is_the_one_the_adapter_was_checked_against() -> None:
    pin = re.search(r"^pyiceberg==(\S+)$", (ROOT / "constraints.txt").read_text(), re.MULTILINE)
    assert pin is not None, "constraints.txt pins pyiceberg"
    assert pyiceberg.__version__ == pin.group(1) == CHECKED_VERSION


def _table(tmp_path: Path, spec: PartitionSpec, name: str = "t") -> Table:
    catalog = open_catalog(str(tmp_path / "warehouse"))
    catalog.create_namespace_if_not_exists("db")
    return catalog.create_table(("db", name), SCHEMA, partition_spec=spec)


def test_data_files_written_by_the_adapter_are_committed_and_read_back(tmp_path: Path) -> None:
    tbl = _table(tmp_path, PartitionSpec(PartitionField(1, 1000, BucketTransform(4), "id_bucket")))
    rows = pa.table({"id": list(range(100)), "v": [f"v{i}" for i in range(100)]}, schema=SCHEMA.as_arrow())
    files = data_files(tbl.metadata, rows, tbl.io)
    assert len(files) == len({f.partition[0] for f in files}) > 1             # split by bucket
    assert all(f.spec_id == tbl.metadata.default_spec_id for f in files)
    assert sum(f.record_count for f in files) == 100
    assert data_files(tbl.metadata, rows.slice(0, 0), tbl.io) == []
    with tbl.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for f in files:
            append.append_data_file(f)
    assert tbl.scan().to_arrow().sort_by("id").equals(rows)


def test_one_worker_swaps_pyicebergs_pool_while_held_nested_and_from_other_threads() -> None:
    before = ExecutorFactory.get_or_create()
    seen: list[int] = []
    with one_worker():
        seen.append(executor_workers())
        with one_worker():
            seen.append(executor_workers())
        seen.append(executor_workers())
        other = threading.Thread(target=lambda: seen.append(executor_workers()))
        other.start()
        other.join()
    assert seen == [1, 1, 1, 1]
    assert ExecutorFactory.get_or_create() is before


def _racy_table(tmp_path: Path, parts: int) -> Table:
    """A table with one manifest per partition."""
    tbl = _table(tmp_path, PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "id")), "racy")
    for p in range(parts):
        tbl.append(pa.table({"id": [p], "v": ["x"]}, schema=SCHEMA.as_arrow()))
    return tbl


def _replace(tbl: Table, p: int) -> None:
    """Delete partition ``p``'s data file by hand and add its replacement, in one overwrite (the mirror
    merge's commit)."""
    old = [t.file for t in tbl.scan().plan_files() if t.file.partition[0] == p]
    new = data_files(tbl.metadata, pa.table({"id": [p], "v": ["y"]}, schema=SCHEMA.as_arrow()), tbl.io)
    with tbl.transaction() as tx, tx.update_snapshot().overwrite() as overwrite:
        for f in old:
            overwrite.delete_data_file(f)
        for f in new:
            overwrite.append_data_file(f)


def test_the_manifest_evaluator_race_is_still_there_and_one_worker_avoids_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With several workers, pyiceberg's overwrite evaluates the parent's manifests on its pool with one
    ``_ManifestEvalVisitor`` whose ``eval`` keeps the manifest's summaries on itself; a 20 ms pause
    between storing and reading them makes the race certain. When this fails because the overwrite
    goes through, pyiceberg fixed it: ``one_worker`` and ``PYICEBERG_MAX_WORKERS=1`` can go."""
    def widened(self: Any, manifest: ManifestFile) -> bool:
        if partitions := manifest.partitions:
            self.partition_fields = partitions
            time.sleep(0.02)   # another thread's eval() on the same evaluator runs here
            return bool(visitors.visit(self.partition_filter, self))
        return True

    monkeypatch.setattr(visitors._ManifestEvalVisitor, "eval", widened)
    monkeypatch.setattr(ExecutorFactory, "_instance", ThreadPoolExecutor(max_workers=8))
    monkeypatch.setattr(ExecutorFactory, "_instance_pid", os.getpid())
    parts = 8
    tbl = _racy_table(tmp_path, parts)
    with pytest.raises(ValidationException, match="Missing required files to delete"):
        _replace(tbl, parts // 2)      # a manifest amid the others (the last one is evaluated alone)
    with one_worker():
        _replace(tbl, parts // 2)
    assert sorted(tbl.refresh().scan().to_arrow().column("v").to_pylist()) == ["x"] * (parts - 1) + ["y"]
