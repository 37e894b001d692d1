"""Real pumps on loopback for the pump client: a TSO per module, pump processes sharing a file registry."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from binlake.local import LocalTSO, PumpProcess
from ingest.tso import TSOClient


@pytest.fixture(scope="module")
def tso() -> Iterator[LocalTSO]:
    """One PD-compatible TSO per test module."""
    server = LocalTSO()
    yield server
    server.stop()


@pytest.fixture
def ts(tso: LocalTSO) -> Iterator[Callable[[], int]]:
    """A function returning fresh timestamps."""
    client = TSOClient(tso.url)
    yield client.get_ts
    client.close()


@pytest.fixture
def registry_uri(tmp_path: Path) -> str:
    """The file registry the test's pumps share."""
    return f"file://{tmp_path / 'registry.json'}"


@pytest.fixture
def pumps(tmp_path: Path, tso: LocalTSO, registry_uri: str) -> Iterator[Callable[..., PumpProcess]]:
    """Start pump processes (``start(node_id, config_text=..., wait=...)``); all are killed at the end."""
    started: list[PumpProcess] = []

    def start(node_id: str, config_text: str | None = None, wait: bool = True) -> PumpProcess:
        config = None
        if config_text is not None:
            config = tmp_path / f"{node_id}.toml"
            config.write_text(config_text)
        p = PumpProcess(data_dir=tmp_path / node_id, pd_url=tso.url, registry=registry_uri, node_id=node_id,
                        extra_args=["--gen-binlog-interval", "0.5", "--heartbeat-interval", "0.5"],
                        config=config)
        started.append(p)
        return p.start(wait=wait)

    yield start
    for p in started:
        p.kill()
