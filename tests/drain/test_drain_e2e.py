"""End to end: SQL on the emulator → two real pumps → a drain on local Spark → Iceberg; then
``verify`` against the upstream's snapshot and the changelog replayed against the mirror."""
from __future__ import annotations

import io

import pytest

from tests.drain.conftest import Env, assert_changelog_matches_mirror, committed_ts, read_table
from upstream.errors import ServerCrashed, TxnAborted

pytestmark = pytest.mark.integration


def test_classic_example_with_ddl_in_the_middle_of_the_range(env: Env) -> None:
    results = env.sql("create table test (id int, name varchar(24), primary key (id))")
    results += env.sql("insert into test values (1, 'a'), (2, 'b')")
    results += env.sql("update test set name = 'c' where id = 1")
    results += env.sql("update test set name = 'd' where id = 2", server=1)
    results += env.sql("delete from test where id = 2")
    results += env.sql("insert into test values (2, 'c')", server=1)
    results += env.sql("create table w (id int primary key, a int, b varchar(10), c int, gone int)")
    results += env.sql("insert into w values (1, 10, 'x', 100, 7), (2, 20, 'y', 200, 8)")
    results += env.sql("alter table w add column d varchar(8) default 'dflt'")
    results += env.sql("insert into w (id, a, b, c, gone, d) values (3, 30, 'z', 300, 9, 'set')")
    results += env.sql("alter table w drop column gone")
    results += env.sql("update w set a = 11 where id = 1", server=1)
    results += env.sql("alter table w rename column b to bee")
    results += env.sql("alter table w modify column a bigint")
    results += env.sql("update w set a = 9000000000, bee = 'q' where id = 2")
    report = env.drain()
    to_ts = report["to_ts"]
    assert report["from_ts"] == 0 and report["checkpoint_after"] == to_ts
    rows = {t["table"]: t["rows"] for t in report["tables"]}
    assert rows["test.test"] == {"I": 3, "U": 2, "D": 1}
    assert rows["test.w"] == {"I": 3, "U": 2, "D": 0}
    env.verify(to_ts)

    cat = env.catalog()
    w = cat.load_table("test.w")
    assert [f.name for f in w.schema().fields][:5] == ["id", "a", "bee", "c", "d"]
    assert str(w.schema().find_field("a").field_type) == "long"
    mirror = {r["id"]: r for r in w.scan().to_arrow().to_pylist()}
    assert mirror[1]["d"] == "dflt" and mirror[1]["a"] == 11      # added with a default, never rewritten
    assert mirror[2]["a"] == 9000000000 and mirror[2]["bee"] == "q"
    log = assert_changelog_matches_mirror(cat, "test.test")
    # exactly the committed DML transactions, in commit order (a unique order per table)
    dml_ts = committed_ts(results[:6])
    assert set(log.column("_tidb_commit_ts").to_pylist()) == dml_ts
    ordered = [(r["_tidb_commit_ts"], r["_tidb_seq"]) for r in log.to_pylist()]
    assert len(set(ordered)) == len(ordered)
    log = log.sort_by([("_tidb_commit_ts", "ascending"), ("_tidb_seq", "ascending")])
    assert [r["_tidb_op"] for r in log.to_pylist()] == ["I", "I", "U", "U", "D", "I"]
    upd = [r for r in log.to_pylist() if r["_tidb_op"] == "U"]
    assert [(r["_tidb_before"]["name"], r["name"]) for r in upd] == [("a", "c"), ("b", "d")]
    assert_changelog_matches_mirror(cat, "test.w")
    snap = cat.load_table("test.test").current_snapshot()
    assert snap.summary["binlake.to-ts"] == str(to_ts)
    assert {"binlake.from-ts", "binlake.batch-id", "binlake.cluster-id"} <= set(snap.summary.additional_properties)


def test_primary_key_changes_and_delete_then_reinsert_in_one_run(env: Env) -> None:
    env.sql("create table k (id int primary key, v varchar(10))")
    env.sql("create table ck (a int, b varchar(10), v int, primary key (a, b) clustered)")
    env.sql("create table nk (x int, y varchar(10))")
    env.sql("insert into k values (1, 'one'), (2, 'two'), (3, 'three')")
    env.sql("insert into ck values (1, 'a', 1), (1, 'b', 2), (2, 'a', 3)")
    env.sql("insert into nk values (1, 'p'), (1, 'p'), (2, 'q')")
    r1 = env.drain()
    env.verify(r1["to_ts"])
    env.sql("update k set id = 10 where id = 1")                        # primary key change
    env.sql("begin; delete from k where id = 2; insert into k values (2, 'again'); commit")
    env.sql("begin; delete from k where id = 3; update k set id = 3 where id = 10; commit", server=1)
    env.sql("update ck set b = 'z' where a = 1 and b = 'a'")           # composite key change
    env.sql("begin; delete from ck where a = 2; insert into ck values (2, 'a', 33); commit")
    env.sql("update nk set y = 'pp' where x = 1")                       # hidden _tidb_rowid table
    env.sql("delete from nk where y = 'q'")
    r2 = env.drain()
    assert r2["from_ts"] == r1["to_ts"]
    env.verify(r2["to_ts"])
    cat = env.catalog()
    k = {r["id"]: r["v"] for r in read_table(cat, "test.k").to_pylist()}
    assert k == {2: "again", 3: "one"}
    ck = {(r["a"], r["b"]): r["v"] for r in read_table(cat, "test.ck").to_pylist()}
    assert ck == {(1, "z"): 1, (1, "b"): 2, (2, "a"): 33}
    for t in ("test.k", "test.ck", "test.nk"):
        assert_changelog_matches_mirror(cat, t)


def test_rollbacks_and_a_lost_commit_resolved_by_the_pump(env: Env) -> None:
    env.sql("create table r (id int primary key, v int)")
    env.sql("insert into r values (1, 1), (2, 2)")
    env.cluster.server(0).faults.abort_after_prewrite()
    with pytest.raises(TxnAborted):
        env.sql("update r set v = 100 where id = 1")                    # rolled back: must not appear
    env.cluster.server(1).faults.crash_before_commit_binlog()
    with pytest.raises(ServerCrashed) as crashed:
        env.sql("insert into r values (3, 3)", server=1)                # committed, commit binlog lost
    env.sql("update r set v = 22 where id = 2")
    report = env.drain()
    env.verify(report["to_ts"])
    cat = env.catalog()
    log = assert_changelog_matches_mirror(cat, "test.r")
    assert crashed.value.commit_ts in log.column("_tidb_commit_ts").to_pylist()
    assert 100 not in log.column("v").to_pylist()
    assert {r["id"]: r["v"] for r in read_table(cat, "test.r").to_pylist()} == {1: 1, 2: 22, 3: 3}


def test_truncate_rename_and_drop_table(env: Env) -> None:
    env.sql("create table t (id int primary key, v int)")
    env.sql("create table gone (id int primary key)")
    env.sql("insert into t values (1, 1), (2, 2); insert into gone values (1)")
    r1 = env.drain()
    env.verify(r1["to_ts"])
    env.sql("insert into t values (3, 3)")
    env.sql("truncate table t")
    env.sql("insert into t values (4, 4)")
    env.sql("rename table t to t2")
    env.sql("insert into t2 values (5, 5)")
    env.sql("drop table gone")
    r2 = env.drain()
    env.verify(r2["to_ts"])
    cat = env.catalog()
    assert not cat.table_exists("test.t") and not cat.table_exists("test.gone")
    assert any(t[1].startswith("gone__changelog_dropped_") for t in cat.list_tables("test"))   # history is kept
    assert any(t[1].startswith("gone__dropped_") for t in cat.list_tables("test"))             # and the mirror
    assert "the mirror is now test.t2" in env.verify(r1["to_ts"])   # verify before the rename and drop: OK
    assert {r["id"] for r in read_table(cat, "test.t2").to_pylist()} == {4, 5}
    log = read_table(cat, "test.t2__changelog")
    assert sorted(log.column("id").to_pylist()) == [1, 2, 3, 4, 5]


def test_reruns_are_noops_and_a_backfill_fills_fresh_tables(env: Env) -> None:
    env.options.iceberg.tag_runs = True
    env.sql("create table s (id int primary key, v int)")
    env.sql("insert into s values (1, 1)")
    r1 = env.drain()
    env.sql("insert into s values (2, 2)", server=1)
    env.sql("update s set v = 10 where id = 1")
    r2 = env.drain()
    r3 = env.drain()                                                     # nothing new except fake binlogs
    assert r3["from_ts"] == r2["to_ts"]
    assert all(sum(t["rows"].values()) == 0 for t in r3["tables"])
    cat = env.catalog()
    before = {t: [s.snapshot_id for s in cat.load_table(t).snapshots()] for t in ("test.s", "test.s__changelog")}
    again = env.drain(from_ts=r1["to_ts"], to_ts=r2["to_ts"])           # re-run a finished range
    assert all(t["skipped"].startswith("already at") for t in again["tables"])
    after = {t: [s.snapshot_id for s in cat.load_table(t).snapshots()] for t in before}
    assert after == before
    s_tbl = cat.load_table("test.s")                                     # time travel by upstream ts
    tagged = s_tbl.snapshot_by_name(f"tidb-ts-{r1['to_ts']}")
    assert tagged is not None and s_tbl.scan(snapshot_id=tagged.snapshot_id).to_arrow().num_rows == 1
    assert s_tbl.snapshot_by_name(f"tidb-ts-{r2['to_ts']}").snapshot_id == s_tbl.current_snapshot().snapshot_id
    env.verify(r2["to_ts"])
    # a backfill of the first range into a fresh warehouse
    fresh = env.fresh_options("backfill")
    b = env.drain(fresh, from_ts=0, to_ts=r1["to_ts"])
    assert b["to_ts"] == r1["to_ts"]
    env.verify(r1["to_ts"], fresh)
    assert read_table(env.catalog(fresh), "test.s").to_pylist()[0]["v"] == 1
    # verify fails (exit status 1) when a mirror differs from the upstream: the backfill stops at
    # r1, and the upstream at r2 has another row and another value
    from binlake.drain import run_verify_command

    out = io.StringIO()
    assert run_verify_command(fresh, r2["to_ts"], out=out) == 1
    assert "missing    id=2" in out.getvalue() and "v: upstream 10 != mirror 1" in out.getvalue(), out.getvalue()


def test_duckdb_reads_the_tables_pyiceberg_wrote(env: Env) -> None:
    import duckdb

    from sink.iceberg.duck import connect_iceberg

    env.sql("create table d (id int primary key, v varchar(10), amount decimal(10, 2))")
    env.sql("insert into d values (1, 'a', 1.50), (2, 'b', 2.25)")
    env.sql("update d set v = 'bb' where id = 2")
    env.drain()
    cat = env.catalog()
    con = connect_iceberg()
    mirror = cat.load_table("test.d").metadata_location
    log = cat.load_table("test.d__changelog").metadata_location
    assert con.sql(f"select id, v, amount from iceberg_scan('{mirror}') order by id").fetchall() == [
        (1, "a", __import__("decimal").Decimal("1.50")), (2, "bb", __import__("decimal").Decimal("2.25"))]
    assert con.sql(f"select _tidb_op, count(*) from iceberg_scan('{log}') group by 1 order by 1").fetchall() == [
        ("I", 2), ("U", 1)]
    assert isinstance(con, duckdb.DuckDBPyConnection)


def test_seeded_workload_with_key_churn_and_ddl_drained_while_it_runs(env: Env) -> None:
    r1, stats = env.drain_during_workload(seed=11, max_txns=400)   # it keeps committing while this run drains
    assert stats.committed > 300 and not stats.errors, stats
    env.verify(r1["to_ts"])
    r2 = env.drain()
    assert r2["from_ts"] == r1["to_ts"]
    env.verify(r2["to_ts"])
    from ingest import binlog as bl
    from ingest.scan_client import ScanClient

    for p in env.pumps:                      # both pumps held commits of the drained ranges
        with ScanClient(p.addr, env.cluster.cluster_id) as c:
            assert any(r.tp == bl.COMMIT and r.start_ts != r.commit_ts for r in c.scan(0, r2["to_ts"])), p.node_id
    cat = env.catalog()
    for t in ("wl_orders", "wl_events", "wl_log"):    # wl_ddl: old changelog rows lack added columns
        assert_changelog_matches_mirror(cat, f"test.{t}")


def test_every_mirror_of_a_run_merges_in_one_spark_job(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    from sink.iceberg import execute, tasks

    calls: list[list[str]] = []
    run_pass = execute.run_pass

    def spy(spark: object, run: object, staged: list[execute.Staged]) -> object:
        calls.append(sorted(s.name for s in staged if isinstance(s.job, tasks.MirrorJob)))
        return run_pass(spark, run, staged)   # type: ignore[arg-type]

    monkeypatch.setattr(execute, "run_pass", spy)
    env.sql("create table a (id int primary key, v varchar(10))")
    env.sql("create table b (id bigint primary key, n int, u int unique)")
    env.sql("create table c (k varchar(8), n int)")                     # keyed by the hidden row id
    env.sql("insert into a values (1, 'x'), (2, 'y'); insert into b values (1, 10, 100), (2, 20, 200)")
    env.sql("insert into c values ('p', 1), ('q', 2)")
    r1 = env.drain()
    assert calls == [["test.a", "test.b", "test.c"]]
    env.verify(r1["to_ts"])
    env.sql("update a set v = 'z' where id = 1; delete from b where id = 2; update b set id = 5 where id = 1")
    env.sql("update c set n = 9 where k = 'q'; insert into a values (3, 'w')")
    env.sql("alter table a add column note varchar(5) default 'd'")    # rewrites a's files (a default to fill)
    r2 = env.drain()
    assert calls[1:] == [["test.a", "test.b", "test.c"]]                  # existing files rewritten in one job too
    env.verify(r2["to_ts"])
    cat = env.catalog()
    for t in ("b", "c"):                     # a: its old changelog rows lack the added column's default
        assert_changelog_matches_mirror(cat, f"test.{t}")
    assert sorted(read_table(cat, "test.b").column("id").to_pylist()) == [5]
    assert read_table(cat, "test.a").column("note").to_pylist() == ["d"] * 3


def test_a_run_with_only_a_ddl_still_verifies(env: Env) -> None:
    env.sql("create table o (id int primary key, v int)")
    env.sql("insert into o values (1, 1)")
    env.drain()
    env.sql("alter table o add column note varchar(10)")           # no default: no rewrite, no snapshot
    r2 = env.drain()
    env.verify(r2["to_ts"])
    assert "note" in [f.name for f in env.catalog().load_table("test.o").schema().fields]


@pytest.mark.parametrize(("broadcast_pairs", "in_process_below"), [(1_000_000, 0), (0, 0), (0, 64 << 20)],
                         ids=["pairs-broadcast", "prewrites-shuffled", "in-process"])
def test_a_prewrite_on_two_pumps_is_decoded_once_and_an_older_one_is_looked_up(
        env: Env, broadcast_pairs: int, in_process_below: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest.scan_client import ScanClient
    from schemas import pump_pb2
    from upstream.pump_client.channel import GrpcWriteChannel

    monkeypatch.setattr("transform.drain.BROADCAST_PAIRS", broadcast_pairs)
    env.options.spark.in_process_below = in_process_below
    env.sql("create table p (id int primary key, v int)")
    ins = env.sql("insert into p values (1, 1), (2, 2)")[0]
    env.settle()
    cid = env.cluster.cluster_id
    # TiDB writes a prewrite again to another pump when the first timed out: both pumps hold it
    copies = []
    for pump in env.pumps:
        with ScanClient(pump.addr, cid) as client:
            copies.append([r.payload for r in client.lookup_prewrites([ins.start_ts])])
    payload = next(c[0] for c in copies if c)
    for pump, held in zip(env.pumps, copies):
        if not held:
            channel = GrpcWriteChannel(pump.addr)
            try:
                resp = channel.write(pump_pb2.WriteBinlogReq(clusterID=cid, payload=payload), timeout=10).result(10)
                assert not resp.errmsg
            finally:
                channel.close()
    # a transaction that began before the first range ends and commits after it: the second range
    # holds its commit, its prewrite (keyed by start_ts) lies before the range and is looked up
    session = env.cluster.servers[1].session("test")
    try:
        session.execute("begin; insert into p values (3, 3)")
        r1 = env.drain()
        done = session.execute("commit")[0]
    finally:
        session.close()
    assert done.start_ts < r1["to_ts"] < done.commit_ts
    r2 = env.drain()
    assert r1["counts"]["transactions"] == 2 and r2["counts"] == {**r2["counts"], "lookups": 1, "transactions": 1}
    assert (r2["spark"] is None) == bool(in_process_below)
    env.verify(r2["to_ts"])
    log = assert_changelog_matches_mirror(env.catalog(), "test.p")
    assert sorted(log.column("id").to_pylist()) == [1, 2, 3]
