"""End-to-end fixtures: an emulated TiDB cluster, two real pump processes, local Spark, and drains
into a real (SQLite) Iceberg catalog."""
from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from binlake.drain import run_drain_command, run_verify_command
from binlake.drain_config import DrainerConfig, SparkSection, UpstreamSection
from sink.iceberg.plugin import IcebergSettings
from sink.iceberg.plugin import catalog_for as open_iceberg_catalog
from tests.drain.inprocess import Local
from tests.upstream.binlogs import wait_watermarks
from upstream.cluster import Cluster
from upstream.local import PumpProcess

KEPT_DROPPED = re.compile(r".+_dropped_c\d+\Z")   # a column the changelog keeps after its drop
CLIENT_OPTIONS = {"check_interval": 0.5, "watch_interval": 0.3, "commit_retry_interval": 0.2,
                  "retry_interval": 0.05, "write_timeout": 3.0}


@dataclass
class Env:
    """A cluster, its pumps and a drainer configuration over one tmp dir."""

    root: Path
    cluster: Cluster
    pumps: list[PumpProcess]
    options: DrainerConfig
    outputs: list[str] = field(default_factory=list)

    def sql(self, script: str, server: int = 0) -> list[Any]:
        """Run SQL on one emulated server; returns its statement results."""
        return self.cluster.execute(script, server=server)

    def settle(self) -> int:
        """Wait until every pump's watermark passes the cluster's latest ts; return that ts."""
        assert self.cluster.flush(60)
        target = self.cluster.ts()
        wait_watermarks(self.pumps, self.cluster.cluster_id, target, timeout=60)
        return target

    def drain(self, options: DrainerConfig | None = None, **kw: Any) -> dict[str, Any]:
        """Settle, then run one drain in-process; returns its report."""
        self.settle()
        out = io.StringIO()
        try:
            return run_drain_command(options or self.options, out=out, **kw).model_dump()
        finally:
            self.outputs.append(out.getvalue())

    def drain_during_workload(self, seed: int, max_txns: int, options: DrainerConfig | None = None
                              ) -> tuple[dict[str, Any], Any]:
        """Start a seeded churn workload with DDLs (4 writers, 120 txn/s, ``max_txns``), drain while it
        commits, wait for it; returns the run report and the workload's stats."""
        import threading

        from upstream.workload import Workload

        wl = Workload(self.cluster, seed=seed, churn=True, ddl_interval=0.3)
        wl.setup()
        stats: list[Any] = []
        writer = threading.Thread(target=lambda: stats.append(wl.run(rate=120, duration=0, workers=4,
                                                                     max_txns=max_txns)))
        writer.start()
        try:
            report = self.drain(options)
        finally:
            writer.join(120)
        assert stats, "the workload did not finish"
        return report, stats[0]

    def verify(self, ts: int, options: DrainerConfig | None = None) -> str:
        """Run ``verify`` at ``ts``; fail the test with its output unless it found no difference."""
        out = io.StringIO()
        code = run_verify_command(options or self.options, ts, out=out)
        assert code == 0, out.getvalue()
        return out.getvalue()

    def catalog(self, options: DrainerConfig | None = None) -> Any:
        """The drainer's Iceberg catalog."""
        return open_iceberg_catalog(options or self.options)

    def fresh_options(self, name: str) -> DrainerConfig:
        """Options for another warehouse (a backfill or a control run)."""
        fresh = self.options.model_copy(deep=True)
        fresh.iceberg.warehouse = str(self.root / name)
        fresh.data_dir = str(self.root / f"{name}-drainer")
        return fresh


@contextmanager
def cluster_with_pumps(root: Path, fake_binlog_interval: str = "0.3", mysql_addr: str | None = "127.0.0.1:0",
                       registry: str | None = None, pull_only: tuple[str, ...] = (),
                       pump_args: tuple[str, ...] = ()) -> Iterator[tuple[Cluster, list[PumpProcess], str]]:
    """Two emulated TiDB servers writing to two real pumps under ``root`` (registry ``registry``, by
    default ``root/registry.json``; ``pump_args`` added to each pump's command line); yields the
    cluster, the started pumps and the registry URI. The
    pumps named in ``pull_only`` serve only TiDB's binlog.Pump (``pump-scan = false``), as TiDB
    Binlog's Go pump does."""
    registry = registry or f"file://{root / 'registry.json'}"
    cluster = Cluster(registry=registry, servers=2, pump_client_options=CLIENT_OPTIONS, mysql_addr=mysql_addr)
    pumps = [PumpProcess(data_dir=root / f"pump-{i}", pd_url=cluster.tso_url, registry=registry, node_id=f"pump-{i}",
                         extra_args=["--gen-binlog-interval", fake_binlog_interval, "--heartbeat-interval", "0.3",
                                     "--upstream-status-url", cluster.status_url,
                                     *(["--pump-scan", "false"] if f"pump-{i}" in pull_only else []), *pump_args])
             for i in (1, 2)]
    try:
        for p in pumps:
            p.start()
        yield cluster, pumps, registry
    finally:
        for p in pumps:
            p.kill()
        cluster.close()


@contextmanager
def make_env(root: Path, pull_only: tuple[str, ...] = (), pump_args: tuple[str, ...] = ()) -> Iterator[Env]:
    """Two emulated TiDB servers writing to two real pumps (``pull_only``, ``pump_args``: see
    ``cluster_with_pumps``); a drainer into root/warehouse that verifies against the emulator's MySQL port."""
    with cluster_with_pumps(root, pull_only=pull_only, pump_args=pump_args) as (cluster, pumps, registry):
        options = DrainerConfig(registry=registry, pd_urls=cluster.tso_url, data_dir=str(root / "drainer"),
                                initial_commit_ts=0,   # every sink from the cluster's start (MySQL's default: now)
                                upstream=UpstreamSection(status_url=cluster.status_url, dsn=cluster.mysql_dsn),
                                iceberg=IcebergSettings(warehouse=str(root / "warehouse")),
                                # Spark even for these small ranges (test_local_engine.py: in process)
                                spark=SparkSection(master="local[2]", in_process_below=0))
        yield Env(root, cluster, pumps, options)


@pytest.fixture
def env(tmp_path: Path, spark: Any) -> Iterator[Env]:
    """Two emulated TiDB servers writing to two real pumps; a drainer into tmp_path/warehouse that
    verifies against the emulator's MySQL port."""
    with make_env(tmp_path) as e:
        yield e


def read_table(catalog: Any, ident: str, snapshot_id: int | None = None) -> pa.Table:
    """A whole Iceberg table (optionally at a snapshot)."""
    tbl = catalog.load_table(ident)
    return tbl.scan(snapshot_id=snapshot_id).to_arrow() if snapshot_id else tbl.scan().to_arrow()


def replay_changelog(changelog: pa.Table, keys: list[str]) -> dict[tuple, dict[str, Any]]:
    """Apply a changelog (sorted by commit ts and seq) to an empty table: key → row (data columns only)."""
    rows = changelog.sort_by([("_tidb_commit_ts", "ascending"), ("_tidb_seq", "ascending")]).to_pylist()
    state: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        image = {k: v for k, v in r.items()
                 if (not k.startswith("_tidb_") or k == "_tidb_rowid") and not KEPT_DROPPED.match(k)}
        key = tuple(image[k] for k in keys)
        if r["_tidb_op"] == "D":
            assert key in state, f"delete of absent key {key}"
            del state[key]
            continue
        if r["_tidb_op"] == "U":
            before = r["_tidb_before"]
            old = tuple(before[k] for k in keys) if all(k in before for k in keys) else key
            assert old in state, f"update of absent key {old}"
            del state[old]
        else:
            assert key not in state, f"insert of present key {key}"
        state[key] = image
    return state


def mirror_state(mirror: pa.Table, keys: list[str]) -> dict[tuple, dict[str, Any]]:
    """The mirror as key → row (data columns only)."""
    out = {}
    for r in mirror.to_pylist():
        image = {k: v for k, v in r.items() if not k.startswith("_tidb_") or k == "_tidb_rowid"}
        key = tuple(image[k] for k in keys)
        assert key not in out, f"duplicate key {key} in the mirror"
        out[key] = image
    return out


def assert_changelog_matches_mirror(catalog: Any, ident: str) -> pa.Table:
    """The changelog of ``ident``, replayed in commit order, gives exactly the mirror; returns it."""
    mirror_tbl = catalog.load_table(ident)
    schema = mirror_tbl.schema()
    keys = [schema.find_column_name(i) for i in schema.identifier_field_ids]
    log = read_table(catalog, ident + "__changelog")
    assert replay_changelog(log, keys) == mirror_state(mirror_tbl.scan().to_arrow(), keys)
    return log


def committed_ts(results: list[Any]) -> set[int]:
    """Commit timestamps of the DML transactions among statement results."""
    return {r.commit_ts for r in results if r.commit_ts and r.kind != "ddl"}


@pytest.fixture
def up(tmp_path: Path, spark: Any) -> Iterator[Local]:
    """An emulated cluster drained in process (``tests/drain/inprocess.py``)."""
    local = Local(tmp_path, spark)
    try:
        yield local
    finally:
        local.close()
