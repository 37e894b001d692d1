"""An Iceberg REST catalog: Apache Iceberg's own REST catalog server (``iceberg_rest_catalog``, the jars
``make iceberg-rest`` downloads) as the drain's ``--catalog-uri``. Two runs (one in process, one through
``binlake drain``'s command line) with inserts, updates, deletes and ADD COLUMN; then the tables are
read back by a plain pyiceberg REST client and by DuckDB and compared with the upstream's rows, the
changelog is replayed onto the mirror, and ``binlake verify`` checks both drained timestamps."""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog

from sink.iceberg.duck import connect_iceberg
from tests.drain.conftest import Env, make_env, mirror_state, read_table, replay_changelog
from tests.servers import RestCatalogServer

pytestmark = pytest.mark.integration

COLUMNS = ["id", "v", "n", "w"]


@pytest.fixture
def rest_env(tmp_path: Path, spark: Any, iceberg_rest_catalog: RestCatalogServer) -> Iterator[Env]:
    """The drain harness (two emulated TiDB servers, two real pumps) draining into the REST catalog,
    with the warehouse directory the catalog server creates its tables in; runs are tagged."""
    with make_env(tmp_path) as env:
        env.options.iceberg.warehouse = iceberg_rest_catalog.warehouse
        env.options.iceberg.catalog_uri = iceberg_rest_catalog.uri
        env.options.iceberg.tag_runs = True
        yield env


def _drain_cli(env: Env, name: str) -> dict[str, Any]:
    """``binlake drain`` as its own process, with the REST catalog given on its command line."""
    o = env.options
    assert o.iceberg.catalog_uri is not None
    report = env.root / f"{name}.json"
    cmd = [sys.executable, "-m", "binlake.cli", "drain", "--registry", o.registry, "--pd-urls", o.pd_urls,
           "--upstream-status-url", o.upstream.status_url,
           "--warehouse", o.iceberg.warehouse, "--catalog-uri", o.iceberg.catalog_uri, "--tag-runs",
           "--spark-master", "local[2]", "--report", str(report)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=env.root)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return dict(json.loads(report.read_text()))


def _rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The data columns of ``rows`` (``w`` is None before ADD COLUMN), sorted by key."""
    return sorted(tuple(r.get(c) for c in COLUMNS) for r in rows)


def test_a_drain_into_the_iceberg_rest_catalog_is_read_by_pyiceberg_and_duckdb(
        rest_env: Env, iceberg_rest_catalog: RestCatalogServer) -> None:
    env = rest_env
    env.sql("create table r (id int primary key, v varchar(20), n decimal(8,2))")
    env.sql("insert into r values " + ", ".join(f"({i}, 'v{i}', {i}.25)" for i in range(30)))
    env.sql("update r set v = 'x' where id < 5; delete from r where id in (20, 21)", server=1)
    first = env.drain()
    ts1 = first["to_ts"]
    assert first["checkpoint_after"] == ts1

    env.sql("alter table r add column w int default 7")
    env.sql("insert into r values (100, 'new', 1.00, 8), (101, 'newer', 2.00, null)", server=1)
    env.sql("update r set n = n * 2, w = 9 where id > 25; delete from r where id in (3, 100)")
    env.sql("update r set id = 200 where id = 10", server=1)     # a key change
    env.settle()
    second = _drain_cli(env, "second")
    ts2 = second["to_ts"]
    assert second["from_ts"] == ts1 and second["checkpoint_after"] == ts2 > ts1

    env.verify(ts2)                       # binlake verify: the mirrors equal the upstream read at each ts
    env.verify(ts1)

    upstream1 = _rows(env.cluster.snapshot(ts1)["test.r"])
    upstream2 = _rows(env.cluster.snapshot(ts2)["test.r"])
    assert len(upstream1) == 28 and len(upstream2) == 28 and upstream1 != upstream2

    # a reader that knows nothing of binlake: pyiceberg's REST catalog by its URI alone
    catalog = load_catalog("binlake", type="rest", uri=iceberg_rest_catalog.uri)
    assert ("test", "r") in catalog.list_tables("test") and ("test", "r__changelog") in catalog.list_tables("test")
    mirror = catalog.load_table("test.r")
    log = catalog.load_table("test.r__changelog")
    warehouse_dir = str(iceberg_rest_catalog.warehouse_dir)
    assert warehouse_dir in mirror.metadata_location and warehouse_dir in log.metadata_location
    assert all(warehouse_dir in t.file.file_path for t in mirror.scan().plan_files())
    assert _rows(mirror.scan().to_arrow().to_pylist()) == upstream2
    assert set(COLUMNS) <= {f.name for f in mirror.schema().fields}     # w: added by the DDL

    # time travel by the run tags, and the run markers in the snapshot summaries
    tagged = mirror.snapshot_by_name(f"tidb-ts-{ts1}")
    assert tagged is not None
    at_ts1 = mirror.scan(snapshot_id=tagged.snapshot_id).to_arrow().to_pylist()
    assert _rows(at_ts1) == upstream1                                  # no w at ts1 on either side
    assert mirror.snapshot_by_name(f"tidb-ts-{ts2}").snapshot_id == mirror.current_snapshot().snapshot_id
    for table in (mirror, log):
        summary = table.current_snapshot().summary.additional_properties
        assert summary["binlake.to-ts"] == str(ts2) and summary["binlake.from-ts"] == str(ts1)
        assert table.properties["binlake.to-ts"] == str(ts2)

    # the changelog: every change once, in an order that rebuilds the mirror (but for w: the rows
    # written before ADD COLUMN have no value in it there, the mirror holds the default, as TiDB reads it)
    changes = read_table(catalog, "test.r__changelog")
    replayed = {k: {c: v for c, v in row.items() if c != "w"} for k, row in replay_changelog(changes, ["id"]).items()}
    assert replayed == {k: {c: v for c, v in row.items() if c != "w"}
                        for k, row in mirror_state(mirror.scan().to_arrow(), ["id"]).items()}
    ops: dict[str, int] = {}
    for op in changes.column("_tidb_op").to_pylist():
        ops[op] = ops.get(op, 0) + 1
    # run 1: 30 inserts, 5 updates, 2 deletes; run 2: 2 inserts, 6 updates (ids 26-29, 100, 101),
    # 2 deletes, and the key change as TiDB writes it, a delete of 10 and an insert of 200 in one commit
    assert ops == {"I": 33, "U": 11, "D": 5}
    moved = {(r["_tidb_op"], r["id"]): r["_tidb_commit_ts"] for r in changes.to_pylist() if r["id"] in (10, 200)}
    assert moved[("D", 10)] == moved[("I", 200)] > ts1

    # DuckDB reads the same files through the metadata the REST catalog committed
    duck = connect_iceberg()
    duck_mirror = duck.sql(f"select * from iceberg_scan('{mirror.metadata_location}')").to_arrow_table()
    assert _rows(duck_mirror.to_pylist()) == upstream2
    duck_ops = dict(duck.sql(f"select _tidb_op, count(*) from iceberg_scan('{log.metadata_location}') "
                             "group by 1").fetchall())
    assert duck_ops == ops
