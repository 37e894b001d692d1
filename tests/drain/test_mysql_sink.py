"""The MySQL sink against Debian's MariaDB: DDL and DML replicated in commit order, the checkpoint
row in TiDB Binlog's format, safe-mode replays, a drain killed mid-apply and re-run, and
``verify --against``."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from binlake.drain import run_verify_command
from binlake.drain_config import DrainerConfig
from ingest.encrypt import encrypt
from tests.drain.conftest import Env
from tests.drain.crashing_cli import CRASH_STATUS
from tests.drain.test_drain_cli import ROOT, binlake, cli_args
from tests.servers import MariaDBServer
from transform import failpoints

pytestmark = pytest.mark.integration


@pytest.fixture
def maria(mariadb_server: MariaDBServer) -> MariaDBServer:
    """The session's MariaDB, emptied of what earlier tests replicated."""
    mariadb_server.reset("test", "other")
    return mariadb_server


def mysql_options(env: Env, maria: MariaDBServer, **syncer: Any) -> DrainerConfig:
    o = env.options.model_copy(deep=True)
    o.syncer.db_type = "mysql"
    o.syncer.to.dsn = maria.dsn
    o.syncer.worker_count = 4
    for k, v in syncer.items():
        setattr(o.syncer, k, v)
    return o


def verify_mysql(env: Env, options: DrainerConfig, ts: int | None = None) -> str:
    out = io.StringIO()
    code = run_verify_command(options, ts, out=out, against=options.syncer.to.dsn)
    assert code == 0, out.getvalue()
    return out.getvalue()


def checkpoint_row(maria: MariaDBServer, cluster_id: int) -> dict[str, Any]:
    conn: Any = maria.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT checkPoint FROM tidb_binlog.checkpoint WHERE clusterID = %s", (cluster_id,))
            row = cur.fetchone()
    finally:
        conn.close()
    assert row is not None, "no checkpoint row"
    parsed: dict[str, Any] = json.loads(row[0])
    return parsed


def test_ddl_and_dml_replicate_in_commit_order_with_tidb_binlog_checkpoint(env: Env, maria: MariaDBServer) -> None:
    o = mysql_options(env, maria)
    env.sql("create table test (id int, name varchar(24), primary key (id))")
    env.sql("insert into test values (1, 'a'), (2, 'b')")
    env.sql("update test set name = 'c' where id = 1")
    env.sql("update test set name = 'd' where id = 2", server=1)
    env.sql("delete from test where id = 2")
    env.sql("insert into test values (2, 'c')", server=1)
    env.sql("update test set id = 7 where id = 1")                        # a primary key change
    env.sql("create table w (id int primary key, a int, b varchar(10), gone int, u int unique)")
    env.sql("insert into w values (1, 10, 'x', 7, 100), (2, 20, 'y', 8, 200)")
    env.sql("alter table w add column d varchar(8) default 'dflt'")
    env.sql("alter table w drop column gone")
    env.sql("update w set a = 11 where id = 1", server=1)
    env.sql("alter table w rename column b to bee")
    env.sql("alter table w modify column a bigint")
    env.sql("update w set a = 9000000000, bee = 'q', u = 300 where id = 2")
    env.sql("create table nokey (a int, b varchar(5))")                   # no key: WHERE on every column
    env.sql("insert into nokey values (1, 'x'), (3, 'x'), (2, null)")
    env.sql("delete from nokey where a = 2")
    env.sql("update nokey set b = 'y' where a = 1")
    report = env.drain(o)
    to_ts = report["to_ts"]
    assert report["sink"] == "mysql" and report["checkpoint_after"] == to_ts
    rows = {t["table"]: t["rows"] for t in report["tables"]}
    assert rows["test.test"] == {"I": 4, "U": 2, "D": 2}     # TiDB logs a handle change as delete + insert
    cp = checkpoint_row(maria, env.cluster.cluster_id)
    assert cp == {"consistent": True, "commitTS": to_ts, "ts-map": {}, "schema-version": cp["schema-version"]}
    assert cp["schema-version"] > 0
    assert maria.query("SELECT id, name FROM test.test ORDER BY id") == [(2, "c"), (7, "c")]
    assert maria.query("SELECT id, a, bee, u, d FROM test.w ORDER BY id") == [(1, 11, "x", 100, "dflt"),
                                                                             (2, 9000000000, "q", 300, "dflt")]
    assert "no differences" in verify_mysql(env, o)

    env.sql("insert into w (id, a, bee, u) values (3, 1, 'n', 400)")
    env.sql("rename table nokey to renamed")
    env.sql("insert into renamed values (5, 'z')")
    second = env.drain(o)
    assert second["from_ts"] == to_ts and second["checkpoint_after"] == second["to_ts"]
    assert maria.query("SELECT a, b FROM test.renamed ORDER BY a, b") == [(1, "y"), (3, "x"), (5, "z")]
    verify_mysql(env, o)


@pytest.mark.parametrize("merge", [False, True], ids=["one-by-one", "merge-mode"])
def test_every_column_type_and_awkward_text_arrive_as_they_were(env: Env, maria: MariaDBServer, merge: bool) -> None:
    """The statements carry values as literals rendered by Arrow: quotes, backslashes, NUL and
    4-byte UTF-8 in text, every byte value in binary strings, BIT(64) and BIGINT UNSIGNED at their
    maximum, FLOAT, fractional temporal values, JSON with escapes, and NULLs, in the rows and in the
    WHERE of a keyless table's updates and deletes."""
    o = mysql_options(env, maria)
    o.syncer.to.merge = merge
    if not merge:   # a session that reads backslashes literally: the sink's sessions must undo it
        o.syncer.to.dsn = f"{maria.dsn}?sql_mode=NO_BACKSLASH_ESCAPES"
    types = ("s varchar(40), vb varbinary(8), b bit(64), u bigint unsigned, f float, d double, dm decimal(20,6), "
             "ts timestamp(3) null, dt datetime(6), t time(3), y year, da date, bl blob, j json, e enum('a','b'), "
             "st set('x','y')")
    env.sql(f"create table every (id int primary key, {types})")
    env.sql("create table loose (s varchar(40), vb varbinary(8), n int)")
    awkward = ["'it''s a \\\\ back\\nslash'", "'é😀\\0z'", "'%s and {} and ?'", "''", "null"]
    binary = ["x'00ff275c'", "x'27'", "x''", "x'5c00'", "null"]
    rows = []
    for i, (text, raw) in enumerate(zip(awkward, binary)):
        rows.append(f"({i}, {text}, {raw}, {'18446744073709551615' if i == 0 else i}, "
                    f"{'18446744073709551615' if i == 1 else i}, {i}.1, -{i}.25e-3, {i}23456789.123456, "
                    f"'2024-01-0{i + 1} 03:04:05.{i}23', '1999-12-31 23:59:59.{i}00001', '-12:34:56.{i}', "
                    f"{2000 + i}, '2020-02-2{i + 5}', {raw}, '{{\"k\": \"q\\\\\"{i}\"}}', 'b', 'x,y')")
    env.sql(f"insert into every values {', '.join(rows)}")
    env.sql("insert into every (id) values (9)")                          # every other column NULL
    loose = [f"({t}, {b}, {i})" for i, (t, b) in enumerate(zip(awkward, binary))]
    env.sql(f"insert into loose values {', '.join(loose)}")
    env.sql("update every set s = 'changed \\\\ again', vb = x'ff' where id = 1", server=1)
    env.sql("update loose set n = n + 10 where n < 3")                     # WHERE on every column's old value
    env.sql("delete from loose where n = 12 or n = 4")
    env.drain(o)
    out = verify_mysql(env, o)
    assert "no differences" in out and "test.every" in out and "test.loose" in out
    assert maria.query("SELECT vb, s FROM test.every WHERE id IN (0, 1) ORDER BY id") == [
        (b"\x00\xff'\\", "it's a \\ back\nslash"), (b"\xff", "changed \\ again")]
    assert maria.query("SELECT COUNT(*) FROM test.loose")[0][0] == 3


@pytest.mark.parametrize("merge", [False, True], ids=["one-by-one", "merge-mode"])
def test_a_workload_with_key_churn_and_ddl_replicated_while_it_runs(env: Env, maria: MariaDBServer, spark: Any,
                                                                     merge: bool, monkeypatch: pytest.MonkeyPatch
                                                                     ) -> None:
    from transform import ordered

    monkeypatch.setattr(ordered, "BUNDLE_ROWS", 50)   # the driver then sorts the run into several partitions
    persisted = dict(spark.sparkContext._jsc.getPersistentRDDs())
    o = mysql_options(env, maria, txn_batch=5)
    o.syncer.to.merge = merge
    r1, stats = env.drain_during_workload(seed=5, max_txns=300, options=o)
    assert stats.committed > 200 and not stats.errors, stats
    verify_mysql(env, o, r1["to_ts"])
    r2 = env.drain(o)
    assert r2["from_ts"] == r1["to_ts"]
    out = verify_mysql(env, o)
    assert "wl_orders" in out
    # every checkpoint the runs kept on the executors (pulled, paired, decoded) is deleted
    assert dict(spark.sparkContext._jsc.getPersistentRDDs()).keys() == persisted.keys()


def test_a_tidb_binlog_checkpoint_is_continued_and_an_inconsistent_one_replays_in_safe_mode(
        env: Env, maria: MariaDBServer) -> None:
    o = mysql_options(env, maria)
    env.sql("create table t (id int primary key, v int, u int, unique key (u))")
    env.sql("insert into t values (1, 1, 1), (2, 2, 2), (3, 3, 3)")
    first = env.drain(o)
    env.sql("update t set v = 10 where id = 1")
    env.sql("update t set u = 30, v = 30 where id = 3")
    env.sql("delete from t where id = 2")
    env.sql("insert into t values (4, 4, 2)")             # takes the unique value the delete freed
    second = env.drain(o)
    want = maria.query("SELECT * FROM test.t ORDER BY id")
    assert want == [(1, 10, 1), (3, 30, 30), (4, 4, 2)]

    # an existing TiDB Binlog drainer left this row (no schema-version key): binlake continues it
    conn: Any = maria.connect()
    with conn.cursor() as cur:
        cur.execute("REPLACE INTO tidb_binlog.checkpoint VALUES (%s, %s)",
                    (env.cluster.cluster_id, json.dumps({"consistent": True, "commitTS": second["to_ts"]})))
    conn.close()
    env.sql("insert into t values (5, 5, 5)")
    third = env.drain(o)
    assert third["checkpoint_before"] == second["to_ts"] and third["from_ts"] == second["to_ts"]
    assert maria.query("SELECT id FROM test.t ORDER BY id") == [(1,), (3,), (4,), (5,)]

    # an unclean stop after the first run: consistent = false; the replay of everything since
    # (already applied) must run in safe mode and leave the same rows
    conn = maria.connect()
    with conn.cursor() as cur:
        cur.execute("REPLACE INTO tidb_binlog.checkpoint VALUES (%s, %s)",
                    (env.cluster.cluster_id, json.dumps({"consistent": False, "commitTS": first["to_ts"],
                                                         "ts-map": {}})))
    conn.close()
    replay = env.drain(o, to_ts=third["to_ts"])
    assert replay["from_ts"] == first["to_ts"]
    assert maria.query("SELECT * FROM test.t ORDER BY id") == [(1, 10, 1), (3, 30, 30), (4, 4, 2), (5, 5, 5)]
    assert checkpoint_row(maria, env.cluster.cluster_id)["consistent"] is True
    verify_mysql(env, o)

    # the same replay without safe mode fails on the first duplicate, naming statement and commit_ts
    conn = maria.connect()
    with conn.cursor() as cur:
        cur.execute("REPLACE INTO tidb_binlog.checkpoint VALUES (%s, %s)",
                    (env.cluster.cluster_id, json.dumps({"consistent": True, "commitTS": first["to_ts"]})))
    conn.close()
    from sink.mysql.loader import ApplyError

    with pytest.raises(ApplyError, match=r"committed at \d+ failed on `test`.`t`: .*Duplicate entry"):
        env.drain(o, to_ts=third["to_ts"])


def test_a_drain_killed_mid_apply_and_rerun_equals_the_upstream(env: Env, maria: MariaDBServer) -> None:
    """Also for a table without a key, whose rows safe mode alone would apply twice."""
    env.sql("create table k (id int primary key, v varchar(20), u int, unique key (u))")
    env.sql("create table n (a int, b varchar(10))")                   # no key: rows match by all columns
    for i in range(12):
        values = ", ".join(f"({i * 20 + j}, 'v{i}', {i * 20 + j})" for j in range(20))
        env.sql(f"insert into k values {values}", server=i % 2)
        env.sql(f"update k set v = 'w{i}', u = u + 1000 where id >= {i * 10} and id < {i * 20 + 5}",
                server=(i + 1) % 2)
        env.sql(f"delete from k where id = {i * 7}")
        env.sql("insert into n values " + ", ".join(f"({j % 3}, 'x{i}')" for j in range(10)))  # equal rows
        env.sql(f"update n set b = 'y{i}' where a = {i % 3} and b = 'x{i}'", server=(i + 1) % 2)
        env.sql(f"delete from n where a = {(i + 1) % 3} and b = 'x{i}'")
    env.settle()
    args = [*cli_args(env.options), "--sink", "mysql", "--to-dsn", maria.dsn, "--spark-master", "local[2]",
            "--txn-batch", "5", "--worker-count", "2"]
    r = binlake("drain", *args, failpoints=("mysql-flush=3",), cwd=env.root)
    assert r.returncode == CRASH_STATUS, r.stderr[-2000:]
    assert maria.PASSWORD not in r.stdout + r.stderr                      # the password is never printed
    cp = checkpoint_row(maria, env.cluster.cluster_id)
    assert cp["consistent"] is False
    applied = maria.query("SELECT COUNT(*) FROM test.k")[0][0]
    assert 0 < applied
    rerun = binlake("drain", *args, cwd=env.root)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "safe mode" in rerun.stdout
    cp = checkpoint_row(maria, env.cluster.cluster_id)
    assert cp["consistent"] is True
    verify = binlake("verify", *cli_args(env.options), "--against", maria.dsn, cwd=env.root)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "no differences" in verify.stdout and maria.PASSWORD not in verify.stdout + verify.stderr
    deleted = sum(4 if (i + 1) % 3 == 0 else 3 for i in range(12))        # a = 0 has 4 of the 10 rows
    assert maria.query("SELECT COUNT(*) FROM test.n")[0][0] == 12 * 10 - deleted   # keyless rows applied once


def test_a_drain_rides_out_a_restart_of_the_downstream_mid_apply(env: Env, maria: MariaDBServer) -> None:
    """MariaDB killed (kill -9) after the loader's 2nd flush and back 1.5 s later: the workers and the
    control connection (the DDL after it, the checkpoint) reconnect, and the run completes exactly."""
    env.sql("create table k (id int primary key, v varchar(20))")
    for i in range(6):
        env.sql("insert into k values " + ", ".join(f"({i * 20 + j}, 'v{i}')" for j in range(20)), server=i % 2)
        env.sql(f"update k set v = 'w{i}' where id < {i * 10}", server=(i + 1) % 2)
    env.sql("alter table k add column z int default 5")
    env.sql("insert into k (id, v) values (1000, 'after the ddl')")
    options = mysql_options(env, maria, worker_count=2, txn_batch=5)
    restarted: list[threading.Thread] = []

    def kill_and_restart(count: int) -> None:
        if count == 2 and not restarted:
            maria.kill()
            restarted.append(threading.Timer(1.5, maria.start))
            restarted[0].start()

    failpoints.enable("mysql-flush", kill_and_restart)
    try:
        report = env.drain(options)
    finally:
        failpoints.disable("mysql-flush")
        for t in restarted:
            t.join()
    assert restarted, "the failpoint did not fire"
    assert report["checkpoint_after"] == report["to_ts"]
    assert checkpoint_row(maria, env.cluster.cluster_id)["consistent"] is True
    assert maria.query("SELECT z FROM test.k WHERE id = 1000") == [(5,)]
    verify_mysql(env, options)


def test_relay_log_recovery_when_the_upstream_is_gone(env: Env, maria: MariaDBServer) -> None:
    relay_dir = env.root / "relay"
    env.sql("create table r (id int primary key, v varchar(20), e enum('a', 'b', 'c'), s set('x', 'y'), "
            "b bit(10), j json, u bigint unsigned, unique key (v))")
    for i in range(10):
        values = ", ".join(f"({i * 20 + j}, 'v{i * 20 + j}', 'b', 'x,y', {j}, '{{\"k\": {j}}}', "
                           f"{18446744073709551615 - j})" for j in range(20))
        env.sql(f"insert into r values {values}", server=i % 2)
        env.sql(f"update r set e = 'c', s = 'y', v = 'u{i}' where id = {i * 20 + 3}",
                server=(i + 1) % 2)
        env.sql(f"delete from r where id = {i * 20 + 7}")
    env.settle()
    conf = env.root / "drainer.toml"
    conf.write_text(f'cluster-id = {env.cluster.cluster_id}\ninitial-commit-ts = 0\n'
                    f'[syncer]\ndb-type = "mysql"\nworker-count = 2\n'
                    f'txn-batch = 5\n[syncer.to]\ndsn = "{maria.dsn}"\n'
                    f'[syncer.relay]\nlog-dir = "{relay_dir}"\nmax-file-size = 4096\n')
    args = ["--config", str(conf), *cli_args(env.options), "--spark-master", "local[2]"]
    first_plan = binlake("drain", *args, "--dry-run", cwd=env.root)
    assert first_plan.returncode == 0, first_plan.stderr[-2000:]
    assert maria.query("SHOW DATABASES LIKE 'tidb_binlog'") == []        # a dry run creates no checkpoint table
    r = binlake("drain", *args, failpoints=("mysql-flush=4",), cwd=env.root)
    assert r.returncode == CRASH_STATUS, r.stderr[-2000:]
    before = checkpoint_row(maria, env.cluster.cluster_id)
    assert before["consistent"] is False
    assert len(list(relay_dir.glob("binlog-*"))) >= 2               # rotated at 4 KiB, older ones kept
    for p in env.pumps:                                              # the upstream goes away
        p.kill()
    assert env.cluster.tso_server is not None
    env.cluster.tso_server.stop(0).wait()
    # a dry run changes nothing (downstream, checkpoint, relay files) and reports the recovery it would run
    relay_files = {p.name: p.read_bytes() for p in relay_dir.glob("binlog-*")}
    rows_before = maria.query("SELECT * FROM test.r ORDER BY id")
    plan_path = env.root / "plan.json"
    dry = binlake("drain", *args, "--dry-run", "--report", str(plan_path), cwd=env.root)
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    assert "would replay" in dry.stdout
    assert checkpoint_row(maria, env.cluster.cluster_id) == before
    assert maria.query("SELECT * FROM test.r ORDER BY id") == rows_before
    assert {p.name: p.read_bytes() for p in relay_dir.glob("binlog-*")} == relay_files
    plan = json.loads(plan_path.read_text())
    assert plan["dry_run"] is True and plan["checkpoint_before"] == plan["checkpoint_after"] == before["commitTS"]
    assert plan["relay_recovery"]["records"] > 0 and plan["to_ts"] > before["commitTS"]
    rec = binlake("drain", *args, cwd=env.root)
    assert rec.returncode == 0, rec.stdout[-2000:] + rec.stderr[-2000:]
    assert "relay-log records" in rec.stdout and maria.PASSWORD not in rec.stdout + rec.stderr
    after = checkpoint_row(maria, env.cluster.cluster_id)
    assert after["consistent"] is True and after["commitTS"] > before["commitTS"]
    assert after["commitTS"] == plan["to_ts"]
    o = mysql_options(env, maria)
    o.cluster_id = env.cluster.cluster_id
    out = verify_mysql(env, o)                                       # at the relay log's last commit
    assert f"verify at ts {after['commitTS']}" in out and "test.r" in out
    again = binlake("drain", *args, cwd=env.root)                    # consistent now: nothing to recover
    assert again.returncode == 1 and "did not answer" in again.stderr


def test_verify_against_mysql_runs_without_pyiceberg(env: Env, maria: MariaDBServer, tmp_path: Path) -> None:
    """``verify --against`` reads the upstream and the downstream over the MySQL protocol only: it
    works in an environment without pyiceberg (here made unimportable) and still finds a difference."""
    o = mysql_options(env, maria)
    env.sql("create table v (id int primary key, s varchar(10))")
    env.sql("insert into v values (1, 'a'), (2, 'b')")
    env.drain(o)
    blocked = tmp_path / "no-pyiceberg" / "pyiceberg"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('pyiceberg is not installed here')\n")

    def verify() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "binlake.cli", "verify", *cli_args(env.options),
                               "--against", maria.dsn], capture_output=True, text=True, timeout=300, cwd=env.root,
                              env={**os.environ, "PYTHONPATH": f"{blocked.parent}{os.pathsep}{ROOT}"})

    r = verify()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no differences" in r.stdout and "test.v" in r.stdout
    conn: Any = maria.connect()
    with conn.cursor() as cur:
        cur.execute("DELETE FROM test.v WHERE id = 2")
    conn.close()
    r = verify()
    assert r.returncode == 1 and "missing 1" in r.stdout, r.stdout + r.stderr


def test_a_bigint_unsigned_primary_key_above_int64_replicates_to_iceberg_and_mysql(
        env: Env, maria: MariaDBServer) -> None:
    """A BIGINT UNSIGNED primary key is the row handle; TiDB writes 2^63 and above as the int64 with
    the same bits (so they sort before 0 in the record keys). Both sinks get the unsigned values."""
    from upstream.keys import int_record_key

    assert int_record_key(9, 1 << 63) < int_record_key(9, 0) < int_record_key(9, (1 << 63) - 1)
    assert int_record_key(9, (1 << 64) - 1) == int_record_key(9, -1)
    env.sql("create table big (id bigint unsigned primary key, v varchar(10))")
    values = [0, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, (1 << 63) + 5]
    env.sql("insert into big values " + ", ".join(f"({v}, 'v{i}')" for i, v in enumerate(values)))
    env.sql(f"update big set v = 'changed' where id = {1 << 63}", server=1)
    env.sql(f"delete from big where id = {(1 << 63) + 5}")
    report = env.drain()
    assert "test.big" in env.verify(report["to_ts"])
    mirror = env.catalog().load_table(("test", "big")).scan().to_arrow()
    assert sorted(int(v) for v in mirror.column("id").to_pylist()) == sorted(values[:4])
    o = mysql_options(env, maria)
    env.drain(o)
    assert maria.query("SELECT id, v FROM test.big ORDER BY id") == [
        (0, "v0"), ((1 << 63) - 1, "v1"), (1 << 63, "changed"), ((1 << 64) - 1, "v3")]
    assert "test.big" in verify_mysql(env, o)


def test_sync_ddl_false_runs_no_ddl_on_the_downstream(env: Env, maria: MariaDBServer) -> None:
    """TiDB Binlog's ``sync-ddl = false``: the downstream's tables are managed there; rows still
    arrive (also into a table whose DDL was not run), and the checkpoint moves past the DDL."""
    o = mysql_options(env, maria, sync_ddl=False)
    conn: Any = maria.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE test")
        cur.execute("CREATE TABLE test.kept (id INT PRIMARY KEY, v VARCHAR(8), extra INT DEFAULT 7)")
    conn.close()
    env.sql("create table kept (id int primary key, v varchar(8))")
    env.sql("insert into kept values (1, 'a'), (2, 'b')")
    env.sql("alter table kept add index iv (v)")
    env.sql("create table other (id int primary key)")
    report = env.drain(o)
    assert maria.query("SELECT id, v, extra FROM test.kept ORDER BY id") == [(1, "a", 7), (2, "b", 7)]
    assert maria.query("SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = 'test' "
                       "AND index_name = 'iv'")[0][0] == 0
    assert maria.query("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'test' "
                       "AND table_name = 'other'")[0][0] == 0
    assert checkpoint_row(maria, env.cluster.cluster_id)["commitTS"] == report["to_ts"]


def test_binlog_filter_rules_leave_out_ddl_and_dml_on_the_downstream(env: Env, maria: MariaDBServer) -> None:
    """TiDB Binlog's ``[syncer.binlog-filter-rule]`` on the tables its ``[[syncer.table-migrate-rule]]``
    names: the ignored deletes and the TRUNCATE are not applied (the downstream keeps those rows), an
    ALTER whose query an ``ignore-sql`` pattern finds is not run; other tables and other DDL are."""
    o = mysql_options(env, maria, binlog_filter_rule={
        "keep-rows": {"ignore-event": ["delete", "truncate table"], "ignore-sql": ["add index iv\\b"]}},
        table_migrate_rule=[{"source": {"schema": "test", "table": "kept*"}, "binlog-filter-rule": ["keep-rows"]}])
    for t in ("kept", "other"):
        env.sql(f"create table {t} (id int primary key, v varchar(8))")
        env.sql(f"insert into {t} values (1, 'a'), (2, 'b'), (3, 'c')")
        env.sql(f"delete from {t} where id = 2")
        env.sql(f"update {t} set v = 'z' where id = 1")
        env.sql(f"alter table {t} add index iv (v)")
        env.sql(f"alter table {t} add index iw (id, v)")
        env.sql(f"truncate table {t}")
        env.sql(f"insert into {t} values (5, 'e')")
    report = env.drain(o)
    assert maria.query("SELECT id, v FROM test.kept ORDER BY id") == [(1, "z"), (2, "b"), (3, "c"), (5, "e")]
    assert maria.query("SELECT id, v FROM test.other ORDER BY id") == [(5, "e")]
    indexes = maria.query("SELECT DISTINCT table_name, index_name FROM information_schema.statistics "
                          "WHERE table_schema = 'test' AND index_name <> 'PRIMARY' ORDER BY 1, 2")
    assert indexes == [("kept", "iw"), ("other", "iv"), ("other", "iw")]
    tables = {t["table"]: t for t in report["tables"]}
    assert tables["test.kept"]["rows"] == {"I": 4, "U": 1}              # the ignored delete is not counted
    assert not any(q.lower().startswith(("truncate", "alter table kept add index iv"))
                   for q in tables["test.kept"]["ddl"])
    assert report["counts"]["ignored_row_changes"] == 1
    assert checkpoint_row(maria, env.cluster.cluster_id)["commitTS"] == report["to_ts"]
    # verify compares the other table and says why it leaves test.kept out (its rows differ on purpose)
    checked = verify_mysql(env, o)
    assert "note: test.kept not compared: [syncer.binlog-filter-rule]" in checked and "test.other" in checked


def test_ignore_txn_commit_ts_leaves_out_those_transactions_in_every_sink(env: Env, maria: MariaDBServer) -> None:
    """TiDB Binlog's ``ignore-txn-commit-ts``: the MySQL sink skips those transactions (DDL too); the
    lake sinks leave out those transactions and refuse a DDL's ts, since their tables follow the DDL
    history. The commit ts are read back from the pumps."""
    from sink.parquet.files import read_changelog
    from tests.upstream.binlogs import committed
    from transform.drain import DrainError

    env.sql("create table ig (id int primary key, v int)")
    for i in (1, 2, 3):
        env.sql(f"insert into ig values ({i}, {i})")
    env.sql("alter table ig add column w int")
    to_ts = env.settle()
    txns = committed(env.pumps, env.cluster.cluster_id, to_ts)
    ddl_ts = [t.commit_ts for t in txns if t.prewrite.ddl_job_id]
    dml_ts = [t.commit_ts for t in txns if not t.prewrite.ddl_job_id]
    second_ts, alter_ts = dml_ts[-2], ddl_ts[-1]          # insert (2, 2); the ALTER

    pq = env.options.model_copy(deep=True)
    pq.syncer.db_type = "parquet"
    pq.parquet.dir = str(env.root / "ig-cdc")
    pq.data_dir = str(env.root / "ig-pq")
    pq.syncer.ignore_txn_commit_ts = [second_ts]
    env.drain(pq, to_ts=to_ts)
    assert sorted(r["id"] for r in read_changelog(pq.parquet.dir, "test", "ig").to_pylist()) == [1, 3]

    o = mysql_options(env, maria, ignore_txn_commit_ts=[second_ts, alter_ts])
    env.drain(o, to_ts=to_ts)
    assert maria.query("SELECT id FROM test.ig ORDER BY id") == [(1,), (3,)]
    assert [c for (c,) in maria.query("SELECT column_name FROM information_schema.columns WHERE "
                                      "table_schema = 'test' AND table_name = 'ig'")] == ["id", "v"]   # no ALTER

    pq.parquet.dir, pq.data_dir = str(env.root / "ig-cdc2"), str(env.root / "ig-pq2")
    pq.syncer.ignore_txn_commit_ts = [alter_ts]
    with pytest.raises(DrainError, match=r"ignore-txn-commit-ts names the DDL binlog of job \d+ \(commit ts "
                                         rf"{alter_ts}\).*remove that ts"):
        env.drain(pq, to_ts=to_ts)


def test_the_checkpoint_kept_in_another_mysql_is_read_and_written_there(env: Env, maria: MariaDBServer) -> None:
    with MariaDBServer() as elsewhere:
        o = mysql_options(env, maria)
        cp = o.syncer.to.checkpoint
        cp.type, cp.port, cp.user, cp.schema_ = "mysql", elsewhere.port, elsewhere.USER, "cp_db"
        cp.encrypted_password = encrypt(elsewhere.PASSWORD)     # its own, not [syncer.to]'s

        def row() -> dict[str, Any]:
            found = elsewhere.query(f"SELECT checkPoint FROM cp_db.checkpoint "
                                    f"WHERE clusterID = {env.cluster.cluster_id}")
            assert len(found) == 1
            parsed: dict[str, Any] = json.loads(found[0][0])
            return parsed

        env.sql("create table c (id int primary key, v int)")
        env.sql("insert into c values (1, 1), (2, 2)")
        first = env.drain(o)
        assert row()["commitTS"] == first["to_ts"] and row()["consistent"] is True
        assert maria.query("SELECT table_schema FROM information_schema.tables WHERE table_name = 'checkpoint'") == []
        env.sql("update c set v = 9 where id = 1")
        second = env.drain(o)
        assert second["checkpoint_before"] == first["to_ts"]

        # an unclean stop recorded there: the next run resumes from it in safe mode
        conn: Any = elsewhere.connect()
        with conn.cursor() as cur:
            cur.execute("REPLACE INTO cp_db.checkpoint VALUES (%s, %s)",
                        (env.cluster.cluster_id, json.dumps({"consistent": False, "commitTS": first["to_ts"]})))
        conn.close()
        replay = env.drain(o, to_ts=second["to_ts"])
        assert replay["from_ts"] == first["to_ts"] and any("safe mode" in n for n in replay["notes"])
        assert row()["consistent"] is True
        assert "test.c" in verify_mysql(env, o)      # at the checkpoint read there
        assert maria.query("SELECT * FROM test.c ORDER BY id") == [(1, 9), (2, 2)]
