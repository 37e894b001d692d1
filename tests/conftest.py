"""Suite-wide setup: the repository root on sys.path, and the harness's process settings (binlake/process.py)."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from binlake.process import HARNESS, configure_process
from ingest.tso import TSOClient
from upstream.local import LocalTSO, PumpProcess

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
configure_process(HARNESS)   # the environment of the commands the tests run in-process (local Spark, pyiceberg)

if TYPE_CHECKING:
    from tests.servers import EtcdServer, KafkaServer, MariaDBServer, MotoS3, PostgresServer, RestCatalogServer


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """A single-node Debian etcd on 127.0.0.1 for the whole session (installed on first use)."""
    from tests.servers import EtcdServer
    with EtcdServer() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A Debian PostgreSQL on 127.0.0.1 for the whole session (installed on first use)."""
    from tests.servers import PostgresServer
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaDBServer]:
    """A Debian MariaDB on 127.0.0.1 for the whole session (installed on first use)."""
    from tests.servers import MariaDBServer
    with MariaDBServer() as server:
        yield server


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """An S3 endpoint (``moto_server``) on 127.0.0.1 for the whole session."""
    from tests.servers import MotoS3
    with MotoS3() as server:
        yield server


T = TypeVar("T")


def peer_built(found: T | None, what: str, target: str) -> T:
    """``found``; when it is None (``make TARGET`` has not put it into ``.peers/``) the test is
    skipped, or fails when ``CI=true`` (``make test`` builds it first)."""
    if found is None:
        why = f"{what}: not in .peers/{target}: run `make {target}`"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    return found


@pytest.fixture(scope="session")
def iceberg_rest_catalog() -> Iterator[RestCatalogServer]:
    """Apache Iceberg's REST catalog server (the jars ``make iceberg-rest`` downloads into ``.peers/``)
    on 127.0.0.1 for the whole session. Without those jars the test is skipped, or fails when
    ``CI=true`` (``make test`` downloads them first). One catalog for the session: binlake's
    checkpoint in it belongs to the first cluster drained into it (another one is refused), so a
    test draining a cluster of its own starts a ``RestCatalogServer`` of its own."""
    from tests.servers import RestCatalogServer, iceberg_rest_classpath
    classpath = peer_built(iceberg_rest_classpath(), "the Iceberg REST catalog's jars", "iceberg-rest")
    with RestCatalogServer(classpath) as server:
        yield server


@pytest.fixture(scope="session")
def kafka_server() -> Iterator[KafkaServer]:
    """A one-node Apache Kafka broker in KRaft mode (the jars ``make kafka`` downloads into ``.peers/``) on
    127.0.0.1 for the whole session, started by the first test that asks for it. Without those jars the
    test is skipped, or fails when ``CI=true`` (``make test`` downloads them first). A test that stops
    it starts it again (``start()``: same port, same data) before it ends."""
    from tests.servers import KafkaServer, kafka_classpath
    with KafkaServer(peer_built(kafka_classpath(), "the Kafka broker's jars", "kafka")) as server:
        yield server


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark for every drain of the session."""
    from transform.spark import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()


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
def registry_uri(tmp_path: Path) -> str:
    """The file registry the test's pumps share."""
    return f"file://{tmp_path / 'registry.json'}"


@pytest.fixture
def pumps(tmp_path: Path, tso: LocalTSO, registry_uri: str) -> Iterator[Callable[..., PumpProcess]]:
    """Start pump processes (``start(node_id, registry=, extra=, config_text=, wait=)``) sharing
    the test's file registry; all are killed at the end of the test."""
    started: list[PumpProcess] = []

    def start(node_id: str = "pump-1", registry: str | None = None, extra: list[str] | None = None,
              config_text: str | None = None, wait: bool = True, client_tls: Any = None) -> PumpProcess:
        config = None
        if config_text is not None:
            config = tmp_path / f"{node_id}.toml"
            config.write_text(config_text)
        p = PumpProcess(data_dir=tmp_path / node_id, pd_url=tso.url,
                        registry=registry or registry_uri, node_id=node_id,
                        extra_args=["--gen-binlog-interval", "0.5", "--heartbeat-interval", "0.5",
                                    *(extra or [])], config=config, client_tls=client_tls)
        started.append(p)
        return p.start(wait=wait)

    yield start
    for p in started:
        p.kill()
