"""``binlake maintain`` (sink/iceberg/maintain.py, binlake/maintain.py) on warehouses the real
IcebergSink wrote from the in-process harness (``tests/drain/inprocess.py``): compaction of many small
runs, snapshot expiry around ``tidb-ts-*`` tags, orphan removal, a drain racing a compaction, the
dry run, and the command's errors."""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from binlake.cli import main
from binlake.maintain import parse_age
from ingest.config import ConfigError
from sink.iceberg import ddl_history, position_deletes
from sink.iceberg.ddl_history import TABLE as DDL_HISTORY
from sink.iceberg.maintain import maintain, referenced_files
from sink.iceberg.verify import verify_mirrors
from sink.iceberg.writer import ConcurrentRunError, IcebergSink
from sink.lake import DAY_MS, MaintainOptions
from tests.drain.conftest import assert_changelog_matches_mirror
from tests.drain.inprocess import Local
from transform import failpoints
from transform.history import SchemaHistory
from upstream.status_api import render_rows

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _root_logging() -> Any:
    """``main`` sets the root logger up (on pytest's captured stderr): put pytest's handlers back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _data_files(tbl: Any) -> list[Any]:
    return [t.file for t in tbl.scan().plan_files()] if tbl.current_snapshot() is not None else []


def _rows(table: Any) -> list[dict[str, Any]]:
    order = "_tidb_seq" in table.column_names
    keys = [("_tidb_commit_ts", "ascending"), ("_tidb_seq", "ascending")] if order else [("id", "ascending")]
    return table.sort_by(keys).to_pylist()


def _rows_at_tag(tbl: Any, tag: str) -> list[dict[str, Any]]:
    return _rows(tbl.scan(snapshot_id=tbl.metadata.refs[tag].snapshot_id).to_arrow())


def _metadata_locations(up: Local) -> dict[str, str]:
    return {f"{ns[0]}.{t[-1]}": up.catalog.load_table((ns[0], t[-1])).metadata_location
            for ns in up.catalog.list_namespaces() for t in up.catalog.list_tables(ns)}


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` but the SQLite catalog, with its size and mtime."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
            if p.is_file() and not p.name.startswith("catalog.db")}


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def _config(up: Local) -> Path:
    path = up.root / "drainer.toml"
    path.write_text(f'data-dir = "{up.root / "drainer"}"\n[iceberg]\nwarehouse = "{up.root / "warehouse"}"\n'
                    f'[spark]\nmaster = "local[2]"\n')
    return path


# ---------------------------------------------------------------------------------------------
# the acceptance scenario: 50 small runs, then `binlake maintain`

def _no_folding(up: Local, name: str) -> None:
    """The mirror keeps a data file per run, for maintain to compact (a drain folding its small files
    into few would leave it nothing to do)."""
    up.catalog.load_table(name).transaction().set_properties({position_deletes.FOLD_KEY: "false"}).commit_transaction()


def test_fifty_small_runs_are_compacted_five_fold_and_verify_and_tags_still_read_the_same(
        up: Local, capsys: pytest.CaptureFixture[str]) -> None:
    up.sql("create table busy (id int primary key, v varchar(20), n int)")
    up.sql("create table quiet (id int primary key)")
    up.sql("insert into quiet values (1)")
    sink = IcebergSink(up.catalog, tag_runs=True, mirror_buckets=2)
    ends = []
    for i in range(50):
        up.sql(f"insert into busy values ({2 * i}, 'a{i}', {i}), ({2 * i + 1}, 'b{i}', {i})")
        up.sql(f"update busy set n = n + 100 where id = {i}")
        if i % 10 == 9:
            up.sql(f"delete from busy where id = {i - 5}")
        ends.append(up.drain(sink=sink).to_ts)
        if i == 0:
            _no_folding(up, "test.busy")
    names = ["test.busy", "test.busy__changelog"]
    before = {n: len(_data_files(up.catalog.load_table(n))) for n in names}
    kept = f"tidb-ts-{ends[24]}"
    at_tag = {n: _rows_at_tag(up.catalog.load_table(n), kept) for n in names}
    locations, files = _metadata_locations(up), _files(up.root / "warehouse")
    config = str(_config(up))
    reports = up.root / "drainer" / "reports"

    # a dry run prints the plan and changes nothing
    assert main(["maintain", "--config", config, "--retention", "0s", "--orphan-age", "0s", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "test.busy__changelog: would expire" in out
    assert _metadata_locations(up) == locations and _files(up.root / "warehouse") == files
    assert not reports.exists()

    assert main(["maintain", "--config", config, "--retention", "0s", "--orphan-age", "0s"]) == 0
    out = capsys.readouterr().out
    report = json.loads(next(reports.glob("maintain-*.json")).read_text())
    by_name = {t["table"]: t for t in report["tables"]}
    assert set(by_name) == {"test.busy", "test.busy__changelog", "test.quiet", "test.quiet__changelog",
                            "_binlake.ddl_history"}
    for n in names:
        tbl = up.catalog.load_table(n)
        after = len(_data_files(tbl))
        assert before[n] >= 5 * after, f"{n}: {before[n]} data files -> {after}"
        assert by_name[n]["compact"]["files_before"] == before[n] and by_name[n]["compact"]["files_after"] == after
        assert f"{n}: expire" in out
        snapshot = tbl.current_snapshot()
        assert snapshot is not None and snapshot.summary is not None
        marks = snapshot.summary.additional_properties
        assert marks["binlake.to-ts"] == str(ends[-1]) and marks["binlake.maintenance"] == "compact"
        assert tbl.properties["binlake.to-ts"] == str(ends[-1])       # the table's progress is untouched
        assert _rows_at_tag(tbl, kept) == at_tag[n]                  # time travel by upstream ts
    assert by_name["test.quiet"]["compact"]["files_rewritten"] == 0
    up.verify(ends[-1])
    up.verify(ends[24])
    # the changelog's rewritten files each hold their rows in commit order
    for f in _data_files(up.catalog.load_table("test.busy__changelog")):
        t = pq.read_table(_local(f.file_path), columns=["_tidb_commit_ts", "_tidb_seq"]).to_pylist()
        order = [(r["_tidb_commit_ts"], r["_tidb_seq"]) for r in t]
        assert order == sorted(order)
    # drains go on over the compacted tables
    up.sql("update busy set v = 'after' where id = 1; insert into busy values (1000, 'x', 0)")
    end = up.drain(sink=sink).to_ts
    up.verify(end)
    assert_changelog_matches_mirror(up.catalog, "test.busy")


# ---------------------------------------------------------------------------------------------
# expiry

def test_expiry_removes_tags_beyond_the_tag_retention_and_keeps_the_younger_tags_and_current(up: Local,
                                                                                               spark: Any) -> None:
    up.sql("create table e (id int primary key, v int)")
    tagged, plain = IcebergSink(up.catalog, tag_runs=True), IcebergSink(up.catalog)
    ends = []
    for i in range(5):
        up.sql(f"insert into e values ({i}, {i})")
        ends.append(up.drain(sink=tagged if i < 3 else plain).to_ts)   # runs 0-2 tagged, 3-4 not
    names = ["test.e", "test.e__changelog"]
    snap_of = {n: {int((s.summary.additional_properties if s.summary else {})["binlake.to-ts"]): s.snapshot_id
                   for s in up.catalog.load_table(n).metadata.snapshots} for n in names}
    now = max(s.timestamp_ms for n in names for s in up.catalog.load_table(n).metadata.snapshots) + 3_600_000
    # tags at or after run 1's upstream time are within the retention; run 0's tag is older
    options = MaintainOptions(retention_ms=60_000, tag_retention_ms=now - (ends[1] >> 18), now_ms=now)
    tag1 = f"tidb-ts-{ends[1]}"
    at_tag1 = {n: _rows_at_tag(up.catalog.load_table(n), tag1) for n in names}
    locations = _metadata_locations(up)

    dry = maintain(up.catalog, lambda: spark, replace(options, dry_run=True), [("test", "e")])
    assert _metadata_locations(up) == locations
    assert [(t.table, t.snapshots_expired, t.tags_removed) for t in dry.tables] == [
        (n, 2, [f"tidb-ts-{ends[0]}"]) for n in names]

    done = maintain(up.catalog, lambda: spark, options, [("test", "e")])
    assert [(t.table, t.snapshots_expired, t.tags_removed, t.skipped) for t in done.tables] == [
        (n, 2, [f"tidb-ts-{ends[0]}"], "") for n in names]
    for n in names:
        tbl = up.catalog.load_table(n)
        ids = {s.snapshot_id for s in tbl.metadata.snapshots}
        assert {snap_of[n][ends[i]] for i in (1, 2, 4)} <= ids             # tagged within retention; current
        assert not {snap_of[n][ends[i]] for i in (0, 3)} & ids             # old tag's; untagged and old
        tags = {r for r in tbl.metadata.refs if r.startswith("tidb-ts-")}
        assert tags == {tag1, f"tidb-ts-{ends[2]}"}
        assert _rows_at_tag(tbl, tag1) == at_tag1[n]
    up.verify(ends[4])
    up.verify(ends[1])        # the tag outlives the snapshots around it: verify finds the state there
    # an expired, untagged state is reported as missing, not compared as an empty table
    gone = verify_mirrors(up.catalog, render_rows(up.cluster.snapshot(ends[3])), ends[3])
    assert any(f"no snapshot at {ends[3]}" in p for p in gone.table("test.e").problems), gone.format()


def test_the_ddl_history_a_drain_with_ddl_appends_to_is_compacted_and_expired_and_reads_the_same(
        up: Local, spark: Any) -> None:
    """Each run with DDL appends a small file to ``_binlake.ddl_history``, which every drain and
    restore reads whole: maintain compacts it like the data tables, not with ``--tables``."""
    up.sql("create table h (id int primary key)")
    for i in range(6):
        up.sql(f"alter table h add column c{i} int")
        up.sql(f"insert into h (id) values ({i})")
        end = up.drain().to_ts
    history = up.catalog.load_table(DDL_HISTORY)
    files, jobs = len(_data_files(history)), ddl_history.read(up.catalog)
    snapshots = len(history.metadata.snapshots)
    assert files >= 6 and jobs is not None and snapshots >= 6

    only = maintain(up.catalog, lambda: spark, MaintainOptions(retention_ms=0), [("test", "h")])
    assert "_binlake.ddl_history" not in {t.table for t in only.tables}
    assert len(_data_files(up.catalog.load_table(DDL_HISTORY))) == files

    report = maintain(up.catalog, lambda: spark, MaintainOptions(retention_ms=0))
    done = next(t for t in report.tables if t.table == "_binlake.ddl_history")
    assert not done.skipped and done.files_before == files and done.files_after == 1
    assert done.snapshots_expired == snapshots - 1
    history = up.catalog.load_table(DDL_HISTORY)   # the current snapshot before maintain, and the compaction's
    assert len(_data_files(history)) == 1 and len(history.metadata.snapshots) == 2
    assert ddl_history.read(up.catalog) == jobs
    up.sql("alter table h add column later int")
    up.sql("insert into h (id) values (100)")
    after = up.drain().to_ts
    assert set(ddl_history.read(up.catalog) or {}) > set(jobs)
    up.verify(end)
    up.verify(after)


def test_a_compaction_of_the_ddl_history_racing_a_drains_append_costs_the_drain_one_more_try(
        up: Local, spark: Any) -> None:
    """pyiceberg retries the drain's append on the compacted table (with ``commit.retry.num-retries``
    at 0 the drain fails: branch main has changed)."""
    up.sql("create table r (id int primary key)")
    for i in range(3):
        up.sql(f"alter table r add column c{i} int")
        up.drain()
    compacted: list[str] = []

    def compact_now(jobs: int) -> None:   # the drain read the table and is about to append
        if not compacted:
            report = maintain(up.catalog, lambda: spark, MaintainOptions())
            done = next(t for t in report.tables if t.table == "_binlake.ddl_history")
            compacted.append(done.skipped)

    up.sql("alter table r add column late int")
    up.sql("insert into r (id) values (1)")
    failpoints.enable("ddl-history-append", compact_now)
    try:
        end = up.drain().to_ts
    finally:
        failpoints.disable("ddl-history-append")
    assert compacted == [""]                             # the compaction committed first
    history = up.catalog.load_table(DDL_HISTORY)
    snapshot = history.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary.additional_properties.get("binlake.maintenance") != "compact"   # the append came after
    assert set(ddl_history.read(up.catalog) or {}) == set(SchemaHistory(up.cluster.catalog.jobs()).jobs)
    assert len(_data_files(history)) == 2                # the compacted file and the drain's
    up.verify(end)


# ---------------------------------------------------------------------------------------------
# orphans

def test_orphans_older_than_the_window_go_younger_ones_and_referenced_files_stay(up: Local, spark: Any) -> None:
    up.sql("create table t (id int primary key, v int)")
    up.sql("insert into t values (1, 1)")
    up.drain()
    up.sql("drop table t")
    up.sql("create table t (id int primary key, v int)")
    up.sql("insert into t values (2, 2), (3, 3)")
    end = up.drain()
    names = [f"test.{t[-1]}" for t in up.catalog.list_tables("test")]
    dropped = next(n for n in names if "__changelog_dropped_" in n)
    kept = next(n for n in names if n.startswith("test.t__dropped_"))
    log, mirror = up.catalog.load_table("test.t__changelog"), up.catalog.load_table("test.t")
    # a changelog and a mirror kept after DROP TABLE share their directories with the new ones
    assert up.catalog.load_table(dropped).location() == log.location()
    assert up.catalog.load_table(kept).location() == mirror.location()
    old = time.time() - 10 * 86400
    for p in (up.root / "warehouse").rglob("*"):
        if p.is_file() and not p.name.startswith("catalog.db"):
            os.utime(p, (old, old))
    data = _local(log.location()) / "data"
    stale, fresh = data / "stale-orphan.parquet", data / "fresh-orphan.parquet"
    stale.write_bytes(b"x" * 10)
    fresh.write_bytes(b"y" * 10)
    os.utime(stale, (old, old))
    mirror_stale = _local(mirror.location()) / "data" / "stale-orphan.parquet"
    mirror_stale.write_bytes(b"z" * 10)
    os.utime(mirror_stale, (old, old))
    referenced = set().union(*(referenced_files(up.catalog.load_table(n)) for n in names))

    report = maintain(up.catalog, lambda: spark, MaintainOptions(orphan_age_ms=3 * DAY_MS), [("test", "t")])
    by_name = {t.table: t for t in report.tables}
    assert set(by_name) == set(names)
    assert not stale.exists() and fresh.exists()
    assert str(stale) in by_name["test.t__changelog"].orphan_paths
    assert all(Path(p).exists() for p in referenced)
    # under test/t: the kept first mirror's files are referenced and stay, an old unreferenced one goes
    assert not mirror_stale.exists() and str(mirror_stale) in by_name["test.t"].orphan_paths
    assert all(p.startswith(str(_local(mirror.location()))) for p in by_name["test.t"].orphan_paths)
    assert up.catalog.load_table(kept).scan().to_arrow().num_rows == 1
    assert up.catalog.load_table(dropped).scan().to_arrow().num_rows == 1
    up.verify(end.to_ts)
    assert_changelog_matches_mirror(up.catalog, "test.t")


# ---------------------------------------------------------------------------------------------
# a drain and a compaction racing on one table

def test_a_drain_and_a_compaction_racing_on_a_table_one_wins_and_nothing_is_lost(up: Local, spark: Any) -> None:
    up.sql("create table c (id int primary key, v int)")
    sink = IcebergSink(up.catalog, tag_runs=True, mirror_buckets=1)
    for i in range(4):
        up.sql(f"insert into c values ({i}, {i})")
        up.drain(sink=sink)
        if i == 0:
            _no_folding(up, "test.c")

    # a drain commits while the compaction of the mirror is about to: the drain wins
    drained: list[int] = []

    def drain_now(table: str) -> None:
        if not drained:
            up.sql("insert into c values (100, 100); update c set v = 7 where id = 0")
            drained.append(up.drain(sink=sink).to_ts)

    failpoints.enable("maintain-before-commit", drain_now)
    try:
        report = maintain(up.catalog, lambda: spark, MaintainOptions(), [("test", "c")])
    finally:
        failpoints.disable("maintain-before-commit")
    lost, won = report.tables
    assert lost.table == "test.c" and "a drain committed" in lost.skipped and lost.files_written == 0
    assert won.table == "test.c__changelog" and not won.skipped and won.files_after < won.files_before
    mirror = up.catalog.load_table("test.c")
    on_disk = {str(p) for p in (_local(mirror.location()) / "data").rglob("*.parquet")}
    assert on_disk <= referenced_files(mirror)        # the lost compaction's files were deleted
    up.verify(drained[0])

    # a compaction commits while a drain's commit of the mirror is about to: the drain fails the table
    # (ConcurrentRunError), and the next run completes it
    def compact_now(table: str) -> None:
        if table == "test.c":
            failpoints.disable("sink-before-commit")
            maintain(up.catalog, lambda: spark, MaintainOptions(), [("test", "c")])

    up.sql("insert into c values (200, 200); delete from c where id = 1")
    failpoints.enable("sink-before-commit", compact_now)
    try:
        with pytest.raises(ConcurrentRunError):
            up.drain(sink=sink)
    finally:
        failpoints.disable("sink-before-commit")
    current = up.catalog.load_table("test.c").current_snapshot()
    assert current is not None and current.summary is not None
    assert current.summary.additional_properties["binlake.maintenance"] == "compact"
    end = up.drain(sink=sink)
    up.verify(end.to_ts)
    assert_changelog_matches_mirror(up.catalog, "test.c")


# ---------------------------------------------------------------------------------------------
# the command's input

def test_durations() -> None:
    assert parse_age("7d", "--retention") == 7 * DAY_MS
    assert parse_age("12h", "--retention") == 12 * 3_600_000
    assert parse_age("30m", "--retention") == 30 * 60_000
    assert parse_age("0s", "--retention") == 0
    assert parse_age("1d12h", "--retention") == 36 * 3_600_000
    for bad in ("", "7", "d", "-1d", "7x", "7d3"):
        with pytest.raises(ConfigError, match="is not a duration"):
            parse_age(bad, "--retention")


def test_bad_input_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = str(tmp_path / "warehouse")
    assert main(["maintain", "--warehouse", wh, "--tag-retention", "30 days"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "binlake maintain: error: --tag-retention '30 days' is not a duration: expected e.g. 7d, 12h, 30m, 1d12h "
        "or 0s"]
    assert main(["maintain", "--warehouse", wh, "--tables", "test.nope"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "binlake maintain: error: --tables: no Iceberg table of test.nope in the catalog"]
