"""The real-TiDB tier: a real ``tidb-server`` (unistore, binlog on) writing to binlake pump processes
that registered in ``pdetcd`` (etcd + PD's GetMembers/Tso on one address, as PD serves them), drained
by binlake into Iceberg, Parquet and MariaDB, checked by ``binlake verify`` against TiDB's MySQL port.

TiDB's own SQL is the upstream; nothing goes through the emulator."""
from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
import pytest

from binlake.drain import run_drain_command, run_verify_command
from binlake.drain_config import DrainerConfig, SparkSection, UpstreamSection
from sink.iceberg.plugin import IcebergSettings
from sink.parquet.plugin import ParquetSettings
from tests.realtidb.peers import PDEtcd, TiDBServer, remove, scratch_dir
from tests.upstream.binlogs import wait_watermarks
from upstream.local import PumpProcess


@dataclass
class Writes:
    """What ``RealCluster.writing``'s threads did: transactions committed, TiDB's refusals."""

    committed: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class RealCluster:
    """pdetcd, two binlake pumps (no ``--cluster-id``: they learn it from PD) and a real tidb-server."""

    root: Path
    pd: PDEtcd
    pumps: list[PumpProcess]
    tidb: TiDBServer

    @property
    def registry(self) -> str:
        """The pumps' registry: PD's etcd, where TiDB's pump client looks for them."""
        return f"etcd://{self.pd.addr}"

    def settle(self, timeout: float = 60) -> int:
        """Wait until every pump's watermark passes TiDB's current ts; return that ts."""
        target = self.tidb.current_ts()
        wait_watermarks(self.pumps, self.pd.cluster_id, target, timeout=timeout)
        return target

    def options(self, name: str, databases: list[str], sink: str = "iceberg") -> DrainerConfig:
        """A drainer of ``databases`` into a warehouse (or Parquet dir) of its own under ``name``."""
        options = DrainerConfig(registry=self.registry, pd_urls=self.pd.url,
                                data_dir=str(self.root / f"{name}-drainer"),
                                upstream=UpstreamSection(status_url=self.tidb.status_url, dsn=self.tidb.dsn),
                                iceberg=IcebergSettings(warehouse=str(self.root / f"{name}-warehouse")),
                                parquet=ParquetSettings(dir=str(self.root / f"{name}-cdc")),
                                spark=SparkSection(master="local[2]"))
        options.syncer.db_type = sink
        options.syncer.replicate_do_db = list(databases)
        return options

    def drain(self, options: DrainerConfig) -> dict[str, Any]:
        """Settle, then one drain run in process; returns its report."""
        self.settle()
        out = io.StringIO()
        report = run_drain_command(options, out=out).model_dump()
        report["output"] = out.getvalue()
        return report

    @contextmanager
    def writing(self, database: str, transaction: Callable[[Any, int, int], None], writers: int = 4
                ) -> Iterator[Writes]:
        """While the block runs, ``writers`` threads, each on a connection of its own to ``database``,
        call ``transaction(cursor, writer, i)`` for i = 1, 2, …; it commits what it writes. A MySQL
        error (write conflict, schema changed, no binlog written) rolls back and is kept in ``errors``."""
        stop = threading.Event()
        done = Writes()
        lock = threading.Lock()

        def writer(w: int) -> None:
            conn = self.tidb.connect(database)
            i = 0
            try:
                while not stop.is_set():
                    i += 1
                    try:
                        with conn.cursor() as cur:
                            transaction(cur, w, i)
                        with lock:
                            done.committed += 1
                    except pymysql.err.MySQLError as e:   # TiDB's answers under concurrent DDL and faults
                        conn.rollback()
                        with lock:
                            done.errors.append(str(e))
            finally:
                conn.close()

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
        for thread in threads:
            thread.start()
        try:
            yield done
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)

    def verify(self, options: DrainerConfig, ts: int | None = None, against: str | None = None) -> str:
        """``binlake verify`` against TiDB's MySQL port; fails the test with its output on a difference."""
        out = io.StringIO()
        code = run_verify_command(options, ts, out=out, against=against)
        assert code == 0, out.getvalue()
        return out.getvalue()


def start_pumps(root: Path, pd: PDEtcd, tidb: TiDBServer, count: int = 2) -> list[PumpProcess]:
    """``count`` pump processes registered in ``pd``'s etcd, resolving lost commits through TiDB."""
    pumps = [PumpProcess(data_dir=root / f"pump-{i}", pd_url=pd.url, registry=f"etcd://{pd.addr}",
                         node_id=f"pump-{i}",
                         extra_args=["--gen-binlog-interval", "0.3", "--heartbeat-interval", "0.3",
                                     "--upstream-status-url", tidb.status_url]) for i in range(1, count + 1)]
    for p in pumps:
        p.start()
    return pumps


@pytest.fixture(scope="module")
def real() -> Iterator[RealCluster]:
    """One real cluster per test module (tidb-server starts in seconds; its build is `make peers`)."""
    root = scratch_dir("binlake-rt-")
    pumps: list[PumpProcess] = []
    try:
        with PDEtcd(root / "pd") as pd:
            tidb = TiDBServer(root / "tidb", pd.url)
            try:
                pumps = start_pumps(root, pd, tidb)
                with tidb:
                    yield RealCluster(root, pd, pumps, tidb)
            finally:
                for p in pumps:
                    p.kill()
    finally:
        remove(root)
