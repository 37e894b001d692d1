"""A real tidb-server writes to binlake pumps; binlake drains into Iceberg, Parquet and MariaDB, and
``binlake verify`` compares each with TiDB read over its MySQL port at the drained ts. Every test runs
on the full builds (``tests/realtidb/versions.py``); those marked ``every_tidb`` on every build."""
from __future__ import annotations

import json
import random
import time
from typing import Any

import pyarrow as pa
import pytest

from ingest import binlog as bl
from ingest.registry import load_registry
from ingest.scan_client import ScanClient
from ingest.topology import TOPOLOGY_PREFIX, tidb_status_urls
from schemas import binlog_pb2
from sink.iceberg.plugin import catalog_for as open_iceberg_catalog
from tests.realtidb.conftest import RealCluster, drain_everywhere
from tests.servers import MariaDBServer
from transform.history import SchemaHistory

TYPES = """CREATE TABLE types (
  id INT PRIMARY KEY, ti TINYINT, si SMALLINT, mi MEDIUMINT, i INT, bi BIGINT, ubi BIGINT UNSIGNED,
  f FLOAT, d DOUBLE, dc DECIMAL(20,6), dc65 DECIMAL(65,30), dt DATETIME(6), ts TIMESTAMP(3) NULL,
  dte DATE, tm TIME(2), yr YEAR, c CHAR(10), vc VARCHAR(64), tx TEXT, bl BLOB, vb VARBINARY(16),
  bn BINARY(4), e ENUM('a','b','c'), st SET('x','y','z'), bt BIT(12), j JSON)"""

TYPE_ROWS = [
    "(1, -128, -32768, -8388608, -2147483648, -9223372036854775808, 0, -1.5, -2.0, -99999999999999.999999,"
    " -12345678901234567890123456789012345.123456789012345678901234567890, '1000-01-01 00:00:00.000000',"
    " '1970-01-02 00:00:00.000', '1000-01-01', '-838:59:59.00', 1901, '', '', '', '', '', x'00000000', 'a', '',"
    " b'0', 'null')",
    "(2, 127, 32767, 8388607, 2147483647, 9223372036854775807, 18446744073709551615, 3.25, 1e300,"
    " 99999999999999.999999, 0.000000000000000000000000000001, '9999-12-31 23:59:59.999999',"
    " '2038-01-19 03:14:07.999', '9999-12-31', '838:59:59.00', 2155, 'chars', 'quote '' \\\\ \\0 end',"
    " 'ünïcødé 𝄞 text', x'00ff27', x'5c00', x'ffffffff', 'c', 'x,z', b'111111111111',"
    " '{\"pi\": 3.14, \"big\": 1e21, \"small\": 1e-7, \"e\": 10000000000, \"neg\": -2.0, \"arr\": [1, 2.5, null, true],"
    " \"s\": \"<&>\\\\u2028\"}')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(4, 0, 0, 0, 0, 0, 9223372036854775808, 0, -0.0, 0, 0, '2024-01-02 03:04:05', '2024-01-02 03:04:05',"
    " '2024-02-29', '00:00:00', 2000, 'x', 'y', 'z', 'w', 'v', 'abcd', 'b', 'y', b'101', "
    " JSON_OBJECT('dt', CAST('2024-01-02 03:04:05' AS DATETIME), 'd', CAST('2024-01-02' AS DATE),"
    " 'tm', CAST('12:34:56' AS TIME), 'tm6', CAST('12:34:56.5' AS TIME(6)), 'dbl', CAST(1e10 AS DOUBLE),"
    " 'neg', CAST(-2 AS DOUBLE), 'tiny', CAST(1e-7 AS DOUBLE), 'u', CAST(18446744073709551615 AS UNSIGNED)))",
]

KEYS = [
    # unsigned clustered handles at and above 2^63 (TiDB flips the sign bit of the handle)
    "CREATE TABLE ubig (id BIGINT UNSIGNED PRIMARY KEY, v VARCHAR(10))",
    "INSERT INTO ubig VALUES (0, 'zero'), (9223372036854775807, 'max63'), (9223372036854775808, 'min64'),"
    " (18446744073709551615, 'max64'), (12345678901234567890, 'mid')",
    "UPDATE ubig SET v = 'upd' WHERE id = 9223372036854775808",
    "DELETE FROM ubig WHERE id = 18446744073709551615",
    "CREATE TABLE ubig_nc (id BIGINT UNSIGNED PRIMARY KEY NONCLUSTERED, v INT)",
    "INSERT INTO ubig_nc VALUES (18446744073709551615, 1), (9223372036854775808, 2), (1, 3)",
    "CREATE TABLE cl (k VARCHAR(20) PRIMARY KEY CLUSTERED, v INT)",
    "CREATE TABLE ncl (k VARCHAR(20) PRIMARY KEY NONCLUSTERED, v INT, u INT UNIQUE)",
    "CREATE TABLE comp (a INT, b VARCHAR(10), v DOUBLE, PRIMARY KEY (a, b) CLUSTERED)",
    "CREATE TABLE ci (k VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
    "CREATE TABLE nokey (a INT, b VARCHAR(10))",
    "CREATE TABLE part_r (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id)"
    " (PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES LESS THAN (MAXVALUE))",
    "CREATE TABLE part_h (id BIGINT PRIMARY KEY, v VARCHAR(10)) PARTITION BY HASH (id) PARTITIONS 3",
    "CREATE TABLE gen (id INT PRIMARY KEY, a INT, b INT AS (a * 2) VIRTUAL, c INT AS (a + 1) STORED)",
    "CREATE TABLE shard (id BIGINT, v INT) SHARD_ROW_ID_BITS = 4",
    "CREATE TABLE rnd (id BIGINT PRIMARY KEY AUTO_RANDOM, v INT)",
    "INSERT INTO cl VALUES ('a', 1), ('b', 2), ('c', 3)",
    "INSERT INTO ncl VALUES ('a', 1, 10), ('b', 2, 20), ('c', 3, 30)",
    "INSERT INTO comp VALUES (1, 'x', 0.5), (1, 'y', 1.5), (2, 'x', 2.5)",
    "INSERT INTO ci VALUES ('Abc', 1), ('ß', 2)",
    "INSERT INTO nokey VALUES (1, 'x'), (1, 'x'), (2, NULL), (3, 'y')",
    "INSERT INTO part_r VALUES (1, 1), (150, 2), (99, 3)",
    "INSERT INTO part_h VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')",
    "INSERT INTO gen (id, a) VALUES (1, 10), (2, 20)",
    "INSERT INTO shard VALUES (1, 1), (2, 2), (3, 3)",
    "INSERT INTO rnd (v) VALUES (1), (2), (3)",
    "UPDATE cl SET k = 'z' WHERE k = 'a'",
    "UPDATE ncl SET k = 'z', u = 11 WHERE k = 'a'",
    "UPDATE comp SET b = 'w' WHERE a = 1 AND b = 'y'",
    "UPDATE ci SET v = 9 WHERE k = 'ABC'",
    "DELETE FROM nokey WHERE a = 2",
    "UPDATE nokey SET b = 'q' WHERE a = 3",
    "UPDATE part_r SET id = 250 WHERE id = 1",
    "UPDATE gen SET a = 11 WHERE id = 1",
    "DELETE FROM shard WHERE id = 2",
    "UPDATE rnd SET v = 7 WHERE v = 1",
]


def run(real: RealCluster, db: str, statements: list[str]) -> None:
    """Create ``db`` and run ``statements`` in it, one by one."""
    real.tidb.execute(f"CREATE DATABASE {db}")
    real.tidb.execute(*statements, database=db)




def test_pumps_and_drains_learn_the_cluster_id_from_pd(real: RealCluster) -> None:
    """No ``--cluster-id`` anywhere: PD (like pdetcd) refuses a TSO request for cluster 0."""
    for pump in real.pumps:
        assert pump.status()["binlake"]["cluster_id"] == real.pd.cluster_id
    run(real, "rt_id", ["CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)"])
    options = real.options("id", ["rt_id"])
    assert options.cluster_id == 0
    report = real.drain(options)
    assert report["cluster_id"] == real.pd.cluster_id
    assert "1 table(s) compared, no differences" in real.verify(options, int(report["to_ts"]))


def test_a_drainer_given_only_pd_urls_finds_the_pumps_and_tidb_in_pds_etcd(real: RealCluster) -> None:
    """TiDB Binlog's drainer.toml names no registry and no status URL: the pumps are in PD's etcd and
    so is each TiDB's status port (``/topology/tidb/<ip:port>/info`` with a live ``/ttl`` key). A
    tidb-server on unistore announces nothing in etcd, so the test writes what one on TiKV writes."""
    run(real, "rt_pd_only", ["CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)"])
    registry = load_registry(real.registry)
    key = f"{TOPOLOGY_PREFIX}127.0.0.1:{real.tidb.port}"
    info = {"version": "8.0.11-TiDB-v8.3.0", "git_hash": "", "ip": "127.0.0.1",
            "status_port": real.tidb.status_port, "deploy_path": "/bin", "start_timestamp": int(time.time()),
            "labels": {}}
    try:
        registry.put(f"{TOPOLOGY_PREFIX}10.0.0.9:4000/info", json.dumps(dict(info, ip="10.0.0.9")).encode())   # gone
        registry.put(f"{key}/info", json.dumps(info).encode())
        registry.put(f"{key}/ttl", str(time.time_ns()).encode())
        assert tidb_status_urls(registry) == [real.tidb.status_url]
        options = real.options("pd_only", ["rt_pd_only"])
        options.registry = ""
        options.upstream.status_url = ""
        assert options.registry_uri == real.pd.url
        report = real.drain(options)
        assert report["tables"] and "1 table(s) compared, no differences" in real.verify(options, int(report["to_ts"]))
    finally:
        for k in (f"{key}/info", f"{key}/ttl", f"{TOPOLOGY_PREFIX}10.0.0.9:4000/info"):
            registry.delete(k)
        registry.close()


@pytest.mark.every_tidb
def test_every_type_key_layout_partition_and_generated_column(real: RealCluster, maria: MariaDBServer) -> None:
    run(real, "rt_types", [TYPES, *(f"INSERT INTO types VALUES {row}" for row in TYPE_ROWS),
                           "UPDATE types SET j = JSON_SET(j, '$.e', 2.5e-7) WHERE id = 2",
                           "UPDATE types SET vc = 'changed', d = 123456789012345678 WHERE id = 4",
                           *KEYS])
    # a multi-statement transaction across tables
    conn = real.tidb.connect("rt_types")
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("INSERT INTO cl VALUES ('m', 100)")
            cur.execute("UPDATE ncl SET v = v + 100")
            cur.execute("DELETE FROM comp WHERE a = 2")
            cur.execute("INSERT INTO types (id, vc) VALUES (5, 'in txn')")
            cur.execute("COMMIT")
    finally:
        conn.close()
    drain_everywhere(real, maria, "types", ["rt_types"])


@pytest.mark.every_tidb
def test_ddl_history_renames_truncates_and_drops(real: RealCluster, maria: MariaDBServer) -> None:
    run(real, "rt_ddl", [
        "CREATE TABLE w (id INT PRIMARY KEY, a INT, b VARCHAR(10), gone INT)",
        "INSERT INTO w VALUES (1, 10, 'x', 7), (2, 20, 'y', 8)",
        "ALTER TABLE w ADD COLUMN d VARCHAR(8) DEFAULT 'dflt'",
        "INSERT INTO w (id, a, b, gone) VALUES (3, 30, 'z', 9)",
        "ALTER TABLE w DROP COLUMN gone",
        "UPDATE w SET a = 11 WHERE id = 1",
        "ALTER TABLE w MODIFY COLUMN a BIGINT",
        "ALTER TABLE w MODIFY COLUMN b VARCHAR(40)",
        "UPDATE w SET a = 9000000000, b = 'widened text' WHERE id = 2",
        "ALTER TABLE w RENAME COLUMN b TO bee",
        "CREATE TABLE r1 (id INT PRIMARY KEY, v INT)",
        "INSERT INTO r1 VALUES (1, 1), (2, 2)",
        "RENAME TABLE r1 TO r2",
        "INSERT INTO r2 VALUES (3, 3)",
        "CREATE TABLE tr (id INT PRIMARY KEY, v INT)",
        "INSERT INTO tr VALUES (1, 1), (2, 2)",
        "TRUNCATE TABLE tr",
        "INSERT INTO tr VALUES (5, 5)",
        "CREATE TABLE dropped (id INT PRIMARY KEY)",
        "INSERT INTO dropped VALUES (1)",
        "DROP TABLE dropped",
        "CREATE TABLE dropped (id INT PRIMARY KEY, v VARCHAR(5))",
        "INSERT INTO dropped VALUES (2, 'again')",
    ])
    run(real, "rt_gone", ["CREATE TABLE g (id INT PRIMARY KEY)", "INSERT INTO g VALUES (1), (2)"])
    real.tidb.execute("DROP DATABASE rt_gone")
    drain_everywhere(real, maria, "ddl", ["rt_ddl", "rt_gone"])


def test_add_and_drop_column_under_concurrent_writes(real: RealCluster, maria: MariaDBServer) -> None:
    """TiDB lets a transaction begun in DROP COLUMN's delete-only state commit after the job's last DDL
    binlog with the older schema version; every sink must still equal TiDB."""
    run(real, "rt_load", ["CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(20))"])
    rngs = [random.Random(seed) for seed in range(4)]

    def transaction(cur: Any, w: int, i: int) -> None:
        rng = rngs[w]
        key = rng.randrange(200)
        cur.execute("BEGIN")
        cur.execute(f"DELETE FROM t WHERE id = {key}")
        cur.execute(f"INSERT INTO t (id, a, b) VALUES ({key}, {rng.randrange(1000)}, 'w{w}')")
        cur.execute(f"UPDATE t SET a = a + 1 WHERE id = {rng.randrange(200)}")
        cur.execute("COMMIT")

    with real.writing("rt_load", transaction) as writes:
        for cycle in range(6):
            real.tidb.execute(f"ALTER TABLE t ADD COLUMN c{cycle} INT DEFAULT {cycle}",
                              f"ALTER TABLE t DROP COLUMN c{cycle}", database="rt_load")
    assert writes.committed > 50, writes.errors[-5:]
    drain_everywhere(real, maria, "load", ["rt_load"])


def test_truncate_under_concurrent_writes(real: RealCluster, maria: MariaDBServer) -> None:
    """A pessimistic transaction begun before a TRUNCATE that touches the table only after it writes
    the new table id under its older schema version, committing after the DDL binlog: the DML is
    decoded with the new table (it happened here at least once in every run tried)."""
    run(real, "rt_trunc", ["CREATE TABLE a (id INT PRIMARY KEY, n INT)", "CREATE TABLE t (a INT, b INT)"])

    def transaction(cur: Any, w: int, i: int) -> None:
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO a VALUES ({w * 10**6 + i}, {i})")
        time.sleep(0.002)
        cur.execute(f"INSERT INTO t VALUES ({w}, {i})")
        cur.execute("COMMIT")

    with real.writing("rt_trunc", transaction) as writes:
        for _ in range(10):
            time.sleep(0.3)
            real.tidb.execute("TRUNCATE TABLE rt_trunc.t")
    assert writes.committed > 50, writes.errors[-5:]
    to_ts = drain_everywhere(real, maria, "trunc", ["rt_trunc"])
    assert written_ahead_of_their_schema(real, to_ts) > 0, "no transaction wrote a table id newer than its version"


def written_ahead_of_their_schema(real: RealCluster, to_ts: int) -> int:
    """The DMLs on the pumps in (0, to_ts] that write a table id their prewrite's schema version does
    not know yet."""
    history = SchemaHistory.fetch(real.tidb.status_url)
    count = 0
    for p in real.pumps:
        with ScanClient(p.addr, real.pd.cluster_id) as client:
            for rec in client.scan(0, to_ts):
                if rec.tp != bl.PREWRITE:
                    continue
                b = bl.parse(rec.payload)
                if not b.prewrite_value:
                    continue
                pv = binlog_pb2.PrewriteValue.FromString(b.prewrite_value)
                count += any(history.version_at(m.table_id, pv.schema_version) is None for m in pv.mutations)
    return count


def test_json_text_is_tidbs_in_every_sink(real: RealCluster, maria: MariaDBServer) -> None:
    """The lake and the downstream hold the JSON text TiDB prints, not a re-rendering of it."""
    run(real, "rt_json", ["CREATE TABLE j (id INT PRIMARY KEY, doc JSON)",
                          "INSERT INTO j VALUES (1, '[1e10, -2.0, 1e-7, 1e21, 0.1, 100]'),"
                          " (2, JSON_OBJECT('dt', CAST('2024-01-02 03:04:05' AS DATETIME),"
                          " 'tm', CAST('01:02:03' AS TIME)))"])
    tidb_text = dict(real.tidb.query("SELECT id, CAST(doc AS CHAR) FROM rt_json.j"))
    drain_everywhere(real, maria, "json", ["rt_json"])
    mirror = open_iceberg_catalog(real.options("json", ["rt_json"])).load_table("rt_json.j").scan().to_arrow()
    assert dict(zip(mirror.column("id").to_pylist(), mirror.column("doc").to_pylist())) == tidb_text
    downstream = dict(maria.query("SELECT id, CAST(doc AS CHAR) FROM rt_json.j"))
    assert {k: json.loads(v) for k, v in downstream.items()} == {k: json.loads(v) for k, v in tidb_text.items()}


def _column_names(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if not c.startswith("_tidb_")]


def test_virtual_generated_columns_are_not_in_the_lake(real: RealCluster) -> None:
    run(real, "rt_gen", ["CREATE TABLE g (id INT PRIMARY KEY, a INT, v INT AS (a * 2) VIRTUAL,"
                         " s INT AS (a + 1) STORED)", "INSERT INTO g (id, a) VALUES (1, 5)"])
    options = real.options("gen", ["rt_gen"])
    report = real.drain(options)
    real.verify(options, int(report["to_ts"]))
    mirror: Any = open_iceberg_catalog(options).load_table("rt_gen.g").scan().to_arrow()
    assert _column_names(mirror) == ["id", "a", "s"]
    assert mirror.to_pylist()[0]["s"] == 6


def test_modify_column_rewriting_the_column_keeps_the_mirrors_rows(real: RealCluster) -> None:
    """MODIFY COLUMN whose type change needs TiDB's reorg (a new column id, backfilled without
    binlogs): rows mirrored by an earlier run (t) and rows written earlier in the same run (u) hold
    TiDB's converted values; INT → BIGINT keeps the id (no reorg) and is a widening."""
    run(real, "rt_mod", [
        "CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT, big BIGINT, d DECIMAL(10,2), s VARCHAR(20), dt DATE,"
        " n INT, w INT)",
        "INSERT INTO t VALUES (1, 10, 100, -4611686018427387904, 1.50, '42', '2024-02-29', 5, 7),"
        " (2, -20, 200, 9223372036854775807, -0.05, '-7', '1999-12-31', -6, 8), (4, NULL, 400, 0, 0, NULL, NULL, 0, 9)",
    ])
    options = real.options("mod", ["rt_mod"])
    real.drain(options)
    real.tidb.execute(
        "ALTER TABLE t MODIFY COLUMN a VARCHAR(20)", "ALTER TABLE t MODIFY COLUMN big VARCHAR(30)",
        "ALTER TABLE t MODIFY COLUMN d VARCHAR(20)", "ALTER TABLE t MODIFY COLUMN s INT",
        "ALTER TABLE t MODIFY COLUMN dt VARCHAR(20)", "ALTER TABLE t MODIFY COLUMN n DECIMAL(12,3)",
        "ALTER TABLE t MODIFY COLUMN w BIGINT",
        "INSERT INTO t VALUES (3, 'x', 300, 'b', 'y', 3, 'z', 1.25, 1099511627776)",
        "UPDATE t SET b = 201 WHERE id = 2",
        "CREATE TABLE u (id INT PRIMARY KEY, a INT, f DOUBLE)",
        "INSERT INTO u VALUES (1, 10, 0.1), (2, NULL, 1e21)",
        "ALTER TABLE u CHANGE COLUMN a aa VARCHAR(20)", "ALTER TABLE u MODIFY COLUMN f VARCHAR(40)",
        "INSERT INTO u VALUES (3, 'new', '2.5')", database="rt_mod")
    report = real.drain(options)
    real.verify(options, int(report["to_ts"]))
    catalog = open_iceberg_catalog(options)
    t = {r["id"]: r for r in catalog.load_table("rt_mod.t").scan().to_arrow().to_pylist()}
    assert [t[1][c] for c in ("a", "big", "d", "s", "dt", "w")] == [
        "10", "-4611686018427387904", "1.50", 42, "2024-02-29", 7]
    u = {r["id"]: r for r in catalog.load_table("rt_mod.u").scan().to_arrow().to_pylist()}
    assert [(u[i]["aa"], u[i]["f"]) for i in (1, 2, 3)] == [
        ("10", "0.1"), (None, "1000000000000000000000"), ("new", "2.5")]


def test_restore_from_the_lake_of_a_real_tidb_at_two_points(real: RealCluster, maria: MariaDBServer) -> None:
    """``binlake restore`` over a real TiDB's DDL history (TableInfos, FinishedTS, TRUNCATE's new table
    id) into MariaDB: at a ts inside a run (a mirror base plus a changelog tail) and at a run's end,
    each equal to TiDB read at that ts."""
    import io

    from binlake.restore import run_restore_command

    run(real, "rt_restore", [
        "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(10), n INT)",
        "CREATE TABLE k (x INT, y VARCHAR(5))",
        "CREATE TABLE tr (id INT PRIMARY KEY, z INT)",
        "INSERT INTO a VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3)",
        "INSERT INTO k VALUES (1, 'x'), (1, 'x'), (2, 'y')",
        "INSERT INTO tr VALUES (1, 1), (2, 2)",
    ])
    options = real.options("restore", ["rt_restore"])
    real.drain(options)
    real.tidb.execute("UPDATE a SET v = 'bb' WHERE id = 2", "DELETE FROM a WHERE id = 1",
                      "ALTER TABLE a ADD COLUMN w INT DEFAULT 7", "INSERT INTO a (id, v, n, w) VALUES (4, 'd', 4, 40)",
                      "UPDATE a SET id = 30 WHERE id = 3", "DELETE FROM k WHERE x = 2",
                      "UPDATE tr SET z = 20 WHERE id = 2", database="rt_restore")
    t1 = real.settle()
    real.tidb.execute("UPDATE a SET n = 44 WHERE id = 4", "ALTER TABLE a DROP COLUMN n", "RENAME TABLE k TO k2",
                      "INSERT INTO k2 VALUES (5, 'z')", "TRUNCATE TABLE tr", "INSERT INTO tr VALUES (9, 9)",
                      database="rt_restore")
    t2 = int(real.drain(options)["to_ts"])
    for ts, tables in ((t1, [("a",), ("k",), ("tr",)]), (t2, [("a",), ("k2",), ("tr",)])):
        maria.reset("rt_restore")
        out = io.StringIO()
        run_restore_command(options, ts, maria.dsn, out=out)
        assert sorted(maria.query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = "
                                  "'rt_restore'")) == tables, out.getvalue()
        real.verify(options, ts, against=maria.dsn)
    maria.reset("rt_restore")
    run_restore_command(options, t1, maria.dsn, out=io.StringIO())
    assert maria.query("SELECT id, v, n, w FROM rt_restore.a ORDER BY id") == [
        (2, "bb", 2, 7), (4, "d", 4, 40), (30, "c", 3, 7)]


def test_files_carry_generated_columns_and_timestamps_in_the_drainers_zone_and_reparo_replays_them(
        real: RealCluster, maria: MariaDBServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """db-type ``file`` from a drainer in America/New_York: the DDL as TiDB's DDL binlog has it;
    TIMESTAMP text as TiDB shows it in that zone
    (both sides of a DST change), generated columns where TiDB Binlog's files have them (an insert: all,
    the virtual one NULL; an update: none; a delete: the stored one); ``binlake reparo`` in the same zone
    replays the files into MariaDB equal to TiDB."""
    from binlake.reparo import ReparoConfig, read_binlogs, run_reparo
    from sink.pb_binlog import decode_events

    zone = "America/New_York"
    real.tidb.execute("CREATE DATABASE rt_files")
    real.tidb.execute(
        "SET time_zone = '+00:00'",
        "CREATE TABLE g (id INT PRIMARY KEY, a INT, v INT AS (a * 2) VIRTUAL, s INT AS (a + 1) STORED, "
        "ts TIMESTAMP(3) NULL, dt DATETIME)",
        "INSERT INTO g (id, a, ts, dt) VALUES (1, 10, '2024-01-15 12:00:00.125', '2024-01-15 12:00:00'), "
        "(2, 20, '2024-07-15 12:00:00', '2024-07-15 12:00:00'), (3, 30, NULL, NULL)",
        "UPDATE g SET a = 11, ts = '2024-03-10 07:30:00' WHERE id = 1",     # 03:30 EDT, just past the change
        "DELETE FROM g WHERE id = 3", database="rt_files")
    monkeypatch.setenv("TZ", zone)
    options = real.options("files", ["rt_files"], sink="file")
    options.syncer.to.dir = str(real.root / "files-pb")
    to_ts = int(real.drain(options)["to_ts"])

    binlogs = list(read_binlogs(real.root / "files-pb", 0, 0))
    # a DDL as TiDB Binlog writes it: the query of TiDB's DDL binlog (restored by TiDB: quoted names,
    # its own spacing; not the job's text as typed), `use db; …;`, a CREATE DATABASE's with a `;` more
    ddl = [b.ddl_query.decode() for b in binlogs if b.ddl_query]
    assert ddl[0] == "CREATE DATABASE `rt_files`;;"
    assert ddl[1].startswith("use `rt_files`; CREATE TABLE `g` (`id` INT PRIMARY KEY,`a` INT,") and ddl[1].endswith(";")
    events = [e for b in binlogs for e in decode_events(b) if e.table == "g"]
    rows = [(e.op, {c.name: (c.value, c.changed) for c in e.columns}) for e in events]
    conn = real.tidb.connect("rt_files")
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET time_zone = '{zone}'")
            cur.execute("SELECT id, CAST(ts AS CHAR), CAST(s AS CHAR) FROM g ORDER BY id")
            shown = {int(i): (t, s) for i, t, s in cur.fetchall()}
    finally:
        conn.close()
    assert [(op, list(cols)) for op, cols in rows] == [
        ("I", ["id", "a", "v", "s", "ts", "dt"])] * 3 + [
        ("U", ["id", "a", "ts", "dt"]), ("D", ["id", "a", "s", "ts", "dt"])]
    assert [cols["v"] for op, cols in rows if op == "I"] == [(None, None)] * 3
    assert rows[0][1]["ts"][0] == "2024-01-15 07:00:00.125" and rows[0][1]["dt"][0] == "2024-01-15 12:00:00"
    assert rows[1][1]["ts"][0] == shown[2][0] == "2024-07-15 08:00:00.000"
    assert rows[3][1]["ts"] == ("2024-01-15 07:00:00.125", shown[1][0]) and shown[1][0] == "2024-03-10 03:30:00.000"
    assert rows[1][1]["s"][0] == int(shown[2][1]) and rows[4][1]["s"] == (31, None)

    maria.reset("rt_files")
    config = ReparoConfig.model_validate({
        "data-dir": str(real.root / "files-pb"), "dest-type": "mysql", "worker-count": 2,
        "dest-db": {"host": "127.0.0.1", "port": maria.port, "user": maria.USER, "password": maria.PASSWORD}})
    assert run_reparo(config) > 0
    real.verify(options, to_ts, against=maria.dsn)
    assert maria.query("SELECT id, a, v, s FROM rt_files.g ORDER BY id") == [(1, 11, 22, 12), (2, 20, 40, 21)]


@pytest.mark.every_tidb
def test_a_read_at_a_ts_is_proven_by_the_ddl_history_and_refused_when_its_tables_are_anothers(
        real: RealCluster) -> None:
    """verify's read of TiDB at a ts must show the tables TiDB's DDL history has there: reads before,
    after and at each DDL's FinishedTS (±1) of a RENAME, a DROP COLUMN and a TRUNCATE are proven; the
    read after them held against the history before them is refused, naming each table."""
    import requests

    from sink.mysql.target import MySQLTarget
    from sink.mysql.upstream_reader import UpstreamSnapshotError, read_snapshot
    from transform.snapshot_proof import differences

    run(real, "rt_proof", [
        "CREATE TABLE comp (id INT PRIMARY KEY, v INT)", "CREATE TABLE cvar (id INT PRIMARY KEY, note VARCHAR(9))",
        "CREATE TABLE nopk (a INT, b INT)", "INSERT INTO comp VALUES (1, 1), (2, 2)",
        "INSERT INTO cvar VALUES (1, 'x')", "INSERT INTO nopk VALUES (1, 1), (1, 1)"])
    before = real.settle()
    real.tidb.execute("RENAME TABLE comp TO comp2", "ALTER TABLE cvar DROP COLUMN note", "TRUNCATE TABLE nopk",
                      "INSERT INTO nopk VALUES (3, 3)", database="rt_proof")
    after = real.settle()
    history = SchemaHistory.fetch(real.tidb.status_url)
    target = MySQLTarget.from_dsn(real.tidb.dsn)

    def ours(db: str, table: str) -> bool:
        return db == "rt_proof"

    def read(ts: int, proven_at: int) -> dict[str, Any]:
        return read_snapshot(target, ts, ours, prove=lambda r: differences(history, proven_at, r, ours))

    assert sorted(read(before, before)) == ["rt_proof.comp", "rt_proof.cvar", "rt_proof.nopk"]
    assert read(after, after)["rt_proof.nopk"] == [{"a": 3, "b": 3, "_tidb_rowid": 1}]
    jobs = [j for j in requests.get(real.tidb.status_url + "/ddl/history").json()
            if j.get("schema_name") == "rt_proof" and j["query"].split()[0] in ("RENAME", "ALTER", "TRUNCATE")]
    assert len(jobs) == 3
    for job in jobs:
        finished = int(job["binlog"]["FinishedTS"])
        for ts in (finished - 1, finished, finished + 1):
            assert read(ts, ts), (job["query"], ts)
    with pytest.raises(UpstreamSnapshotError) as refused:
        read(after, before)
    text = str(refused.value)
    assert "nothing is compared" in text and "rt_proof.comp2 is in the read" in text, text
    assert "rt_proof.cvar has columns (id) in the read, (id, note)" in text, text
    assert "rt_proof.nopk is table id" in text, text
