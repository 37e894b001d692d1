"""The drain on a Spark standalone cluster (a master and two workers started from the pyspark
package): executors that do not have binlake installed get its code shipped by the driver, read
the pumps by their registered addresses, write the warehouse, and the tables equal a local run's;
executors without the S3 credentials the driver has fail the run before it commits."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from sink.iceberg.catalog import open_catalog
from sink.iceberg.checkpoint import MetaNamespace
from tests.drain.conftest import Env, read_table
from tests.servers import MotoS3, SparkStandalone

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
            "--spark-master", standalone.master, "--in-process-below", "0", "--to-ts", str(to_ts),
            "--report", str(report_path),
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


def test_executors_without_the_drivers_s3_credentials_fail_the_run_before_it_commits(
        env: Env, standalone: SparkStandalone, moto_s3: MotoS3) -> None:
    """The driver has AWS credentials in its environment, the executors do not: their tasks refuse to
    write (an S3 endpoint that does not check signatures would store their unsigned writes as data
    files no reader can open), the run fails naming the missing credentials, and no data, snapshot or
    checkpoint is committed."""
    moto_s3.make_bucket("lake-cluster-s3")
    env.sql("create table s3c (id int primary key, v varchar(20))")
    env.sql("insert into s3c values (1, 'a'), (2, 'b')")
    to_ts = env.settle()
    catalog_db = env.root / "s3-catalog.db"
    props = [a for k, v in moto_s3.properties.items() for a in ("--catalog-property", f"{k}={v}")]
    driver_env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
                  "AWS_ACCESS_KEY_ID": MotoS3.ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": MotoS3.SECRET_KEY}
    args = ["drain", "--registry", env.options.registry, "--pd-urls", env.options.pd_urls,
            "--upstream-status-url", env.options.upstream.status_url, "--warehouse", "s3://lake-cluster-s3/wh",
            "--catalog-uri", f"sqlite:///{catalog_db}", *props, "--spark-master", standalone.master,
            "--in-process-below", "0", "--to-ts", str(to_ts),
            "--spark-conf", f"spark.pyspark.python={standalone.executor_python}",
            "--spark-conf", "spark.driver.host=127.0.0.1", "--spark-conf", "spark.driver.bindAddress=127.0.0.1",
            "--spark-conf", "spark.executor.memory=1g", "--spark-conf", "spark.cores.max=2",
            "--spark-conf", f"spark.executorEnv.HOME={env.root}",
            "--spark-conf", "spark.executorEnv.AWS_EC2_METADATA_DISABLED=true"]
    r = subprocess.run([sys.executable, "-m", "binlake.cli", *args], capture_output=True, text=True,
                       timeout=900, cwd=env.root, env=driver_env)
    assert r.returncode == 1, r.stderr[-4000:]
    assert "no S3 credentials on a write task's process" in r.stderr, r.stderr[-4000:]
    assert MotoS3.SECRET_KEY not in r.stdout + r.stderr
    catalog = open_catalog("s3://lake-cluster-s3/wh", f"sqlite:///{catalog_db}",
                           **moto_s3.properties, **{"s3.access-key-id": MotoS3.ACCESS_KEY,
                                                    "s3.secret-access-key": MotoS3.SECRET_KEY})
    assert MetaNamespace(catalog, read_only=True).checkpoint() is None
    for ns in catalog.list_namespaces():
        for ident in catalog.list_tables(ns):
            assert catalog.load_table(ident).current_snapshot() is None, ident
    assert not [k for k in moto_s3.objects("lake-cluster-s3") if k.endswith(".parquet")]
