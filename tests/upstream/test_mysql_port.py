"""The emulator's MySQL protocol port: what ``verify`` reads through it at a ts equals the emulator's
own snapshot for every column type, TiDB's errors come back with their codes, and Debian's ``mysql``
client can drive a session."""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from sink.mysql.target import MySQLTarget
from sink.mysql.upstream_reader import read_snapshot
from tests.servers import ensure_mariadb_installed
from upstream.cluster import Cluster
from upstream.status_api import render_rows
from upstream.workload import Workload

F32 = struct.Struct("<f")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster(mysql_addr="127.0.0.1:0")
    try:
        yield c
    finally:
        c.close()


def connect(c: Cluster, **kw: Any) -> Any:
    assert c.mysql is not None
    return pymysql.connect(host="127.0.0.1", port=c.mysql.port, user="root", database="test", autocommit=True, **kw)


def as_float32(v: Any) -> Any:
    return F32.unpack(F32.pack(v))[0] if isinstance(v, float) else v


def http_form(c: Cluster, ts: int) -> dict[str, list[dict[str, Any]]]:
    """What ``GET /binlake/snapshot?ts=`` answers (rendered, JSON round trip)."""
    return json.loads(json.dumps(render_rows(c.snapshot(ts)), ensure_ascii=False))


def comparable(snapshot: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return {t: [{k: as_float32(v) for k, v in r.items()} for r in rows] for t, rows in snapshot.items()}


def test_read_at_a_ts_equals_the_snapshot_for_every_column_type(cluster: Cluster) -> None:
    cluster.execute("create table np (v varchar(8), b bit(10), t time(3), d date, dt datetime(2), f float, "
                    "vb varbinary(4), j json, e enum('x','y'), s set('p','q'), y year, dec decimal(12,4))")
    cluster.execute("insert into np values ('a', b'101', '-12:34:56.5', '2020-02-29', '1999-12-31 23:59:59.99', "
                    "1.1, x'00ff', '{\"k\": [1, 2.5, null]}', 'y', 'p,q', 2024, -1.5), "
                    "(null, null, null, null, null, null, null, null, null, null, null, null)")
    wl = Workload(cluster, seed=7, churn=True, ddl_interval=0.2)
    wl.setup()
    wl.run(rate=0, duration=0, workers=2, max_txns=120)
    middle = cluster.ts()
    cluster.execute("update np set v = 'changed' where b is not null; delete from np where b is null")
    wl.run(rate=0, duration=0, workers=2, max_txns=60)
    end = cluster.ts()

    target = MySQLTarget.from_dsn(cluster.mysql_dsn)
    for ts in (middle, end):
        got = read_snapshot(target, ts)
        want = http_form(cluster, ts)
        assert sorted(got) == sorted(want)
        assert comparable(got) == comparable(want), ts
    assert [r["v"] for r in read_snapshot(target, middle)["test.np"]] == ["a", None]
    assert [r["v"] for r in read_snapshot(target, end)["test.np"]] == ["changed"]
    assert "_tidb_rowid" in read_snapshot(target, end)["test.np"][0]
    some = read_snapshot(target, end, allows=lambda db, t: t == "np")
    assert list(some) == ["test.np"]


def test_a_read_at_a_ts_the_upstream_has_not_reached_is_refused(cluster: Cluster,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot ts ahead of the upstream's clock would read its current state, which commits still
    to come change: the reader waits for the clock to pass the ts, then reads at it; when the clock
    does not get there, it fails saying how far behind it is, and reads nothing."""
    from sink.mysql import upstream_reader

    cluster.execute("create table ahead (id int primary key)")
    cluster.execute("insert into ahead values (1)")
    target = MySQLTarget.from_dsn(cluster.mysql_dsn)
    with connect(cluster) as conn, conn.cursor() as cur:
        now = upstream_reader.upstream_clock(cur)
    assert now > cluster.ts() - (1000 << 18)                              # TiDB's @@tidb_current_ts, emulated
    soon = ((now >> 18) + 300) << 18                                       # 0.3 s ahead: waited for
    assert read_snapshot(target, soon)["test.ahead"] == [{"id": 1}]
    monkeypatch.setattr(upstream_reader, "CLOCK_WAIT", 0.2)
    later = ((now >> 18) + 60_000) << 18                                   # a minute ahead: refused
    with pytest.raises(upstream_reader.UpstreamSnapshotError,
                       match=rf"at ts {later}: its clock is at \d+, 5\d\.\d+ s behind the ts after 0.2 s"):
        read_snapshot(target, later)


def test_json_comes_back_in_tidbs_text(cluster: Cluster) -> None:
    """SELECT of a JSON column answers TiDB's text: doubles in Go's shortest form, TiDB's escapes."""
    cluster.execute("create table jt (id int primary key, j json)")
    conn = connect(cluster)
    with conn.cursor() as cur:
        cur.execute("insert into jt values (1, %s), (2, %s), (3, '1e10'), (4, '-0.0')",
                    ('[1e10, -2.0, 1e-7, 1E21, 0.1, 123456789012345678.0, 1.5]', '{"s": "a\u2028\\b<&>"}'))
        cur.execute("select j from jt order by id")
        got = [r[0] for r in cur.fetchall()]
    conn.close()
    assert got == ["[10000000000, -2, 1e-7, 1e+21, 0.1, 123456789012345680, 1.5]", '{"s": "a\\u2028\\u0008<&>"}',
                   "10000000000", "-0"]
    assert [r["j"] for r in http_form(cluster, cluster.ts())["test.jt"]] == got


def test_tidb_errors_and_session_rules(cluster: Cluster) -> None:
    cluster.execute("create table t (id int primary key, v int)")
    before = cluster.ts()
    conn = connect(cluster)
    with conn.cursor() as cur:
        cur.execute("insert into t values (1, 10), (2, 20)")
        with pytest.raises(pymysql.err.MySQLError) as e:
            cur.execute("select * from nope")
        assert e.value.args[0] == 1146 and "test.nope" in e.value.args[1]
        with pytest.raises(pymysql.err.MySQLError) as e:
            cur.execute("select *, _tidb_rowid from t")          # keyed by its int primary key
        assert e.value.args[0] == 1054
        with pytest.raises(pymysql.err.MySQLError) as e:
            cur.execute("insert into t values (1, 11)")
        assert e.value.args[0] == 1062                         # TiDB's duplicate-entry code
        cur.execute(f"set @@tidb_snapshot = '{before}'")
        cur.execute("select count(*) from t")
        assert cur.fetchone() == (0,)
        with pytest.raises(pymysql.err.MySQLError, match="tidb_snapshot"):
            cur.execute("delete from t")
        cur.execute("set @@tidb_snapshot = ''")
        cur.execute("select v from t where id = 2")
        assert cur.fetchone() == (20,)
        cur.execute("begin")
        cur.execute("update t set v = 21 where id = 2")
        with pytest.raises(pymysql.err.MySQLError, match="COMMIT first"):
            cur.execute("select v from t")
        cur.execute("commit")
        cur.execute("select v from t where id = 2")
        assert cur.fetchone() == (21,)
    conn.close()
    bare = pymysql.connect(host="127.0.0.1", port=cluster.mysql.port, user="root")  # type: ignore[union-attr]
    with bare.cursor() as cur, pytest.raises(pymysql.err.MySQLError) as e:
        cur.execute("insert into t values (3, 30)")
    assert e.value.args[0] == 1046                             # no database selected
    bare.close()


def test_debian_mysql_client_session(cluster: Cluster) -> None:
    if shutil.which("mysql") is None:
        ensure_mariadb_installed()
    assert cluster.mysql is not None
    script = ("create table c (id int primary key, name varchar(10));\n"
              "insert into c values (1, 'a'), (2, 'b');\n"
              "update c set name = 'z' where id = 2;\n"
              "select id, name from c order by id;\n"
              "show tables;\n"
              "select @@version;\n")
    r = subprocess.run(["mysql", "-h127.0.0.1", f"-P{cluster.mysql.port}", "-uroot", "--batch", "test"],
                       input=script, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:3] == ["id\tname", "1\ta", "2\tz"]
    assert "c" in lines and any("TiDB" in line for line in lines)
    assert cluster.snapshot()["test.c"] == [{"id": 1, "name": "a"}, {"id": 2, "name": "z"}]
