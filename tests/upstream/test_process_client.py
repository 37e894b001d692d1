"""The emulator with its pump clients in child processes (``Cluster(pump_client_process=True)``):
the classic example and the pump-kill/crash test run unchanged against real pumps, and the process
client's own failure paths (no pump at start, errors from the child, a child that dies)."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest import binlog as bl
from schemas import binlog_pb2
from tests.upstream.conftest import CLIENT_OPTIONS
from tests.upstream.test_binlog_integration import test_classic_example_binlogs  # noqa: F401 - rerun here
from tests.upstream.test_faults_and_snapshot import (  # noqa: F401 - rerun here
    test_pump_killed_and_restarted_and_crash_resolved,
)
from upstream.cluster import Cluster
from upstream.local import PumpProcess
from upstream.pump_client.errors import BinlogTooLarge, NoPumpFound, PumpClientClosed
from upstream.pump_client.process import ProcessPumpsClient

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(registry_uri: str) -> Iterator[Cluster]:
    """Two emulated servers whose pump clients run in child processes (overrides conftest's)."""
    c = Cluster(registry=registry_uri, servers=2, pump_client_options=CLIENT_OPTIONS, pump_client_process=True)
    yield c
    c.close()


def _prewrite(start_ts: int, value: bytes) -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog(tp=bl.PREWRITE, start_ts=start_ts, prewrite_key=b"t\x80pk", prewrite_value=value)


def test_no_pump_registered_is_raised_in_the_parent(tmp_path: Path) -> None:
    with pytest.raises(NoPumpFound, match="no pump found in pd") as err:
        ProcessPumpsClient(f"file://{tmp_path / 'empty.json'}", 1)
    assert "empty.json" in str(err.value)


def test_child_errors_keep_their_class_and_a_dead_child_fails_every_call(cluster: Cluster, registry_uri: str,
                                                                         tmp_path: Path) -> None:
    config = tmp_path / "pump-1.toml"
    config.write_text("max-message-size = 1048576\n")
    pump = PumpProcess(data_dir=tmp_path / "pump-1", pd_url=cluster.tso_url, registry=registry_uri,
                       node_id="pump-1", extra_args=["--gen-binlog-interval", "0.3"], config=config).start()
    client = ProcessPumpsClient(registry_uri, cluster.cluster_id, cpus={min(os.sched_getaffinity(0))},
                                **CLIENT_OPTIONS)
    try:
        with pytest.raises(BinlogTooLarge, match="binlog data is too large"):
            client.write_binlog(_prewrite(cluster.ts(), b"x" * (2 << 20)))
        s = cluster.ts()
        assert client.write_binlog(_prewrite(s, b"rows")) == "pump-1"
        commit = binlog_pb2.Binlog(tp=bl.COMMIT, start_ts=s, commit_ts=cluster.ts(), prewrite_key=b"t\x80pk")
        assert client.write_commit_async(commit).result(30) == "pump-1"
        with pytest.raises(ValueError, match="takes commit or rollback binlogs"):
            client.write_commit_async(_prewrite(cluster.ts(), b""))
        client._proc.kill()                      # the child dies
        client._proc.join(10)
        with pytest.raises(PumpClientClosed, match="pump client process"):
            client.write_binlog(_prewrite(cluster.ts(), b"rows"))
    finally:
        client.close()
        pump.kill()
