"""A real tidb-server with ``binlog-socket`` writes to a binlake pump over a unix socket (TiDB's local
pump client: no discovery), and the drain equals TiDB."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.realtidb.conftest import RealCluster
from tests.realtidb.peers import PDEtcd, TiDBServer, remove, scratch_dir
from upstream.local import PumpProcess


@pytest.fixture(scope="module")
def local_pump_cluster() -> Iterator[RealCluster]:
    """pdetcd, one pump serving ``socket`` as well as ``addr``, and tidb-server writing to that socket."""
    root = scratch_dir("binlake-rs-")
    socket = root / "pump.sock"
    try:
        with PDEtcd(root / "pd") as pd:
            tidb = TiDBServer(root / "tidb", pd.url, binlog_socket=str(socket))
            config = root / "pump.toml"
            config.write_text(f'socket = "unix://{socket}"\n')
            pump = PumpProcess(data_dir=root / "pump-1", pd_url=pd.url, registry=f"etcd://{pd.addr}",
                               node_id="pump-1", config=config,
                               extra_args=["--gen-binlog-interval", "0.3", "--heartbeat-interval", "0.3",
                                           "--upstream-status-url", tidb.status_url])
            try:
                pump.start()
                with tidb:
                    yield RealCluster(root, pd, [pump], tidb)
            finally:
                pump.kill()
    finally:
        remove(root)


def test_tidb_writes_to_a_pump_over_its_unix_socket(local_pump_cluster: RealCluster) -> None:
    real = local_pump_cluster
    real.tidb.execute("CREATE DATABASE rt_sock", "CREATE TABLE rt_sock.t (id INT PRIMARY KEY, v VARCHAR(10))",
                      "INSERT INTO rt_sock.t VALUES (1, 'a'), (2, 'b')", "UPDATE rt_sock.t SET v = 'c' WHERE id = 1")
    options = real.options("sock", ["rt_sock"])
    report = real.drain(options)
    assert report["tables"][0]["rows"] == {"I": 2, "U": 1, "D": 0}
    real.verify(options, int(report["to_ts"]))
