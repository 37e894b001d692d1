"""load_registry: backend by URI scheme, clear errors otherwise."""
from __future__ import annotations

import pytest

import ingest.registry as registry_pkg
from ingest.config import ConfigError
from ingest.registry import EtcdRegistry, FileRegistry, load_registry


@pytest.mark.parametrize("uri, scheme", [("s3://bucket/reg.json", "s3"), ("zk://h:2181", "zk")])
def test_unknown_scheme_names_it_and_the_accepted_ones(uri: str, scheme: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_registry(uri)
    text = str(info.value)
    assert repr(scheme) in text
    for accepted in ("file://", "etcd://", "http://"):
        assert accepted in text


def test_https_etcd_needs_the_security_section() -> None:
    with pytest.raises(ConfigError, match=r"\[security\] ssl-cert"):
        load_registry("HTTPS://pd:2379")


@pytest.mark.parametrize("uri", ["/var/lib/registry.json", "127.0.0.1:2379", ""])
def test_missing_scheme_is_a_config_error(uri: str) -> None:
    with pytest.raises(ConfigError, match="no scheme"):
        load_registry(uri)


def test_empty_targets_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="names no file"):
        load_registry("file://")
    with pytest.raises(ConfigError, match="no etcd endpoints"):
        load_registry("etcd://")


def test_backend_classes_by_scheme(tmp_path: object) -> None:
    assert isinstance(load_registry(f"file://{tmp_path}/r.json"), FileRegistry)
    reg = load_registry("etcd://127.0.0.1:1,127.0.0.1:2")  # constructing does not connect
    assert isinstance(reg, EtcdRegistry)
    assert reg.endpoints == [("127.0.0.1", 1), ("127.0.0.1", 2)]
    assert isinstance(load_registry("http://127.0.0.1:2379"), EtcdRegistry)


def test_package_reexports() -> None:
    for name in ("Registry", "NodeStatus", "PUMP", "DRAINER", "ONLINE", "PAUSING", "PAUSED", "CLOSING",
                 "OFFLINE", "load_registry"):
        assert hasattr(registry_pkg, name), name
