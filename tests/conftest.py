"""Suite-wide setup: the repository root on sys.path, and loopback-only Spark/grpc settings."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

if TYPE_CHECKING:
    from tests.servers import EtcdServer


@pytest.fixture(scope="session")
def etcd_server() -> Iterator["EtcdServer"]:
    """A single-node Debian etcd on 127.0.0.1 for the whole session (installed on first use)."""
    from tests.servers import EtcdServer
    with EtcdServer() as server:
        yield server
