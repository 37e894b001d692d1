"""The drain on a Spark standalone cluster (a master and two workers started from the pyspark
package): executors that do not have binlake installed get its code shipped by the driver, read
the pumps by their registered addresses, write the warehouse, and the tables equal a local run's."""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from tests.drain.conftest import Env, read_table
from tests.servers import SparkStandalone

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def standalone() -> Iterator[SparkStandalone]:
    with SparkStandalone(workers=2, cores=1) as cluster:
        yield cluster


def _sorted(rows: pa.Table) -> list[dict[str, Any]]:
    """A changelog in commit order, a mirror by its key (``id``, else the hidden row id)."""
    if "_tidb_seq" in rows.column_names:
        return rows.sort_by([("_tidb_commit_ts", "ascending"), ("_tidb_seq", "ascending")]).to_pylist()
    return rows.sort_by("id" if "id" in rows.column_names else "_tidb_rowid").to_pylist()


def test_a_standalone_cluster_writes_what_local_spark_writes(env: Env, standalone: SparkStandalone) -> None:
    env.sql("create table c (id int primary key, v varchar(20), n decimal(10,2))")
    env.sql("create table h (k varchar(10), n int)")    # no primary key: keyed by _tidb_rowid
    for i in range(6):
        env.sql(f"insert into c values ({i * 10 + 1}, 'a{i}', {i}.5), ({i * 10 + 2}, 'b{i}', {i}.25)")
        env.sql(f"insert into h values ('k{i}', {i})", server=i % 2)
    env.sql("update c set v = 'moved', id = id + 1000 where id < 20; delete from c where id = 32")
    env.sql("alter table c add column w int default 7")
    env.sql("update c set w = 9 where id = 41; update h set n = n * 10 where n > 2")
    to_ts = env.settle()
    local = env.drain(to_ts=to_ts)
    assert local["checkpoint_after"] == to_ts
    remote = env.fresh_options("on-cluster")
    report_path = env.root / "cluster-report.json"
    args = ["drain", "--registry", remote.registry, "--pd-urls", remote.pd_urls,
            "--upstream-status-url", remote.upstream.status_url, "--warehouse", remote.iceberg.warehouse,
            "--spark-master", standalone.master, "--to-ts", str(to_ts), "--report", str(report_path),
            "--spark-conf", f"spark.pyspark.python={standalone.executor_python}",
            "--spark-conf", "spark.driver.host=127.0.0.1", "--spark-conf", "spark.driver.bindAddress=127.0.0.1",
            "--spark-conf", "spark.executor.memory=1g", "--spark-conf", "spark.cores.max=2"]
    r = subprocess.run([sys.executable, "-m", "binlake.cli", *args], capture_output=True, text=True,
                       timeout=900, cwd=env.root)
    assert r.returncode == 0, r.stderr[-4000:]
    report = json.loads(report_path.read_text())
    assert report["spark"]["master"] == standalone.master and report["checkpoint_after"] == to_ts
    assert {t["table"]: t["rows"] for t in report["tables"]} == {t["table"]: t["rows"] for t in local["tables"]}
    a, b = env.catalog(), env.catalog(remote)
    for ident in ("test.c", "test.c__changelog", "test.h", "test.h__changelog"):
        assert _sorted(read_table(b, ident)) == _sorted(read_table(a, ident)), ident
    env.verify(to_ts, remote)
