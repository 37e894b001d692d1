"""ingest.ctl (binlogctl's commands) against both registries and a real HTTP node on 127.0.0.1."""
from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ingest import ctl
from ingest.errors import CtlError, NodeNotFound, RegistryError
from ingest.registry import (
    DRAINER,
    OFFLINE,
    ONLINE,
    PAUSED,
    PUMP,
    STATUS_ADDR_LABEL,
    NodeStatus,
    Registry,
)
from ingest.tso import compose_ts
from upstream.local import free_port


class FakeNode:
    """A tiny real HTTP server answering ``PUT /state/<id>/<action>`` in the pump's JSON shape.

    ``answers[(node_id, action)]`` = (http status, body bytes); default: code 200 for ``node_id``.
    """

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.requests: list[tuple[str, str]] = []
        self.answers: dict[tuple[str, str], tuple[int, bytes]] = {}
        node = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                node.requests.append(("PUT", self.path))
                parts = self.path.strip("/").split("/")
                if len(parts) != 3 or parts[0] != "state":
                    status, body = 404, b"404 page not found"
                else:
                    nid, action = urllib.parse.unquote(parts[1]), parts[2]
                    default = (200, json.dumps({"message": f"apply action {action} success!", "code": 200,
                                                "data": None}).encode())
                    if nid != node.node_id:
                        default = (200, json.dumps({"message": f"invalid nodeID {nid}", "code": 3,
                                                    "data": None}).encode())
                    status, body = node.answers.get((nid, action), default)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def node() -> Iterator[FakeNode]:
    fake = FakeNode("pump-1")
    yield fake
    fake.close()


def _register(reg: Registry, kind: str, node_id: str, state: str = ONLINE, status_addr: str | None = None,
              host: str = "10.9.9.9:8250", max_commit_ts: int = 0, update_ts: int = 0) -> NodeStatus:
    status = NodeStatus(node_id=node_id, host=host, state=state, max_commit_ts=max_commit_ts,
                        update_ts=update_ts, labels={STATUS_ADDR_LABEL: status_addr} if status_addr else None)
    reg.put_node(kind, status)
    return status


def test_list_hides_offline_unless_asked(registry: Registry) -> None:
    _register(registry, PUMP, "p-b", ONLINE)
    _register(registry, PUMP, "p-a", OFFLINE)
    _register(registry, PUMP, "p-c", PAUSED)
    _register(registry, DRAINER, "d-1", ONLINE)
    assert [n.node_id for n in ctl.list_nodes(registry, PUMP)] == ["p-b", "p-c"]
    assert [n.node_id for n in ctl.list_nodes(registry, PUMP, show_offline=True)] == ["p-a", "p-b", "p-c"]
    assert [n.node_id for n in ctl.list_nodes(registry, DRAINER)] == ["d-1"]
    with pytest.raises(CtlError, match="unknown node kind"):
        ctl.list_nodes(registry, "pump")


def test_format_nodes_table_with_update_time_from_tso() -> None:
    when = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    ts = compose_ts(int(when.timestamp() * 1000) + 678, 12)
    nodes = [NodeStatus(node_id="pump-1", host="127.0.0.1:8250", max_commit_ts=ts, update_ts=ts),
             NodeStatus(node_id="p2", host="h:1", state=PAUSED)]
    lines = ctl.format_nodes(nodes, tz=UTC).splitlines()
    assert lines[0].split() == ["NodeID", "Addr", "State", "MaxCommitTS", "UpdateTime"]
    assert lines[1].split() == ["pump-1", "127.0.0.1:8250", "online", str(ts), "2024-01-02", "03:04:05", "+0000",
                                "UTC"]
    assert lines[2].split() == ["p2", "h:1", "paused", "0", "-"]
    # Go prints a zone without a name as its offset, twice
    assert ctl.format_update_time(ts, timezone(timedelta(hours=8))) == "2024-01-02 11:04:05 +0800 +0800"
    # columns line up: every row's Addr starts where the header's does
    col = lines[0].index("Addr")
    assert lines[1][col:].startswith("127.0.0.1:8250") and lines[2][col:].startswith("h:1")
    assert ctl.format_nodes([]).split() == ["NodeID", "Addr", "State", "MaxCommitTS", "UpdateTime"]


def test_update_state_rewrites_only_the_state(registry: Registry) -> None:
    registry.put("/tidb-binlog/v1/pumps/p1",
                 b'{"nodeId":"p1","host":"h:8250","state":"online","isAlive":true,"score":0,"label":null,'
                 b'"maxCommitTS":77,"updateTS":88,"extra":"kept"}')
    new = ctl.update_state(registry, PUMP, "p1", PAUSED)
    assert new.state == PAUSED
    stored = json.loads(registry.get("/tidb-binlog/v1/pumps/p1") or b"")
    assert stored == {"nodeId": "p1", "host": "h:8250", "state": "paused", "isAlive": True, "score": 0,
                      "label": None, "maxCommitTS": 77, "updateTS": 88, "extra": "kept"}


def test_update_state_errors(registry: Registry) -> None:
    _register(registry, PUMP, "p1")
    with pytest.raises(NodeNotFound, match="'nope'"):
        ctl.update_state(registry, PUMP, "nope", PAUSED)
    with pytest.raises(NodeNotFound):
        ctl.update_state(registry, DRAINER, "p1", PAUSED)  # a pump is not a drainer
    with pytest.raises(RegistryError, match="sleeping"):
        ctl.update_state(registry, PUMP, "p1", "sleeping")
    assert (registry.get_node(PUMP, "p1") or NodeStatus("x", "y")).state == ONLINE


@pytest.mark.parametrize("action", ["pause", "close"])
def test_request_state_sends_put_to_the_status_addr(registry: Registry, node: FakeNode, action: str) -> None:
    _register(registry, PUMP, "pump-1", status_addr=node.addr)
    message = ctl.request_state(registry, PUMP, "pump-1", action)
    assert message == f"apply action {action} success!"
    assert node.requests == [("PUT", f"/state/pump-1/{action}")]
    assert (registry.get_node(PUMP, "pump-1") or NodeStatus("x", "y")).state == ONLINE  # the node writes it


def test_request_state_falls_back_to_host_and_quotes_the_node_id(registry: Registry, node: FakeNode) -> None:
    node.node_id = "host:8250/x"
    _register(registry, DRAINER, "host:8250/x", host=node.addr)
    ctl.request_state(registry, DRAINER, "host:8250/x", "pause")
    assert node.requests == [("PUT", "/state/host%3A8250%2Fx/pause")]


def test_request_state_surfaces_the_nodes_error(registry: Registry, node: FakeNode) -> None:
    node.answers[("pump-1", "close")] = (200, json.dumps(
        {"message": "node pump-1 is not online, state: paused", "code": 3, "data": None}).encode())
    _register(registry, PUMP, "pump-1", status_addr=node.addr)
    with pytest.raises(CtlError, match="code 3: node pump-1 is not online, state: paused"):
        ctl.request_state(registry, PUMP, "pump-1", "close")


def test_request_state_non_json_answer(registry: Registry, node: FakeNode) -> None:
    node.answers[("pump-1", "pause")] = (500, b"internal error")
    _register(registry, PUMP, "pump-1", status_addr=node.addr)
    with pytest.raises(CtlError, match="HTTP 500.*internal error"):
        ctl.request_state(registry, PUMP, "pump-1", "pause")


def test_request_state_closed_port_names_the_address(registry: Registry) -> None:
    addr = f"127.0.0.1:{free_port()}"
    _register(registry, PUMP, "pump-1", status_addr=addr, state=PAUSED)
    with pytest.raises(CtlError, match=f"cannot reach pump 'pump-1' at {addr} \\(registry state paused\\)"):
        ctl.request_state(registry, PUMP, "pump-1", "pause")


def test_request_state_bad_action_and_missing_node(registry: Registry) -> None:
    with pytest.raises(CtlError, match="unknown action"):
        ctl.request_state(registry, PUMP, "pump-1", "offline")
    with pytest.raises(NodeNotFound):
        ctl.request_state(registry, PUMP, "pump-1", "pause")


def test_run_command_dispatches_binlogctl_names(file_registry: Registry, node: FakeNode) -> None:
    _register(file_registry, PUMP, "pump-1", status_addr=node.addr)
    _register(file_registry, PUMP, "gone", state=OFFLINE)
    listing = ctl.run_command(file_registry, "pumps")
    assert "pump-1" in listing and "gone" not in listing
    assert "gone" in ctl.run_command(file_registry, "pumps", show_offline=True)
    assert ctl.run_command(file_registry, "drainers").split() == ["NodeID", "Addr", "State", "MaxCommitTS",
                                                                 "UpdateTime"]
    assert "paused" in ctl.run_command(file_registry, "update-pump", node_id="gone", state=PAUSED)
    assert (file_registry.get_node(PUMP, "gone") or NodeStatus("x", "y")).state == PAUSED
    assert "success" in ctl.run_command(file_registry, "offline-pump", node_id="pump-1")
    assert node.requests == [("PUT", "/state/pump-1/close")]
    for args, msg in (({"cmd": "frobnicate"}, "unknown command"), ({"cmd": "pause-pump"}, "needs a node id"),
                      ({"cmd": "update-drainer", "node_id": "d"}, "needs a state")):
        with pytest.raises(CtlError, match=msg):
            ctl.run_command(file_registry, **args)
