"""A mirror merged on read (``sink/iceberg/position_deletes.py``, ``sink/iceberg/tasks.py``): an
incremental run's updates and deletes become position delete files (one per bucket) naming only the
data files that held their keys, no data file is rewritten, and every reader (pyiceberg, DuckDB; Java Iceberg in
``tests/sink/test_java_readers.py``), time travel by tag, ``verify``, ``check``, ``restore`` and ``maintain``
see the rows as before. A mirror set to ``write.merge.mode=copy-on-write`` rewrites instead."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import FileScanTask, Table

from binlake.cli import main
from sink.iceberg import position_deletes
from sink.iceberg.duck import connect_iceberg
from sink.iceberg.maintain import maintain
from sink.iceberg.verify import verify_table
from sink.lake import DAY_MS, MaintainOptions
from sink.mysql.target import MySQLTarget
from sink.mysql.upstream_reader import read_snapshot
from tests.drain.conftest import Env, make_env
from tests.drain.test_check import _config
from tests.drain.test_restore import restore

pytestmark = pytest.mark.integration


@pytest.fixture
def env(tmp_path: Path, spark: Any) -> Iterator[Env]:
    with make_env(tmp_path) as e:
        yield e


def _ids_of(tbl: Table, path: str) -> set[int]:
    """The ids data file ``path`` holds, deleted ones included."""
    task = next(t for t in tbl.scan().plan_files() if t.file.file_path == path)
    rows = ArrowScan(tbl.metadata, tbl.io, tbl.schema(), AlwaysTrue()).to_table([FileScanTask(task.file)])
    return set(rows.column("id").to_pylist())


def _pyiceberg(tbl: Table, snapshot_id: int | None = None) -> dict[int, str]:
    scan = tbl.scan() if snapshot_id is None else tbl.scan(snapshot_id=snapshot_id)
    return {r["id"]: r["v"] for r in scan.to_arrow().select(["id", "v"]).to_pylist()}


def _duckdb(tbl: Table, snapshot_id: int | None = None) -> dict[int, str]:
    at = "" if snapshot_id is None else f", snapshot_from_id={snapshot_id}"
    rows = connect_iceberg().execute(f"SELECT id, v FROM iceberg_scan('{tbl.metadata_location}'{at})").fetchall()
    return dict(rows)


def _upstream(env: Env, ts: int) -> dict[int, str]:
    snapshot = read_snapshot(MySQLTarget.from_dsn(env.options.upstream.dsn), ts, lambda d, t: d == "test")
    return {r["id"]: r["v"] for r in snapshot["test.t"]}


def _set(env: Env, props: dict[str, str]) -> Table:
    tbl = env.catalog().load_table(("test", "t"))
    tbl.transaction().set_properties(props).commit_transaction()
    return tbl.refresh()


def _summary(tbl: Table) -> dict[str, str]:
    snap = tbl.current_snapshot()
    assert snap is not None and snap.summary is not None
    return dict(snap.summary.additional_properties)


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_an_update_and_a_delete_touch_only_the_files_holding_their_keys(env: Env, mode: str) -> None:
    env.sql("create table t (id int primary key, v varchar(20))")
    for run in range(4):   # four runs: about four data files per bucket (not folded into one)
        env.sql("insert into t values " + ", ".join(f"({i}, 'v{i}')" for i in range(run * 100, run * 100 + 100)))
        env.drain()
        if run == 0:
            _set(env, {position_deletes.FOLD_KEY: "false"})
    tbl = _set(env, {position_deletes.FOLD_KEY: "true"})
    assert tbl.properties[position_deletes.MODE_KEY] == "merge-on-read"   # binlake creates mirrors so
    if mode == "copy-on-write":
        tbl = _set(env, {position_deletes.MODE_KEY: mode})
    files = [t.file.file_path for t in tbl.scan().plan_files()]
    assert len(files) > 20
    holders = {p for p in files if _ids_of(tbl, p) & {5, 250}}
    assert 1 <= len(holders) <= 2
    env.sql("update t set v = 'changed' where id = 5; delete from t where id = 250")
    ts = env.drain()["to_ts"]
    tbl = tbl.refresh()
    summary = _summary(tbl)
    if mode == "merge-on-read":
        assert "deleted-data-files" not in summary, summary            # no data file rewritten
        assert summary["added-data-files"] == "1"                       # the update's new image
        added = {d.file_path: d for t in tbl.scan().plan_files() for d in t.delete_files}
        assert set(position_deletes.read(tbl.io, added.values())) == holders          # the files that held them
        assert summary["added-position-deletes"] == "2" and summary["added-delete-files"] == str(len(added))
    else:
        assert summary["deleted-data-files"] == str(len(holders)) and "added-delete-files" not in summary
    expect = {i: f"v{i}" for i in range(400) if i != 250} | {5: "changed"}
    assert _pyiceberg(tbl) == _duckdb(tbl) == _upstream(env, ts) == expect
    env.verify(ts)


def test_readers_tags_verify_check_restore_and_maintain_read_through_position_deletes(
        env: Env, spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    env.options.iceberg.tag_runs = True
    env.sql("create table t (id int primary key, v varchar(20))")
    env.sql("insert into t values " + ", ".join(f"({i}, 'v{i}')" for i in range(60)))
    runs = [env.drain()["to_ts"]]
    env.sql("update t set v = 'one' where id in (1, 2, 3, 40); delete from t where id in (4, 41, 59)")
    env.sql("update t set id = 100 where id = 7")          # a key change: a delete and an insert
    runs.append(env.drain()["to_ts"])
    env.sql("update t set v = 'two' where id in (1, 100); insert into t values (4, 'back'), (61, 'new')")
    env.sql("delete from t where id in (2, 61)")
    runs.append(env.drain()["to_ts"])
    catalog = env.catalog()
    tbl = catalog.load_table(("test", "t"))
    assert int(_summary(tbl)["total-position-deletes"]) >= 4   # the rest went with the small files folded
    for ts in runs:
        snap = tbl.metadata.refs[f"tidb-ts-{ts}"].snapshot_id
        assert _pyiceberg(tbl, snap) == _duckdb(tbl, snap) == _upstream(env, ts), ts
        env.verify(ts)
    counts = restore(env, runs[1], "iceberg://at_two")
    upstream = read_snapshot(MySQLTarget.from_dsn(env.options.upstream.dsn), runs[1], lambda d, t: d == "test")
    assert counts["test.t"] == len(upstream["test.t"]) == 57
    result = verify_table(catalog, "test.t", upstream["test.t"], runs[1], mirror=("at_two", "test", "t"))
    assert result.ok, result
    # binlake check reads the mirror through its deletes (its key unique, its row count the report's)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        code = main(["check", "--config", str(_config(env.root / "drainer.toml", env.options))])
    finally:
        root.handlers[:], root.level = handlers, level
    out = capsys.readouterr().out
    assert code == 0 and "OK   test.t" in out, out
    # maintain folds the deletes: the rows, the tags and verify read the same
    report = maintain(catalog, lambda: spark, MaintainOptions(retention_ms=365 * DAY_MS, tag_retention_ms=365 * DAY_MS),
                      [("test", "t")])
    done = next(t for t in report.tables if t.table == "test.t")
    assert done.delete_files_folded >= 2, done.format()
    tbl = tbl.refresh()
    summary = _summary(tbl)
    assert summary["total-delete-files"] == "0" and summary["binlake.maintenance"] == "compact"
    assert _pyiceberg(tbl) == _duckdb(tbl) == _upstream(env, runs[-1])
    for ts in runs:
        assert _pyiceberg(tbl, tbl.metadata.refs[f"tidb-ts-{ts}"].snapshot_id) == _upstream(env, ts)
    env.verify(runs[-1])
    # a drain after maintain merges on read again
    env.sql("update t set v = 'three' where id = 3")
    ts = env.drain()["to_ts"]
    tbl = tbl.refresh()
    assert _summary(tbl)["added-position-delete-files"] == "1"
    assert _pyiceberg(tbl) == _duckdb(tbl) == _upstream(env, ts)
    env.verify(ts)


def test_maintain_merges_a_partitions_delete_files_into_one_and_the_rows_stay(env: Env, spark: Any) -> None:
    env.sql("create table t (id int primary key, v varchar(20))")
    env.sql("insert into t values " + ", ".join(f"({i}, 'v{i}')" for i in range(800)))
    env.drain()
    catalog = env.catalog()
    # no file is small: only the delete files are maintain's business (each removes < 20 % of a file);
    # the runs leave a delete file each (a run folding the bucket's would leave one)
    tbl = _set(env, {"write.target-file-size-bytes": "1", position_deletes.FOLD_KEY: "false"})
    holder = next(t.file.file_path for t in tbl.scan().plan_files() if 7 in _ids_of(tbl, t.file.file_path))
    other = min(_ids_of(tbl, holder) - {7})   # a second key of the same data file
    for n, key in ((1, 7), (2, other)):
        env.sql(f"update t set v = 'run{n}' where id = {key}")
        ts = env.drain()["to_ts"]
    tbl = tbl.refresh()
    assert _summary(tbl)["total-delete-files"] == "2"
    report = maintain(catalog, lambda: spark, MaintainOptions(retention_ms=365 * DAY_MS), [("test", "t")])
    done = next(t for t in report.tables if t.table == "test.t")
    assert done.delete_files_merged == 2 and done.files_rewritten == 0, done.format()
    tbl = tbl.refresh()
    summary = _summary(tbl)
    assert summary["total-delete-files"] == "1" and summary["total-position-deletes"] == "2"
    assert _pyiceberg(tbl) == _duckdb(tbl) == _upstream(env, ts)
    env.verify(ts)


def _per_bucket(tbl: Table) -> tuple[list[list[int]], int]:
    """The row counts of each bucket's (partition's) data files, sorted, and the most delete files
    one bucket has."""
    data: dict[object, list[int]] = {}
    dels: dict[object, set[str]] = {}
    for t in tbl.scan().plan_files():
        data.setdefault(t.file.partition, []).append(t.file.record_count)
        dels.setdefault(t.file.partition, set()).update(d.file_path for d in t.delete_files)
    return [sorted(d) for d in data.values()], max(len(d) for d in dels.values())


@pytest.mark.parametrize("fold", [True, False])
def test_runs_fold_a_buckets_small_files_and_its_delete_files(env: Env, fold: bool) -> None:
    env.sql("create table t (id int primary key, v varchar(20))")
    env.sql("insert into t values " + ", ".join(f"({i}, 'v{i}')" for i in range(400)))
    env.drain()
    if not fold:
        _set(env, {position_deletes.FOLD_KEY: "false"})
    next_id = 400
    for run in range(8):   # each run: 40 inserts, 10 updates and 3 deletes over the table
        env.sql("insert into t values " + ", ".join(f"({i}, 'r{run}')" for i in range(next_id, next_id + 40)))
        ids = ", ".join(str(i) for i in range(run, next_id, 37))
        env.sql(f"update t set v = 'u{run}' where id in ({ids})")
        env.sql(f"delete from t where id in ({run * 7 + 1}, {run * 11 + 300}, {next_id + 5})")
        next_id += 40
        ts = env.drain()["to_ts"]
    tbl = env.catalog().load_table(("test", "t"))
    buckets, most_deletes = _per_bucket(tbl)
    tiered = all(b > 2 * a for sizes in buckets for a, b in zip(sizes, sizes[1:]))
    if fold:   # each file over twice the next smaller one (at most 4 here), one delete file per bucket
        assert tiered and max(map(len, buckets)) <= 4 and most_deletes == 1, (buckets, most_deletes)
    else:      # a data file and a delete file per run in a bucket the runs touch
        assert not tiered and max(map(len, buckets)) > 4 and most_deletes > 1, (buckets, most_deletes)
    assert _pyiceberg(tbl) == _duckdb(tbl) == _upstream(env, ts)
    env.verify(ts)
