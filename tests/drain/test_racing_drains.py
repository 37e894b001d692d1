"""Two drains on one catalog: for every table exactly one commits a range, the other fails that
table with a "concurrent run" error (or skips it), a re-run completes, and no change is written
twice or lost."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from sink.iceberg.catalog import open_catalog
from sink.iceberg.writer import ConcurrentRunError, IcebergSink
from tests.drain.conftest import Env, read_table
from tests.drain.inprocess import Local
from transform import failpoints

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _changes_once(catalog: object, ident: str) -> int:
    """Assert every change of the changelog is there once (by commit ts and order); return the count."""
    log = read_table(catalog, ident)
    seen = Counter(zip(log.column("_tidb_commit_ts").to_pylist(), log.column("_tidb_seq").to_pylist()))
    assert not [k for k, n in seen.items() if n > 1], f"{ident}: changes written twice"
    return log.num_rows


def test_the_run_that_loses_a_commit_race_writes_nothing_and_a_rerun_completes(up: Local) -> None:
    up.sql("create table a (id int primary key, v int); create table b (id int primary key, v int)")
    up.sql("insert into a values (1, 1), (2, 2); insert into b values (1, 10)")
    up.sql("update a set v = 3 where id = 2; delete from b where id = 1; insert into b values (5, 50)")
    run = up.batch(0, up.cluster.ts())
    winner = IcebergSink(up.catalog)
    loser = IcebergSink(open_catalog(str(up.root / "warehouse")))
    raced: list[str] = []

    def the_other_run_commits_first(table: str) -> None:
        failpoints.disable("sink-before-commit")   # the winner commits its tables undisturbed
        raced.append(table)
        winner.check_cluster(run.cluster_id)
        winner.write(run)

    failpoints.enable("sink-before-commit", the_other_run_commits_first)
    try:
        with pytest.raises(ConcurrentRunError, match="concurrent run"):
            loser.write(run)
    finally:
        failpoints.disable("sink-before-commit")
    assert raced == ["test.a__changelog"]
    again = IcebergSink(up.catalog).write(run)
    assert [r.skipped for r in again] == [f"already at to_ts={run.to_ts}"] * 2
    assert _changes_once(up.catalog, "test.a__changelog") == 3
    assert _changes_once(up.catalog, "test.b__changelog") == 3
    up.verify(run.to_ts)


@pytest.mark.parametrize("catalog", ["sqlite", "postgresql"])
def test_two_drain_processes_started_together(env: Env, catalog: str, request: pytest.FixtureRequest) -> None:
    if catalog == "postgresql":   # the shared catalog of teams with several writers
        env.options.iceberg.catalog_uri = request.getfixturevalue("postgres_server").create_database("racing")
    for t in ("p", "q", "r"):
        env.sql(f"create table {t} (id int primary key, v varchar(10))")
        env.sql(f"insert into {t} values (1, 'a'), (2, 'b'), (3, 'c')")
        env.sql(f"update {t} set v = 'x' where id = 2; delete from {t} where id = 3", server=1)
    to_ts = env.settle()
    o = env.options
    args = ["drain", "--registry", o.registry, "--pd-urls", o.pd_urls, "--upstream-status-url",
            o.upstream.status_url, "--warehouse", o.iceberg.warehouse, "--spark-master", "local[1]",
            "--to-ts", str(to_ts), *(["--catalog-uri", o.iceberg.catalog_uri] if o.iceberg.catalog_uri else [])]
    procs = [subprocess.Popen([sys.executable, "-m", "binlake.cli", *args, "--report", str(env.root / f"r{i}.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=env.root)
             for i in (1, 2)]
    outcomes = [(p.wait(timeout=600), p.stderr.read() if p.stderr else "") for p in procs]
    assert any(code == 0 for code, _ in outcomes), outcomes
    for code, err in outcomes:
        assert code == 0 or "concurrent run" in err, err[-3000:]
    report = env.drain(to_ts=to_ts)                     # a re-run completes what a loser left
    assert report["checkpoint_after"] == to_ts
    cat = env.catalog()
    for t in ("p", "q", "r"):
        assert _changes_once(cat, f"test.{t}__changelog") == 5
    env.verify(to_ts)
    reports = [json.loads((env.root / f"r{i}.json").read_text()) for i in (1, 2) if (env.root / f"r{i}.json").exists()]
    written = Counter(t["table"] for r in reports for t in r["tables"] if not t["skipped"])
    assert all(n <= 1 for n in written.values()), written   # no table committed by both
