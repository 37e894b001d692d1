"""Fixtures for registry tests: one real etcd per session and a registry of each backend."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.registry import EtcdRegistry, FileRegistry, Registry
from tests.servers import EtcdServer


@pytest.fixture
def etcd_registry(etcd_server: EtcdServer) -> Iterator[EtcdRegistry]:
    """An EtcdRegistry on the session etcd, emptied before the test."""
    reg = EtcdRegistry.from_spec(etcd_server.endpoint)
    for key in reg.get_prefix(""):
        reg.delete(key)
    yield reg
    reg.close()


@pytest.fixture
def file_registry(tmp_path: Path) -> Iterator[FileRegistry]:
    """A FileRegistry in a fresh directory (created by the registry itself)."""
    reg = FileRegistry(tmp_path / "nested" / "dir" / "registry.json")
    yield reg
    reg.close()


@pytest.fixture(params=["file", "etcd"])
def registry(request: pytest.FixtureRequest) -> Registry:
    """Each backend in turn, for contract tests."""
    name = "file_registry" if request.param == "file" else "etcd_registry"
    return request.getfixturevalue(name)
