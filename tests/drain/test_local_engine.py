"""A small range computed in the drain's own process (no Spark) writes what Spark writes: the same
range of a churn workload with DDL drained by both engines into Iceberg, Parquet and MariaDB gives
equal tables, files and downstream rows; a range past ``[spark] in-process-below`` goes to Spark."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from binlake.drain_config import DrainerConfig
from emulator.upstream.workload import Workload
from sink.parquet.files import read_changelog
from tests.drain.conftest import Env, read_table
from tests.drain.test_mysql_sink import mysql_options, verify_mysql
from tests.servers import MariaDBServer

LIMIT = 64 << 20


def _load(env: Env, seed: int, txns: int = 250) -> int:
    """A seeded churn workload (DDL among the writes), finished; the ts every pump has passed."""
    wl = Workload(env.cluster, seed=seed, churn=True, ddl_interval=0.2)
    wl.setup()
    stats = wl.run(rate=0, duration=0, workers=4, max_txns=txns)
    assert stats.committed > txns // 2, stats
    return env.settle()


def _engines(env: Env, name: str) -> tuple[DrainerConfig, DrainerConfig]:
    """Options for the same sink on Spark (``[spark] in-process-below = 0``) and in process."""
    on_spark = env.fresh_options(f"{name}-spark")
    here = env.fresh_options(f"{name}-here")
    here.spark.in_process_below = LIMIT
    return on_spark, here


def _sorted(t: pa.Table) -> list[dict[str, Any]]:
    return sorted(t.to_pylist(), key=repr)


def _lake(env: Env, options: DrainerConfig) -> dict[str, list[dict[str, Any]]]:
    """Every table the drain wrote outside binlake's own namespace, its rows sorted."""
    cat = env.catalog(options)
    names = [".".join(ident) for ns in cat.list_namespaces() if not ns[0].startswith("_")
             for ident in cat.list_tables(ns)]
    return {n: _sorted(read_table(cat, n)) for n in names}


def _ran_in_process(env: Env, report: dict[str, Any]) -> bool:
    return report["spark"] is None and "spark-start" not in report["stages"] and \
        "in this process" in env.outputs[-1]


def test_a_small_range_in_process_writes_the_iceberg_tables_and_parquet_files_spark_writes(env: Env) -> None:
    to_ts = _load(env, seed=21)
    on_spark, here = _engines(env, "lake")
    spark_report = env.drain(on_spark, to_ts=to_ts)
    here_report = env.drain(here, to_ts=to_ts)
    assert spark_report["spark"] is not None and _ran_in_process(env, here_report)
    assert here_report["counts"] == spark_report["counts"] and here_report["counts"]["row_changes"] > 500
    assert [(t["table"], t["rows"]) for t in here_report["tables"]] == \
        [(t["table"], t["rows"]) for t in spark_report["tables"]]
    spark_lake, here_lake = _lake(env, on_spark), _lake(env, here)
    assert len(spark_lake) >= 4 and here_lake == spark_lake
    env.verify(to_ts, here)

    pq_spark, pq_here = _engines(env, "cdc")
    for o in (pq_spark, pq_here):
        o.syncer.db_type = "parquet"
        o.parquet.dir = str(Path(o.data_dir) / "cdc")
    env.drain(pq_spark, to_ts=to_ts)
    here_report = env.drain(pq_here, to_ts=to_ts)
    assert _ran_in_process(env, here_report)
    tables = [t["table"].split(".", 1) for t in here_report["tables"]]
    assert tables
    for db, table in tables:
        assert _sorted(read_changelog(pq_here.parquet.dir, db, table)) == \
            _sorted(read_changelog(pq_spark.parquet.dir, db, table)), (db, table)


def _downstream(maria: MariaDBServer) -> dict[str, list[tuple[Any, ...]]]:
    conn: Any = maria.connect()
    out: dict[str, list[tuple[Any, ...]]] = {}
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'test'")
            for (name,) in cur.fetchall():
                cur.execute(f"SELECT * FROM test.`{name}`")
                out[name] = sorted(cur.fetchall(), key=repr)
    finally:
        conn.close()
    return out


def test_a_small_range_in_process_applies_to_mysql_what_spark_applies(env: Env, mariadb_server: MariaDBServer) -> None:
    maria = mariadb_server
    maria.reset("test", "other")
    to_ts = _load(env, seed=22)
    on_spark = mysql_options(env, maria)
    on_spark.data_dir = str(env.root / "mysql-spark")
    env.drain(on_spark, to_ts=to_ts)
    applied_by_spark = _downstream(maria)
    maria.reset("test", "other")   # and the checkpoint schema
    here = mysql_options(env, maria)
    here.data_dir = str(env.root / "mysql-here")
    here.spark.in_process_below = LIMIT
    report = env.drain(here, to_ts=to_ts)
    assert _ran_in_process(env, report)
    assert len(applied_by_spark) >= 4 and _downstream(maria) == applied_by_spark
    verify_mysql(env, here, to_ts)


def test_a_range_past_the_limit_is_computed_on_spark(env: Env) -> None:
    to_ts = _load(env, seed=23, txns=60)
    options = env.fresh_options("past")
    options.spark.in_process_below = 4096
    report = env.drain(options, to_ts=to_ts)
    assert report["spark"] is not None and "spark-start" in report["stages"]
    assert "passed 4096 bytes: computing it on Spark" in env.outputs[-1]
    env.verify(to_ts, options)


def test_pairing_in_process_keeps_one_copy_per_transaction_and_finds_ddl_positions_and_missing_prewrites() -> None:
    from transform.in_process import _pair

    prewrites = pa.table({"start_ts": pa.array([10, 10, 20, 30], pa.int64()),
                          "source": pa.array([1, 0, 1, 0], pa.int32()),
                          "payload": pa.array([b"a", b"a", b"b", b"c"], pa.binary())})
    commits = pa.table({"start_ts": pa.array([10, 10, 20, 40, 50], pa.int64()),     # 10 stored on both pumps
                        "commit_ts": pa.array([11, 11, 21, 41, 51], pa.int64()),
                        "ddl_job_id": pa.array([0, 0, 7, 0, 7], pa.int64())})     # job 7: two commit binlogs
    paired, ddl_commits, lost = _pair(prewrites, commits)
    got = sorted((r["start_ts"], r["commit_ts"], r["source"]) for r in paired.to_pylist())
    assert got == [(10, 11, 0), (20, 21, 1), (40, 41, None), (50, 51, None)]   # 30: never committed
    assert ddl_commits == {7: 51} and sorted(lost) == [40, 50]
