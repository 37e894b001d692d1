"""An emulated TiDB cluster (in-process) with real pump processes on loopback."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from upstream.cluster import Cluster
from upstream.local import PumpProcess

# Short intervals so failures and recoveries happen within a test (TiDB's defaults are minutes).
CLIENT_OPTIONS = {"check_interval": 0.5, "watch_interval": 0.3, "commit_retry_interval": 0.2,
                  "retry_interval": 0.05, "write_timeout": 3.0}


@pytest.fixture
def registry_uri(tmp_path: Path) -> str:
    """The file registry shared by the pumps and the emulated servers."""
    return f"file://{tmp_path / 'registry.json'}"


@pytest.fixture
def cluster(registry_uri: str) -> Iterator[Cluster]:
    """Two emulated TiDB servers sharing a catalog, KV and TSO, writing binlogs to the registry's pumps."""
    c = Cluster(registry=registry_uri, servers=2, pump_client_options=CLIENT_OPTIONS)
    yield c
    c.close()


@pytest.fixture
def pumps(tmp_path: Path, cluster: Cluster, registry_uri: str) -> Iterator[Callable[..., PumpProcess]]:
    """Start pump processes using the cluster's TSO and (for lost commits) its status API."""
    started: list[PumpProcess] = []

    def start(node_id: str, wait: bool = True) -> PumpProcess:
        p = PumpProcess(data_dir=tmp_path / node_id, pd_url=cluster.tso_url, registry=registry_uri,
                        node_id=node_id,
                        extra_args=["--gen-binlog-interval", "0.3", "--heartbeat-interval", "0.3",
                                    "--upstream-status-url", cluster.status_url])
        started.append(p)
        return p.start(wait=wait)

    yield start
    for p in started:
        p.kill()
