"""TTL from a real tidb-server (the builds that have TTL_JOB_INTERVAL, 7.0 on): TiDB's TTL job deletes
expired rows through its internal SQL, which writes no binlog, so no binlog consumer sees those
deletes (TiDB Binlog's neither: its drainer turns TTL off on its downstream). The lake and MariaDB
keep the expired rows, and ``binlake verify`` does not count a row the upstream's TTL expired at the
compared ts and TiDB no longer has as a difference (it names how many it set aside); a row TiDB still
has, or one not expired, is compared as any other."""
from __future__ import annotations

from typing import Any

import pytest

from sink.iceberg.plugin import catalog_for as open_iceberg_catalog
from tests.realtidb.conftest import RealCluster
from tests.realtidb.versions import TiDBBuild
from tests.servers import MariaDBServer
from tests.waiting import wait_for


def _count(real: RealCluster) -> int:
    conn = real.tidb.connect("rttl")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM t")
            return int(cur.fetchone()[0])
    finally:
        conn.close()


@pytest.mark.every_tidb
def test_ttl_deletes_come_without_binlogs_and_verify_sets_the_expired_rows_aside(
        real: RealCluster, maria: MariaDBServer, tidb_build: TiDBBuild) -> None:
    if not tidb_build.reaches("v7.0"):
        pytest.skip("TTL_JOB_INTERVAL comes with 7.0")
    real.tidb.execute("CREATE DATABASE rttl")
    real.tidb.execute("CREATE TABLE t (id INT PRIMARY KEY, at DATETIME, v INT) "
                      "TTL = at + INTERVAL 1 DAY TTL_JOB_INTERVAL = '1m'",
                      "INSERT INTO t VALUES (1, '2000-01-01 00:00:00', 1), (2, '2001-02-03 04:05:06', 2),"
                      " (3, NOW() + INTERVAL 10 YEAR, 3), (4, NOW() + INTERVAL 10 YEAR, 4)", database="rttl")
    # TiDB's TTL job runs within a minute or two of the table's creation
    wait_for(lambda: _count(real) <= 2, 300, "TiDB's TTL job to delete the two expired rows", interval=5)
    real.tidb.execute("UPDATE t SET v = 30 WHERE id = 3", database="rttl")

    iceberg = real.options(f"ttl-{tidb_build.line}", ["rttl"])
    to_ts = int(real.drain(iceberg)["to_ts"])
    mirror = open_iceberg_catalog(iceberg).load_table(("rttl", "t")).scan().to_arrow()
    assert sorted(mirror.column("id").to_pylist()) == [1, 2, 3, 4]   # no binlog carried the TTL deletes
    said = real.verify(iceberg, to_ts)
    assert "2 expired by the table's TTL" in said, said

    maria.reset("rttl")
    mysql = real.options(f"ttl-{tidb_build.line}-my", ["rttl"], sink="mysql")
    mysql.initial_commit_ts, mysql.syncer.to.dsn = 0, maria.dsn
    real.drain(mysql)
    conn: Any = maria.connect("rttl")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, v FROM t ORDER BY id")
            assert [tuple(r) for r in cur.fetchall()] == [(1, 1), (2, 2), (3, 30), (4, 4)]
    finally:
        conn.close()
    said = real.verify(mysql, against=maria.dsn)
    assert "2 expired by the table's TTL" in said, said
