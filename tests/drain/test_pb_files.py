"""db-type file (TiDB Binlog's protobuf files) and ``binlake reparo``: a drain killed while writing and
run again writes each transaction once; reparo replays the files between two tso into Debian's MariaDB,
equal to the upstream at the stop tso, and prints them as TiDB Binlog's reparo does."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from binlake.reparo import ReparoConfig, read_binlogs, run_reparo
from schemas import pb_binlog_pb2 as pbb
from sink.mysql.target import MySQLTarget
from sink.mysql.upstream_reader import read_snapshot
from sink.mysql.verify import verify_downstream
from tests.drain.conftest import Env
from tests.drain.crashing_cli import CRASH_STATUS
from tests.drain.test_drain_cli import binlake, cli_args
from tests.servers import MariaDBServer

pytestmark = pytest.mark.integration


def file_options(env: Env, directory: Path) -> Any:
    o = env.options.model_copy(deep=True)
    o.syncer.db_type = "file"
    o.syncer.to.dir = str(directory)
    return o


def workload(env: Env, step: int) -> None:
    """Every value kind reparo converts, DDL (ADD/DROP COLUMN, RENAME, TRUNCATE) in the first step."""
    if step == 0:
        env.sql("create table k (id int primary key, v varchar(20), d decimal(10, 3), t datetime(3), "
                "e enum('a', 'b', 'c'), s set('x', 'y'), b bit(12), j json, bl blob, f double, "
                "u bigint unsigned, unique key (v))")
        env.sql("create table g (id int primary key, note varchar(10))")
        env.sql("insert into g values (1, 'gone'), (2, 'gone')")
    base = step * 100
    blob = ("bl, ", "'blob{i}', ") if step == 0 else ("", "")          # bl is dropped in step 0
    for i in range(5):
        env.sql(f"insert into k (id, v, d, t, e, s, b, j, {blob[0]}f, u) values "
                f"({base + i}, 'v{base + i}', {i}.125, '2024-02-0{i + 1} 10:11:12.345', 'b', 'x,y', {i + 7}, "
                f"'{{\"k\": {i}}}', {blob[1].format(i=i)}{i}.5, {18446744073709551615 - i})", server=i % 2)
        env.sql(f"update k set d = d + 1, e = 'c', s = 'y' where id = {base + i}", server=(i + 1) % 2)
    env.sql(f"delete from k where id = {base + 4}")
    if step == 0:
        env.sql("rename table g to g2")
        env.sql("alter table k add column extra varchar(8) default 'x'")
        env.sql("update k set f = f + 1")
        env.sql("alter table k drop column bl")
        env.sql("truncate table g2")
        env.sql("insert into g2 values (4, 'after')")


def upstream(env: Env, ts: int) -> dict[str, list[dict[str, Any]]]:
    return read_snapshot(MySQLTarget.from_dsn(env.options.upstream.dsn), ts, lambda db, t: db == "test")


def replay(maria: MariaDBServer, directory: Path, start: int, stop: int, safe_mode: bool = False) -> int:
    config = ReparoConfig.model_validate({
        "data-dir": str(directory), "start-tso": start, "stop-tso": stop, "dest-type": "mysql", "worker-count": 2,
        "safe-mode": safe_mode,
        "txn-batch": 5, "dest-db": {"host": "127.0.0.1", "port": maria.port, "user": maria.USER,
                                    "password": maria.PASSWORD}})
    return run_reparo(config)


def test_files_written_once_across_a_crash_then_reparo_between_two_tso_equals_the_upstream(
        env: Env, mariadb_server: MariaDBServer, tmp_path: Path) -> None:
    """One drain killed while writing (a torn record left at the end), run again, then a second range:
    the files hold what an uninterrupted drain writes; reparo replays them in two tso ranges into
    MariaDB, equal to the upstream at each stop tso, and prints one table as TiDB Binlog's reparo does."""
    maria = mariadb_server
    maria.reset("test")
    maria.query("CREATE DATABASE test")                   # reparo replays onto a restored backup
    pb = tmp_path / "pb"
    env.sql("create table p (id int primary key, name varchar(10), amount decimal(6, 2), f double, b blob)")
    env.sql("insert into p values (1, 'one', 12.50, 1234567.0, 'hi')")
    env.sql("update p set name = 'uno', f = 0.5 where id = 1")
    workload(env, 0)
    env.settle()
    conf = env.root / "drainer.toml"
    conf.write_text(f'[syncer]\ndb-type = "pb"\n[syncer.to]\ndir = "{pb}"\n')
    r = binlake("drain", "--config", str(conf), *cli_args(env.options), "--spark-master", "local[2]",
                failpoints=("file-append=9",), cwd=env.root)
    assert r.returncode == CRASH_STATUS, r.stdout[-1000:] + r.stderr[-2000:]
    files = sorted(pb.glob("binlog-*")) or [pb / "binlog-0000000000000000-20260101000000"]
    with open(files[-1], "ab") as f:
        f.write(b"\x04\xd7\x1a\x1c\x00")                          # a torn record, as a crash mid-write leaves
    o = file_options(env, pb)
    first = env.drain(o)
    workload(env, 1)
    second = env.drain(o)
    assert second["from_ts"] == first["to_ts"]
    assert sorted(p.name.split("-")[0] for p in pb.iterdir()) == ["binlake.checkpoint", "binlog"]
    records = list(read_binlogs(pb, 0, 0))
    ts = [b.commit_ts for b in records]
    env.drain(file_options(env, tmp_path / "control"))              # an uninterrupted drain of the same range
    assert ts == [b.commit_ts for b in read_binlogs(tmp_path / "control", 0, 0)]
    assert ts == sorted(set(ts)) and len(records) > 20           # commit order, each transaction once
    ddl = [b.ddl_query.decode() for b in records if b.tp == pbb.DDL]
    assert ddl[1].startswith("use `test`; create table k") and ddl[1].endswith(";")
    mid = next(t for t in ts if t > first["to_ts"]) - 1           # a tso between two transactions
    assert replay(maria, pb, 0, mid) == sum(1 for t in ts if t <= mid)
    conn = MySQLTarget.from_dsn(maria.dsn).connect()
    try:
        report = verify_downstream(conn, upstream(env, mid), mid)
        assert report.ok, report
        assert replay(maria, pb, mid + 1, second["to_ts"]) == sum(1 for t in ts if t > mid)
        report = verify_downstream(conn, upstream(env, second["to_ts"]), second["to_ts"])
        assert report.ok, report
        # a resume: everything after the RENAME again in safe mode, across the ADD/DROP COLUMN already applied
        after_rename = next(b.commit_ts for b in records if b.tp == pbb.DDL and b"rename table" in b.ddl_query)
        assert replay(maria, pb, after_rename + 1, second["to_ts"], safe_mode=True) > 0
        report = verify_downstream(conn, upstream(env, second["to_ts"]), second["to_ts"])
        assert report.ok, report
    finally:
        conn.close()
    assert maria.query("SELECT COUNT(*) FROM test.k")[0][0] == 8 and maria.query("SELECT id FROM test.g2") == [(4,)]
    reparo_toml = tmp_path / "reparo.toml"            # TiDB Binlog's example reparo.toml, print, one table
    reparo_toml.write_text(f'data-dir = "{pb}"\nlog-level = "info"\ndest-type = "print"\ntxn-batch = 20\n'
                           f'worker-count = 16\n[[replicate-do-table]]\ndb-name = "test"\ntbl-name = "p"\n\n'
                           f'[dest-db]\nhost = "127.0.0.1"\nport = 3309\nuser = "root"\npassword = ""\n')
    r = binlake("reparo", "--config", str(reparo_toml), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == [
        "DDL query: use `test`; create table p (id int primary key, name varchar(10), amount decimal(6, 2), "
        "f double, b blob);",
        "schema: test; table: p; type: Insert",
        "id(int): 1", "name(varchar): one", "amount(decimal): 12.50", "f(double): 1.234567e+06", "b(blob): [104 105]",
        "schema: test; table: p; type: Update",
        "id(int): 1 => 1", "name(varchar): one => uno", "amount(decimal): 12.50 => 12.50",
        "f(double): 1.234567e+06 => 0.5", "b(blob): [104 105] => [104 105]",
    ]
