"""``binlake drain --follow`` as TiDB's online drainer: registered online with its Cistern address,
pumps taken offline through ``binlake ctl`` wait for it and a rejoining pump notifies it, ``/status``
and ``/metrics``, and SIGTERM leaving the checkpoint written and the registry entry paused."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from binlake.drain_config import DrainerConfig
from binlake.follow import Follower
from ingest.registry import load_registry
from ingest.registry.base import DRAINER, OFFLINE, ONLINE, PAUSED, PUMP
from tests.drain.conftest import Env
from tests.drain.test_drain_cli import ROOT, binlake, cli_args
from tests.drain.test_mysql_sink import checkpoint_row, mysql_options, verify_mysql
from tests.servers import MariaDBServer
from tests.waiting import wait_for
from upstream.local import free_port

pytestmark = pytest.mark.integration

# TiDB Binlog's drainer metric names the follower serves
DRAINER_METRICS = {"binlog_drainer_checkpoint_tso", "binlog_drainer_checkpoint_delay_seconds_count",
                   "binlog_drainer_event", "binlog_drainer_ddl_jobs_total", "binlog_drainer_pump_position"}


def status_of(status: str) -> dict[str, Any] | None:
    """The follower's ``/status`` (None while it does not answer yet)."""
    try:
        with urllib.request.urlopen(f"http://{status}/status", timeout=10) as r:
            body: dict[str, Any] = json.loads(r.read())
            return body
    except urllib.error.URLError:
        return None


def last_ts(status: str) -> int:
    """The follower's ``/status`` LastTS (-1 while it does not answer yet)."""
    body = status_of(status)
    return -1 if body is None else int(body["LastTS"])


def pump_pos(status: str, ts: int) -> dict[str, int] | None:
    """The follower's ``/status`` PumpPos once every pump in it is at ``ts`` or later (else None)."""
    pos: dict[str, int] = (status_of(status) or {}).get("PumpPos") or {}
    return pos if pos and min(pos.values()) >= ts else None


def node(env: Env, kind: str, node_id: str) -> Any:
    registry = load_registry(env.options.registry)
    try:
        return next(n for n in registry.list_nodes(kind) if n.node_id == node_id)
    finally:
        registry.close()


@pytest.fixture
def maria(mariadb_server: MariaDBServer) -> MariaDBServer:
    mariadb_server.reset("test")
    return mariadb_server


def test_follow_mode_is_an_online_drainer_pumps_wait_for_and_notify(env: Env, maria: MariaDBServer) -> None:
    env.sql("create table f (id int primary key, v int)")
    env.sql("insert into f values (1, 1), (2, 2)")
    first = env.settle()
    addr, status = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    conf = env.root / "drainer.toml"
    conf.write_text(f'initial-commit-ts = 0\n[syncer]\ndb-type = "mysql"\nworker-count = 2\n'
                    f'[syncer.to]\ndsn = "{maria.dsn}"\n')
    log = open(env.root / "follow.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "binlake.cli", "drain", "--follow", "--interval", "0.3",
                             "--config", str(conf), *cli_args(env.options), "--spark-master", "local[2]",
                             "--addr", addr, "--status-addr", status],
                            stdout=log, stderr=subprocess.STDOUT, cwd=env.root,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_for(lambda: last_ts(status) >= first if proc.poll() is None
                 else pytest.fail((env.root / "follow.log").read_text()[-3000:]), 120, "the first range")
        me = node(env, DRAINER, "binlake-drain")
        assert me.state == ONLINE and me.host == addr and me.status_addr == status
        # TiDB's drainer /status: PumpPos maps each pump to the commit ts drained from it (set as a run ends)
        pos = wait_for(lambda: pump_pos(status, first), 60, "PumpPos past the first range")
        assert pos is not None and set(pos) == {p.node_id for p in env.pumps}, pos
        listed = binlake("ctl", "drainers", "--registry", env.options.registry)
        assert "binlake-drain" in listed.stdout and "online" in listed.stdout

        # a pump taken offline waits for this drainer to pass its last binlog, then goes offline
        env.sql("insert into f values (3, 3)")
        r = binlake("ctl", "offline-pump", "--node-id", "pump-1", "--registry", env.options.registry)
        assert r.returncode == 0, r.stderr
        assert env.pumps[0].wait_exit(120) == 0
        assert node(env, PUMP, "pump-1").state == OFFLINE
        # it rejoins: before serving it notifies every online drainer (a failed Notify would stop it)
        env.pumps[0].start()
        env.sql("insert into f values (4, 4)", server=1)
        latest = env.settle()
        wait_for(lambda: last_ts(status) >= latest, 120, "the range after the rejoin")

        def counted() -> dict[str, str] | None:
            """/metrics once it counts the four rows of f (the checkpoint moves inside a run, the row
            counts are added as the run ends)."""
            with urllib.request.urlopen(f"http://{status}/metrics", timeout=10) as m:
                got = dict(line.rsplit(" ", 1) for line in m.read().decode().splitlines() if line[:1] != "#")
            return got if float(got.get('binlog_drainer_event{type="Insert"}', 0)) >= 4 else None
        samples = wait_for(counted, 30, "the four rows of f counted in /metrics")
        assert DRAINER_METRICS <= {name.split("{")[0] for name in samples}
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
        log.close()
    output = (env.root / "follow.log").read_text()
    assert code == 0, output[-3000:]
    assert "notified by a pump" in output and "registry state paused" in output
    assert node(env, DRAINER, "binlake-drain").state == PAUSED
    cp = checkpoint_row(maria, env.cluster.cluster_id)
    assert cp["consistent"] is True and cp["commitTS"] >= latest
    o = mysql_options(env, maria)
    assert "test.f" in verify_mysql(env, o)


def test_a_terminal_error_stops_the_follower_with_its_message(tmp_path: Path) -> None:
    """A Parquet root whose checkpoint names another cluster: no run can ever succeed there, so the
    follower does not retry it every interval, it stops (entry paused) and exits 1 with the message.
    No pumps are needed: the sink's cluster is checked before the plan."""
    cdc = tmp_path / "cdc"
    cdc.mkdir()
    (cdc / "_binlake_checkpoint.json").write_text(json.dumps(
        {"format": 1, "to_ts": 1000, "from_ts": 0, "batch_id": "other", "cluster_id": 8}))
    registry = f"file://{tmp_path / 'registry.json'}"
    r = subprocess.run([sys.executable, "-m", "binlake.cli", "drain", "--follow", "--interval", "0.3",
                        "--cluster-id", "7", "--registry", registry, "--sink", "parquet", "--parquet-dir", str(cdc),
                        "--spark-master", "local[1]", "--addr", f"127.0.0.1:{free_port()}",
                        "--status-addr", f"127.0.0.1:{free_port()}"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert "binlake drain: error: " in r.stderr and "holds cluster 8" in r.stderr, r.stderr[-3000:]
    assert r.stdout.count("run failed") == 1 and "ClusterMismatchError is a terminal error: not retried" in r.stdout
    assert "registry state paused" in r.stdout
    entry = load_registry(registry)
    try:
        assert entry.get_node(DRAINER, "binlake-drain").state == PAUSED
    finally:
        entry.close()


def test_a_transient_error_is_retried_until_stopped(tmp_path: Path) -> None:
    """No pump registered yet (a transient PlanError): the follower tries again every interval
    (``detect-interval``, TiDB Binlog's key, when ``--interval`` is not given) and SIGTERM still stops
    it cleanly (exit 0)."""
    log_path = tmp_path / "follow.log"
    conf = tmp_path / "drainer.toml"
    conf.write_text("detect-interval = 1\n")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "binlake.cli", "drain", "--follow", "--config", str(conf),
                                 "--cluster-id", "7", "--registry", f"file://{tmp_path / 'registry.json'}",
                                 "--sink", "parquet", "--parquet-dir", str(tmp_path / "cdc"),
                                 "--spark-master", "local[1]", "--addr", f"127.0.0.1:{free_port()}",
                                 "--status-addr", f"127.0.0.1:{free_port()}"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            wait_for(lambda: log_path.read_text().count("no pump that is not offline") >= 3
                     if proc.poll() is None else pytest.fail(log_path.read_text()[-3000:]), 120, "three failed runs")
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
    output = log_path.read_text()
    assert code == 0, output[-3000:]
    assert "terminal" not in output and "registry state paused" in output
    assert "every 1 s" in output


@pytest.mark.parametrize("minutes, synced", [(0, True), (5, False)])
def test_status_says_synced_after_synced_check_time_without_rows(minutes: int, synced: bool) -> None:
    options = DrainerConfig(synced_check_time=minutes)
    follower = Follower(options, None, io.StringIO())
    time.sleep(0.01)
    assert follower.status()["Synced"] is synced
    assert follower.interval == options.detect_interval == 5


def test_a_bug_is_retried_with_backoff_and_stops_the_follower_at_the_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run failing with an error that is not binlake's (a bug) is retried after a growing wait, the
    metric counts the failures in a row, and the ``max-failed-runs``-th stops the follower (entry
    paused) with that error; the waits never exceed the cap. Unit test of ``binlake.follow``: the run
    itself is replaced."""
    import binlake.follow as follow

    calls: list[float] = []

    def broken(*args: Any, **kwargs: Any) -> Any:
        calls.append(time.monotonic())
        raise ZeroDivisionError("a bug in a run")

    monkeypatch.setattr(follow, "run_drain_command", broken)
    registry = f"file://{tmp_path / 'registry.json'}"
    options = DrainerConfig(registry=registry, cluster_id=7, max_failed_runs=3, data_dir=str(tmp_path / "d"),
                            addr=f"127.0.0.1:{free_port()}", status_addr=f"127.0.0.1:{free_port()}")
    options.syncer.db_type = "parquet"
    out = io.StringIO()
    follower = Follower(options, 0.2, out)
    with pytest.raises(ZeroDivisionError, match="a bug in a run"):
        follower.run()
    text = out.getvalue()
    assert len(calls) == 3 and text.count("run failed: a bug in a run") == 3, text
    assert "3 runs in a row failed with errors that are not binlake's (ZeroDivisionError; max-failed-runs = 3)" in text
    assert "1 failed run(s) in a row, the next in 0.2 s" in text and "the next in 0.4 s" in text
    assert calls[2] - calls[1] >= 0.35 > calls[1] - calls[0] >= 0.15   # the wait doubled
    assert follower.metrics.failed_in_a_row._value.get() == 3
    entry = load_registry(registry)
    try:
        assert entry.get_node(DRAINER, "binlake-drain").state == PAUSED
    finally:
        entry.close()
    assert [Follower(options, 10, out).retry_wait(n) for n in (1, 2, 6, 40)] == [10, 20, 300, 300]
    assert Follower(options, 900, out).retry_wait(5) == 900   # an interval above the cap is kept
