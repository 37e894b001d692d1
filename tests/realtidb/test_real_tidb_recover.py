"""RECOVER TABLE and FLASHBACK TABLE from a real tidb-server into the lake: the table comes back with
the rows it had when it was dropped, made row changes of the job (inserts whose start ts is the
DDL's commit ts), in the run that dropped it and in a later one (the mirror the DROP kept and the
changelog set aside beside it), in Iceberg, Parquet and a restore from the lake.

The tier's tidb-server runs on unistore, whose delete-range runs as soon as a table is dropped: there
TiDB itself brings the table back empty (on TiKV the rows stay until GC, which is what RECOVER is
for). So the expected rows are TiDB's, read at a ts before the drop, plus what was written after the
table came back; the lake must hold exactly those. A table a TRUNCATE ended (brought back under its
old id) is refused, naming the job: the lake emptied it at the TRUNCATE."""
from __future__ import annotations

import io
from typing import Any

import pytest

from binlake.restore import run_restore_command
from sink.iceberg.plugin import catalog_for as open_iceberg_catalog
from sink.parquet.files import read_changelog
from tests.realtidb.conftest import RealCluster, parquet_matches_iceberg
from tests.servers import MariaDBServer
from transform.ddl import UnreplicableDDLError

Rows = dict[int, int]


def _tidb_rows(real: RealCluster, table: str, ts: int | None = None) -> Rows:
    conn = real.tidb.connect("rb")
    try:
        with conn.cursor() as cur:
            if ts is not None:
                cur.execute(f"SET @@tidb_snapshot = {ts}")
            cur.execute(f"SELECT id, v FROM {table}")
            return {int(k): int(v) for k, v in cur.fetchall()}
    finally:
        conn.close()


def _mirror(options: Any, table: str) -> Rows:
    rows = open_iceberg_catalog(options).load_table(("rb", table)).scan().to_arrow()
    return dict(zip(rows.column("id").to_pylist(), rows.column("v").to_pylist()))


def _replayed(options: Any, table: str) -> Rows:
    """The Parquet changelog of ``table`` replayed from its last DROP on (the changes a job made have
    start ts = commit ts)."""
    log = read_changelog(options.parquet.dir, "rb", table).to_pylist()
    state: Rows = {}
    for r in log:
        if r["_tidb_op"] == "D":
            state.pop(r["id"], None)
        else:
            state[r["id"]] = r["v"]
    return state


@pytest.mark.every_tidb
def test_tables_brought_back_come_back_with_the_rows_the_lake_held(real: RealCluster, maria: MariaDBServer) -> None:
    real.tidb.execute("CREATE DATABASE rb")
    real.tidb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)",
                      f"INSERT INTO t VALUES {', '.join(f'({k}, {k})' for k in range(40))}", database="rb")
    iceberg = real.options("recover", ["rb"])
    parquet = real.options("recover-pq", ["rb"], sink="parquet")
    for options in (iceberg, parquet):
        real.drain(options)

    # dropped and brought back within one run
    real.tidb.execute("UPDATE t SET v = v + 1000 WHERE id < 10", "DELETE FROM t WHERE id >= 35", database="rb")
    held = _tidb_rows(real, "t")
    real.tidb.execute("DROP TABLE t", "RECOVER TABLE t", "INSERT INTO t VALUES (100, 1)", database="rb")
    expected = {**held, 100: 1}
    for options in (iceberg, parquet):
        real.drain(options)
    assert _mirror(iceberg, "t") == expected
    assert _replayed(parquet, "t") == expected

    # dropped in one run (the lake keeps its mirror and sets its changelog aside), brought back in the next
    real.tidb.execute("DROP TABLE t", database="rb")
    for options in (iceberg, parquet):
        real.drain(options)
    real.tidb.execute("FLASHBACK TABLE t TO t_back", "INSERT INTO t_back VALUES (200, 2)",
                      "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (7, 7)", database="rb")
    back = {**expected, 200: 2}
    to_ts = int(real.drain(iceberg)["to_ts"])
    real.drain(parquet)
    assert _mirror(iceberg, "t_back") == back
    assert _mirror(iceberg, "t") == _tidb_rows(real, "t") == {7: 7}
    assert _replayed(parquet, "t_back") == back
    assert parquet_matches_iceberg(iceberg, parquet) == 2
    log = open_iceberg_catalog(iceberg).load_table(("rb", "t_back__changelog")).scan().to_arrow().to_pylist()
    made = [r for r in log if r["_tidb_start_ts"] == r["_tidb_commit_ts"]]
    assert {r["id"] for r in made} == set(expected) and {r["_tidb_op"] for r in made} == {"I"}

    # a restore from the lake brings the same rows
    maria.reset("rb")
    run_restore_command(iceberg, to_ts, maria.dsn, out=io.StringIO())
    conn: Any = maria.connect("rb")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, v FROM t_back")
            assert {int(k): int(v) for k, v in cur.fetchall()} == back
    finally:
        conn.close()

    # a MySQL downstream cannot bring rows back: it stops at the job
    maria.reset("rb")
    mysql = real.options("recover-my", ["rb"], sink="mysql")
    mysql.initial_commit_ts, mysql.syncer.to.dsn = 0, maria.dsn
    with pytest.raises(UnreplicableDDLError, match="the MySQL downstream cannot do the same"):
        real.drain(mysql)

    # a table a TRUNCATE ended, brought back: the lake emptied it at the TRUNCATE, and says so
    real.tidb.execute("TRUNCATE TABLE t", "FLASHBACK TABLE t TO t_old", database="rb")
    with pytest.raises(UnreplicableDDLError, match="whose rows the lake did not keep") as refused:
        real.drain(iceberg)
    assert "FLASHBACK TABLE t TO t_old" in str(refused.value)
