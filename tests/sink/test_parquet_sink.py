"""The Parquet sink (sink/parquet/files.py): layout, schema files, markers, exactly-once, crash leftovers,
checkpoint, cluster id, DDL versions, and DuckDB reading the files with hive partitioning."""
from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sink.base import TableReport
from sink.errors import SinkError
from sink.parquet.files import (
    CHECKPOINT_FILE,
    MANIFEST_FILE,
    ClusterMismatchError,
    CorruptStateError,
    ParquetSink,
    ParquetSinkError,
    SinkBusyError,
    committed_files,
    read_changelog,
    table_dir,
)
from transform.changes import (
    BEFORE,
    COMMIT_TIME,
    COMMIT_TIME_TYPE,
    COMMIT_TS,
    OP,
    SEQ,
    START_TS,
    DDLEvent,
    RunBatch,
    Segment,
    TableChanges,
    write_segment,
)
from transform.codec import mysqltypes as mt
from transform.codec.model import HistoryInfo, Job, TableInfo, arrow_type
from transform.spark import spark_session

CLUSTER = 7001
DAY1 = dt.datetime(2024, 3, 1, 23, 59, 0, tzinfo=dt.UTC)
DAY2 = dt.datetime(2024, 3, 2, 0, 1, 0, tzinfo=dt.UTC)


def tso(when: dt.datetime, logical: int = 0) -> int:
    """A TiDB TSO whose physical part is ``when``."""
    return (int(when.timestamp() * 1000) << 18) | logical


def col(cid: int, name: str, tp: int, flag: int = 0) -> dict[str, Any]:
    charset = "utf8mb4" if tp == mt.TYPE_VARCHAR else "binary"
    return {"id": cid, "name": {"O": name, "L": name.lower()}, "offset": cid - 1,
            "type": {"Tp": tp, "Flag": flag, "Flen": -1, "Decimal": -1, "Charset": charset,
                     "Collate": "utf8mb4_bin" if charset == "utf8mb4" else "binary"},
            "state": 5, "version": 2}


def table_info(tid: int, name: str, extra_cols: tuple[str, ...] = ()) -> TableInfo:
    """``name`` (id INT PK handle, name VARCHAR) plus INT columns ``extra_cols``."""
    cols = [col(1, "id", mt.TYPE_LONG, mt.PRI_KEY_FLAG | mt.NOT_NULL_FLAG), col(2, "name", mt.TYPE_VARCHAR)]
    cols += [col(3 + i, c, mt.TYPE_LONG) for i, c in enumerate(extra_cols)]
    return TableInfo.from_json({"id": tid, "name": {"O": name, "L": name.lower()}, "cols": cols,
                                "pk_is_handle": True, "charset": "utf8mb4", "collate": "utf8mb4_bin"})


def rows(info: TableInfo, changes: list[tuple[str, int, int, dict[str, Any], dict[str, Any] | None]]) -> pa.Table:
    """Changelog rows: (op, commit_ts, seq, after-image, before-image) per change."""
    fields = [pa.field(c.name, arrow_type(c)) for c in info.columns]
    phys = [dt.datetime.fromtimestamp((ts >> 18) / 1000, tz=dt.UTC) for _, ts, _, _, _ in changes]
    data: dict[str, pa.Array] = {
        OP: pa.array([c[0] for c in changes], pa.string()),
        COMMIT_TS: pa.array([c[1] for c in changes], pa.int64()),
        COMMIT_TIME: pa.array(phys, COMMIT_TIME_TYPE),
        START_TS: pa.array([c[1] - 5 for c in changes], pa.int64()),
        SEQ: pa.array([c[2] for c in changes], pa.int32()),
    }
    for f in fields:
        data[f.name] = pa.array([c[3].get(f.name) for c in changes], f.type)
    data[BEFORE] = pa.array([c[4] for c in changes], pa.struct(fields))
    schema = pa.schema([pa.field(OP, pa.string(), False), pa.field(COMMIT_TS, pa.int64(), False),
                        pa.field(COMMIT_TIME, COMMIT_TIME_TYPE, False), pa.field(START_TS, pa.int64(), False),
                        pa.field(SEQ, pa.int32(), False), *fields, pa.field(BEFORE, pa.struct(fields))])
    return pa.Table.from_pydict(data, schema=schema)


def ddl(commit_ts: int, query: str, version: int, info: TableInfo | None) -> DDLEvent:
    job = Job(id=version, type=5, schema_id=1, table_id=info.id if info else 0, query=query,
              binlog=HistoryInfo(schema_version=version, table_info=info))
    return DDLEvent(commit_ts=commit_ts, job=job, table=info)


@dataclass(frozen=True)
class Seg:
    """A segment with its rows, as a test writes it (``run_of`` puts the rows into the run's frame)."""

    schema_version: int
    table: TableInfo
    rows: pa.Table


def run_of(from_ts: int, to_ts: int, batch: str, *tables: TableChanges, cluster: int = CLUSTER) -> RunBatch:
    """A run of ``tables`` (whose segments are ``Seg``s) as ``run_drain`` hands it over: segment
    metadata on the driver, the rows in a Spark frame, two records per segment (two tasks' pieces)."""
    out: dict[int, TableChanges] = {}
    records: list[dict[str, Any]] = []
    for t in tables:
        segs = []
        for s in t.segments:
            segs.append(Segment(s.schema_version, s.table, s.rows.num_rows))
            half = s.rows.num_rows // 2
            for piece in (s.rows.slice(0, half), s.rows.slice(half)):
                if piece.num_rows:
                    records.append({"table_id": t.table_id, "schema_version": s.schema_version,
                                    "commit_ts": piece.column(COMMIT_TS)[0].as_py(), "rows": piece.num_rows,
                                    "data": write_segment(piece)})
        out[t.table_id] = TableChanges(t.table_id, t.db, t.name, t.final, segs, list(t.events))
    run = RunBatch(cluster_id=cluster, from_ts=from_ts, to_ts=to_ts, batch_id=batch, tables=out)
    if records:
        run.frame = spark_session("local[2]").createDataFrame(pa.Table.from_pylist(records, FRAME))
    return run


FRAME = pa.schema([("table_id", pa.int64()), ("schema_version", pa.int64()), ("commit_ts", pa.int64()),
                   ("rows", pa.int64()), ("data", pa.binary())])


T1, T2, T3 = tso(DAY1), tso(DAY1, 3), tso(DAY2)
INFO = table_info(41, "users")


def first_run() -> RunBatch:
    """users: I(1) and I(2) on day 1, U(1) and D(2) on day 2, all at schema version 5."""
    return run_of(T1 - 1, T3, "b1", first_changes())


def first_changes() -> TableChanges:
    """The changes of :func:`first_run`."""
    seg = Seg(5, INFO, rows(INFO, [
        ("I", T1, 0, {"id": 1, "name": "ann"}, None),
        ("I", T2, 0, {"id": 2, "name": "bob"}, None),
        ("U", T3, 0, {"id": 1, "name": "anne"}, {"id": 1, "name": "ann"}),
        ("D", T3, 1, {"id": 2, "name": "bob"}, None),
    ]))
    return TableChanges(41, "shop", "users", INFO, [seg], [])


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != "_binlake.lock"}


def test_layout_partitions_by_utc_date_and_writes_schema_files(tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path / "out"))
    reports = sink.write(first_run())
    root = tmp_path / "out"
    files = files_under(root)
    assert {f for f in files if not f.endswith(".parquet")} == {"shop/users/_binlake_runs.json",
                                                                "shop/users/v5/_schema.json"}
    data = sorted(f for f in files if f.endswith(".parquet"))
    assert [f.rsplit("/", 1)[0] for f in data] == ["shop/users/v5/commit_date=2024-03-01",
                                                   "shop/users/v5/commit_date=2024-03-02"]
    assert all(re.fullmatch(r"b1-[0-9a-f]{32}\.parquet", f.rsplit("/", 1)[1]) for f in data), data
    day1 = pq.read_table(root / data[0])
    day2 = pq.read_table(root / data[1])
    assert "commit_date" not in day1.column_names
    assert day1.column("id").to_pylist() == [1, 2]
    assert day2.column(OP).to_pylist() == ["U", "D"]
    assert day2.column(BEFORE).to_pylist()[0] == {"id": 1, "name": "ann"}
    assert [r.model_dump() for r in reports] == [
        TableReport(table="shop.users", rows={"I": 2, "U": 1, "D": 1}).model_dump()]
    doc = json.loads((root / "shop/users/v5/_schema.json").read_text())
    assert doc["table_id"] == 41 and doc["schema_version"] == 5
    assert doc["table_info"] == INFO.to_json()
    assert "name: string" in doc["arrow_schema"] and "_tidb_before: struct<" in doc["arrow_schema"]


def test_files_carry_run_markers_and_schema_version(tmp_path: Path) -> None:
    run = first_run()
    ParquetSink(str(tmp_path)).write(run)
    for path in committed_files(tmp_path, "shop", "users"):
        meta = {k.decode(): v.decode() for k, v in pq.read_metadata(path).metadata.items()}
        for k, v in run.markers().items():
            assert meta[k] == v
        assert meta["binlake.schema-version"] == "5"
        assert meta["binlake.table-id"] == "41"


def test_read_changelog_returns_rows_in_commit_order(tmp_path: Path) -> None:
    ParquetSink(str(tmp_path)).write(first_run())
    out = read_changelog(tmp_path, "shop", "users")
    assert [(r[OP], r["id"], r["name"]) for r in out.to_pylist()] == [
        ("I", 1, "ann"), ("I", 2, "bob"), ("U", 1, "anne"), ("D", 2, "bob")]


def test_rerunning_a_committed_run_writes_nothing(tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path))
    sink.write(first_run())
    before = {p: (tmp_path / p).read_bytes() for p in files_under(tmp_path)}
    again = sink.write(first_run())
    assert again[0].skipped == f"already at to_ts={T3}" and again[0].rows == {}
    assert {p: (tmp_path / p).read_bytes() for p in files_under(tmp_path)} == before
    # a narrower range inside the committed one is covered too
    inner = run_of(T1, T3, "b9", first_changes())
    assert sink.write(inner)[0].skipped.startswith("already at")
    assert read_changelog(tmp_path, "shop", "users").num_rows == 4


def test_partly_committed_range_writes_only_the_rest(tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path))
    first = first_changes()
    sink.write(run_of(T1 - 1, T2, "b1", TableChanges(41, "shop", "users", INFO, [
        Seg(5, INFO, first.segments[0].rows.slice(0, 2))])))
    report = sink.write(run_of(T1 - 1, T3, "b2", first))[0]
    assert report.skipped == "" and report.rows == {"U": 1, "D": 1}
    out = read_changelog(tmp_path, "shop", "users")
    assert out.column(OP).to_pylist() == ["I", "I", "U", "D"]


def test_crash_leftovers_are_ignored_by_readers_and_cleaned_by_the_next_run(tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path))
    tdir = table_dir(tmp_path, "shop", "users")
    # Crash 1: the manifest cannot be written (its temp name is taken by a directory), after the
    # data files were renamed into place.
    (tdir / (MANIFEST_FILE + ".inprogress")).mkdir(parents=True)
    with pytest.raises(SinkError):
        sink.write(first_run())
    leftovers = {p for p in files_under(tmp_path) if p.endswith(".parquet")}
    assert len(leftovers) == 2
    with pytest.raises(ParquetSinkError, match="no committed changelog"):
        read_changelog(tmp_path, "shop", "users")
    (tdir / (MANIFEST_FILE + ".inprogress")).rmdir()
    # Crash 2 leftovers by hand: an in-progress file and a stray finished-looking file.
    part = tdir / "v5/commit_date=2024-03-01"
    (part / "zz-0.parquet.inprogress").write_bytes(b"PAR1 torn")
    day1_file = next(part.glob("b1-*.parquet"))
    (part / "zz-1.parquet").write_bytes(day1_file.read_bytes())

    assert sink.write(first_run())[0].rows == {"I": 2, "U": 1, "D": 1}
    assert not (part / "zz-0.parquet.inprogress").exists() and not (part / "zz-1.parquet").exists()
    committed = committed_files(tmp_path, "shop", "users")
    assert len(committed) == 2 and all(Path(p).exists() and Path(p).name.startswith("b1-") for p in committed)
    assert read_changelog(tmp_path, "shop", "users").num_rows == 4

    # Leftovers after a committed run: ignored by readers, cleaned by the next run touching the table.
    (part / "zz-2.parquet").write_bytes(Path(committed[0]).read_bytes())
    (part / "zz-3.parquet.inprogress").write_bytes(b"x")
    assert read_changelog(tmp_path, "shop", "users").num_rows == 4
    assert not [f for f in committed_files(tmp_path, "shop", "users") if "zz-" in f]
    later = tso(DAY2, 9)
    sink.write(run_of(T3, later, "b2", TableChanges(41, "shop", "users", INFO, [Seg(5, INFO, rows(INFO, [
        ("I", later, 0, {"id": 3, "name": "cy"}, None)]))])))
    assert not (part / "zz-2.parquet").exists() and not (part / "zz-3.parquet.inprogress").exists()
    assert read_changelog(tmp_path, "shop", "users").column("id").to_pylist() == [1, 2, 1, 2, 3]


def test_checkpoint_round_trip_and_corrupt_file(tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path / "root"))
    assert sink.checkpoint() is None
    run = first_run()
    sink.save_checkpoint(run)
    assert sink.checkpoint() == T3
    assert ParquetSink(str(tmp_path / "root")).checkpoint() == T3
    doc = json.loads((tmp_path / "root" / CHECKPOINT_FILE).read_text())
    assert (doc["batch_id"], doc["cluster_id"], doc["to_ts"]) == ("b1", CLUSTER, T3)
    (tmp_path / "root" / CHECKPOINT_FILE).write_text('{"to_ts": 12')
    with pytest.raises(CorruptStateError, match=str(tmp_path / "root" / CHECKPOINT_FILE)):
        sink.checkpoint()
    (tmp_path / "root" / CHECKPOINT_FILE).write_text('{"to_ts": "12"}')
    with pytest.raises(CorruptStateError, match=CHECKPOINT_FILE):
        sink.checkpoint()


def test_a_run_of_another_cluster_is_refused(tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path))
    sink.write(first_run())
    sink.save_checkpoint(first_run())
    other = first_run()
    other.cluster_id = CLUSTER + 1
    with pytest.raises(ClusterMismatchError, match=f"cluster {CLUSTER + 1}.*cluster {CLUSTER}"):
        sink.write(other)
    with pytest.raises(ClusterMismatchError):
        sink.save_checkpoint(other)
    assert sink.checkpoint() == T3
    # without a checkpoint, the table's manifest still names its cluster
    (tmp_path / CHECKPOINT_FILE).unlink()
    with pytest.raises(ClusterMismatchError, match="shop.users"):
        sink.write(other)


def test_schema_versions_get_their_own_dirs_and_are_projected_on_read(tmp_path: Path) -> None:
    v6 = table_info(41, "users", ("score",))
    v7 = TableInfo.from_json({**v6.to_json(), "cols": [c for c in v6.to_json()["cols"] if c["name"]["O"] != "name"]})
    seg5 = Seg(5, INFO, rows(INFO, [("I", T1, 0, {"id": 1, "name": "ann"}, None)]))
    seg6 = Seg(6, v6, rows(v6, [("U", T3, 0, {"id": 1, "name": "ann", "score": 9},
                                     {"id": 1, "name": "ann", "score": None})]))
    events = [ddl(T2, "ALTER TABLE users ADD score INT", 6, v6), ddl(T3 + 1, "ALTER TABLE users DROP name", 7, v7)]
    sink = ParquetSink(str(tmp_path))
    report = sink.write(run_of(T1 - 1, T3 + 1, "b1", TableChanges(41, "shop", "users", v7, [seg5, seg6], events)))[0]
    assert report.ddl == ["ALTER TABLE users ADD score INT", "ALTER TABLE users DROP name"]
    tdir = table_dir(tmp_path, "shop", "users")
    assert sorted(p.name for p in tdir.iterdir() if p.is_dir()) == ["v5", "v6", "v7"]
    assert json.loads((tdir / "v7/_schema.json").read_text())["table_info"] == v7.to_json()
    assert not list((tdir / "v7").glob("commit_date=*"))
    out = read_changelog(tmp_path, "shop", "users")
    assert "name" not in out.column_names
    assert [(r[OP], r["id"], r["score"]) for r in out.to_pylist()] == [("I", 1, None), ("U", 1, 9)]
    assert out.column(BEFORE).to_pylist() == [None, {"id": 1, "score": None}]


def test_rename_table_writes_under_the_new_name(tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path))
    sink.write(first_run())
    renamed = table_info(41, "members")
    later = tso(DAY2, 20)
    sink.write(run_of(T3, later, "b2", TableChanges(41, "shop", "members", renamed, [
        Seg(8, renamed, rows(renamed, [("I", later, 0, {"id": 5, "name": "eve"}, None)]))],
        [ddl(later - 1, "RENAME TABLE users TO members", 8, renamed)])))
    assert read_changelog(tmp_path, "shop", "users").num_rows == 4
    assert read_changelog(tmp_path, "shop", "members").column("id").to_pylist() == [5]
    assert json.loads((table_dir(tmp_path, "shop", "members") / "v8/_schema.json").read_text())["table_id"] == 41


def test_unsafe_names_are_escaped(tmp_path: Path) -> None:
    info = table_info(50, "a/b")
    sink = ParquetSink(str(tmp_path))
    sink.write(run_of(0, T1, "b1", TableChanges(50, "..", "a/b", info, [
        Seg(3, info, rows(info, [("I", T1, 0, {"id": 1}, None)]))])))
    assert (tmp_path / "%2E." / "a%2Fb" / MANIFEST_FILE).is_file()
    assert read_changelog(tmp_path, "..", "a/b").num_rows == 1


def test_a_second_writer_on_the_same_root_is_refused(tmp_path: Path) -> None:
    holder = ParquetSink(str(tmp_path))
    holder._lock()
    try:
        with pytest.raises(SinkBusyError):
            ParquetSink(str(tmp_path)).write(first_run())
    finally:
        holder.close()
    assert ParquetSink(str(tmp_path)).write(first_run())[0].rows["I"] == 2


def test_duckdb_reads_the_files_with_hive_partitioning(tmp_path: Path) -> None:
    v6 = table_info(41, "users", ("score",))
    sink = ParquetSink(str(tmp_path))
    sink.write(first_run())
    later = tso(DAY2, 30)
    sink.write(run_of(T3, later, "b2", TableChanges(41, "shop", "users", v6, [
        Seg(6, v6, rows(v6, [("I", later, 0, {"id": 3, "name": "cy", "score": 4}, None)]))])))
    glob = str(tmp_path / "shop" / "users" / "*" / "commit_date=*" / "*.parquet")
    con = duckdb.connect()
    got = con.execute(
        f"SELECT commit_date, _tidb_op, id, name, score FROM read_parquet('{glob}', hive_partitioning=true, "
        f"union_by_name=true) ORDER BY _tidb_commit_ts, _tidb_seq").fetchall()
    assert got == [(dt.date(2024, 3, 1), "I", 1, "ann", None), (dt.date(2024, 3, 1), "I", 2, "bob", None),
                   (dt.date(2024, 3, 2), "U", 1, "anne", None), (dt.date(2024, 3, 2), "D", 2, "bob", None),
                   (dt.date(2024, 3, 2), "I", 3, "cy", 4)]
    files = committed_files(tmp_path, "shop", "users")
    n = con.execute("SELECT count(*) FROM read_parquet($files, union_by_name=true)", {"files": files}).fetchone()
    assert n == (5,)
    con.close()


def test_an_older_range_written_after_a_newer_one_reads_in_commit_order(tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path))
    later = tso(DAY2, 40)
    newer = run_of(T3, later, "b2", TableChanges(41, "shop", "users", INFO, [Seg(5, INFO, rows(INFO, [
        ("I", later, 0, {"id": 9, "name": "zed"}, None)]))]))
    assert sink.write(newer)[0].rows == {"I": 1}
    assert sink.write(first_run())[0].rows == {"I": 2, "U": 1, "D": 1}  # a backfill, not covered
    out = read_changelog(tmp_path, "shop", "users")
    assert out.column("id").to_pylist() == [1, 2, 1, 2, 9]
    assert out.column(SEQ).to_pylist() == [0, 0, 0, 1, 0]


@pytest.mark.parametrize("uri", ["s3://lake/cdc", "gs://lake/cdc", "abfss://c@acct.dfs.core.windows.net/cdc",
                                 "hdfs://nn:8020/cdc"])
def test_object_storage_is_refused_naming_what_to_use(uri: str, tmp_path: Path) -> None:
    """The sink's exactly-once protocol needs flock and rename: an object store URI is refused when
    the config is read, pointing at the Iceberg sink; a ``file://`` URI is a path."""
    from binlake.drain_config import DrainerConfig
    from ingest.config import ConfigError, load_config

    config = tmp_path / "drainer.toml"
    config.write_text(f'[syncer]\ndb-type = "parquet"\n[parquet]\ndir = "{uri}"\n')
    with pytest.raises(ConfigError, match=r"parquet.dir: .* not a filesystem path.*flock and renames.*Iceberg sink"):
        load_config(DrainerConfig, config)
    config.write_text(f'[syncer]\ndb-type = "parquet"\n[parquet]\ndir = "file://{tmp_path / "cdc"}"\n')
    assert load_config(DrainerConfig, config).parquet.dir == str(tmp_path / "cdc")
