"""Fixtures for registry tests: one real etcd per session and a registry of each backend."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:  # `pytest` run without `python -m` does not put the repo root on sys.path
    sys.path.insert(0, _REPO)

from ingest.registry import EtcdRegistry, FileRegistry, Registry  # noqa: E402
from tests.servers import EtcdServer  # noqa: E402 - type of the suite-wide fixture


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
