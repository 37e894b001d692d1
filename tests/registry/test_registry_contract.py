"""Contract tests run against every registry backend (file and real etcd)."""
from __future__ import annotations

import json

import pytest

from ingest.errors import RegistryError
from ingest.registry import (
    DRAINER,
    OFFLINE,
    ONLINE,
    PAUSED,
    PUMP,
    STATUS_ADDR_LABEL,
    NodeStatus,
    Registry,
    kind_prefix,
    node_key,
)

TIDB_KEY_ORDER = ["nodeId", "host", "state", "isAlive", "score", "label", "maxCommitTS", "updateTS"]


def test_put_get_delete(registry: Registry) -> None:
    key = "/tidb-binlog/v1/pumps/p1"
    assert registry.get(key) is None
    registry.put(key, b"one")
    assert registry.get(key) == b"one"
    registry.put(key, b"two")
    assert registry.get(key) == b"two"
    registry.delete(key)
    assert registry.get(key) is None
    registry.delete(key)  # deleting an absent key is not an error
    assert registry.get(key) is None


def test_get_prefix_returns_only_matching_keys_in_order(registry: Registry) -> None:
    registry.put("/tidb-binlog/v1/pumps/b", b"2")
    registry.put("/tidb-binlog/v1/pumps/a", b"1")
    registry.put("/tidb-binlog/v1/pumpsX", b"not under the prefix")
    registry.put("/tidb-binlog/v1/drainers/d", b"3")
    got = registry.get_prefix("/tidb-binlog/v1/pumps/")
    assert list(got.items()) == [("/tidb-binlog/v1/pumps/a", b"1"), ("/tidb-binlog/v1/pumps/b", b"2")]
    assert registry.get_prefix("/nothing/here/") == {}
    assert set(registry.get_prefix("")) == {"/tidb-binlog/v1/pumps/a", "/tidb-binlog/v1/pumps/b",
                                            "/tidb-binlog/v1/pumpsX", "/tidb-binlog/v1/drainers/d"}


def test_values_are_bytes_exactly_including_non_utf8_and_non_ascii_keys(registry: Registry) -> None:
    raw = bytes(range(256))
    registry.put("/bin/raw", raw)
    registry.put("/bin/ключ-键", "värde-值".encode())
    assert registry.get("/bin/raw") == raw
    assert registry.get("/bin/ключ-键") == "värde-值".encode()
    assert registry.get_prefix("/bin/") == {"/bin/raw": raw, "/bin/ключ-键": "värde-值".encode()}


def test_node_key_layout_is_tidb_binlog() -> None:
    assert node_key(PUMP, "pump-1") == "/tidb-binlog/v1/pumps/pump-1"
    assert node_key(DRAINER, "d") == "/tidb-binlog/v1/drainers/d"
    assert kind_prefix(PUMP) == "/tidb-binlog/v1/pumps/"
    with pytest.raises(RegistryError, match="unknown node kind"):
        node_key("pump", "x")


def test_status_json_round_trip_with_tidb_key_names_and_order(registry: Registry) -> None:
    status = NodeStatus(node_id="host-a:8250", host="10.0.0.1:8250", state=PAUSED, is_alive=False,
                        score=3, labels={STATUS_ADDR_LABEL: "127.0.0.1:18250"},
                        max_commit_ts=445566778899001, update_ts=445566778899002)
    registry.put_node(PUMP, status)
    raw = registry.get("/tidb-binlog/v1/pumps/host-a:8250")
    assert raw is not None
    obj = json.loads(raw)  # dicts keep the document's key order
    assert list(obj) == TIDB_KEY_ORDER
    assert obj == {
        "nodeId": "host-a:8250", "host": "10.0.0.1:8250", "state": "paused", "isAlive": False, "score": 3,
        "label": {"labels": {"status-addr": "127.0.0.1:18250"}},
        "maxCommitTS": 445566778899001, "updateTS": 445566778899002,
    }
    assert registry.get_node(PUMP, "host-a:8250") == status
    assert registry.get_node(DRAINER, "host-a:8250") is None
    assert status.status_addr == "127.0.0.1:18250"


def test_status_written_by_tidb_is_read_and_unknown_keys_survive_a_rewrite(registry: Registry) -> None:
    # What a Go pump writes: label null, plus a key from some future version.
    go_json = ('{"nodeId":"pump-go","host":"127.0.0.1:8250","state":"online","isAlive":true,"score":0,'
               '"label":null,"maxCommitTS":42,"updateTS":43,"futureField":{"x":[1,2]}}')
    registry.put("/tidb-binlog/v1/pumps/pump-go", go_json.encode())
    node = registry.get_node(PUMP, "pump-go")
    assert node is not None
    assert (node.state, node.max_commit_ts, node.labels, node.status_addr) == (ONLINE, 42, None, "127.0.0.1:8250")
    node.state = OFFLINE
    registry.put_node(PUMP, node)
    rewritten = json.loads(registry.get("/tidb-binlog/v1/pumps/pump-go") or b"")
    assert list(rewritten) == TIDB_KEY_ORDER + ["futureField"]
    assert rewritten["futureField"] == {"x": [1, 2]}
    assert rewritten["state"] == "offline"
    assert rewritten["label"] is None


def test_list_nodes_sorted_by_id_and_kinds_separate(registry: Registry) -> None:
    for node_id in ("p2", "p1", "p3"):
        registry.put_node(PUMP, NodeStatus(node_id=node_id, host=f"{node_id}:8250"))
    registry.put_node(DRAINER, NodeStatus(node_id="d1", host="d1:8249"))
    assert [n.node_id for n in registry.list_nodes(PUMP)] == ["p1", "p2", "p3"]
    assert [n.node_id for n in registry.list_nodes(DRAINER)] == ["d1"]


@pytest.mark.parametrize("bad", [
    b"{not json",
    b"[1, 2]",
    b'{"host": "x"}',
    b'{"nodeId": "p", "state": "sleeping"}',
    b'{"nodeId": "p", "state": "online", "maxCommitTS": "lots"}',
    b'{"nodeId": "p", "state": "online", "label": {"labels": [1]}}',
])
def test_bad_status_json_is_a_registry_error(registry: Registry, bad: bytes) -> None:
    registry.put("/tidb-binlog/v1/pumps/p", bad)
    with pytest.raises(RegistryError):
        registry.get_node(PUMP, "p")
    with pytest.raises(RegistryError):
        registry.list_nodes(PUMP)
