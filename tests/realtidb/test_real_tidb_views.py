"""Views from a real tidb-server, drained from ts 0 with the default filters (TiDB Binlog's
``ignore-schemas``: ``mysql`` and the memory schemas left out, ``sys`` kept): TiDB's own bootstrap
views (``sys.schema_unused_indexes`` on 8.x) and a user's CREATE, CREATE OR REPLACE and DROP VIEW,
under concurrent writes to the table they select from. The lake records every view job in its DDL
history and holds no table for a view; MariaDB gets the user's views as TiDB Binlog runs them and
answers them as TiDB does."""
from __future__ import annotations

from typing import Any

import pytest

from sink.iceberg import ddl_history
from sink.iceberg.plugin import catalog_for as open_iceberg_catalog
from tests.realtidb.conftest import RealCluster, drain_everywhere
from tests.servers import MariaDBServer
from transform.history import SchemaHistory

VIEW_DDL = (
    "CREATE VIEW v_sum AS SELECT id, v * 2 AS w FROM t",
    "CREATE VIEW v_gone AS SELECT id FROM t WHERE v > 3",
    "CREATE OR REPLACE VIEW v_sum AS SELECT id, v + 1 AS w, 'x' AS tag FROM t WHERE id < 50",
    "DROP VIEW v_gone",
    "CREATE VIEW v_of_view AS SELECT COUNT(*) AS n FROM v_sum",
)


def _views(conn: Any, db: str) -> dict[str, list[tuple[object, ...]]]:
    """Each view of ``db`` (by name) and its rows, sorted."""
    with conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.views WHERE table_schema = %s", (db,))
        names = sorted(str(r[0]) for r in cur.fetchall())
        out = {}
        for name in names:
            cur.execute(f"SELECT * FROM `{db}`.`{name}`")
            out[name] = sorted(tuple(str(v) for v in row) for row in cur.fetchall())
    return out


@pytest.mark.every_tidb
def test_views_from_ts_0_are_recorded_by_the_lake_and_replayed_into_mariadb(
        real: RealCluster, maria: MariaDBServer) -> None:
    real.tidb.execute("CREATE DATABASE rv")
    real.tidb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)",
                      "INSERT INTO t VALUES (1, 1), (2, 5), (60, 7)", database="rv")

    def transaction(cur: Any, w: int, i: int) -> None:
        cur.execute(f"INSERT INTO t VALUES ({(w * 1000 + i) % 97}, {i}) ON DUPLICATE KEY UPDATE v = v + 1")

    with real.writing("rv", transaction, writers=2) as writes:
        real.tidb.execute(*VIEW_DDL, database="rv")
    assert writes.committed > 0, writes.errors[-3:]

    # every database TiDB Binlog's default filters keep, from the cluster's bootstrap on
    to_ts = drain_everywhere(real, maria, "views", [], reset=("rv", "test"))

    upstream = SchemaHistory.fetch(real.tidb.status_url)
    view_jobs = {j.id for j in upstream.jobs.values() if j.type == 21 or j.type == 24}
    bootstrap_sys = [j for j in upstream.jobs.values() if j.type == 21 and j.schema_name == "sys"]
    assert len(view_jobs) >= len(VIEW_DDL) + len(bootstrap_sys)
    catalog = open_iceberg_catalog(real.options("views", []))
    recorded = ddl_history.read(catalog)
    assert recorded is not None and view_jobs <= set(recorded), sorted(view_jobs - set(recorded or {}))
    tables = {".".join(t) for ns in catalog.list_namespaces() for t in catalog.list_tables(ns)}
    assert {"rv.t", "rv.t__changelog"} <= tables, sorted(tables)
    assert not any(name.split(".")[-1].startswith("v_") or name.startswith("sys.") for name in tables), sorted(tables)
    lake_history = ddl_history.history(recorded)
    assert all(lake_history.is_view(j.binlog.table_info.id) for j in bootstrap_sys if j.binlog.table_info)

    tidb = real.tidb.connect("rv")
    downstream: Any = maria.connect()
    try:
        with tidb.cursor() as cur:
            cur.execute(f"SET @@tidb_snapshot = {to_ts}")
        expected = _views(tidb, "rv")
        assert sorted(expected) == ["v_of_view", "v_sum"], expected
        assert _views(downstream, "rv") == expected
    finally:
        tidb.close()
        downstream.close()
