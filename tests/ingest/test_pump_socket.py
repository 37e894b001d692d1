"""pump.toml ``socket``: the pump serves its gRPC services on a unix socket next to ``addr``, where
TiDB's ``binlog-socket`` client writes; the socket file is the pump's own (removed at stop, a stale
one replaced at start, one in use refused)."""
from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest import binlog as bl
from ingest.config import ConfigError, load_config
from ingest.pump.config import PumpConfig
from ingest.scan_client import ScanClient
from tests.ingest.helpers import commit, prewrite
from tests.waiting import wait_for
from upstream.local import PumpProcess, PumpWriter

Start = Callable[..., PumpProcess]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: a unix socket address holds at most 107 bytes."""
    d = Path(tempfile.mkdtemp(prefix="blsock"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("value, path", [
    ("unix:///run/pump.sock", "/run/pump.sock"),   # TiDB Binlog's form
    ("/run/pump.sock", "/run/pump.sock"),          # the path TiDB's binlog-socket names
    ("unix:/run/pump.sock", "/run/pump.sock"),     # gRPC's forms
    ("unix:pump.sock", "pump.sock"),
    ("", ""),
])
def test_socket_values(value: str, path: str) -> None:
    assert load_config(PumpConfig, None, {"socket": value}).socket == path


@pytest.mark.parametrize("value, message", [
    ("unix://run/pump.sock", "three slashes"),
    ("tcp://127.0.0.1:8250", "not a unix socket"),
    ("unix://", "names no path"),
    ("/" + "x" * 120, "longer than 107 bytes"),
])
def test_bad_socket_values_are_refused(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"socket: .*{message}"):
        load_config(PumpConfig, None, {"socket": value})


def write_over_socket(path: Path, cluster_id: int, ts: Callable[[], int]) -> tuple[int, int]:
    """A transaction written the way TiDB's binlog-socket client sends it: grpcio over ``unix:``."""
    w = PumpWriter(f"unix:{path}", cluster_id)
    try:
        start = ts()
        w.write(prewrite(start, b"over the socket"))
        commit_ts = ts()
        w.write(commit(start, commit_ts))
    finally:
        w.close()
    return start, commit_ts


@pytest.mark.integration
def test_the_pump_serves_write_binlog_on_its_unix_socket(pumps: Start, tso: Any, ts: Callable[[], int],
                                                        short_dir: Path) -> None:
    path = short_dir / "pump.sock"
    p = pumps(config_text=f'socket = "unix://{path}"\n')
    mode = path.stat().st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o660
    start, commit_ts = write_over_socket(path, tso.cluster_id, ts)
    with ScanClient(p.addr, tso.cluster_id) as c:                        # read back over addr
        wait_for(lambda: c.watermark().max_commit_ts >= commit_ts, 15, p.log_tail)
        assert [(r.key_ts, r.tp) for r in c.scan(start - 1, commit_ts)] == [(start, bl.PREWRITE),
                                                                           (commit_ts, bl.COMMIT)]
    with ScanClient(f"unix:{path}", tso.cluster_id) as c:                # every service is on the socket
        assert c.watermark().max_commit_ts >= commit_ts
    assert p.terminate() == 0
    assert not path.exists(), "the socket file outlived the pump"


@pytest.mark.integration
def test_a_stale_socket_is_replaced_and_one_in_use_refused(pumps: Start, tso: Any, ts: Callable[[], int],
                                                          short_dir: Path) -> None:
    path = short_dir / "pump.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))                                                # a socket file nobody listens on
    stale.close()
    p = pumps(config_text=f'socket = "{path}"\n')
    write_over_socket(path, tso.cluster_id, ts)
    other = pumps("pump-2", config_text=f'socket = "{path}"\n', wait=False)
    assert other.wait_exit(60) == 1
    errors = [line for line in other.log_tail(200).splitlines() if line.startswith("binlake pump: error:")]
    assert len(errors) == 1 and f"socket {path} is in use" in errors[0], other.log_tail()
    write_over_socket(path, tso.cluster_id, ts)                          # the first pump still serves there
    assert p.terminate() == 0
    path.write_text("not a socket")
    third = pumps("pump-3", config_text=f'socket = "{path}"\n', wait=False)
    assert third.wait_exit(60) == 1
    assert f"socket {path} exists and is not a socket" in third.log_tail(), third.log_tail()
    assert path.read_text() == "not a socket"
    assert os.listdir(short_dir) == ["pump.sock"]

