"""Registry presence, one implementation (``ingest.registry.presence``) for the pump, the following
drainer and the batch drainer: each writes TiDB Binlog's Status JSON byte for byte as binlogctl and a
real TiDB read it, a heartbeat keeps the state last written, and a state is reported only once the
registry holds it."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

import binlake.drain
from binlake.drain import register_drainer
from binlake.drain_config import DrainerConfig
from binlake.follow import Follower
from binlake.tso_clock import UpdateClock
from ingest.pump.node import Node
from ingest.registry import FileRegistry, Registry
from ingest.registry.base import DRAINER, OFFLINE, ONLINE, PAUSED, PAUSING, PUMP, NodeStatus, node_key
from ingest.registry.presence import Presence

UPDATE_TS = 449_000_000_000_000_000   # a TSO


def raw(registry: Registry, kind: str, node_id: str) -> bytes | None:
    return registry.get(node_key(kind, node_id))


def test_put_heartbeat_offline(registry: Registry) -> None:
    presence = Presence(registry, PUMP, "p-1", "127.0.0.1:8250", labels={"status-addr": "127.0.0.1:8251"})
    assert presence.state == OFFLINE and presence.registered() is None
    written = presence.put(ONLINE, 7, UPDATE_TS)
    assert presence.state == ONLINE and presence.registered() == written
    assert raw(registry, PUMP, "p-1") == (
        b'{"nodeId":"p-1","host":"127.0.0.1:8250","state":"online","isAlive":true,"score":0,'
        b'"label":{"labels":{"status-addr":"127.0.0.1:8251"}},"maxCommitTS":7,"updateTS":449000000000000000}')
    presence.put(PAUSING, 8, UPDATE_TS + 1)
    beat = presence.heartbeat(9, UPDATE_TS + 2)          # the state last written, fresh values
    assert (beat.state, beat.is_alive, beat.max_commit_ts, beat.update_ts) == (PAUSING, False, 9, UPDATE_TS + 2)
    presence.offline(10, UPDATE_TS + 3)
    stored = registry.get_node(PUMP, "p-1")
    assert stored is not None and (stored.state, stored.max_commit_ts) == (OFFLINE, 10)


def test_the_pump_writes_as_before(tmp_path: Path) -> None:
    """Every pump entry: isAlive true whatever the state, the status address in the label."""
    registry = FileRegistry(tmp_path / "registry.json")
    registry.put_node(PUMP, NodeStatus("pump-1", "old:1", PAUSED))
    node = Node(registry, "pump-1", "127.0.0.1:8250", "127.0.0.1:8251", lambda: 7, lambda: UPDATE_TS)
    assert node.previous_state == PAUSED and node.state == PAUSED
    node.set_state(ONLINE)
    node.heartbeat()
    node.set_state(OFFLINE)
    assert raw(registry, PUMP, "pump-1") == (
        b'{"nodeId":"pump-1","host":"127.0.0.1:8250","state":"offline","isAlive":true,"score":0,'
        b'"label":{"labels":{"status-addr":"127.0.0.1:8251"}},"maxCommitTS":7,"updateTS":449000000000000000}')
    assert node.status(ONLINE).to_json().startswith('{"nodeId":"pump-1","host":"127.0.0.1:8250","state":"online"')


def test_the_batch_drainer_writes_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Paused, not alive, no label, at its checkpoint."""
    monkeypatch.setattr(binlake.drain, "approximate_ts", lambda options: UPDATE_TS)
    options = DrainerConfig(registry=f"file://{tmp_path / 'registry.json'}", node_id="d-batch")
    register_drainer(options, 445566778899)
    assert raw(FileRegistry(tmp_path / "registry.json"), DRAINER, "d-batch") == (
        b'{"nodeId":"d-batch","host":"batch:iceberg","state":"paused","isAlive":false,"score":0,'
        b'"label":null,"maxCommitTS":445566778899,"updateTS":449000000000000000}')


class FixedClock(UpdateClock):
    def now(self) -> int:
        return self.base_ts


def test_the_following_drainer_writes_as_before(tmp_path: Path) -> None:
    """Online and alive with its Cistern address and status label; left offline (not alive) after
    ``close``; the registry is closed once the last entry is written."""
    options = DrainerConfig(registry=f"file://{tmp_path / 'registry.json'}", node_id="d-follow")
    follower = Follower(options, 1.0, io.StringIO())
    follower.advertise, follower.status_addr = "127.0.0.1:8249", "127.0.0.1:8250"
    follower.clock = FixedClock(UPDATE_TS)
    follower.checkpoint = 5
    follower._register(ONLINE)
    registry = FileRegistry(tmp_path / "registry.json")
    label = b'"label":{"labels":{"status-addr":"127.0.0.1:8250"}}'
    assert raw(registry, DRAINER, "d-follow") == (
        b'{"nodeId":"d-follow","host":"127.0.0.1:8249","state":"online","isAlive":true,"score":0,'
        + label + b',"maxCommitTS":5,"updateTS":449000000000000000}')
    assert follower.request_state("close") is None
    follower.checkpoint = 6
    follower._leave()
    assert raw(registry, DRAINER, "d-follow") == (
        b'{"nodeId":"d-follow","host":"127.0.0.1:8249","state":"offline","isAlive":false,"score":0,'
        + label + b',"maxCommitTS":6,"updateTS":449000000000000000}')
