"""DDL text as a real TiDB's ``/ddl/history`` carries it (the user's statement: partition clauses,
TiDB-only options in and out of comments, trailing comments, a charset already stated), applied by
the MySQL sink to Debian's MariaDB."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from sink.mysql.sink import MySQLSink
from sink.mysql.target import MySQLTarget
from tests.servers import MariaDBServer
from transform import changes as ch
from transform.codec.model import HistoryInfo, Job, TableInfo

pytestmark = pytest.mark.integration

PARTITIONED = ("CREATE TABLE ranged (id int NOT NULL, v varchar(10), "
               "PRIMARY KEY (id) /*T![clustered_index] CLUSTERED */) PARTITION BY RANGE (id) "
               "(PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES LESS THAN MAXVALUE)")
QUERIES = {
    "ranged": PARTITIONED,
    "hashed": "create table hashed (id bigint primary key, s varchar(5)) COMMENT='a (b)' "
              "partition by hash(id) partitions 3",
    "sharded": "CREATE TABLE sharded (id int, s varchar(5)) /*T! SHARD_ROW_ID_BITS=4 */ -- a trailing comment",
    "randomized": "CREATE TABLE randomized (id bigint AUTO_RANDOM(5), PRIMARY KEY (id) CLUSTERED) "
                  "SHARD_ROW_ID_BITS = 4, PRE_SPLIT_REGIONS=2 AUTO_RANDOM_BASE=100",
    "stated": "CREATE TABLE stated (id int primary key, s varchar(5)) ENGINE=InnoDB DEFAULT CHARSET=latin1 "
              "PARTITION BY KEY (id) PARTITIONS 2",
    "expiring": "CREATE TABLE `expiring` (id int primary key, t datetime) TTL = `t` + INTERVAL 1 DAY "
                "TTL_ENABLE = 'OFF' TTL_JOB_INTERVAL = '1h'",
    "copied": "CREATE TABLE copied LIKE stated",
}


@pytest.fixture
def sink(mariadb_server: MariaDBServer) -> Iterator[MySQLSink]:
    mariadb_server.reset("ddl")
    s = MySQLSink(MySQLTarget.from_dsn(mariadb_server.dsn))
    yield s
    s.close()


def test_create_table_statements_of_a_real_tidb_apply_with_the_upstream_charset(
        sink: MySQLSink, mariadb_server: MariaDBServer) -> None:
    for i, (name, query) in enumerate(QUERIES.items()):
        info = TableInfo(id=100 + i, name=name, columns=(), charset="utf8mb4", collate="utf8mb4_bin")
        job = Job(id=10 + i, type=3, schema_id=1, table_id=100 + i, schema_name="ddl", table_name=name, query=query,
                  binlog=HistoryInfo(schema_version=i + 1, table_info=info))
        sink._apply_ddl(ch.DDLJob(1000 + i, job), {}, None)
    collations = dict(mariadb_server.query(
        "SELECT table_name, table_collation FROM information_schema.tables WHERE table_schema = 'ddl'"))
    assert collations == {"ranged": "utf8mb4_bin", "hashed": "utf8mb4_bin", "sharded": "utf8mb4_bin",
                          "randomized": "utf8mb4_bin", "stated": "latin1_swedish_ci", "expiring": "utf8mb4_bin",
                          "copied": "latin1_swedish_ci"}
    partitions = mariadb_server.query("SELECT table_name, COUNT(*) FROM information_schema.partitions "
                                      "WHERE table_schema = 'ddl' AND partition_name IS NOT NULL "
                                      "GROUP BY table_name ORDER BY table_name")
    assert partitions == [("copied", 2), ("hashed", 3), ("ranged", 2), ("stated", 2)]
    conn = mariadb_server.connect("ddl")
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute("INSERT INTO ranged VALUES (1, 'a'), (500, 'b')")
    conn.close()  # type: ignore[attr-defined]
    assert mariadb_server.query("SELECT (SELECT COUNT(*) FROM ddl.ranged PARTITION (p0)), "
                                "(SELECT COUNT(*) FROM ddl.ranged PARTITION (p1))") == [(1, 1)]
