"""Table lineage across DDL in the Drainer (transform/ + sink/iceberg): TRUNCATE, RENAME, DROP and
re-create, primary keys added and dropped, column renames under composite keys, DROP DATABASE, and
``--tables`` runs over renames, each ending with the mirror equal to the upstream.

Most tests use the in-process harness (``tests/drain/inprocess.py``: the real decode, assembly and
sink, no pumps); the one end-to-end test uses the ``env`` fixture (two real pumps, local Spark).
"""
from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.drain.conftest import Env
from tests.drain.inprocess import Local
from tests.waiting import wait_for
from transform.filters import TableFilter

pytestmark = pytest.mark.integration


def _by(rows: list[dict[str, Any]], *keys: str) -> dict[Any, dict[str, Any]]:
    return {tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]: r for r in rows}


# ---------------------------------------------------------------------------------------------
# the harness itself: a plain scenario works and verifies

def test_two_runs_with_dml_and_an_added_column_verify(up: Local) -> None:
    up.sql("create table t (id int primary key, v varchar(10))")
    up.sql("insert into t values (1, 'a'), (2, 'b')")
    r1 = up.drain()
    up.verify(r1.to_ts)
    up.sql("update t set v = 'bb' where id = 2; delete from t where id = 1; insert into t values (3, 'c')")
    up.sql("alter table t add column w int default 7")
    up.sql("update t set w = 8 where id = 3")
    r2 = up.drain()
    up.verify(r2.to_ts)
    assert sorted(up.mirror("test.t"), key=lambda r: r["id"]) == [
        {"id": 2, "v": "bb", "w": 7}, {"id": 3, "v": "c", "w": 8}]


# ---------------------------------------------------------------------------------------------
# end to end: a pump taken offline waits for the batch drainer registered at its checkpoint

def test_a_pump_taken_offline_waits_until_the_batch_drainer_has_its_binlogs(env: Env) -> None:
    import io

    from binlake.drain import run_drain_command
    from ingest.registry import load_registry
    from ingest.registry.base import DRAINER
    from ingest.scan_client import ScanClient
    from schemas import binlog_pb2 as pb

    env.sql("create table off (id int primary key)")
    first = env.drain()                       # registers the batch drainer (paused) at its checkpoint
    registry = load_registry(env.options.registry)
    node = registry.get_node(DRAINER, env.options.node_id)
    registry.close()
    assert node is not None and node.state == "paused" and node.max_commit_ts == first["to_ts"]
    for i in range(16):
        env.sql(f"insert into off values ({i})", server=i % 2)
    env.settle()
    p1 = env.pumps[0]
    with ScanClient(p1.addr, env.cluster.cluster_id) as c:
        held = sum(sum(1 for tp in b.tp if tp == pb.Prewrite) for b in c.scan_batches(first["to_ts"], 0))
    assert held > 0, "precondition: pump-1 holds some of the transactions"
    ctl = subprocess.run([sys.executable, "-m", "binlake.cli", "ctl", "offline-pump", "--node-id", p1.node_id,
                          "--registry", env.options.registry], capture_output=True, text=True, timeout=60)
    assert ctl.returncode == 0, ctl.stderr
    assert p1.proc.poll() is None             # closing: it waits for the drainer, still serving scans
    with ScanClient(p1.addr, env.cluster.cluster_id) as c1, ScanClient(env.pumps[1].addr, env.cluster.cluster_id) as c2:
        last = wait_for(lambda: c1.watermark().max_commit_ts, what="pump-1's final watermark")
        wait_for(lambda: c2.watermark().max_commit_ts >= last, timeout=30, what="pump-2 passing pump-1's last ts")
    out = io.StringIO()
    report = run_drain_command(env.options, out=out).model_dump()
    env.verify(report["to_ts"])
    assert p1.wait_exit(60) == 0              # the drainer passed its last ts: now it goes offline


# ---------------------------------------------------------------------------------------------
# TRUNCATE TABLE: the old table id ends at the truncate and the new id continues the same tables

def test_truncate_with_no_earlier_dml_in_the_run_drains_and_verifies(up: Local) -> None:
    up.sql("create table x (id int primary key, v int)")
    up.sql("insert into x values (1, 1)")
    up.drain()
    up.sql("truncate table x")
    up.sql("insert into x values (5, 5)")
    r = up.drain()
    up.verify(r.to_ts)


def test_truncate_between_dml_in_one_run_keeps_the_rows_after_it(up: Local) -> None:
    up.sql("create table x (id int primary key, v int)")
    up.sql("insert into x values (1, 1)")
    up.drain()
    up.sql("update x set v = 2 where id = 1")
    up.sql("truncate table x")
    up.sql("insert into x values (5, 5)")
    r = up.drain()
    assert up.mirror("test.x") == [{"id": 5, "v": 5}]
    up.verify(r.to_ts)


# ---------------------------------------------------------------------------------------------
# RENAME TABLE onto a name another table of the run held: the dropped table is finished first

def test_drop_then_rename_into_the_dropped_name_keeps_every_row(up: Local) -> None:
    up.sql("create table t1 (id int primary key, v int)")
    up.sql("create table t2 (id int primary key, v int)")
    up.sql("insert into t1 values (1, 1); insert into t2 values (2, 2), (3, 3)")
    up.drain()
    up.sql("drop table t1")
    up.sql("rename table t2 to t1")
    up.sql("insert into t1 values (4, 4)")
    r = up.drain()
    assert sorted(row["id"] for row in up.mirror("test.t1")) == [2, 3, 4]
    up.verify(r.to_ts)
    names = {t[1] for t in up.catalog.list_tables("test")}
    assert "t2" not in names and any(n.startswith("t1__changelog_dropped_") for n in names)


def test_verify_before_a_rename_or_a_drop_finds_each_table_by_its_name_then(up: Local) -> None:
    """``verify --ts T`` after later runs renamed ``a`` (and gave its name to another table) and
    dropped ``b``: the sink's recorded lineage leads to the Iceberg tables holding them now, and
    their snapshots at T equal the upstream at T; a real difference at T is still found."""
    from sink.changelog import FROM_TS_MARKER as FROM_TS
    from sink.changelog import TO_TS_MARKER as TO_TS
    from sink.iceberg.verify import verify_mirrors
    from upstream.status_api import render_rows

    up.sql("create table a (id int primary key, v int)")
    up.sql("create table b (id int primary key, v int)")
    up.sql("insert into a values (1, 1), (2, 2); insert into b values (1, 1), (2, 2), (3, 3)")
    t = up.drain().to_ts
    up.sql("rename table a to a2")
    up.sql("insert into a2 values (3, 3)")
    up.sql("create table a (id int primary key, v int)")        # the old name now holds another table
    up.sql("insert into a values (9, 9)")
    up.sql("drop table b")
    r = up.drain()
    up.sql("rename table a2 to a3")                             # a second move of the same table
    up.drain()
    up.verify(t)
    up.verify(r.to_ts)
    report = verify_mirrors(up.catalog, render_rows(up.cluster.snapshot(t)), t)
    assert "the mirror is now test.a3" in report.format() and report.table("test.a").upstream_rows == 2
    kept = next(n for _, n in up.catalog.list_tables("test") if n.startswith("b__dropped_"))
    assert "the mirror is now test." + kept in report.format()
    # a snapshot of the kept mirror marked as the state at t that lost a row: a real difference
    up.catalog.load_table(("test", kept)).delete("id = 3", snapshot_properties={FROM_TS: "0", TO_TS: str(t)})
    report = verify_mirrors(up.catalog, render_rows(up.cluster.snapshot(t)), t)
    assert not report.ok and report.table("test.b").missing == 1 and report.table("test.a").ok


def test_swapping_table_names_in_one_run_is_refused_and_split_runs_finish_it(up: Local) -> None:
    from sink.errors import SinkError

    up.sql("create table a (id int primary key, v int)")
    up.sql("create table b (id int primary key, v int)")
    up.sql("insert into a values (1, 1); insert into b values (2, 2)")
    up.drain()
    first = up.sql("rename table a to tmp")[0].commit_ts
    up.sql("rename table b to a")
    up.sql("rename table tmp to b")
    up.sql("insert into a values (20, 20); insert into b values (10, 10)")
    end = up.cluster.ts()
    with pytest.raises(SinkError, match="still holds another table"):   # loud, and no checkpoint
        up.drain(to_ts=end)
    up.drain(to_ts=first)                  # as the message says: up to the first rename, then on
    r = up.drain(to_ts=end)
    up.verify(r.to_ts)
    assert sorted(row["id"] for row in up.mirror("test.a")) == [2, 20]


# ---------------------------------------------------------------------------------------------
# the mirror merge of composite keys: rows sharing the first key column are re-read and renamed by
# column id

def test_composite_key_merge_after_a_column_rename_keeps_untouched_rows(up: Local) -> None:
    up.sql("create table c (a int, b varchar(10), v int, primary key (a, b) clustered)")
    up.sql("insert into c values (1, 'x', 10), (1, 'y', 20)")
    up.drain()
    up.sql("alter table c rename column v to w")
    up.sql("update c set w = 11 where a = 1 and b = 'x'")
    r = up.drain()
    assert _by(up.mirror("test.c"), "a", "b")[(1, "y")]["w"] == 20     # the untouched row keeps its value
    up.verify(r.to_ts)


def test_composite_key_merge_after_renaming_the_first_key_column(up: Local) -> None:
    up.sql("create table c (a int, b varchar(10), v int, primary key (a, b) clustered)")
    up.sql("insert into c values (1, 'x', 10), (1, 'y', 20)")
    up.drain()
    up.sql("alter table c rename column a to aa")
    up.sql("update c set v = 11 where aa = 1 and b = 'x'")
    r = up.drain()
    up.verify(r.to_ts)


# ---------------------------------------------------------------------------------------------
# primary key added / dropped (job types 32, 33)

def test_add_primary_key_merges_rows_written_under_the_rowid_key(up: Local) -> None:
    up.sql("create table n (id int not null, v int)")
    up.sql("insert into n values (1, 10), (1, 11), (2, 20)")
    up.drain()
    up.sql("delete from n where v = 11")                  # one of the two id=1 rows, by _tidb_rowid
    up.sql("alter table n add primary key (id)")
    r = up.drain()
    assert sorted((row["id"], row["v"]) for row in up.mirror("test.n")) == [(1, 10), (2, 20)]
    up.verify(r.to_ts)


def test_drop_primary_key_then_drop_its_column(up: Local) -> None:
    up.sql("create table p (id int, v int, primary key (id) nonclustered)")
    up.sql("insert into p values (1, 1), (2, 2)")
    up.drain()
    up.sql("alter table p drop primary key")
    up.sql("insert into p values (1, 100)")
    up.sql("alter table p drop column id")
    r = up.drain()
    up.verify(r.to_ts)


# ---------------------------------------------------------------------------------------------
# schema changes Iceberg could not follow in place: a re-created table and a reused column name

def test_drop_and_recreate_with_another_column_type_starts_new_tables(up: Local) -> None:
    up.sql("create table t (id int primary key, v varchar(10))")
    up.sql("insert into t values (1, 'a')")
    up.drain()
    up.sql("drop table t")
    up.sql("create table t (id int primary key, v int)")
    up.sql("insert into t values (2, 2)")
    r = up.drain()
    up.verify(r.to_ts)


def test_rename_column_then_add_a_column_with_the_old_name(up: Local) -> None:
    up.sql("create table r (id int primary key, a int)")
    up.sql("insert into r values (1, 1)")
    up.drain()
    up.sql("alter table r rename column a to b")
    up.sql("alter table r add column a int default 5")
    r = up.drain()
    assert up.mirror("test.r") == [{"id": 1, "b": 1, "a": 5}]
    up.verify(r.to_ts)


# ---------------------------------------------------------------------------------------------
# DROP DATABASE and --tables

def test_drop_database_drops_its_mirrors(up: Local) -> None:
    up.sql("create database d2")
    up.sql("create table d2.x (id int primary key)")
    up.sql("insert into d2.x values (1)")
    up.drain()
    up.sql("insert into d2.x values (2)")
    up.sql("drop database d2")
    up.drain()
    assert not up.catalog.table_exists("d2.x")


def test_a_full_run_after_a_tables_run_over_a_rename_keeps_every_row(up: Local) -> None:
    up.sql("create table a (id int primary key)")
    up.sql("insert into a values (1)")
    up.sql("rename table a to b")
    up.sql("insert into b values (2)")
    up.drain(to_ts=up.cluster.ts(), from_ts=0, table_filter=TableFilter(only=(("test", "b"),)))
    r = up.drain()                                          # the full run from the (unmoved) checkpoint
    up.verify(r.to_ts)
