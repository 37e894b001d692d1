"""The drainer's registry entry as TiDB Binlog writes it: ``updateTS`` a TSO (PD's when at hand, else
the clock's), rendered by ``binlake ctl`` as a time of today, and follow mode registering the sink's
saved checkpoint from its first entry on, in the file registry and in etcd."""
from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import binlake.follow
from binlake.drain import register_drainer
from binlake.drain_config import DrainerConfig
from binlake.follow import Follower
from binlake.report import PlanReport, PumpPlan, RunReport
from ingest import ctl
from ingest.config import load_config
from ingest.registry import load_registry
from ingest.registry.base import DRAINER, ONLINE, PAUSED, NodeStatus
from ingest.tso import physical_ms
from sink.parquet.files import CHECKPOINT_FILE, FORMAT_VERSION
from tests.servers import EtcdServer

CLUSTER = 7


@pytest.fixture(params=["file", "etcd"])
def registry_at(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A registry URI of each backend (etcd emptied first)."""
    if request.param == "file":
        yield f"file://{tmp_path / 'registry.json'}"
        return
    etcd: EtcdServer = request.getfixturevalue("etcd_server")
    reg = load_registry(etcd.uri)
    for key in reg.get_prefix(""):
        reg.delete(key)
    reg.close()
    yield etcd.uri


def drainer_options(registry: str, tmp_path: Path, **extra: Any) -> DrainerConfig:
    """A Parquet-sink drainer on ``registry`` whose cluster id is configured (no PD needed)."""
    return load_config(DrainerConfig, None, {
        "registry": registry, "node-id": "drainer-t", "cluster-id": CLUSTER, "syncer.db-type": "parquet",
        "parquet.dir": str(tmp_path / "cdc"), "data-dir": str(tmp_path / "data"), "addr": "127.0.0.1:0",
        "status-addr": "127.0.0.1:0", **extra})


def entry(registry: str) -> NodeStatus:
    reg = load_registry(registry)
    try:
        node = reg.get_node(DRAINER, "drainer-t")
    finally:
        reg.close()
    assert node is not None
    return node


def clock_ms() -> int:
    """The local clock in Unix milliseconds (what a TSO's physical part counts)."""
    return int(time.time() * 1000)


def assert_clock_tso(update_ts: int, since_ms: int) -> None:
    """``update_ts`` is a TSO composed from the clock after ``since_ms`` (not a Unix-ms value), and
    ``binlake ctl`` shows it as a time of today."""
    until_ms = clock_ms()
    assert since_ms <= physical_ms(update_ts) <= until_ms, (update_ts, since_ms, until_ms)
    assert time.strftime("%Y-%m-%d") in ctl.format_update_time(update_ts)


def save_parquet_checkpoint(tmp_path: Path, to_ts: int | str) -> None:
    root = tmp_path / "cdc"
    root.mkdir(parents=True, exist_ok=True)
    text = to_ts if isinstance(to_ts, str) else json.dumps(
        {"format": FORMAT_VERSION, "to_ts": to_ts, "from_ts": 0, "batch_id": "b1", "cluster_id": CLUSTER})
    (root / CHECKPOINT_FILE).write_text(text)


def test_a_batch_run_registers_a_tso(registry_at: str, tmp_path: Path) -> None:
    since = clock_ms()
    register_drainer(drainer_options(registry_at, tmp_path), 445566778899)
    node = entry(registry_at)
    assert (node.state, node.max_commit_ts) == (PAUSED, 445566778899)
    assert_clock_tso(node.update_ts, since)
    listing = ctl.format_nodes([node])
    assert "1970-01-01" not in listing and time.strftime("%Y-%m-%d") in listing


def test_a_batch_run_takes_update_ts_from_pd(tmp_path: Path, tso: Any, ts: Callable[[], int]) -> None:
    registry = f"file://{tmp_path / 'registry.json'}"
    before = ts()
    register_drainer(drainer_options(registry, tmp_path, **{"pd-urls": tso.url, "cluster-id": 0}), 1)
    after = ts()
    assert before < entry(registry).update_ts < after


def _follow_once(options: DrainerConfig, registry: str, monkeypatch: pytest.MonkeyPatch) -> NodeStatus:
    """Run the follower for one (stubbed) range; return the entry the range saw when it started."""
    seen: list[NodeStatus] = []
    follower = Follower(options, interval=0.1, out=io.StringIO())

    def one_range(*args: Any, **kwargs: Any) -> PlanReport:
        seen.append(entry(registry))
        follower.stop.set()
        return PlanReport(cluster_id=CLUSTER, from_ts=0, to_ts=0, sink="parquet", checkpoint_before=None,
                          checkpoint_after=None, dry_run=False, data_dir=options.data_dir)

    monkeypatch.setattr(binlake.follow, "run_drain_command", one_range)
    assert follower.run() == 0
    return seen[0]


def test_follow_registers_the_saved_checkpoint_at_start(registry_at: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    options = drainer_options(registry_at, tmp_path)
    save_parquet_checkpoint(tmp_path, 445566778899)
    since = clock_ms()
    first = _follow_once(options, registry_at, monkeypatch)
    assert (first.state, first.max_commit_ts) == (ONLINE, 445566778899)   # before the first range ends
    assert_clock_tso(first.update_ts, since)
    last = entry(registry_at)
    assert (last.state, last.max_commit_ts) == (PAUSED, 445566778899)
    assert_clock_tso(last.update_ts, since)


def test_follow_keeps_the_registered_checkpoint_when_the_sink_cannot_be_read(
        registry_at: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = drainer_options(registry_at, tmp_path)
    register_drainer(options, 445566778800)                  # what the last batch run registered
    save_parquet_checkpoint(tmp_path, "not json")
    first = _follow_once(options, registry_at, monkeypatch)
    assert (first.state, first.max_commit_ts) == (ONLINE, 445566778800)


def test_follow_status_reports_each_pumps_position(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``/status`` PumpPos, as TiDB's drainer reports it: each pump's node id → the commit ts drained
    from it, the run's ``to_ts`` for every pump of its plan (a pump's watermark may be above it)."""
    options = drainer_options(f"file://{tmp_path / 'registry.json'}", tmp_path)
    follower = Follower(options, interval=0.1, out=io.StringIO())

    def one_range(*args: Any, **kwargs: Any) -> RunReport:
        follower.stop.set()
        return RunReport(cluster_id=CLUSTER, from_ts=0, to_ts=445566778899, sink="parquet", checkpoint_before=None,
                         checkpoint_after=445566778899, data_dir=str(tmp_path / "data"),
                         pumps=[PumpPlan(node_id="pump-1", addr="127.0.0.1:1", protocol="PumpScan",
                                         watermark=445566778899),
                                PumpPlan(node_id="pump-2", addr="127.0.0.1:2", protocol="PullBinlogs",
                                         watermark=445566779999)])

    monkeypatch.setattr(binlake.follow, "run_drain_command", one_range)
    assert follower.status()["PumpPos"] == {}
    assert follower.run() == 0
    assert follower.status()["PumpPos"] == {"pump-1": 445566778899, "pump-2": 445566778899}
    assert entry(f"file://{tmp_path / 'registry.json'}").max_commit_ts == 445566778899
