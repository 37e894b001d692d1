"""The DDL history kept in the lake (``_binlake.ddl_history``): every job a drain applied, placed at
its DDL binlog's commit ts; ``binlake restore`` reads it there, so it restores with PD, the pumps and
TiDB all gone; a lake written before it kept one is filled by the next drain. Real pumps, the
emulated TiDB, Debian's MariaDB, local Spark."""
from __future__ import annotations

import io
import json
from typing import Any

import pytest

from binlake.restore import run_restore_command
from ingest.config import ConfigError
from sink.iceberg import ddl_history
from sink.iceberg.verify import verify_table
from sink.mysql.target import MySQLTarget
from sink.mysql.upstream_reader import read_snapshot
from tests.drain.conftest import Env
from tests.drain.test_restore import history, restore, tables, verify_against
from tests.servers import MariaDBServer
from upstream.local import http

pytestmark = pytest.mark.integration


@pytest.fixture
def maria(mariadb_server: MariaDBServer) -> MariaDBServer:
    """The session's MariaDB without what earlier tests left."""
    mariadb_server.reset("test", "other")
    return mariadb_server


def upstream_jobs(env: Env) -> dict[int, dict[str, Any]]:
    """The done jobs of the upstream's ``/ddl/history`` by id."""
    status, body = http("GET", f"{env.cluster.status_url}/ddl/history")
    assert status == 200, body
    doc = json.loads(body)
    return {j["id"]: j for j in doc if j["state"] in (4, 6) and j["binlog"]["SchemaVersion"] > 0}


def maria_rows(maria: MariaDBServer, name: str, columns: list[str]) -> list[tuple[Any, ...]]:
    """The rows of ``name`` (``db.table``) in MariaDB, ``columns`` in that order, sorted."""
    db, table = name.split(".")
    cols = ", ".join(f"`{c}`" for c in columns)
    return sorted(tuple(r) for r in maria.query(f"SELECT {cols} FROM `{db}`.`{table}`"))


def test_every_job_is_in_the_lake_at_its_ddl_binlog_commit_ts(env: Env) -> None:
    env.sql("create table a (id int primary key, v int)")
    env.sql("insert into a values (1, 1)")
    env.drain()
    env.sql("alter table a add column w int default 5")
    env.sql("create table b (id int primary key)")
    env.sql("rename table b to b2")
    report = env.drain()
    recorded = ddl_history.read(env.catalog())
    assert recorded is not None
    upstream = upstream_jobs(env)
    assert set(recorded) == set(upstream)
    ran = {"create table a (id int primary key, v int)", "alter table a add column w int default 5",
           "create table b (id int primary key)", "rename table b to b2"}
    for job_id, rec in recorded.items():
        assert json.loads(rec.job) == upstream[job_id]   # the job as TiDB's API gave it
        if upstream[job_id]["query"] not in ran:   # the bootstrap's CREATE DATABASE test: no DDL binlog
            assert rec.commit_ts is None, rec
            continue
        ran.remove(upstream[job_id]["query"])
        finished = upstream[job_id]["binlog"]["FinishedTS"]
        assert rec.commit_ts is not None and finished < rec.commit_ts <= int(report["to_ts"])
    assert not ran
    # a run with nothing new records nothing; the table's snapshots do not grow
    table = env.catalog().load_table(ddl_history.TABLE)
    snapshots = len(table.metadata.snapshots)
    env.sql("insert into a (id, v) values (2, 2)")
    env.drain()
    assert len(env.catalog().load_table(ddl_history.TABLE).metadata.snapshots) == snapshots


def test_a_ddl_counts_from_its_binlog_commit_ts_not_its_finished_ts(env: Env, maria: MariaDBServer) -> None:
    """A restore at a ts inside the DDL's transaction (after its FinishedTS, before its commit) is the
    upstream without the DDL, as TiDB itself reads it there."""
    env.sql("create table w (id int primary key)")
    env.sql("insert into w values (1)")
    env.drain()
    env.sql("create table late (id int primary key)")
    env.sql("insert into late values (1)")
    env.drain()
    recorded = ddl_history.read(env.catalog())
    assert recorded is not None
    rec = next(r for r in recorded.values() if json.loads(r.job)["query"] == "create table late (id int primary key)")
    finished = json.loads(rec.job)["binlog"]["FinishedTS"]
    assert rec.commit_ts is not None and finished + 1 < rec.commit_ts, (finished, rec.commit_ts)
    inside = finished + 1
    counts = restore(env, inside, maria.dsn)
    assert "test.late" not in counts and tables(maria) == ["w"]
    verify_against(env, maria.dsn, inside)
    maria.reset("test")
    assert "test.late" in restore(env, rec.commit_ts, maria.dsn)
    verify_against(env, maria.dsn, rec.commit_ts)


def test_restore_with_pd_pumps_and_tidb_gone(env: Env, maria: MariaDBServer) -> None:
    """Into MariaDB and into an Iceberg namespace, at three points of a history with DDL, with every
    upstream process stopped: equal to what TiDB read at each point while it was up."""
    points = history(env)
    upstream = MySQLTarget.from_dsn(env.options.upstream.dsn)
    expected = {label: read_snapshot(upstream, ts, lambda d, t: d == "test") for label, ts in points.items()}
    for p in env.pumps:
        p.kill()
    env.cluster.close()   # the emulated TiDB servers, their status port and PD's TSO
    catalog = env.catalog()
    for label, ts in points.items():
        maria.reset("test")
        counts = restore(env, ts, maria.dsn)
        assert sorted(counts) == sorted(expected[label]), label
        for name, rows in expected[label].items():
            # a keyless table's rows carry TiDB's _tidb_rowid, which a MySQL target has no column for
            columns = [c for c in rows[0] if c != "_tidb_rowid"] if rows else \
                [r[0] for r in maria.query(f"SHOW COLUMNS FROM {name}")]
            assert maria_rows(maria, name, columns) == sorted(tuple(r[c] for c in columns) for r in rows), \
                (label, name)
        ns = f"gone_{label}"
        assert sorted(restore(env, ts, f"iceberg://{ns}")) == sorted(expected[label])
        for name, rows in expected[label].items():
            result = verify_table(catalog, name, rows, ts, mirror=(ns, *name.split(".")))
            assert result.ok and result.mirror_rows == len(rows), (label, name, result)


def test_a_lake_without_history_is_filled_by_the_next_drain(env: Env, maria: MariaDBServer) -> None:
    """A lake written before binlake kept the history: restore reads the upstream's and says so; the
    next drain records every job before its range (at its FinishedTS) and those of its range."""
    env.sql("create table a (id int primary key, v int)")
    env.sql("insert into a values (1, 1)")
    env.sql("alter table a add column w int default 5")
    first = int(env.drain()["to_ts"])
    env.catalog().drop_table(ddl_history.TABLE)   # as a lake written before this table existed
    out = io.StringIO()
    run_restore_command(env.options, first, maria.dsn, out=out)
    assert "holds no DDL history yet" in out.getvalue()
    gone = env.options.model_copy(deep=True)
    gone.upstream.status_url = "http://127.0.0.1:9"   # nothing answers there
    maria.reset("test")
    with pytest.raises(Exception, match="ddl/history"):
        run_restore_command(gone, first, maria.dsn, out=io.StringIO())
    gone.upstream.status_url = ""
    gone.registry = f"file://{env.root / 'empty-registry.json'}"
    with pytest.raises(ConfigError, match="holds no DDL history yet"):
        run_restore_command(gone, first, maria.dsn, out=io.StringIO())

    env.sql("create table b (id int primary key)")
    env.drain()
    recorded = ddl_history.read(env.catalog())
    assert recorded is not None and set(recorded) == set(upstream_jobs(env))
    before = [r for r in recorded.values() if r.commit_ts is None]
    assert len(before) == len(recorded) - 1   # every job before the run's range, at its FinishedTS
    maria.reset("test")
    out = io.StringIO()
    run_restore_command(gone, first, maria.dsn, out=out)   # from the lake alone now
    assert "holds no DDL history" not in out.getvalue()
    assert maria.query("SELECT id, v, w FROM test.a") == [(1, 1, 5)]
