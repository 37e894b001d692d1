"""The real-TiDB tier: a real ``tidb-server`` (unistore, binlog on) writing to binlake pump processes
that registered in ``pdetcd`` (etcd + PD's GetMembers/Tso on one address, as PD serves them), drained
by binlake into Iceberg, Parquet and MariaDB, checked by ``binlake verify`` against TiDB's MySQL port.

TiDB's own SQL is the upstream; nothing goes through the emulator. A test taking the ``real`` cluster
runs once per tidb-server build of ``tests/realtidb/versions.py``: on every build when it is marked
``every_tidb``, else on the ``full`` ones."""
from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pymysql
import pytest

from binlake.drain import run_drain_command, run_verify_command
from binlake.drain_config import DrainerConfig, SparkSection, UpstreamSection
from sink.iceberg.plugin import IcebergSettings
from sink.iceberg.plugin import catalog_for as open_iceberg_catalog
from sink.parquet.files import read_changelog
from sink.parquet.plugin import ParquetSettings
from tests.realtidb.peers import PDEtcd, TiDBServer, remove, scratch_dir
from tests.realtidb.versions import BUILDS, TiDBBuild
from tests.servers import MariaDBServer
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
        options.initial_commit_ts = 0   # every sink from the cluster's start (MySQL's default: PD's ts now)
        return options

    def drain(self, options: DrainerConfig) -> dict[str, Any]:
        """Settle, then one drain run in process; returns its report. A run that read past TiDB's clock
        fails the test: TiDB stamps from unistore's clock, the pumps' watermark from PD's (pdetcd keeps
        it behind), and a watermark ahead of TiDB lets later commits fall below a finished run."""
        self.settle()
        out = io.StringIO()
        report = run_drain_command(options, out=out).model_dump()
        report["output"] = out.getvalue()
        try:
            clock = self.tidb.current_ts()
        except pymysql.err.MySQLError:   # TiDB stopped by the test
            return report
        assert int(report["to_ts"]) < clock, (
            f"the drain ran to ts {report['to_ts']}, past TiDB's clock {clock}: PD's clock is ahead of TiDB's")
        return report

    def late_commits(self) -> list[str]:
        """The pumps' log lines of commits that arrived below their watermark (two clocks disagreeing)."""
        return [line for p in self.pumps if p.log_path is not None and p.log_path.exists()
                for line in p.log_path.read_text(errors="replace").splitlines()
                if "arrived after the watermark passed it" in line]

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


def start_pumps(root: Path, pd: PDEtcd, tidb: TiDBServer, count: int = 2,
                extra_args: tuple[str, ...] = ()) -> list[PumpProcess]:
    """``count`` pump processes registered in ``pd``'s etcd, resolving lost commits through TiDB."""
    pumps = [PumpProcess(data_dir=root / f"pump-{i}", pd_url=pd.url, registry=f"etcd://{pd.addr}",
                         node_id=f"pump-{i}",
                         extra_args=["--gen-binlog-interval", "0.3", "--heartbeat-interval", "0.3",
                                     "--upstream-status-url", tidb.status_url, *extra_args])
             for i in range(1, count + 1)]
    for p in pumps:
        p.start()
    return pumps


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``tidb_build``: every build for a test marked ``every_tidb``, the ``full`` ones for the others."""
    if "tidb_build" in metafunc.fixturenames:
        every = metafunc.definition.get_closest_marker("every_tidb") is not None
        builds = [b for b in BUILDS if every or b.full]
        metafunc.parametrize("tidb_build", builds, ids=[b.line for b in builds], scope="module")


@pytest.fixture(scope="module")
def real(tidb_build: TiDBBuild) -> Iterator[RealCluster]:
    """One real cluster per test module and tidb-server build (tidb-server starts in seconds; its
    build is `make peers`)."""
    root = scratch_dir(f"binlake-rt-{tidb_build.line}-")
    try:
        with real_cluster(root, tidb_build) as cluster:
            yield cluster
    finally:
        remove(root)


@contextmanager
def real_cluster(root: Path, build: TiDBBuild, write_timeout: str = "15s", persistent: bool = False,
                 pump_args: tuple[str, ...] = (), pd_offset_ms: int = -1) -> Iterator[RealCluster]:
    """pdetcd, two pumps and a tidb-server of ``build`` under ``root`` (left in place), stopped on exit;
    ``write_timeout`` is TiDB's pump client write timeout (``[binlog] write-timeout``); ``persistent``
    keeps unistore's data in ``root/tidb-store``, so a killed tidb-server restarts on it; ``pump_args``
    go to every pump; ``pd_offset_ms`` puts PD's TSO that far from the wall clock (above zero: ahead of
    TiDB's, as a restarted PD can be; the pumps' late commits are then not a failure)."""
    pumps: list[PumpProcess] = []
    with PDEtcd(root / "pd", offset_ms=pd_offset_ms) as pd:
        tidb = TiDBServer(root / "tidb", pd.url, build=build, write_timeout=write_timeout,
                          store_dir=root / "tidb-store" if persistent else None)
        try:
            pumps = start_pumps(root, pd, tidb, extra_args=pump_args)
            with tidb:
                cluster = RealCluster(root, pd, pumps, tidb)
                yield cluster
                late = cluster.late_commits()
                assert not late or pd_offset_ms > 0, f"a pump saw commits below its watermark: {late[:3]}"
        finally:
            for p in pumps:
                p.kill()


def parquet_matches_iceberg(iceberg: DrainerConfig, parquet: DrainerConfig) -> int:
    """Every row change of the Iceberg changelogs is in the Parquet sink's changelog of the same table
    name with the same values (where Parquet's projection holds one), and nothing else is: a table
    name's Parquet changelog holds every incarnation of the name (Iceberg keeps a dropped one as
    ``<name>__changelog_dropped_<ts>``).
    Returns the number of table names compared."""
    catalog = open_iceberg_catalog(iceberg)
    by_name: dict[tuple[str, str], list[pa.Table]] = {}
    for namespace in catalog.list_namespaces():
        for ident in catalog.list_tables(namespace):
            db, name = ident[0], ident[-1]
            base, marker, _ = name.partition("__changelog")
            if marker:
                by_name.setdefault((db, base), []).append(catalog.load_table(ident).scan().to_arrow())
    for (db, name), parts in by_name.items():
        rows = read_changelog(parquet.parquet.dir, db, name).to_pylist()
        pq = {(r["_tidb_commit_ts"], r["_tidb_seq"]): r for r in rows}
        seen = 0
        for part in parts:
            for row in part.to_pylist():
                key = (row["_tidb_commit_ts"], row["_tidb_seq"])
                assert key in pq, f"{db}.{name}: change {key} is in Iceberg, not in Parquet"
                other = pq[key]
                # Parquet projects older schema versions onto the newest by name: a renamed column's
                # older values read as null there; Iceberg keeps a column a DDL rewrote under a new id
                # as <column>_dropped_c<id> in the changes written before (the column itself null)
                rewritten = {c for c in row if any(k.startswith(f"{c}_dropped_c") for k in row)}
                same = {c: row[c] for c in row if other.get(c) is not None and c != "_tidb_before"
                        and not (c in rewritten and row[c] is None)}
                assert same == {c: other[c] for c in same}, f"{db}.{name}: change {key} differs"
                seen += 1
        assert seen == len(pq), f"{db}.{name}: Parquet holds {len(pq) - seen} changes Iceberg does not"
    return len(by_name)


def drain_everywhere(real: RealCluster, maria: MariaDBServer, name: str, databases: list[str],
                     reset: tuple[str, ...] = ()) -> int:
    """Drain ``databases`` (none: every database TiDB Binlog's default filters keep) into Iceberg,
    Parquet and MariaDB, each from ts 0; verify Iceberg and MariaDB against TiDB and Parquet against
    Iceberg. MariaDB starts without ``databases`` and ``reset``. Returns the Iceberg run's to_ts."""
    iceberg = real.options(name, databases)
    report = real.drain(iceberg)
    assert report["cluster_id"] == real.pd.cluster_id
    to_ts = int(report["to_ts"])
    real.verify(iceberg, to_ts)

    # nothing is written while the tests drain, so a later range holds the same changes
    parquet = real.options(f"{name}-pq", databases, sink="parquet")
    assert int(real.drain(parquet)["to_ts"]) >= to_ts
    assert parquet_matches_iceberg(iceberg, parquet) > 0

    maria.reset(*databases, *reset)
    mysql = real.options(f"{name}-my", databases, sink="mysql")
    mysql.initial_commit_ts = 0   # from the start, as the lake (a MySQL sink's default is PD's ts at its first run)
    mysql.syncer.to.dsn = maria.dsn
    mysql.syncer.worker_count = 4
    real.drain(mysql)
    real.verify(mysql, against=maria.dsn)
    return to_ts


@pytest.fixture
def maria(mariadb_server: MariaDBServer) -> MariaDBServer:
    """The session's MariaDB (each drain resets the databases it replicates)."""
    return mariadb_server
