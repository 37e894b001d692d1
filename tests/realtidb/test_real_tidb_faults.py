"""Faults with a real tidb-server: a pump killed with ``kill -9`` under TiDB's load loses nothing."""
from __future__ import annotations

import time
from typing import Any

from tests.realtidb.conftest import RealCluster
from tests.waiting import wait_for


def test_a_pump_killed_under_load_loses_no_commit(real: RealCluster) -> None:
    """TiDB's pump client moves to the other pump when one dies; the dead pump comes back with what
    it acknowledged; the drain equals TiDB, and every transaction TiDB acknowledged is in the lake."""
    real.tidb.execute("CREATE DATABASE rt_kill", "CREATE TABLE rt_kill.t (id INT PRIMARY KEY, w INT, n INT)")
    acknowledged: list[tuple[int, int]] = []

    def transaction(cur: Any, w: int, n: int) -> None:   # autocommit: one INSERT, acknowledged when it returns
        cur.execute(f"INSERT INTO t VALUES ({w * 1_000_000 + n}, {w}, {n})")
        acknowledged.append((w, n))

    with real.writing("rt_kill", transaction) as writes:   # a commit whose binlog could not be written fails
        wait_for(lambda: len(acknowledged) > 200, 60, "TiDB commits before the kill")
        victim = real.pumps[0]
        victim.kill()
        at_kill = len(acknowledged)
        wait_for(lambda: len(acknowledged) > at_kill + 200, 120,
                 lambda: f"TiDB commits after the kill (failures: {writes.errors[-3:]})")
        victim.start()                                  # same data dir and node id: what it acknowledged is back
        time.sleep(1)
        at_restart = len(acknowledged)
        wait_for(lambda: len(acknowledged) > at_restart + 100, 120, "TiDB commits after the restart")

    options = real.options("kill", ["rt_kill"])
    report = real.drain(options)
    real.verify(options, int(report["to_ts"]))
    mirror = {(r["w"], r["n"]) for r in _mirror_rows(real, options)}
    assert set(acknowledged) <= mirror, f"{len(set(acknowledged) - mirror)} acknowledged commits missing"


def _mirror_rows(real: RealCluster, options: object) -> list[dict[str, int]]:
    from sink.iceberg.plugin import catalog_for as open_iceberg_catalog

    catalog = open_iceberg_catalog(options)  # type: ignore[arg-type]
    rows: list[dict[str, int]] = catalog.load_table("rt_kill.t").scan().to_arrow().to_pylist()
    return rows
