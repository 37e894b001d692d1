"""Where the tables live: an ``s3://`` warehouse on a real HTTP S3 endpoint (moto_server) written
by the drain's executors and read back by pyiceberg and DuckDB; a shared PostgreSQL catalog.
Credentials (the AWS environment or catalog properties, a password in the catalog URI) never
appear in the drain's output, logs or run report."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sink.iceberg.duck import connect_iceberg
from tests.drain.conftest import Env, read_table
from tests.servers import MotoS3, PostgresServer

pytestmark = pytest.mark.integration


def _drain_process(env: Env, args: list[str], environ: dict[str, str], name: str) -> dict[str, Any]:
    """``binlake drain`` as its own process; asserts it succeeded and that no secret of ``environ``
    or ``args`` shows in its output or report; returns the report."""
    o = env.options
    report_path = env.root / f"{name}.json"
    cmd = [sys.executable, "-m", "binlake.cli", "drain", "--registry", o.registry, "--pd-urls", o.pd_urls,
           "--upstream-status-url", o.upstream.status_url, "--warehouse", o.iceberg.warehouse,
           "--spark-master", "local[2]", "--report", str(report_path), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=env.root, env=environ)
    assert r.returncode == 0, r.stderr[-4000:]
    shown = r.stdout + r.stderr + report_path.read_text()
    for secret in (MotoS3.SECRET_KEY, PostgresServer.PASSWORD):
        assert secret not in shown, f"{secret!r} printed by {name}"
    return dict(json.loads(report_path.read_text()))


def _keyed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["id"])


def test_an_s3_warehouse_is_written_by_the_executors_and_read_by_pyiceberg_and_duckdb(
        env: Env, moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> None:
    moto_s3.make_bucket("lake-s3-test")
    env.options.iceberg.warehouse = "s3://lake-s3-test/warehouse"
    env.options.iceberg.catalog_uri = f"sqlite:///{env.root / 'catalog.db'}"
    env.options.iceberg.properties = dict(moto_s3.properties)
    props = [a for k, v in moto_s3.properties.items() for a in ("--catalog-property", f"{k}={v}")]
    uri = ["--catalog-uri", env.options.iceberg.catalog_uri]
    env.sql("create table s (id int primary key, v varchar(20), n decimal(8,2))")
    env.sql("insert into s values " + ", ".join(f"({i}, 'v{i}', {i}.25)" for i in range(40)))
    env.sql("update s set v = 'x' where id < 5", server=1)
    first_ts = env.settle()
    # no credentials anywhere: refused before the catalog or the bucket is touched (an S3 endpoint
    # that does not check signatures would store unsigned writes as data files no reader can open)
    bare = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    bare.update(HOME=str(env.root), AWS_EC2_METADATA_DISABLED="true")
    r = subprocess.run([sys.executable, "-m", "binlake.cli", "drain", "--registry", env.options.registry,
                        "--pd-urls", env.options.pd_urls, "--upstream-status-url", env.options.upstream.status_url,
                        "--warehouse", env.options.iceberg.warehouse, "--spark-master", "local[1]", *uri, *props,
                        "--to-ts", str(first_ts)], capture_output=True, text=True, timeout=600, cwd=env.root, env=bare)
    assert r.returncode == 1 and "no S3 credentials on the driver" in r.stderr, r.stderr[-3000:]
    assert "s3.access-key-id" in r.stderr and moto_s3.objects("lake-s3-test") == []
    assert not (env.root / "catalog.db").exists()
    aws = {**os.environ, "AWS_ACCESS_KEY_ID": MotoS3.ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": MotoS3.SECRET_KEY}
    first = _drain_process(env, [*uri, *props, "--to-ts", str(first_ts)], aws, "from-environment")
    assert first["checkpoint_after"] == first_ts

    env.sql("delete from s where id in (7, 8); update s set n = n * 2 where id > 30")
    env.sql("alter table s add column w int default 3; insert into s values (100, 'new', 1.00, 4)", server=1)
    second_ts = env.settle()
    creds = ["--catalog-property", f"s3.access-key-id={MotoS3.ACCESS_KEY}",
             "--catalog-property", f"s3.secret-access-key={MotoS3.SECRET_KEY}"]
    second = _drain_process(env, [*uri, *props, *creds, "--to-ts", str(second_ts)], bare, "from-properties")
    assert second["checkpoint_after"] == second_ts

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", MotoS3.ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", MotoS3.SECRET_KEY)
    env.verify(second_ts)          # the mirror equals the upstream's snapshot, read by pyiceberg
    catalog = env.catalog()
    mirror, log = catalog.load_table("test.s"), catalog.load_table("test.s__changelog")
    assert mirror.metadata_location.startswith("s3://lake-s3-test/warehouse/")
    assert all(t.file.file_path.startswith("s3://lake-s3-test/") for t in mirror.scan().plan_files())
    duck = connect_iceberg(s3=moto_s3.properties)
    rows = duck.sql(f"select * from iceberg_scan('{mirror.metadata_location}')").to_arrow_table()
    assert _keyed(rows.to_pylist()) == _keyed(read_table(catalog, "test.s").to_pylist())
    assert len(rows) == 39 and {r["w"] for r in rows.to_pylist()} == {3, 4}
    counts = duck.sql(f"select _tidb_op, count(*) from iceberg_scan('{log.metadata_location}') group by 1").fetchall()
    assert sum(n for _, n in counts) == read_table(catalog, "test.s__changelog").num_rows == 40 + 5 + 2 + 9 + 1


def test_a_postgresql_catalog_shared_by_drain_and_readers(env: Env, postgres_server: PostgresServer) -> None:
    uri = postgres_server.create_database("shared_catalog")
    env.options.iceberg.catalog_uri = uri
    env.sql("create table g (id int primary key, v int)")
    env.sql("insert into g values (1, 1), (2, 2), (3, 3)")
    env.sql("update g set v = 20 where id = 2; delete from g where id = 3", server=1)
    to_ts = env.settle()
    report = _drain_process(env, ["--catalog-uri", uri, "--to-ts", str(to_ts)], dict(os.environ), "postgres")
    assert report["checkpoint_after"] == to_ts
    env.verify(to_ts)
    mirror = read_table(env.catalog(), "test.g").select(["id", "v"]).to_pylist()
    assert _keyed(mirror) == [{"id": 1, "v": 1}, {"id": 2, "v": 20}]
    import psycopg2

    con = psycopg2.connect(host="127.0.0.1", port=postgres_server.port, user=postgres_server.USER,
                           password=postgres_server.PASSWORD, dbname="shared_catalog")
    try:
        with con.cursor() as cur:     # the catalog's rows are in PostgreSQL, not in a file beside the warehouse
            cur.execute("select table_namespace, table_name from iceberg_tables order by 1, 2")
            assert ("test", "g") in cur.fetchall()
    finally:
        con.close()
    assert not Path(env.options.iceberg.warehouse, "catalog.db").exists()


def test_a_wrong_catalog_password_is_a_clear_error_without_the_password(env: Env,
                                                                        postgres_server: PostgresServer) -> None:
    wrong = postgres_server.uri().replace(PostgresServer.PASSWORD, "not-the-Password-7")
    o = env.options
    r = subprocess.run([sys.executable, "-m", "binlake.cli", "drain", "--registry", o.registry, "--pd-urls", o.pd_urls,
                        "--warehouse", o.iceberg.warehouse, "--catalog-uri", wrong], capture_output=True, text=True,
                       timeout=300, cwd=env.root)
    assert r.returncode != 0
    assert "cannot open the Iceberg catalog 'postgresql+psycopg2://binlake:***@127.0.0.1" in r.stderr, r.stderr[-2000:]
    assert "password authentication failed" in r.stderr and "not-the-Password-7" not in r.stderr + r.stdout
