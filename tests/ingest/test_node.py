"""A pump's registry presence: a new state is written before the pump reports it anywhere."""
from __future__ import annotations

from pathlib import Path

from ingest.pump.node import Node
from ingest.registry.base import OFFLINE, ONLINE, PAUSED, PUMP, NodeStatus
from ingest.registry.file import FileRegistry


def test_the_registry_has_a_state_before_the_pump_reports_it(tmp_path: Path) -> None:
    """``/status`` reads ``Node.state``: a client that saw "online" there and then read the registry
    must find the pump online (a test once raced this and found no pump)."""
    seen: list[tuple[str, str]] = []

    class Watching(FileRegistry):
        def put_node(self, kind: str, status: NodeStatus) -> None:
            seen.append((status.state, node.state))   # (what is written, what the pump reports meanwhile)
            super().put_node(kind, status)

    registry = Watching(tmp_path / "registry.json")
    node = Node(registry, "pump-1", "127.0.0.1:8250", "127.0.0.1:8251", lambda: 7, lambda: 9)
    node.set_state(ONLINE)
    node.set_state(PAUSED)
    assert seen == [(ONLINE, OFFLINE), (PAUSED, ONLINE)]
    assert node.state == PAUSED
    stored = registry.get_node(PUMP, "pump-1")
    assert stored is not None and stored.state == PAUSED and stored.max_commit_ts == 7
