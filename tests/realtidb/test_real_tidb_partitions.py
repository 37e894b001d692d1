"""Partition DDL from a real tidb-server into the lake: which partition TiDB put each row in, as
binlake computes it from the table's partitioning (``transform.partitions``), checked against TiDB's
own ``SELECT … FROM t PARTITION (p)`` over every kind of partitioning the build has."""
from __future__ import annotations

import pytest

from sink.iceberg.plugin import catalog_for as open_iceberg_catalog
from tests.realtidb.conftest import RealCluster
from tests.realtidb.versions import TiDBBuild
from transform.history import SchemaHistory
from transform.partitions import Partitioning, locate

# (since, CREATE TABLE, rows): each table keyed by id; the rows cover every partition, NULLs and edges
PARTITIONINGS = (
    ("v6.4", "CREATE TABLE r_int (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN "
             "(-5), PARTITION p1 VALUES LESS THAN (10), PARTITION p2 VALUES LESS THAN (MAXVALUE))",
     "(-100, 1), (-5, 2), (-6, 3), (9, 4), (10, 5), (2000000000, 6)"),
    ("v6.4", "CREATE TABLE r_year (id INT, d DATE, PRIMARY KEY (id, d)) PARTITION BY RANGE (YEAR(d)) ("
             "PARTITION p0 VALUES LESS THAN (2000), PARTITION p1 VALUES LESS THAN (2020), PARTITION p2 VALUES "
             "LESS THAN MAXVALUE)",
     "(1, '1999-12-31'), (2, '2000-01-01'), (3, '2019-06-30'), (4, '2020-01-01'), (5, '9999-12-31')"),
    ("v6.4", "CREATE TABLE r_days (id INT, dt DATETIME(3), PRIMARY KEY (id, dt)) PARTITION BY RANGE (TO_DAYS(dt)) ("
             "PARTITION p0 VALUES LESS THAN (TO_DAYS('2024-01-01')), PARTITION p1 VALUES LESS THAN "
             "(TO_DAYS('2024-02-01')), PARTITION p2 VALUES LESS THAN MAXVALUE)",
     "(1, '2023-12-31 23:59:59.999'), (2, '2024-01-01 00:00:00'), (3, '2024-01-31 12:00:00'), (4, '2024-02-01')"),
    ("v6.4", "CREATE TABLE r_unix (id INT, ts TIMESTAMP, PRIMARY KEY (id, ts)) PARTITION BY RANGE "
             "(UNIX_TIMESTAMP(ts)) (PARTITION p0 VALUES LESS THAN (UNIX_TIMESTAMP('2024-01-01 00:00:00')), "
             "PARTITION p1 VALUES LESS THAN (MAXVALUE))",
     "(1, '2023-12-31 23:59:59'), (2, '2024-01-01 00:00:00'), (3, '2030-01-01 00:00:00')"),
    ("v6.4", "CREATE TABLE r_expr (id INT, a INT, PRIMARY KEY (id, a)) PARTITION BY RANGE ((a DIV 10) * 2 - id % 3) ("
             "PARTITION p0 VALUES LESS THAN (0), PARTITION p1 VALUES LESS THAN (5), PARTITION p2 VALUES LESS THAN "
             "(MAXVALUE))",
     "(1, -25), (2, -9), (3, 9), (4, 21), (5, 22), (6, 33), (7, 100)"),
    ("v6.4", "CREATE TABLE r_month (id INT, d DATETIME, PRIMARY KEY (id, d)) PARTITION BY RANGE "
             "(MONTH(d) + DAYOFWEEK(d) + QUARTER(d) + HOUR(d)) (PARTITION p0 VALUES LESS THAN (10), "
             "PARTITION p1 VALUES LESS THAN (20), PARTITION p2 VALUES LESS THAN (MAXVALUE))",
     "(1, '2024-01-01 00:00:00'), (2, '2024-06-15 09:00:00'), (3, '2024-12-31 23:00:00'), (4, '2024-03-03 05:00:00')"),
    ("v6.4", "CREATE TABLE r_week (id INT, d DATE, PRIMARY KEY (id, d)) PARTITION BY RANGE (YEARWEEK(d)) ("
             "PARTITION p0 VALUES LESS THAN (202353), PARTITION p1 VALUES LESS THAN (202401), PARTITION p2 VALUES "
             "LESS THAN (202402), PARTITION p3 VALUES LESS THAN (MAXVALUE))",
     "(1, '2023-12-30'), (2, '2023-12-31'), (3, '2024-01-01'), (4, '2024-01-06'), (5, '2024-01-07'),"
     " (6, '2021-01-02'), (7, '2021-01-03'), (8, '2027-01-01')"),
    ("v6.4", "CREATE TABLE r_misc (id INT, dt DATETIME(6), PRIMARY KEY (id, dt)) PARTITION BY RANGE ("
             "(WEEKDAY(dt) * 1000 + DAYOFYEAR(dt)) * 100 + MINUTE(dt) + SECOND(dt) + MICROSECOND(dt) DIV 100000 "
             "+ TO_SECONDS(dt) % 7 + EXTRACT(DAY_HOUR FROM dt) % 5 + DATEDIFF(dt, '2024-01-01') % 3) ("
             "PARTITION p0 VALUES LESS THAN (100000), PARTITION p1 VALUES LESS THAN (300000), "
             "PARTITION p2 VALUES LESS THAN (MAXVALUE))",
     "(1, '2024-01-01 00:00:00'), (2, '2024-03-05 10:11:12.345678'), (3, '2024-07-04 23:59:59.999999'),"
     " (4, '2023-02-28 01:02:03.5'), (5, '2024-12-29 12:30:00')"),
    ("v6.4", "CREATE TABLE rc_dt (id INT, dt DATETIME, PRIMARY KEY (id, dt)) PARTITION BY RANGE COLUMNS (dt) ("
             "PARTITION p0 VALUES LESS THAN ('2024-01-01'), PARTITION p1 VALUES LESS THAN ('2024-01-01 12:00:00'), "
             "PARTITION p2 VALUES LESS THAN (MAXVALUE))",
     "(1, '2023-12-31 23:59:59'), (2, '2024-01-01 00:00:00'), (3, '2024-01-01 11:59:59'), (4, '2024-01-01 12:00:00')"),
    ("v7.0", "CREATE TABLE rc_multi (a INT, b VARCHAR(10), PRIMARY KEY (a, b)) PARTITION BY RANGE COLUMNS (a, b) ("
             "PARTITION p0 VALUES LESS THAN (10, 'm'), PARTITION p1 VALUES LESS THAN (10, MAXVALUE), "
             "PARTITION p2 VALUES LESS THAN (20, 'c'), PARTITION p3 VALUES LESS THAN (MAXVALUE, MAXVALUE))",
     "(1, 'zzz'), (10, 'a'), (10, 'm'), (10, 'zz'), (19, 'x'), (20, 'b'), (20, 'c'), (99, '')"),
    ("v6.4", "CREATE TABLE rc_str (s VARCHAR(20) PRIMARY KEY, v INT) PARTITION BY RANGE COLUMNS (s) ("
             "PARTITION p0 VALUES LESS THAN ('G'), PARTITION p1 VALUES LESS THAN ('n'), "
             "PARTITION p2 VALUES LESS THAN (MAXVALUE))",
     "('A', 1), ('F', 2), ('G', 3), ('a', 4), ('m', 5), ('n', 6), ('zz', 7), ('', 8)"),
    ("v6.4", "CREATE TABLE l_int (id INT PRIMARY KEY, v INT) PARTITION BY LIST (id) ("
             "PARTITION p0 VALUES IN (1, 3, 5), PARTITION p1 VALUES IN (2, 4, -6), PARTITION p2 VALUES IN (7))",
     "(1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (-6, 6), (7, 7)"),
    ("v6.4", "CREATE TABLE l_null (id INT, k INT) PARTITION BY LIST (k) ("
             "PARTITION p0 VALUES IN (1, NULL), PARTITION p1 VALUES IN (2, 3))",
     "(1, 1), (2, NULL), (3, 2), (4, 3)"),
    ("v6.4", "CREATE TABLE lc_multi (a INT, b CHAR(2), PRIMARY KEY (a, b)) PARTITION BY LIST COLUMNS (a, b) ("
             "PARTITION p0 VALUES IN ((1, 'x'), (2, 'y')), PARTITION p1 VALUES IN ((1, 'y'), (2, 'x')))",
     "(1, 'x'), (2, 'y'), (1, 'y'), (2, 'x')"),
    ("v6.4", "CREATE TABLE h_int (id BIGINT PRIMARY KEY, v INT) PARTITION BY HASH (id) PARTITIONS 5",
     "(0, 0), (1, 1), (-1, 2), (-7, 3), (9223372036854775807, 4), (-9223372036854775807, 5), (123456789, 6)"),
    ("v6.4", "CREATE TABLE h_expr (id INT, d DATE, PRIMARY KEY (id, d)) PARTITION BY HASH (YEAR(d) * 12 + MONTH(d)) "
             "PARTITIONS 4",
     "(1, '2024-01-15'), (2, '2024-02-15'), (3, '2023-12-31'), (4, '2000-07-04'), (5, '1999-03-01')"),
    ("v7.0", "CREATE TABLE k_str (s VARCHAR(20), n INT, PRIMARY KEY (s, n)) PARTITION BY KEY (s, n) PARTITIONS 4",
     "('a', 1), ('b', 2), ('hello', 3), ('', 4), ('trailing  ', 5), ('x', -6)"),
    ("v7.0", "CREATE TABLE k_int (id BIGINT PRIMARY KEY, v INT) PARTITION BY KEY (id) PARTITIONS 3",
     "(0, 0), (1, 1), (-1, 2), (100, 3), (9223372036854775807, 4)"),
    ("v7.5", "CREATE TABLE l_default (id INT PRIMARY KEY, v INT) PARTITION BY LIST (id) ("
             "PARTITION p0 VALUES IN (1, 2), PARTITION pd DEFAULT)",
     "(1, 1), (2, 2), (3, 3), (-4, 4)"),
)


@pytest.mark.every_tidb
def test_binlake_places_each_row_in_the_partition_tidb_put_it_in(real: RealCluster, tidb_build: TiDBBuild) -> None:
    cases = [(ddl, rows) for since, ddl, rows in PARTITIONINGS if tidb_build.reaches(since)]
    real.tidb.execute("CREATE DATABASE rp_locate")
    for ddl, rows in cases:
        table = ddl.split()[2]
        real.tidb.execute(ddl, f"INSERT INTO {table} VALUES {rows}", database="rp_locate")
    options = real.options(f"locate-{tidb_build.line}", ["rp_locate"])
    real.drain(options)
    history = SchemaHistory.fetch(real.tidb.status_url)
    catalog = open_iceberg_catalog(options)
    conn = real.tidb.connect("rp_locate")
    checked = 0
    try:
        for ddl, _ in cases:
            table = ddl.split()[2]
            info = next(v.table for v, _ in history.tables_at(real.tidb.current_ts())
                        if v.db == "rp_locate" and v.table is not None and v.table.name == table)
            part = Partitioning.of(info)
            assert part is not None, table
            names = {c.name for c in info.columns}
            key = next(c for c in ("id", "s", "a") if c in names)
            tidb_has: dict[str, int] = {}
            with conn.cursor() as cur:
                for d in part.definitions:
                    cur.execute(f"SELECT CAST({key} AS CHAR) FROM {table} PARTITION ({d.name})")
                    for (k,) in cur.fetchall():
                        tidb_has[str(k)] = d.id
            mirror = catalog.load_table(("rp_locate", table)).scan().to_arrow()
            ours = dict(zip((str(k) for k in mirror.column(key).to_pylist()), locate(info, mirror).to_pylist()))
            partition = {d.id: d.name for d in part.definitions}
            assert ({k: partition[v] for k, v in ours.items()}
                    == {k: partition[v] for k, v in tidb_has.items()}), table
            checked += len(ours)
    finally:
        conn.close()
    assert checked >= 60
