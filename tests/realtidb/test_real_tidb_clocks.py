"""Two clocks in the tier: a tidb-server on unistore stamps its commits from its own clock, the pumps
their watermark (fake binlogs) from PD's. With PD ahead, as a real pd-server is for up to its 3 s
saved window after a restart, an idle cluster's watermark runs ahead of TiDB: a drain finishes a
range TiDB has not reached, commits made after it fall below it, and TiDB read at the run's ts shows
DDL that came after the run (what ``verify --against mysql`` once showed on a real pd-server). In a
real cluster TiDB takes its timestamps from PD too, and this cannot happen; the pumps name such
commits, the tier keeps pdetcd's clock behind TiDB's and fails any drain that ran past TiDB's clock."""
from __future__ import annotations

import io
import time

import requests

from binlake.drain import run_drain_command, run_verify_command
from tests.realtidb.conftest import real_cluster
from tests.realtidb.peers import remove, scratch_dir
from tests.realtidb.versions import NEWEST


def test_a_pd_clock_ahead_of_tidbs_gives_late_commits_the_pumps_name_and_verify_reports() -> None:
    root = scratch_dir("binlake-rt-clock-")
    try:
        with real_cluster(root, NEWEST, pd_offset_ms=3000) as real:
            real.tidb.execute("CREATE DATABASE rt_clock")
            real.tidb.execute("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)", database="rt_clock")
            options = real.options("clock", ["rt_clock"])
            real.settle()
            time.sleep(1)                       # idle: fake binlogs stamped 3 s ahead carry the watermark
            ran_to = int(run_drain_command(options, out=io.StringIO()).to_ts)
            assert ran_to > real.tidb.current_ts()                       # past TiDB's clock
            real.tidb.execute("RENAME TABLE t TO t2", "INSERT INTO t2 VALUES (2)", database="rt_clock")
            assert real.tidb.current_ts() < ran_to                       # committed below the finished run

            deadline = time.monotonic() + 20
            while not real.late_commits() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert real.late_commits(), "no pump named the commits below its watermark"
            metrics = "".join(requests.get(f"{p.status_url}/metrics", timeout=5).text for p in real.pumps)
            late = [line for line in metrics.splitlines() if line.startswith("binlog_pump_late_commits_total")]
            assert sum(float(line.split()[-1]) for line in late) >= 2, late

            while real.tidb.current_ts() <= ran_to:
                time.sleep(0.2)
            out = io.StringIO()
            assert run_verify_command(options, ran_to, out=out) == 1     # TiDB at ran_to holds the RENAME
            assert "rt_clock.t2" in out.getvalue(), out.getvalue()
    finally:
        remove(root)
