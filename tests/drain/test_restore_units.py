"""The pieces of ``binlake restore`` that need no Spark, pumps or MariaDB: the DDL history at a ts
(from the emulator's real DDL jobs), the lake's base snapshot and range (a real SQLite catalog),
the bulk-load statements, the targets by scheme."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from binlake.drain_config import DrainerConfig
from sink import changelog as fmt
from sink.iceberg.pit import LakeRange, LakeRangeError, base_snapshot, changelog_of
from sink.iceberg.plugin import IcebergSettings
from sink.mysql.statements import TargetTable, insert_statements
from sink.restore import RestoreError, target_for
from transform.changes import RunMarkers
from transform.history import SchemaHistory
from upstream.cluster import Cluster


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster(tso_addr=None, status_addr=None, mysql_addr=None)
    try:
        yield c
    finally:
        c.close()


def _names(history: SchemaHistory, ts: int) -> list[str]:
    return [f"{v.db}.{v.table.name}" for v, _ in history.tables_at(ts) if v.table is not None]


def test_the_tables_alive_at_a_ts_and_their_columns_added_since(cluster: Cluster) -> None:
    cluster.execute("create table a (id int primary key, v int)")
    t0 = cluster.ts()
    cluster.execute("alter table a add column w int default 5")
    t1 = cluster.ts()
    cluster.execute("truncate table a")
    t2 = cluster.ts()
    cluster.execute("rename table a to b; create table k (x int)")
    t3 = cluster.ts()
    cluster.execute("drop table k")
    t4 = cluster.ts()
    h = SchemaHistory(cluster.catalog.jobs())
    assert _names(h, t0) == ["test.a"] and _names(h, t1) == ["test.a"] and _names(h, t2) == ["test.a"]
    assert _names(h, t3) == ["test.b", "test.k"] and _names(h, t4) == ["test.b"]
    (first, began0), = h.tables_at(t1)
    assert first.table is not None and [c.name for c in first.table.columns] == ["id", "v", "w"]
    alter = max(j.binlog.finished_ts for j in h.done_by(t1))
    assert h.column_past(first.table.id, t0).born == {}
    assert h.column_past(first.table.id, t1).born == {"w": alter}
    (second, began2), = h.tables_at(t2)
    assert second.table is not None and second.table.id != first.table.id   # TRUNCATE: a new table id
    assert began0 < alter < began2 <= t2
    assert h.column_past(second.table.id, t2).born == {}                       # w was there when the id began
    assert [j.binlog.finished_ts for j in h.done_by(t4)] == sorted(j.binlog.finished_ts for j in h.done_by(t4))
    assert len(h.done_by(t0)) < len(h.done_by(t4))
    k = next(v.table for v, _ in h.tables_at(t3) if v.table is not None and v.table.name == "k")
    assert h.last_table(k.id, t4) == k and h.last_table(k.id, t0) is None


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return load_catalog("binlake", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path / 'wh'}")


def test_the_base_is_the_newest_run_end_at_or_before_the_ts_main_line_or_tag(catalog: Catalog) -> None:
    catalog.create_namespace("db")
    tbl = catalog.create_table(("db", "t"), Schema(NestedField(1, "id", LongType(), required=False)))
    ids = []
    for from_ts, to_ts in ((0, 10), (10, 20), (20, 30)):
        tbl.append(pa.table({"id": pa.array([to_ts], pa.int64())}),
                   snapshot_properties=RunMarkers(from_ts, to_ts, f"b{to_ts}", "1").summary())
        ids.append(tbl.current_snapshot().snapshot_id)   # type: ignore[union-attr]
    assert base_snapshot(tbl, 5) == (None, None)
    assert [(s.snapshot_id if s else None, ts) for s, ts in (base_snapshot(tbl, 10), base_snapshot(tbl, 29))] == [
        (ids[0], 10), (ids[1], 20)]
    # a tag names a run end the main line no longer shows (e.g. its snapshots were expired)
    tbl.manage_snapshots().create_tag(ids[0], fmt.tag_name(15)).commit()
    snap, ts = base_snapshot(tbl, 17)
    assert snap is not None and (snap.snapshot_id, ts) == (ids[0], 15)
    snap, ts = base_snapshot(tbl, 35)
    assert snap is not None and (snap.snapshot_id, ts) == (ids[2], 30)


def test_changelog_names_and_the_lake_range() -> None:
    assert changelog_of("t") == "t__changelog"
    assert changelog_of("t__dropped_42") == "t__changelog_dropped_42"
    assert changelog_of("t__dropped_x") == "t__dropped_x__changelog"
    LakeRange(10, 20).check(10)
    LakeRange(10, 20).check(20)
    for ts in (9, 21):
        with pytest.raises(LakeRangeError, match=f"ts {ts} is outside what the lake holds: it holds every ts "
                                                 f"from 10 .* to 20"):
            LakeRange(10, 20).check(ts)


def test_bulk_load_statements_carry_the_sinks_literals_in_runs() -> None:
    table = TargetTable("d", "t", ("id", "s", "b"), (("PRIMARY", (0,)),), frozenset({2}))
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["a'b", None, "c\\d"],
                     "b": pa.array([1, -1, 0], pa.int64())})
    out = list(insert_statements(table, rows, 2))
    assert out == ["INSERT INTO `d`.`t` (`id`, `s`, `b`) VALUES (1, 'a\\'b', 1), (2, NULL, 18446744073709551615)",
                   "INSERT INTO `d`.`t` (`id`, `s`, `b`) VALUES (3, 'c\\\\d', 0)"]


def test_targets_are_chosen_by_scheme(tmp_path: Path) -> None:
    options = DrainerConfig(iceberg=IcebergSettings(warehouse=str(tmp_path / "wh")))
    with pytest.raises(RestoreError, match="a restore writes into iceberg://, mysql://, tidb://"):
        target_for("parquet:///x", options)
    for bad in ("iceberg://", "iceberg://a.b", "iceberg://_binlake"):
        with pytest.raises(RestoreError, match="give iceberg://NAMESPACE"):
            target_for(bad, options)
    assert target_for("iceberg://asof", options).describe() == "iceberg://asof"
    assert (tmp_path / "wh").is_dir()   # the [iceberg] warehouse is the one the target writes in
    assert target_for("tidb://root@127.0.0.1:4000", options).describe() == "tidb://root@127.0.0.1:4000"
