"""The DDL a binlog consumer meets from TiDB 6.4 to 8.3, each run by a real tidb-server under
concurrent writes, on every build that has it (``tests/realtidb/versions.py``).

A DDL is either replicated exactly into Iceberg, Parquet and MariaDB (``binlake verify`` against TiDB
at the drained ts; ``binlake restore`` into MariaDB at the ts just before and just after each DDL,
verified against TiDB at that ts), or the run stops with an error that names the job and says what
the user can do. PARTITION BY and REMOVE PARTITIONING keep one lake table across the table's new id;
DROP, TRUNCATE and EXCHANGE PARTITION move rows without binlogs, which the lake makes row changes of
the job from what it held (drained once before the DDL and once after, so its state is read from the
mirror and the Parquet files), while the MySQL sink replays them and refuses a transaction written
across them. FLASHBACK DATABASE is refused by every sink but a TiDB downstream (RECOVER and
FLASHBACK TABLE: ``test_real_tidb_recover.py``)."""
from __future__ import annotations

import io
import random
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pyarrow.compute as pc
import pymysql
import pytest

from binlake.restore import run_restore_command
from sink.iceberg.plugin import catalog_for as open_iceberg_catalog
from tests.realtidb.conftest import RealCluster, drain_everywhere, parquet_matches_iceberg
from tests.realtidb.versions import TiDBBuild
from tests.servers import MariaDBServer
from transform.ddl import UnreplicableDDLError

RANGE_3 = ("CREATE TABLE t (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (100),"
           " PARTITION p1 VALUES LESS THAN (200), PARTITION p2 VALUES LESS THAN (MAXVALUE))")


@dataclass(frozen=True)
class Case:
    """One DDL kind: ``setup`` runs first, then writers write ``table`` (ids below ``keys``) while
    ``ddl`` runs statement by statement; ``since`` is the first TiDB line that has it."""

    kind: str
    setup: tuple[str, ...]
    ddl: tuple[str, ...]
    table: str = "t"
    keys: int = 300
    since: str = "v6.4"
    db_settings: tuple[str, ...] = ()       # statements run before the DDL on the DDL's connection
    concurrent_ddl: bool = False           # the DDL statements run at once, each on a connection of its own

    @property
    def db(self) -> str:
        return f"rd_{self.kind}"


# replicated exactly into every sink
EXACT = (
    Case("reorganize", (RANGE_3,), (
        "ALTER TABLE t REORGANIZE PARTITION p1, p2 INTO (PARTITION p1 VALUES LESS THAN (150),"
        " PARTITION p2 VALUES LESS THAN (MAXVALUE))",
        "ALTER TABLE t REORGANIZE PARTITION p0, p1 INTO (PARTITION p0 VALUES LESS THAN (150))"), since="v7.0"),
    Case("add_partition", ("CREATE TABLE t (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) "
                           "(PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES LESS THAN (200))",),
         ("ALTER TABLE t ADD PARTITION (PARTITION p2 VALUES LESS THAN (300))",)),
    Case("multi_schema", ("CREATE TABLE t (id INT PRIMARY KEY, v INT, d INT DEFAULT 4, e INT, s VARCHAR(10),"
                          " r INT, KEY kd (d))",
                          "INSERT INTO t VALUES (1000, 1, 2, 3, '44', 5), (1001, 6, 7, 8, '-9', 10)"),
         ("ALTER TABLE t ADD COLUMN c INT DEFAULT 5, DROP COLUMN d, MODIFY COLUMN e BIGINT,"
          " RENAME COLUMN r TO r2, ADD INDEX iv (v)",
          "ALTER TABLE t MODIFY COLUMN s INT, ADD COLUMN c2 VARCHAR(8) DEFAULT 'x', DROP INDEX iv")),
    Case("cache", ("CREATE TABLE t (id INT PRIMARY KEY, v INT)",),
         ("ALTER TABLE t CACHE", "ALTER TABLE t NOCACHE")),
    Case("placement", ("CREATE TABLE t (id INT PRIMARY KEY, v INT)",),
         ("CREATE PLACEMENT POLICY rd_pp FOLLOWERS = 2", "ALTER TABLE t PLACEMENT POLICY = rd_pp",
          "CREATE TABLE t2 (id INT PRIMARY KEY) PLACEMENT POLICY = rd_pp", "INSERT INTO t2 VALUES (1)",
          "ALTER PLACEMENT POLICY rd_pp FOLLOWERS = 3", "ALTER TABLE t PLACEMENT POLICY = DEFAULT",
          "ALTER TABLE t2 PLACEMENT POLICY = DEFAULT", "DROP PLACEMENT POLICY rd_pp")),
    Case("foreign_keys", ("CREATE TABLE p (id INT PRIMARY KEY, v INT)",
                          "CREATE TABLE t (id INT PRIMARY KEY, v INT, pid INT, KEY kp (pid))",
                          "INSERT INTO p VALUES (1, 1), (2, 2), (3, 3)"),
         ("ALTER TABLE t ADD CONSTRAINT fk_p FOREIGN KEY (pid) REFERENCES p (id) ON DELETE CASCADE",
          "DELETE FROM p WHERE id = 2", "ALTER TABLE t DROP FOREIGN KEY fk_p"), since="v7.0"),
    Case("ttl", ("CREATE TABLE t (id INT PRIMARY KEY, v INT, at DATETIME DEFAULT '2000-01-01 00:00:00')"
                 " TTL = at + INTERVAL 10 YEAR TTL_ENABLE = 'OFF'",),
         ("ALTER TABLE t TTL = at + INTERVAL 20 YEAR", "ALTER TABLE t TTL_JOB_INTERVAL = '2h'",
          "ALTER TABLE t REMOVE TTL"), since="v7.0"),
    Case("resource_group", ("CREATE TABLE t (id INT PRIMARY KEY, v INT)",),
         ("CREATE RESOURCE GROUP rd_rg RU_PER_SEC = 1000", "ALTER RESOURCE GROUP rd_rg RU_PER_SEC = 2000",
          "DROP RESOURCE GROUP rd_rg"), since="v7.0",
         db_settings=("SET GLOBAL tidb_enable_resource_control = ON",)),   # off by default before 7.5
    Case("create_tables", ("CREATE TABLE t (id INT PRIMARY KEY, v INT)",),
         tuple(f"CREATE TABLE c{i} (id INT PRIMARY KEY, v VARCHAR(10) DEFAULT 'c{i}')" for i in range(6)),
         since="v8.0", db_settings=("SET GLOBAL tidb_enable_fast_create_table = ON",), concurrent_ddl=True),
    # the table goes on under a new table id, its rows carried over by TiDB without binlogs
    Case("partition_by", ("CREATE TABLE t (id INT PRIMARY KEY, v INT)",),
         ("ALTER TABLE t PARTITION BY HASH (id) PARTITIONS 3",
          "ALTER TABLE t PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (150), PARTITION p1 VALUES LESS THAN "
          "(MAXVALUE))"), since="v7.1"),
    Case("remove_partitioning", (RANGE_3,), ("ALTER TABLE t REMOVE PARTITIONING",), since="v7.1"),
)

# rows go or come back without binlogs: the lake makes them row changes at the DDL's commit ts from what it held
REMOVALS = (
    Case("drop_partition", (RANGE_3,), ("ALTER TABLE t DROP PARTITION p1",)),
    Case("truncate_partition", (RANGE_3,), ("ALTER TABLE t TRUNCATE PARTITION p0",)),
    Case("drop_two", (RANGE_3,), ("ALTER TABLE t DROP PARTITION p0", "ALTER TABLE t TRUNCATE PARTITION p2")),
    Case("drop_list", ("CREATE TABLE t (id INT PRIMARY KEY, v INT) PARTITION BY LIST (id DIV 100) ("
                       "PARTITION p0 VALUES IN (0), PARTITION p1 VALUES IN (1), PARTITION p2 VALUES IN (2, 3))",),
         ("ALTER TABLE t DROP PARTITION p1",)),
    Case("truncate_hash", ("CREATE TABLE t (id INT PRIMARY KEY, v INT) PARTITION BY HASH (id) PARTITIONS 4",),
         ("ALTER TABLE t TRUNCATE PARTITION p1, p3",)),
    # the partition's rows go to the plain table and the plain table's to the partition
    Case("exchange_partition", (RANGE_3, "CREATE TABLE nt (id INT PRIMARY KEY, v INT)",
                                "INSERT INTO nt VALUES (150, -1), (160, -2), (199, -3)"),
         ("ALTER TABLE t EXCHANGE PARTITION p1 WITH TABLE nt",
          "INSERT INTO nt VALUES (170, -4) ON DUPLICATE KEY UPDATE v = -4",
          "UPDATE nt SET v = v - 1000 WHERE id < 160", "DELETE FROM nt WHERE id = 199"),
         db_settings=("SET GLOBAL tidb_enable_exchange_partition = ON",)),
)

# refused by every sink but a TiDB downstream: every table of the database comes back with its rows
# without binlogs (RECOVER / FLASHBACK TABLE: tests/realtidb/test_real_tidb_recover.py)
REFUSED = (
    Case("flashback_database", ("CREATE TABLE t (id INT PRIMARY KEY, v INT)",),
         ("DROP DATABASE rd_flashback_database", "FLASHBACK DATABASE rd_flashback_database"), since="v7.0"),
)


def reached(build: TiDBBuild, cases: tuple[Case, ...]) -> list[Case]:
    """The cases ``build`` has."""
    return [c for c in cases if build.reaches(c.since)]


@dataclass
class Marks:
    """TiDB's ts before the first DDL and after each DDL statement of the cases run (one list)."""

    ts: list[int] = field(default_factory=list)


def _writer(real: RealCluster, case: Case) -> Callable[[Any, int, int], None]:
    rngs: dict[int, random.Random] = {}

    def transaction(cur: Any, w: int, i: int) -> None:
        rng = rngs.setdefault(w, random.Random(f"{case.kind}{w}"))
        key = rng.randrange(case.keys)
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {case.table} (id, v) VALUES ({key}, {i}) ON DUPLICATE KEY UPDATE v = v + 1")
        if case.kind == "foreign_keys":
            cur.execute(f"UPDATE t SET pid = {rng.choice([1, 2, 3, None]) or 'NULL'} WHERE id = {key}")
        cur.execute(f"DELETE FROM {case.table} WHERE id = {rng.randrange(case.keys)}")
        cur.execute("COMMIT")

    return transaction


def run_cases(real: RealCluster, cases: list[Case], setup: bool = True) -> tuple[Marks, dict[str, int]]:
    """Set up each case's database (unless ``setup`` is false: done already), then write every case's
    table while the cases' DDL runs one statement at a time; returns the ts marks and the transactions
    each case's writers committed."""
    for case in cases if setup else ():
        real.tidb.execute(f"CREATE DATABASE {case.db}")
        real.tidb.execute(*case.setup, database=case.db)
    marks = Marks()
    committed: dict[str, int] = {}
    with ExitStack() as stack:
        writes = {c.kind: stack.enter_context(real.writing(c.db, _writer(real, c), writers=2)) for c in cases}
        marks.ts.append(real.tidb.current_ts())
        for case in cases:
            _run_ddl(real, case)
            marks.ts.append(real.tidb.current_ts())
        stack.close()
        for kind, w in writes.items():
            committed[kind] = w.committed
            assert w.committed > 0, f"{kind}: no transaction committed: {w.errors[-3:]}"
    return marks, committed


def _run_ddl(real: RealCluster, case: Case) -> None:
    conn = real.tidb.connect(case.db)
    try:
        with conn.cursor() as cur:
            for statement in case.db_settings:
                cur.execute(statement)
    finally:
        conn.close()
    if not case.concurrent_ddl:
        real.tidb.execute(*case.ddl, database=case.db)
        return
    errors: list[BaseException] = []

    def one(statement: str) -> None:
        try:
            real.tidb.execute(statement, database=case.db)
        except pymysql.err.MySQLError as e:
            errors.append(e)

    threads = [threading.Thread(target=one, args=(s,)) for s in case.ddl]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors


@pytest.mark.every_tidb
def test_ddl_replicated_exactly_into_every_sink(real: RealCluster, maria: MariaDBServer,
                                                tidb_build: TiDBBuild) -> None:
    cases = reached(tidb_build, EXACT)
    marks, _ = run_cases(real, cases)
    dbs = [c.db for c in cases]
    to_ts = drain_everywhere(real, maria, f"exact-{tidb_build.line}", dbs)
    assert to_ts > marks.ts[-1]
    options = real.options(f"exact-{tidb_build.line}", dbs)
    for ts in marks.ts:
        maria.reset(*dbs)
        out = io.StringIO()
        run_restore_command(options, ts, maria.dsn, out=out)
        real.verify(options, ts, against=maria.dsn)


def _refused(real: RealCluster, name: str, db: str, sink: str, job_query: str) -> str:
    options = real.options(name, [db], sink=sink)
    with pytest.raises(UnreplicableDDLError) as refused:
        real.drain(options)
    message = str(refused.value)
    assert f"`{job_query}`" in message and "To go on:" in message, message
    return message


@pytest.mark.every_tidb
def test_partitions_dropped_and_truncated_leave_the_lake_and_mariadb_as_tidb(
        real: RealCluster, maria: MariaDBServer, tidb_build: TiDBBuild) -> None:
    """Rows written, drained into every sink; then the partition DDL under concurrent writes and a
    second drain of every sink from its checkpoint: the lake deletes the rows its mirror and its
    changelog hold in the partitions that went (the Iceberg drain computing them on Spark, the Parquet
    one in its own process), and equals TiDB, as does MariaDB; restores from the lake at the marks
    around each DDL equal TiDB at those ts. A MySQL drain may still refuse a drop that a transaction
    begun before it committed during (after a transaction that needed the job), naming the job."""
    cases = reached(tidb_build, REMOVALS)
    dbs = [c.db for c in cases]
    for case in cases:
        real.tidb.execute(f"CREATE DATABASE {case.db}")
        real.tidb.execute(*case.setup, f"INSERT INTO t VALUES {', '.join(f'({k}, {k})' for k in range(0, 400, 3))}",
                          database=case.db)
    name = f"removals-{tidb_build.line}"
    iceberg, parquet = real.options(name, dbs), real.options(f"{name}-pq", dbs, sink="parquet")
    iceberg.spark.in_process_below = 0
    maria.reset(*dbs)
    mysql = real.options(f"{name}-my", dbs, sink="mysql")
    mysql.initial_commit_ts, mysql.syncer.to.dsn, mysql.syncer.worker_count = 0, maria.dsn, 4
    for options in (iceberg, parquet, mysql):
        real.drain(options)
    marks, _ = run_cases(real, cases, setup=False)
    to_ts = int(real.drain(iceberg)["to_ts"])
    assert to_ts > marks.ts[-1]
    real.verify(iceberg, to_ts)
    assert int(real.drain(parquet)["to_ts"]) >= to_ts
    assert parquet_matches_iceberg(iceberg, parquet) == len(cases) + sum(c.kind == "exchange_partition" for c in cases)
    _drop_deletes_are_the_jobs(iceberg, dbs)
    try:
        real.drain(mysql)
        real.verify(mysql, against=maria.dsn)
    except UnreplicableDDLError as e:
        said = str(e)
        assert " PARTITION " in said, e
        assert "committed while it ran" in said or "wrote the exchanged partition" in said, e
    for ts in marks.ts:
        maria.reset(*dbs)
        run_restore_command(iceberg, ts, maria.dsn, out=io.StringIO())
        real.verify(iceberg, ts, against=maria.dsn)


def _drop_deletes_are_the_jobs(options: Any, dbs: list[str]) -> None:
    """The lake's row changes made by a partition job (deletes; an exchange's inserts too) carry the
    job's commit ts as their start ts, and replaying each changelog gives its mirror."""
    catalog = open_iceberg_catalog(options)
    for db in dbs:
        tables = [t[-1] for t in catalog.list_tables(db) if "__" not in t[-1]]   # the live mirrors
        made_ops: list[str] = []
        for name in tables:
            log = catalog.load_table((db, f"{name}__changelog")).scan().to_arrow().sort_by(
                [("_tidb_commit_ts", "ascending"), ("_tidb_seq", "ascending")])
            made = pc.equal(log.column("_tidb_start_ts"), log.column("_tidb_commit_ts"))
            made_ops += pc.filter(log.column("_tidb_op"), made).to_pylist()
            state: dict[int, int] = {}
            for r in log.select(["_tidb_op", "id", "v"]).to_pylist():
                if r["_tidb_op"] == "D":
                    state.pop(r["id"], None)
                else:
                    state[r["id"]] = r["v"]
            mirror = catalog.load_table((db, name)).scan().to_arrow()
            assert state == dict(zip(mirror.column("id").to_pylist(), mirror.column("v").to_pylist())), (db, name)
        made = {"D", "I"} if db.endswith("exchange_partition") else {"D"}
        assert made_ops and set(made_ops) == made, (db, set(made_ops))


@pytest.mark.every_tidb
def test_ddl_whose_rows_no_binlog_tells_is_refused_by_every_sink(real: RealCluster, maria: MariaDBServer,
                                                                  tidb_build: TiDBBuild) -> None:
    cases = reached(tidb_build, REFUSED)
    run_cases(real, cases)
    for case in cases:
        for sink in ("iceberg", "parquet"):
            _refused(real, f"{case.kind}-{sink}-{tidb_build.line}", case.db, sink, case.ddl[-1])
        maria.reset(case.db)
        mysql = real.options(f"{case.kind}-my-{tidb_build.line}", [case.db], sink="mysql")
        mysql.syncer.to.dsn = maria.dsn
        message = _refused_mysql(real, mysql, case.ddl[-1])
        assert "downstream cannot" in message or "no downstream can" in message, message


def _refused_mysql(real: RealCluster, options: Any, job_query: str) -> str:
    with pytest.raises(UnreplicableDDLError) as refused:
        real.drain(options)
    message = str(refused.value)
    assert f"`{job_query}`" in message, message
    return message
