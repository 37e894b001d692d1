"""``sink.iceberg.pyiceberg_adapter``: the pyiceberg internals the sink uses, pinned to the version in
constraints.txt. A pyiceberg bump fails the first test: re-check the adapter (the private
``_dataframe_to_data_files`` it wraps, the ``_SnapshotProducer`` its ``commit_files`` extends), then
move ``CHECKED_VERSION``."""
from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyiceberg
import pytest
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Table
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType, NestedField, StringType

from sink.iceberg import position_deletes
from sink.iceberg.catalog import open_catalog
from sink.iceberg.duck import connect_iceberg
from sink.iceberg.pyiceberg_adapter import CHECKED_VERSION, commit_files, data_files

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


def _keyed(tmp_path: Path, rows: int = 10) -> Table:
    tbl = _table(tmp_path, PartitionSpec(PartitionField(1, 1000, BucketTransform(2), "id_bucket")), "keyed")
    tbl.append(pa.table({"id": list(range(rows)), "v": [f"v{i}" for i in range(rows)]}, schema=SCHEMA.as_arrow()))
    return tbl


def _duck_ids(tbl: Table) -> list[int]:
    con = connect_iceberg()
    return sorted(r[0] for r in con.execute(f"SELECT id FROM iceberg_scan('{tbl.metadata_location}')").fetchall())


def _file_ids(tbl: Table, f: DataFile) -> list[int]:
    """The ids of data file ``f`` in its row order (no deletes applied)."""
    rows = ArrowScan(tbl.metadata, tbl.io, tbl.schema(), AlwaysTrue()).to_table([FileScanTask(f)])
    return rows.column("id").to_pylist()


def test_commit_files_adds_position_deletes_that_pyiceberg_and_duckdb_apply_and_removes_them_with_their_file(
        tmp_path: Path) -> None:
    tbl = _keyed(tmp_path)
    target = max((t.file for t in tbl.scan().plan_files()), key=lambda f: f.record_count)
    held = _file_ids(tbl, target)
    assert len(held) >= 3
    first = position_deletes.write(tbl.io, {target.file_path: pa.array([2, 0])}, target)
    path_id = position_deletes.FILE_PATH_ID   # its file_path bounds name the one file
    assert first.lower_bounds[path_id] == first.upper_bounds[path_id] == target.file_path.encode()
    assert first.record_count == 2
    with tbl.transaction() as tx:
        commit_files(tx, {"binlake.test": "1"}, [first], [])
    tbl = tbl.refresh()
    expect = sorted(set(range(10)) - {held[0], held[2]})
    assert sorted(tbl.scan().to_arrow().column("id").to_pylist()) == expect == _duck_ids(tbl)
    summary = tbl.current_snapshot().summary
    assert summary is not None
    assert summary["added-position-delete-files"] == "1" and summary["total-position-deletes"] == "2"
    assert summary["binlake.test"] == "1"
    assert position_deletes.read(tbl.io, [first])[target.file_path].to_pylist() == [0, 2]
    # the data file replaced by its live rows: its delete file goes with it, older snapshots read as they were
    live = [i for n, i in enumerate(held) if n not in (0, 2)]
    new = data_files(tbl.metadata, pa.table({"id": live, "v": [f"v{i}" for i in live]}, schema=SCHEMA.as_arrow()),
                     tbl.io)
    with tbl.transaction() as tx:
        commit_files(tx, {}, new, [target, first])
    tbl = tbl.refresh()
    assert sorted(tbl.scan().to_arrow().column("id").to_pylist()) == expect == _duck_ids(tbl)
    assert all(not t.delete_files for t in tbl.scan().plan_files())
    summary = tbl.current_snapshot().summary
    assert summary is not None
    assert summary["total-delete-files"] == "0" and summary["removed-position-delete-files"] == "1"
    assert [len(tbl.scan(snapshot_id=s.snapshot_id).to_arrow()) for s in tbl.metadata.snapshots] == [10, 8, 8]
    with tbl.transaction() as tx, pytest.raises(ValueError, match="Missing required files to delete"):
        commit_files(tx, {}, [], [target])


def test_commit_files_merges_the_manifests_it_rewrites_and_drops_those_left_with_no_live_file(
        tmp_path: Path) -> None:
    tbl = _keyed(tmp_path)
    for i in range(10, 14):   # four more manifests of one data file each
        tbl.append(pa.table({"id": [i], "v": [f"v{i}"]}, schema=SCHEMA.as_arrow()))
    tbl = tbl.refresh()
    snapshot = tbl.current_snapshot()
    assert snapshot is not None and len(snapshot.manifests(tbl.io)) == 5
    small = [t.file for t in tbl.scan().plan_files() if t.file.record_count == 1]
    assert len(small) == 4
    with tbl.transaction() as tx:   # the four one-row files folded into one
        commit_files(tx, {}, data_files(tbl.metadata, pa.table({"id": [10, 11, 12, 13], "v": ["a"] * 4},
                                                                schema=SCHEMA.as_arrow()), tbl.io), small)
    tbl = tbl.refresh()
    snapshot = tbl.current_snapshot()
    assert snapshot is not None
    # the added one, and the four rewritten as one holding their entries as DELETED
    kinds = sorted((m.added_files_count, m.existing_files_count, m.deleted_files_count)
                   for m in snapshot.manifests(tbl.io))
    assert (0, 0, 4) in kinds and len(kinds) == 3, kinds
    with tbl.transaction() as tx:   # the next commit leaves that one out: it holds no live file
        commit_files(tx, {}, data_files(tbl.metadata, pa.table({"id": [20], "v": ["b"]}, schema=SCHEMA.as_arrow()),
                                        tbl.io), [])
    tbl = tbl.refresh()
    snapshot = tbl.current_snapshot()
    assert snapshot is not None
    assert all(m.added_files_count or m.existing_files_count for m in snapshot.manifests(tbl.io))
    assert sorted(tbl.scan().to_arrow().column("id").to_pylist()) == [*range(14), 20] == _duck_ids(tbl)
    assert len(tbl.scan(snapshot_id=snapshot.parent_snapshot_id).to_arrow()) == 14   # time travel as before
