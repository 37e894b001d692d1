"""TiDB Binlog's own ``binlogctl`` against binlake's pumps (opt-in: binlogctl comes from tidb-binlog,
which the Go module proxy does not serve, so CI skips this module; build it by hand and set
``BINLAKE_BINLOGCTL``). ``pause-pump`` and ``offline-pump`` send ``PUT /state/{id}/{pause|close}`` to
the address in the registry, which is the pump's gRPC address: the front door answers it there."""
from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from ingest.registry.base import OFFLINE, PAUSED
from tests.realtidb.peers import PDEtcd, remove, scratch_dir
from tests.waiting import wait_for
from upstream.local import PumpProcess

BINLOGCTL_ENV = "BINLAKE_BINLOGCTL"
pytestmark = pytest.mark.skipif(not os.environ.get(BINLOGCTL_ENV),
                                reason=f"needs TiDB Binlog's binlogctl in {BINLOGCTL_ENV} (built by hand)")


@pytest.fixture
def pd() -> Iterator[PDEtcd]:
    root = scratch_dir("binlake-ctl-")
    try:
        with PDEtcd(root / "pd") as server:
            yield server
    finally:
        remove(root)


def _binlogctl(pd: PDEtcd, *args: str) -> str:
    r = subprocess.run([os.environ[BINLOGCTL_ENV], "-pd-urls", pd.url, *args], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout + r.stderr


def test_binlogctl_pauses_and_offlines_a_binlake_pump(pd: PDEtcd) -> None:
    root = scratch_dir("binlake-ctl-pump-")
    pump = PumpProcess(data_dir=root / "data", pd_url=pd.url, registry=f"etcd://{pd.addr}", node_id="ctl-pump",
                       log_path=root / "pump.log")
    try:
        pump.start(wait=True, timeout=60)
        assert "ctl-pump" in _binlogctl(pd, "-cmd", "pumps")
        _binlogctl(pd, "-cmd", "pause-pump", "-node-id", "ctl-pump")
        wait_for(lambda: pd.pump_state("ctl-pump") == PAUSED, 30, lambda: pump.log_tail())
        assert pump.proc is not None and pump.proc.wait(30) == 0
        pump.start(wait=True, timeout=60)                     # a paused pump comes back online
        _binlogctl(pd, "-cmd", "offline-pump", "-node-id", "ctl-pump")
        wait_for(lambda: pd.pump_state("ctl-pump") == OFFLINE, 60, lambda: pump.log_tail())
    finally:
        pump.kill()
        remove(root)
