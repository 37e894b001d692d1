"""``binlake restore``: the upstream at a past ts rebuilt from the lake (the Iceberg mirrors and
changelogs), into Debian's MariaDB and into an Iceberg namespace, each checked against the upstream
read at that ts. Real pumps, the emulated TiDB (its MySQL port answers ``@@tidb_snapshot`` reads),
local Spark."""
from __future__ import annotations

import io
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from binlake.drain import run_verify_command
from binlake.drain_config import DrainerConfig
from binlake.restore import run_restore_command
from binlake.restore_report import SCHEMA_FILE as RESTORE_SCHEMA
from binlake.restore_report import parse_restore_report
from sink.iceberg.pit import LakeRangeError
from sink.iceberg.verify import verify_table
from sink.mysql.target import MySQLTarget
from sink.mysql.upstream_reader import read_snapshot
from sink.restore import RestoreError
from tests.drain.conftest import Env, make_env
from tests.drain.test_drain_cli import ROOT, cli_args
from tests.servers import MariaDBServer
from tests.waiting import wait_for
from upstream.local import http

pytestmark = pytest.mark.integration


@pytest.fixture
def maria(mariadb_server: MariaDBServer) -> MariaDBServer:
    """The session's MariaDB without what earlier tests left."""
    mariadb_server.reset("test", "other")
    return mariadb_server


@pytest.fixture
def gc_env(tmp_path: Path, spark: Any) -> Iterator[Env]:
    """``env`` whose pumps keep binlogs one second (their GC runs when triggered)."""
    with make_env(tmp_path, pump_args=("--gc", "1s")) as e:
        yield e


def verify_against(env: Env, dsn: str, ts: int) -> str:
    """``binlake verify --ts ts --against dsn``; fails the test on any difference."""
    out = io.StringIO()
    code = run_verify_command(env.options, ts, out=out, against=dsn)
    assert code == 0, out.getvalue()
    return out.getvalue()


def restore(env: Env, ts: int, into: str, options: DrainerConfig | None = None, replace: bool = False,
            report: Path | None = None) -> dict[str, int]:
    out = io.StringIO()
    try:
        return run_restore_command(options or env.options, ts, into, replace, out=out,
                                   report_path=str(report) if report else None)
    finally:
        env.outputs.append(out.getvalue())


def on_engine(env: Env, engine: str) -> DrainerConfig:
    """``env``'s options with every restore's load on ``engine``: ``Spark`` (``in-process-below = 0``) or
    ``in process`` (the default 64 MiB: a load this small runs in process)."""
    options = env.options.model_copy(deep=True)
    options.spark.in_process_below = 0 if engine == "Spark" else 64 << 20
    return options


def tables(maria: MariaDBServer, db: str = "test") -> list[str]:
    return sorted(r[0] for r in maria.query(f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE "
                                            f"TABLE_SCHEMA = '{db}'"))


def history(env: Env) -> dict[str, int]:
    """A history with DDL over four runs: a keyed table that gains and loses a column, a keyless one
    (dropped and re-created), a renamed one, a truncated one; three restore points, two inside a
    run (a mirror base plus a changelog tail) and one at a run's end."""
    env.sql("create table a (id int primary key, v varchar(20), n int)")
    env.sql("create table k (x int, y varchar(10))")
    env.sql("create table r (id int primary key, s varchar(10))")
    env.sql("create table tr (id int primary key, z int)")
    env.sql("insert into a values (1, 'a', 1), (2, 'b', 2), (3, 'c', 3); insert into k values (1, 'x'), (1, 'x'), "
            "(2, 'y'); insert into r values (1, 'r1'); insert into tr values (1, 1), (2, 2)")
    env.drain()
    # run 2: DML, ADD COLUMN with a default, a key change; t1 inside it
    env.sql("update a set v = 'bb' where id = 2; delete from a where id = 1; insert into k values (3, 'z')")
    env.sql("delete from k where x = 2; insert into k values (1, 'x')")
    env.sql("alter table a add column w int default 7")
    env.sql("insert into a (id, v, n, w) values (4, 'd', 4, 40); update a set id = 30 where id = 3")
    env.sql("update tr set z = 20 where id = 2")
    t1 = env.settle()
    env.sql("rename table r to r2")
    env.sql("insert into r2 values (2, 'r2'); update a set v = 'after t1' where id = 2")
    env.sql("truncate table tr")
    env.sql("insert into tr values (10, 10)")
    env.drain()
    # run 3: DROP COLUMN, then t2, then DROP TABLE and the name taken again
    env.sql("alter table a drop column n")
    env.sql("insert into a (id, v) values (5, 'e'); update tr set z = 11 where id = 10")
    t2 = env.settle()
    env.sql("drop table k")
    env.sql("create table k (x int primary key, q varchar(10))")
    env.sql("insert into k values (7, 'new'); delete from a where id = 4; update r2 set s = 'r22' where id = 2")
    t3 = int(env.drain()["to_ts"])
    # run 4: after every restore point
    env.sql("insert into a (id, v) values (6, 'f'); delete from tr; drop table r2")
    env.drain()
    return {"t1": t1, "t2": t2, "t3": t3}


def test_restore_at_three_points_of_a_history_with_ddl_into_mariadb(env: Env, maria: MariaDBServer) -> None:
    points = history(env)
    expected = {"t1": ["a", "k", "r", "tr"], "t2": ["a", "k", "r2", "tr"], "t3": ["a", "k", "r2", "tr"]}
    schema = json.loads(RESTORE_SCHEMA.read_text())
    for (label, ts), engine in itertools.product(points.items(), ("in process", "Spark")):
        maria.reset("test")
        report_path = env.root / f"restore-{label}.json"
        counts = restore(env, ts, maria.dsn, report=report_path, options=on_engine(env, engine))
        assert sorted(n.split(".")[1] for n in counts) == expected[label], (label, counts)
        # --report: what was restored, validated against its schema in docs/
        jsonschema.validate(json.loads(report_path.read_text()), schema)
        report = parse_restore_report(report_path.read_text())
        assert (report.ts, report.rows, report.cluster_id) == (ts, sum(counts.values()), env.cluster.cluster_id)
        assert {t.table: t.rows for t in report.tables} == counts and maria.dsn.split("@")[-1] in report.target
        assert all((t.base_ts is None or t.base_ts <= ts) and (t.tail_from is None or t.tail_from < ts)
                   for t in report.tables)
        assert any(t.tail_from is not None for t in report.tables) is (label != "t3"), report.tables   # t3: a run end
        assert set(report.stages) == {"prepare", "locate", "load", "finish", "total"}
        assert report.engine.startswith(engine), (engine, report.engine)
        assert tables(maria) == expected[label], label
        verify_against(env, maria.dsn, ts)
        row = maria.query(f"SELECT checkPoint FROM tidb_binlog.checkpoint WHERE clusterID = "
                          f"{env.cluster.cluster_id}")
        assert f'"commitTS":{ts}' in row[0][0].replace(" ", "") and '"consistent":true' in row[0][0].replace(" ", "")
    # the restore at t1 holds the key change, the added column's default and the keyless duplicates
    maria.reset("test")
    restore(env, points["t1"], maria.dsn)
    assert maria.query("SELECT id, v, n, w FROM test.a ORDER BY id") == [
        (2, "bb", 2, 7), (4, "d", 4, 40), (30, "c", 3, 7)]
    assert sorted(maria.query("SELECT x, y FROM test.k")) == [(1, "x"), (1, "x"), (1, "x"), (3, "z")]
    assert maria.query("SELECT id, z FROM test.tr ORDER BY id") == [(1, 1), (2, 20)]


def test_a_drain_into_mysql_continues_from_the_restored_checkpoint(env: Env, maria: MariaDBServer) -> None:
    env.sql("create table c (id int primary key, v int)")
    env.sql("insert into c values (1, 1), (2, 2)")
    t = int(env.drain()["to_ts"])
    env.sql("update c set v = 20 where id = 2; insert into c values (3, 3)")
    env.sql("alter table c add column w varchar(5) default 'w'")
    env.sql("insert into c values (4, 4, 'x')")
    restore(env, t, maria.dsn)
    mysql = env.options.model_copy(deep=True)
    mysql.syncer.db_type = "mysql"
    mysql.syncer.to.dsn = maria.dsn
    report = env.drain(mysql)
    assert report["checkpoint_before"] == t and report["to_ts"] > t
    verify_against(env, maria.dsn, int(report["to_ts"]))
    assert maria.query("SELECT id, v, w FROM test.c ORDER BY id") == [
        (1, 1, "w"), (2, 20, "w"), (3, 3, "w"), (4, 4, "x")]


def test_restore_after_the_pumps_gc_removed_the_range(gc_env: Env, maria: MariaDBServer) -> None:
    env = gc_env
    env.sql("create table g (id int primary key, v varchar(10))")
    env.sql("insert into g values (1, 'one'), (2, 'two')")
    env.drain()
    env.sql("update g set v = 'TWO' where id = 2; insert into g values (3, 'three')")
    t = env.settle()
    env.sql("delete from g where id = 1")
    env.drain()
    env.sql("insert into g values (4, 'four')")
    env.settle()
    for p in env.pumps:
        assert http("POST", f"{p.status_url}/debug/gc/trigger")[0] == 200
    for p in env.pumps:
        wait_for(lambda p=p: p.status()["binlake"]["gc_ts"] > t, 30, p.log_tail)
    restore(env, t, maria.dsn)
    verify_against(env, maria.dsn, t)
    assert maria.query("SELECT id, v FROM test.g ORDER BY id") == [(1, "one"), (2, "TWO"), (3, "three")]


def test_restore_into_an_iceberg_namespace(env: Env) -> None:
    points = history(env)
    catalog = env.catalog()
    upstream = MySQLTarget.from_dsn(env.options.upstream.dsn)
    for (label, ts), engine in itertools.product(points.items(), ("in process", "Spark")):
        ns = f"restored_{label}_{engine.split()[-1].lower()}"
        counts = restore(env, ts, f"iceberg://{ns}", options=on_engine(env, engine))
        snapshot = read_snapshot(upstream, ts, lambda d, t: d == "test")
        assert sorted(counts) == sorted(snapshot), label
        for name, rows in snapshot.items():
            result = verify_table(catalog, name, rows, ts, mirror=(ns, *name.split(".")))
            assert result.ok, (label, name, result)
            assert result.mirror_rows == len(rows)
    # a second restore into a namespace that exists is refused, and replaces it when asked
    with pytest.raises(RestoreError, match="restored_t1_process exists already"):
        restore(env, points["t1"], "iceberg://restored_t1_process")
    restore(env, points["t2"], "iceberg://restored_t1_process", replace=True)
    assert sorted(t[-1] for t in catalog.list_tables(("restored_t1_process", "test"))) == ["a", "k", "r2", "tr"]
    # --tables: only those
    only = env.options.model_copy(deep=True)
    only.tables = [("test", "a")]
    assert list(restore(env, points["t3"], "iceberg://only_a", options=only)) == ["test.a"]
    assert catalog.list_tables(("only_a", "test")) == [("only_a", "test", "a")]


def test_a_ts_outside_the_lake_is_refused_naming_its_range(env: Env, maria: MariaDBServer) -> None:
    env.sql("create table o (id int primary key)")
    env.sql("insert into o values (1)")
    first = env.drain()
    env.sql("insert into o values (2)")
    last = env.drain()
    start, end = int(first["from_ts"]), int(last["to_ts"])
    for ts in (end + (1 << 20), start - 1):
        with pytest.raises(LakeRangeError) as e:
            restore(env, ts, maria.dsn)
        assert f"ts {ts} is outside what the lake holds" in str(e.value)
        assert f"from {start}" in str(e.value) and f"to {end}" in str(e.value)
    assert tables(maria) == []     # nothing was created
    # the command line says the same in one line, exit status 1
    cmd = [sys.executable, "-m", "binlake.cli", "restore", *cli_args(env.options), "--ts", str(end + (1 << 20)),
           "--into", maria.dsn]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=env.root,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().startswith("binlake restore: error: ts ") and f"to {end}" in done.stderr


def test_a_target_that_holds_the_databases_is_refused_unless_replace(env: Env, maria: MariaDBServer) -> None:
    env.sql("create table p (id int primary key)")
    env.sql("insert into p values (1)")
    t = int(env.drain()["to_ts"])
    restore(env, t, maria.dsn)
    with pytest.raises(RestoreError, match="already has the database"):
        restore(env, t, maria.dsn)
    restore(env, t, maria.dsn, replace=True)
    verify_against(env, maria.dsn, t)


def test_a_column_dropped_later_in_the_run_holding_the_ts_comes_back_from_the_changelog(
        env: Env, maria: MariaDBServer) -> None:
    """The Iceberg changelog keeps a dropped column (``<name>_dropped_c<id>``): the changes written
    before the drop, in the run that dropped it, still hold its values, so a ts before the drop is
    restored exactly."""
    env.sql("create table dc (id int primary key, v int, n int)")
    env.sql("insert into dc values (1, 1, 1), (2, 2, 2)")
    env.drain()
    env.sql("update dc set n = 10 where id = 1; insert into dc values (3, 3, 30)")
    t = env.settle()
    env.sql("alter table dc drop column n")
    env.sql("insert into dc values (4, 4)")
    env.sql("alter table dc add column n varchar(5) default 'new'")   # the name taken again, a new column
    env.drain()
    log = env.catalog().load_table("test.dc__changelog")
    kept = [f.name for f in log.schema().fields if f.name.startswith("n_dropped_c")]
    assert len(kept) == 1 and "n" in log.schema().column_names
    rows = {r["id"]: r for r in log.scan().to_arrow().sort_by("_tidb_commit_ts").to_pylist()}   # the last change
    assert rows[1][kept[0]] == 10 and rows[3][kept[0]] == 30 and rows[4][kept[0]] is None
    assert rows[4]["n"] is None and rows[1]["n"] is None
    restore(env, t, maria.dsn)
    assert "warning" not in env.outputs[-1]
    verify_against(env, maria.dsn, t)
    assert maria.query("SELECT id, v, n FROM test.dc ORDER BY id") == [(1, 1, 10), (2, 2, 2), (3, 3, 30)]
