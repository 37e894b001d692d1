"""Fixtures that start real things on loopback: a PD-compatible TSO and pump processes."""
from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator

import pytest

from binlake.local import LocalTSO, PumpProcess
from ingest.tso import TSOClient
from tests.ingest.helpers import MVCCHandler


@pytest.fixture(scope="module")
def tso() -> Iterator[LocalTSO]:
    """One TSO per test module."""
    server = LocalTSO()
    yield server
    server.stop()


@pytest.fixture
def ts(tso: LocalTSO) -> Iterator[Callable[[], int]]:
    """A function returning fresh timestamps from the TSO."""
    client = TSOClient(tso.url)
    yield client.get_ts
    client.close()


@pytest.fixture
def pumps(tmp_path: Path, tso: LocalTSO) -> Iterator[Callable[..., PumpProcess]]:
    """Start pump processes sharing a file registry; all are killed at the end of the test."""
    started: list[PumpProcess] = []

    def start(node_id: str = "pump-1", registry: str | None = None, extra: list[str] | None = None,
              config_text: str | None = None, wait: bool = True) -> PumpProcess:
        config = None
        if config_text is not None:
            config = tmp_path / f"{node_id}.toml"
            config.write_text(config_text)
        p = PumpProcess(data_dir=tmp_path / node_id, pd_url=tso.url,
                        registry=registry or f"file://{tmp_path / 'registry.json'}", node_id=node_id,
                        extra_args=["--gen-binlog-interval", "0.5", "--heartbeat-interval", "0.5",
                                    *(extra or [])], config=config)
        started.append(p)
        return p.start(wait=wait)

    yield start
    for p in started:
        p.kill()


@pytest.fixture
def mvcc_server() -> Iterator[tuple[str, type[MVCCHandler]]]:
    """A TiDB status API stand-in serving the MVCC-by-key contract; yields (base url, handler class)."""
    handler = type("MVCC", (MVCCHandler,), {"answers": {}, "asked": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()
