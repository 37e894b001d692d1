"""``binlake-emulator demo``: the whole pipeline on one machine.

The upstream emulator (PD-compatible TSO + TiDB status API + SQL) writes binlogs to two real pump
processes while a seeded workload with key churn and DDLs runs; two Drainer runs on local Spark
drain it into Iceberg tables in ``<dir>/warehouse``; DuckDB queries the tables; ``verify`` compares
every mirror with the upstream's snapshot at each run's end; ``check`` runs the quality gates on both
runs (skipped when Great Expectations is not installed).

Part of the emulator's distribution (``emulator/pyproject.toml``), not of binlake's: the one module of
``upstream`` that drives binlake's commands (docs/architecture.md, section 3).
"""
from __future__ import annotations

import io
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from binlake.drain import run_drain_command, run_verify_command
from binlake.drain_config import DrainerConfig
from ingest import ctl
from ingest.config import load_config
from ingest.registry import load_registry
from ingest.registry.base import PUMP
from ingest.scan_client import ScanClient
from sink.iceberg.plugin import SPEC as ICEBERG
from sink.mysql.plugin import SPEC as MYSQL
from upstream.local import PumpProcess

if TYPE_CHECKING:
    from upstream.cluster import Cluster
    from upstream.workload import Stats

TRANSACTIONS = 400


def _say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def _cluster(registry_uri: str) -> Cluster:
    """Two emulated TiDB servers; the MySQL port on TiDB's 4000, or a free one when 4000 is taken."""
    from upstream.cluster import Cluster

    try:
        return Cluster(registry=registry_uri, servers=2, mysql_addr="127.0.0.1:4000")
    except OSError:
        return Cluster(registry=registry_uri, servers=2, mysql_addr="127.0.0.1:0")


def _settle(cluster: Cluster, pumps: list[PumpProcess], timeout: float = 60.0) -> None:
    """Wait until every pump's watermark passes the cluster's current ts; raise after ``timeout``."""
    cluster.flush(timeout)
    target = cluster.ts()
    deadline = time.monotonic() + timeout
    for p in pumps:
        with ScanClient(p.addr, cluster.cluster_id) as c:
            while c.watermark().max_commit_ts < target:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{p.node_id}'s watermark did not pass {target} in {timeout:.0f} s; "
                                       f"see {p.log_path}")
                time.sleep(0.1)


def run_demo(directory: Path, transactions: int = TRANSACTIONS) -> int:
    """Run the demo in ``directory`` (wiped first); return 0 when every check passed."""
    from upstream.workload import Workload

    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    directory = directory.resolve()
    registry_uri = f"file://{directory / 'registry.json'}"
    cluster = _cluster(registry_uri)
    _say(f"upstream emulator: PD-compatible TSO {cluster.tso_url}, TiDB status API {cluster.status_url}, "
         f"MySQL protocol {cluster.mysql_dsn}, 2 TiDB servers (cluster id {cluster.cluster_id})")
    pumps = [PumpProcess(data_dir=directory / f"pump-{i}", pd_url=cluster.tso_url, registry=registry_uri,
                         node_id=f"pump-{i}", extra_args=["--gen-binlog-interval", "0.5",
                                                          "--upstream-status-url", cluster.status_url])
             for i in (1, 2)]
    ok = True
    try:
        for p in pumps:
            p.start()
            print(f"    {p.node_id}: gRPC {p.addr}, HTTP {p.status_url}, data {p.data_dir}, log {p.log_path}")
        registry = load_registry(registry_uri)
        print(ctl.format_nodes(ctl.list_nodes(registry, PUMP)))
        registry.close()
        options = load_config(DrainerConfig, None, {
            "registry": registry_uri, "pd-urls": cluster.tso_url, "data-dir": str(directory / "drainer"),
            "upstream.status-url": cluster.status_url, "upstream.dsn": cluster.mysql_dsn,
            "iceberg.warehouse": str(directory / "warehouse"),
            "spark.master": "local[2]"})

        # the JVM is forked while no gRPC call is in flight (a fork during the workload's calls can
        # kill the child before it execs java); the drains reuse this session
        from transform.spark import spark_session

        _say(f"starting Spark ({options.spark.master})")
        spark_session(options.spark.master, options.spark.app_name, options.spark.conf,
                          options.spark.class_archive)
        wl = Workload(cluster, seed=1, churn=True, ddl_interval=0.5)
        wl.setup()
        _say(f"workload: {transactions} transactions (5 rows each, every column type, deletes and re-inserts, "
             f"primary-key changes) and DDLs on wl_ddl (add / modify / rename / drop column) while it runs")
        stats: list[Stats] = []
        writer = threading.Thread(target=lambda: stats.append(wl.run(rate=100, duration=0, workers=4,
                                                                     max_txns=transactions)))
        writer.start()
        _settle(cluster, pumps)
        _say("drain run 1 (while the workload is still writing): pumps -> Spark -> Iceberg")
        on_spark = options.model_copy(deep=True)
        on_spark.spark.in_process_below = 0     # a range this small would run in process (run 2 does)
        r1 = run_drain_command(on_spark)
        writer.join()
        print(f"    workload: {stats[0].committed} committed, {stats[0].ddls} DDLs, "
              f"{stats[0].aborted} aborted by a concurrent DDL, {len(stats[0].errors)} errors")
        _settle(cluster, pumps)
        _say("drain run 2: continues from run 1's checkpoint, in this process (its binlogs are below "
             "[spark] in-process-below: no Spark)")
        r2 = run_drain_command(options)

        _say("DuckDB over the Iceberg tables pyiceberg wrote")
        ok = _duckdb_tour(options) and ok
        for report in (r1, r2):
            _say(f"binlake verify --ts {report.to_ts}: every mirror against the upstream read at that ts "
                 f"(SET @@tidb_snapshot over {cluster.mysql_dsn})")
            out = io.StringIO()
            code = run_verify_command(options, report.to_ts, out=out)
            print(out.getvalue(), end="")
            ok = ok and code == 0
        gated = None
        for report in (r1, r2):
            _say(f"binlake check --ts {report.to_ts}: quality gates (Great Expectations on Spark) over the "
                 f"run's changelog rows and the mirrors at its end")
            gated = _quality_gate(options, report.to_ts)
            ok = ok and gated is not False
        replicated = _mysql_leg(directory, options, cluster.mysql_dsn)
        ok = ok and replicated is not False
        what = ("every mirror equals the upstream at both run ends"
                + (", every quality gate holds" if gated else "")
                + (", and MariaDB equals it at its checkpoint" if replicated else ""))
        _say(f"PASS: {what}" if ok else "FAIL: see the differences above")
        warehouse = ICEBERG.settings(options).warehouse
        print(f"""
Look further:
  warehouse        {warehouse} (SQLite catalog {warehouse}/catalog.db)
  run reports      {options.data_dir}/reports/run-*.json
  quality gates    {options.data_dir}/quality/<to_ts>/results.json and docs/index.html
  pump logs        {directory}/pump-*.log
  query            .venv/bin/python -c "from sink.iceberg.catalog import open_catalog; \\
                     print(open_catalog('{warehouse}').load_table('test.wl_orders').scan().to_arrow())"
  DuckDB           see README, "The Drainer" (iceberg_scan over a table's metadata.json)
  SQL upstream     binlake-emulator serve --registry '' & mysql -h127.0.0.1 -P4000 -uroot test""")
        return 0 if ok else 1
    finally:
        for p in pumps:
            p.kill()
        cluster.close()


def _mysql_leg(directory: Path, options: DrainerConfig, upstream_dsn: str) -> bool | None:
    """Replicate the whole range into a local MariaDB with the MySQL sink and verify it at its checkpoint;
    None (skipped) when MariaDB is not installed."""
    if shutil.which("mariadbd") is None:
        _say("MariaDB is not installed: the MySQL sink leg is skipped (`make demo-mysql` installs it)")
        return None
    from upstream.local import MariaDBProcess

    with MariaDBProcess(directory / "mariadb") as maria:
        mysql = options.model_copy(deep=True)
        mysql.syncer.db_type = "mysql"
        mysql.initial_commit_ts = 0   # the whole range, as the lake took it (a MySQL sink's default: PD's ts now)
        settings = MYSQL.settings(mysql)
        settings.to.dsn = maria.dsn
        mysql.data_dir = str(directory / "drainer-mysql")
        _say(f"drain into MariaDB ({maria.dsn.replace(maria.password, '***')}): the same range, DDL as "
             f"barriers, DML by causality on {settings.worker_count} workers, TiDB Binlog's checkpoint table")
        report = run_drain_command(mysql)
        _say(f"binlake verify --against MariaDB: every table at its checkpoint {report.to_ts} against the "
             f"upstream read over {upstream_dsn}")
        out = io.StringIO()
        code = run_verify_command(mysql, None, out=out, against=maria.dsn)
        print(out.getvalue(), end="")
        return code == 0


def _quality_gate(options: DrainerConfig, ts: int) -> bool | None:
    """``binlake check --ts ts`` on the demo's warehouse, its summary printed; None (skipped) when
    Great Expectations is not installed."""
    from binlake.check import GreatExpectationsMissing, run_check_command

    out = io.StringIO()
    try:
        code = run_check_command(options, ts, out=out)
    except GreatExpectationsMissing as e:
        print(f"    skipped: {e}")
        return None
    print(out.getvalue(), end="")
    return code == 0


def _duckdb_tour(options: DrainerConfig) -> bool:
    from sink.iceberg.catalog import open_catalog
    from sink.iceberg.duck import connect_iceberg

    catalog = open_catalog(ICEBERG.settings(options).warehouse)
    con = connect_iceberg()
    ok = True
    for ns in sorted(n for n in catalog.list_namespaces() if n[0] != "_binlake"):
        for ident in sorted(catalog.list_tables(ns)):
            tbl = catalog.load_table(ident)
            row = con.sql(f"select count(*) from iceberg_scan('{tbl.metadata_location}')").fetchone()
            assert row is not None  # count(*) always answers one row
            n = row[0]
            ok = ok and n == len(tbl.scan().to_arrow())
            print(f"    {'.'.join(ident):<32} {n:>6} rows   {tbl.metadata_location}")
    log = catalog.load_table("test.wl_orders__changelog").metadata_location
    print("    changes per operation in test.wl_orders__changelog:")
    for op, count, first, last in con.sql(
            f"select _tidb_op, count(*), min(_tidb_commit_time), max(_tidb_commit_time) "
            f"from iceberg_scan('{log}') group by 1 order by 1").fetchall():
        print(f"      {op}  {count:>5}   {first} .. {last}")
    return ok
