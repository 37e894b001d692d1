"""EtcdRegistry against a real etcd: TiDB-readable keys, failover, and a registry that is down."""
from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from ingest.config import ConfigError
from ingest.errors import RegistryError
from ingest.registry import PUMP, EtcdRegistry, NodeStatus, load_registry
from ingest.registry.etcd import parse_endpoints
from tests.servers import EtcdServer
from upstream.local import free_port


def test_keys_are_readable_with_etcdctl(etcd_server: EtcdServer, etcd_registry: EtcdRegistry) -> None:
    etcd_registry.put_node(PUMP, NodeStatus(node_id="pump-a", host="127.0.0.1:8250", max_commit_ts=99))
    out = etcd_server.etcdctl("get", "--prefix", "/tidb-binlog/v1/pumps/").splitlines()
    assert out[0] == "/tidb-binlog/v1/pumps/pump-a"
    assert json.loads(out[1]) == {"nodeId": "pump-a", "host": "127.0.0.1:8250", "state": "online",
                                  "isAlive": True, "score": 0, "label": None, "maxCommitTS": 99,
                                  "updateTS": 0}


def test_values_written_by_etcdctl_are_read(etcd_server: EtcdServer, etcd_registry: EtcdRegistry) -> None:
    etcd_server.etcdctl("put", "/tidb-binlog/v1/drainers/d1",
                        '{"nodeId":"d1","host":"h:8249","state":"paused","isAlive":false,"score":0,'
                        '"label":null,"maxCommitTS":5,"updateTS":6}')
    node = etcd_registry.get_node("drainers", "d1")
    assert node is not None and (node.state, node.max_commit_ts) == ("paused", 5)


def test_load_registry_etcd_and_pd_style_uris(etcd_server: EtcdServer) -> None:
    for uri in (etcd_server.uri, etcd_server.client_url, f"{etcd_server.client_url}/,{etcd_server.client_url}"):
        reg = load_registry(uri)
        assert isinstance(reg, EtcdRegistry)
        reg.put("/uri-test", uri.encode())
        assert reg.get("/uri-test") == uri.encode()
        reg.delete("/uri-test")
        reg.close()


def test_fails_over_to_the_next_endpoint(etcd_server: EtcdServer) -> None:
    dead = f"127.0.0.1:{free_port()}"
    reg = load_registry(f"etcd://{dead},{etcd_server.endpoint}")
    reg.put("/failover", b"ok")
    assert etcd_server.etcdctl("get", "--print-value-only", "/failover").strip() == "ok"
    assert reg.get("/failover") == b"ok"
    reg.delete("/failover")


def test_nothing_listening_is_a_registry_error_naming_every_endpoint() -> None:
    a, b = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    reg = load_registry(f"etcd://{a},{b}")
    for op in (lambda: reg.get("/x"), lambda: reg.put("/x", b"1"), lambda: reg.delete("/x"),
               lambda: reg.get_prefix("/"), lambda: reg.list_nodes(PUMP)):
        with pytest.raises(RegistryError) as info:
            op()
        assert a in str(info.value) and b in str(info.value)


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A socket that accepts TCP connections (via the backlog) but never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def test_a_server_that_never_answers_times_out_as_registry_error(silent_listener: str) -> None:
    reg = EtcdRegistry(parse_endpoints(silent_listener), timeout=0.5)
    with pytest.raises(RegistryError, match=silent_listener):
        reg.get("/x")


def test_registry_down_then_back(tmp_path: object) -> None:
    with EtcdServer() as server:
        reg = load_registry(server.uri)
        reg.put("/survives", b"1")
        server.stop()
        with pytest.raises(RegistryError, match=server.endpoint):
            reg.get("/survives")
        with pytest.raises(RegistryError, match=server.endpoint):
            reg.put("/survives", b"2")
        server.start()
        assert reg.get("/survives") == b"1"  # the same registry object reconnects


def test_parse_endpoints() -> None:
    assert parse_endpoints("127.0.0.1:2379") == [("127.0.0.1", 2379)]
    assert parse_endpoints("http://a:1, http://b:2/") == [("a", 1), ("b", 2)]
    assert parse_endpoints("etcd://h") == [("h", 2379)]
    assert parse_endpoints("https://a:1") == [("a", 1)]   # TLS itself comes from [security]
    assert parse_endpoints("[::1]:2381,pd") == [("::1", 2381), ("pd", 2379)]
    for bad, msg in ((" , ", "no etcd endpoints"), ("a:b", "not a number"), ("a:70000", "out of range"),
                     ("ftp://a:1", "ftp"), (":1", "no host")):
        with pytest.raises(ConfigError, match=msg):
            parse_endpoints(bad)
