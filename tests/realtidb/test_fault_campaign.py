"""A short seeded subset of ``bench/faults_real.py``: real tidb-server, binlake pumps, one fault per
run, nothing lost, duplicated or broken in Iceberg, MariaDB and Parquet (the campaign's own checks)."""
from __future__ import annotations

import pytest

from bench.faults_real import plan, run_one, summary
from tests.realtidb.peers import remove, scratch_dir
from tests.servers import MariaDBServer

SEED = 7
# one run of each (30-60 s each here once Spark is up)
KINDS = ["pump-kill", "pump-stop", "tidb-kill", "disk-full", "drain-kill-stage", "mariadb-kill"]


@pytest.mark.parametrize(("index", "kind", "seed"), plan(len(KINDS), SEED, KINDS), ids=KINDS)
def test_a_seeded_fault_run_loses_and_duplicates_nothing(index: int, kind: str, seed: int,
                                                         maria: MariaDBServer) -> None:
    """Run ``index`` of ``--runs 6 --seed 7 --kinds pump-kill,pump-stop,tidb-kill,disk-full,drain-kill-stage,
    mariadb-kill``: the fault under TiDB's load, then every acknowledged transfer exactly once in each sink,
    the bank total constant at every tag, checkpoint and commit ts, ``binlake verify`` exact."""
    root = scratch_dir(f"binlake-fc-{kind}-")
    try:
        out = run_one(index, kind, seed, root, maria, load_seconds=6.0)
    finally:
        remove(root)
    assert not out.skipped, out.skipped
    assert not out.missed, out.missed          # the fault landed in the drain it was tied to
    assert (out.lost, out.duplicated, out.breaks, out.problems) == (0, 0, 0, []), \
        f"{summary([out])}\n" + "\n".join(out.notes)
