"""Two-way replication with TiDB Binlog's loopback control: two real clusters (pdetcd, a binlake pump
and a tidb-server each) drained into each other through the MySQL sink (db-type tidb), both drainers
with ``loopback-control = true`` and one ``channel-id``. A change made on one side reaches the other
once and never comes back."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from binlake.drain_config import DrainerConfig
from tests.realtidb.conftest import RealCluster, start_pumps
from tests.realtidb.peers import PDEtcd, TiDBServer, remove, scratch_dir
from tests.realtidb.versions import NEWEST

pytestmark = pytest.mark.integration

CHANNEL = 7


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[RealCluster, RealCluster]]:
    """Clusters ``a`` and ``b`` of the newest tidb-server build, with cluster ids of their own."""
    with ExitStack() as stack:
        clusters = []
        for name, cluster_id in (("a", 6_900_000_000_000_000_101), ("b", 6_900_000_000_000_000_102)):
            root = scratch_dir(f"binlake-loop-{name}-")
            stack.callback(remove, root)
            pd = stack.enter_context(PDEtcd(root / "pd", cluster_id=cluster_id))
            tidb = TiDBServer(root / "tidb", pd.url, build=NEWEST)
            pumps = start_pumps(root, pd, tidb, count=1)
            for p in pumps:
                stack.callback(p.kill)
            stack.enter_context(tidb)
            clusters.append(RealCluster(root, pd, pumps, tidb))
        yield clusters[0], clusters[1]


def drainer(source: RealCluster, target: RealCluster, name: str) -> DrainerConfig:
    """``source``'s app database into ``target``'s TiDB, loopback-controlled on ``CHANNEL``."""
    options = source.options(name, ["app"], sink="tidb")
    options.syncer.to.dsn = target.tidb.dsn
    options.syncer.worker_count = 2
    options.syncer.loopback_control = True
    options.syncer.channel_id = CHANNEL
    return options


def rows_of(report: dict[str, Any], table: str = "app.t") -> dict[str, int]:
    """The row changes a run applied to ``table``."""
    return next((dict(t["rows"]) for t in report["tables"] if t["table"] == table), {})


def table(cluster: RealCluster) -> list[tuple[object, ...]]:
    return cluster.tidb.query("SELECT id, v, origin FROM app.t ORDER BY id")


def test_two_clusters_replicate_into_each_other_and_nothing_comes_back(
        pair: tuple[RealCluster, RealCluster]) -> None:
    a, b = pair
    for c in (a, b):
        c.tidb.execute("CREATE DATABASE app",
                       "CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(20), origin CHAR(1))")
    a.tidb.execute("INSERT INTO app.t VALUES (1, 'a1', 'A'), (2, 'a2', 'A')")
    b.tidb.execute("INSERT INTO app.t VALUES (11, 'b1', 'B')")
    a_to_b, b_to_a = drainer(a, b, "a-to-b"), drainer(b, a, "b-to-a")

    first = a.drain(a_to_b)
    assert rows_of(first) == {"I": 2}
    # b's binlog holds a's two rows as applied by a_to_b, with the mark: they do not go back to a
    # (without loopback control they would, and fail on a's primary key)
    back = b.drain(b_to_a)
    assert rows_of(back) == {"I": 1}
    assert back["counts"]["loopback_transactions"] >= 1
    assert table(a) == table(b) == [(1, "a1", "A"), (2, "a2", "A"), (11, "b1", "B")]

    a.tidb.execute("UPDATE app.t SET v = 'a1x' WHERE id = 1")
    second = a.drain(a_to_b)
    assert rows_of(second) == {"U": 1}            # b's row 11, applied to a by b_to_a, stays out
    assert second["counts"]["loopback_transactions"] >= 1
    assert rows_of(b.drain(b_to_a)) == {}          # the update came from a: nothing to send back
    assert table(a) == table(b) == [(1, "a1x", "A"), (2, "a2", "A"), (11, "b1", "B")]

    # each applied transaction bumped this channel's mark rows on its downstream (one per worker)
    for downstream in (a, b):
        marks = downstream.tidb.query("SELECT id, val FROM retl._drainer_repl_mark WHERE channel_id = 7")
        assert sorted(int(i) for i, _ in marks) == [0, 1]
        assert sum(int(v) for _, v in marks) > len(marks)
