"""``binlake drain`` and ``binlake verify``: wire the plan, the Spark stages and a sink together."""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from binlake.drain_config import DrainerConfig
from binlake.metrics import DrainerMetrics
from binlake.presence import approximate_ts
from ingest.config import ConfigError
from ingest.errors import TSOError
from ingest.registry import load_registry
from ingest.registry.base import DRAINER, PAUSED, NodeStatus
from ingest.tso import TSOClient
from sink.base import Sink, TableReport

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from sink.mysql.target import MySQLTarget


class ConsoleProgress:
    """Prints each stage of a run as it goes: ``[pull] …`` then ``[pull] done in 1.23 s  detail``."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def started(self, stage: str) -> None:
        print(f"  [{stage}] …", end="", file=self.out, flush=True)

    def finished(self, stage: str, seconds: float, detail: str) -> None:
        extra = f"  {detail}" if detail else ""
        print(f"\r  [{stage}] done in {seconds:.2f} s{extra}", file=self.out, flush=True)


def cluster_id_of(options: DrainerConfig) -> int:
    """The configured cluster id, else the one PD's ``GetMembers`` answer carries."""
    if options.cluster_id:
        return options.cluster_id
    if not options.pd_urls:
        raise ConfigError("give --cluster-id or --pd-urls (the cluster id comes from PD)")
    client = TSOClient(options.pd_urls, credentials=options.security.pd_credentials(options.pd_urls))
    try:
        return client.learn_cluster_id()
    finally:
        client.close()


def register_drainer(options: DrainerConfig, checkpoint: int) -> None:
    """Record this batch drainer in the registry as a *paused* drainer at ``checkpoint``.

    Pumps then wait for it before going offline (TiDB's waitSafeToOffline: every drainer that is
    not offline must pass the pump's last ts), so a pump cannot leave with binlogs the next run
    has not drained. Paused, because between runs nobody answers ``Cistern/Notify``. ``updateTS``
    is a TSO, as TiDB Binlog writes it (``binlake.presence``).
    """
    update_ts = approximate_ts(options)
    registry = load_registry(options.registry, security=options.security)
    try:
        registry.put_node(DRAINER, NodeStatus(node_id=options.node_id, host=f"batch:{options.syncer.db_type}",
                                              state=PAUSED, is_alive=False, max_commit_ts=checkpoint,
                                              update_ts=update_ts))
    finally:
        registry.close()


def open_iceberg_catalog(options: DrainerConfig) -> Catalog:
    """The ``[iceberg]`` catalog: warehouse, catalog URI and ``[iceberg.properties]``."""
    from sink.iceberg.catalog import open_catalog

    ice = options.iceberg
    return open_catalog(ice.warehouse, ice.catalog_uri or None, **ice.properties)


def mysql_target(options: DrainerConfig) -> MySQLTarget:
    """The ``[syncer.to]`` downstream (``dsn`` over host/port/user/password or password-file)."""
    from sink.mysql.target import MySQLTarget

    to = options.syncer.to
    if to.dsn:
        return MySQLTarget.from_dsn(to.dsn, params=to.params, read_timeout=to.read_timeout)
    return MySQLTarget(to.host, to.port, to.user, to.secret(), dict(to.params), to.read_timeout)


def open_sink(options: DrainerConfig, dry_run: bool = False) -> Sink:
    """The sink the options name (Iceberg catalog + warehouse, a Parquet directory, or MySQL/TiDB)."""
    if options.syncer.db_type == "parquet":
        from sink.parquet.files import ParquetSink

        return ParquetSink(options.parquet.dir)
    if options.syncer.db_type in ("mysql", "tidb"):
        from sink.mysql.sink import MySQLOptions, MySQLSink

        s = options.syncer
        return MySQLSink(mysql_target(options), MySQLOptions(
            tidb=s.db_type == "tidb", worker_count=s.worker_count, txn_batch=s.txn_batch, safe_mode=s.safe_mode,
            merge=s.to.merge,
            checkpoint_schema=s.to.checkpoint.schema_, checkpoint_table=s.to.checkpoint.table,
            ignore_txn_commit_ts=frozenset(s.ignore_txn_commit_ts), table_filter=options.table_filter(),
            relay_dir=s.relay.log_dir, relay_max_file_size=s.relay.max_file_size, dry_run=dry_run))
    from sink.iceberg.writer import IcebergSink

    ice = options.iceberg
    return IcebergSink(open_iceberg_catalog(options), tag_runs=ice.tag_runs,
                       mirror_buckets=ice.mirror_buckets, table_buckets=ice.table_buckets)


def run_drain_command(options: DrainerConfig, from_ts: int | None = None, to_ts: int | None = None,
                      dry_run: bool = False, report_path: str | None = None,
                      out: TextIO = sys.stdout, register: Callable[[int], None] | None = None,
                      metrics: DrainerMetrics | None = None) -> dict[str, Any]:
    """One run end to end; returns the run report (also printed, and written as JSON). ``register(ts)``
    records the drainer in the registry at ``ts`` (default: a paused batch drainer). Every run but a dry
    one records its outcome in ``metrics`` (default: a fresh registry) and publishes them
    (``DATA_DIR/metrics.prom``, the Pushgateway of ``metrics-addr``), a failed run too."""
    metrics = metrics or DrainerMetrics()
    try:
        report = _drain(options, from_ts, to_ts, dry_run, report_path, out, register, metrics)
    except Exception:
        if not dry_run:
            metrics.failed()
            metrics.publish(options.data_dir, options.metrics_addr, options.cluster_id or None)
        raise
    if not dry_run:
        metrics.succeeded(report)
        metrics.publish(options.data_dir, options.metrics_addr, report.get("cluster_id"))
    return report


def _drain(options: DrainerConfig, from_ts: int | None, to_ts: int | None, dry_run: bool, report_path: str | None,
           out: TextIO, register: Callable[[int], None] | None, metrics: DrainerMetrics) -> dict[str, Any]:
    register = register or (lambda ts: register_drainer(options, ts))
    from transform.history import SchemaHistory
    from transform.plan import PumpUnreachableError, make_plan

    started = time.perf_counter()
    stages: dict[str, float] = {}
    mysql = options.syncer.db_type in ("mysql", "tidb")
    if mysql and options.tables:
        raise ConfigError("--tables cannot restrict a MySQL sink run: its checkpoint covers every table "
                          "(choose tables with [syncer] replicate-do-table)")
    relay = mysql and bool(options.syncer.relay.log_dir)
    try:
        cluster_id = cluster_id_of(options)
    except TSOError as e:
        if not relay:
            raise
        return _recover_from_relay(options, options.cluster_id or None, e, out, dry_run, report_path)
    sink = open_sink(options, dry_run)
    try:
        sink.check_cluster(cluster_id)
        checkpoint = sink.checkpoint()
        metrics.observe_checkpoint(checkpoint)
        begin = (from_ts if from_ts is not None
                 else checkpoint if checkpoint is not None else options.initial_commit_ts)
        t0 = time.perf_counter()
        try:
            plan = make_plan(options.registry, cluster_id, begin, to_ts, security=options.security,
                             compressor=options.compressor)
        except PumpUnreachableError as e:
            if not relay:
                raise
            sink.close()
            return _recover_from_relay(options, cluster_id, e, out, dry_run, report_path)
        stages["plan"] = time.perf_counter() - t0
        print(f"binlake drain: {options.syncer.db_type} sink, checkpoint {checkpoint}", file=out)
        print(plan.describe(), file=out, flush=True)
        report: dict[str, Any] = {"cluster_id": cluster_id, "from_ts": plan.from_ts, "to_ts": plan.to_ts,
                                  "sink": options.syncer.db_type, "checkpoint_before": checkpoint, "dry_run": dry_run,
                                  "data_dir": options.data_dir, "tables": [], "stages": stages,
                                  "pumps": [{"node_id": p.node_id, "addr": p.addr, "protocol": p.protocol,
                                             "watermark": p.watermark} for p in plan.pumps]}
        if dry_run or plan.empty:
            report["checkpoint_after"] = checkpoint
            if report_path:   # a scheduler asks for the plan (never the default path: a real run's report)
                _write_report(report, options, report_path, out)
            return report
        if checkpoint is None and not options.tables:
            register(plan.from_ts)  # pumps wait for this drainer from now on
        if not options.upstream.status_url:
            raise ConfigError("the drain needs [upstream] status-url / --upstream-status-url for the DDL history")
        t0 = time.perf_counter()
        history = SchemaHistory.fetch(options.upstream.status_url)
        stages["history"] = time.perf_counter() - t0

        from transform.drain import run_drain
        from transform.spark import settings_in_force, spark_session

        t0 = time.perf_counter()
        spark = spark_session(options.spark.master, options.spark.app_name, options.spark.conf)
        stages["spark-start"] = time.perf_counter() - t0
        report["spark"] = {"master": options.spark.master,
                           "settings": settings_in_force(spark, options.spark.master, options.spark.conf)}
        result = run_drain(spark, plan, history, options.table_filter(), options.spark.splits_per_pump,
                           progress=ConsoleProgress(out), per_transaction=sink.per_transaction)
        stages.update(result.stages)
        t0 = time.perf_counter()
        try:
            tables: list[TableReport] = sink.write(result.batch)
        finally:
            result.release()
        stages["sink"] = time.perf_counter() - t0
        advance = not options.tables and (checkpoint is None or plan.from_ts <= checkpoint < plan.to_ts)
        if advance:
            sink.save_checkpoint(result.batch)
            register(plan.to_ts)
        report["notes"] = sink.notes()
        report.update({"batch_id": result.batch.batch_id, "tables": [t.to_json() for t in tables],
                       "nulled_values": result.batch.nulled_values, "counts": result.counts,
                       "checkpoint_after": plan.to_ts if advance else checkpoint})
        if not advance:
            report["note"] = ("checkpoint not moved: " + ("--tables restricts the run" if options.tables
                                                           else "the range does not continue the checkpoint"))
    finally:
        sink.close()
    stages["total"] = time.perf_counter() - started
    _print_report(report, out)
    _write_report(report, options, report_path, out)
    return report


def _write_report(report: dict[str, Any], options: DrainerConfig, report_path: str | None, out: TextIO) -> None:
    path = Path(report_path) if report_path else Path(options.data_dir) / "reports" / f"run-{report['to_ts']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
    print(f"report written to {path}", file=out)


def _recover_from_relay(options: DrainerConfig, cluster_id: int | None, cause: Exception, out: TextIO,
                        dry_run: bool = False, report_path: str | None = None) -> dict[str, Any]:
    """The upstream cannot be reached: bring a MySQL downstream whose checkpoint is not consistent to
    the relay log's last transaction (TiDB Binlog's relay recovery), or re-raise ``cause``. A dry run
    changes nothing: it reports the recovery that would run (and writes only ``report_path``)."""
    from sink.mysql.checkpoint import CheckpointTable
    from sink.mysql.sink import MySQLSink

    sink = open_sink(options, dry_run)
    assert isinstance(sink, MySQLSink)
    try:
        cp = options.syncer.to.checkpoint
        if cluster_id is None:   # no PD to ask: the checkpoint table's only row names the cluster
            cluster_id = CheckpointTable.sole_cluster(sink.conn, cp.schema_, cp.table)
            if cluster_id is None:
                raise cause
        sink.check_cluster(cluster_id)
        before = sink.loaded
        done = sink.recover()
        if done is None:
            raise cause
    finally:
        sink.close()
    records, ts = done
    assert before is not None
    if dry_run:
        print(f"binlake drain (dry run): the upstream cannot be reached ({cause}); a relay-log recovery would "
              f"replay {records} relay-log records after {before.commit_ts} in safe mode: the downstream would "
              f"be consistent at {ts}", file=out)
    else:
        print(f"binlake drain: the upstream cannot be reached ({cause}); replayed {records} relay-log records "
              f"after {before.commit_ts} in safe mode: the downstream is consistent at {ts}", file=out)
    report: dict[str, Any] = {"cluster_id": cluster_id, "from_ts": before.commit_ts, "to_ts": ts,
                              "sink": options.syncer.db_type, "checkpoint_before": before.commit_ts,
                              "checkpoint_after": before.commit_ts if dry_run else ts, "dry_run": dry_run,
                              "data_dir": options.data_dir,
                              "relay_recovery": {"records": records, "cause": str(cause)}, "tables": []}
    if report_path or not dry_run:   # a dry run writes only the report asked for
        _write_report(report, options, report_path, out)
    return report


def _print_report(report: dict[str, Any], out: TextIO) -> None:
    print(f"run {report.get('batch_id', '-')}: ({report['from_ts']}, {report['to_ts']}]", file=out)
    for t in report["tables"]:
        rows = " ".join(f"{op}={n}" for op, n in t["rows"].items())
        state = f"skipped ({t['skipped']})" if t["skipped"] else "written"
        ddl = f"  ddl: {len(t['ddl'])}" if t["ddl"] else ""
        print(f"  {t['table']:<40} {rows:<28} {state}{ddl}", file=out)
    print(f"  values nulled (zero/invalid dates): {report.get('nulled_values', 0)}", file=out)
    for note in report.get("notes", []):
        print(f"  {note}", file=out)
    print("  seconds per stage: " + ", ".join(f"{k} {v:.2f}" for k, v in report["stages"].items()), file=out)
    print(f"  checkpoint: {report['checkpoint_before']} -> {report.get('checkpoint_after')}", file=out)


def run_verify_command(options: DrainerConfig, ts: int | None, out: TextIO = sys.stdout,
                       against: str | None = None) -> int:
    """Compare every mirror at ``ts`` (default: the checkpoint) with the upstream read at ``ts`` over
    the MySQL protocol; 0 when equal. ``against`` (a ``mysql://`` DSN) compares a MySQL downstream at
    its checkpoint instead (without importing pyiceberg)."""
    if not options.upstream.dsn:
        raise ConfigError("verify needs --upstream-dsn mysql://USER:PASS@HOST:PORT ([upstream] dsn): TiDB's "
                          "MySQL port, read at the ts with @@tidb_snapshot (the emulator's is 127.0.0.1:4000)")
    if against:
        return _verify_mysql(options, against, ts, out)
    from sink.iceberg.writer import IcebergSink
    from sink.verify import verify_mirrors

    catalog = open_iceberg_catalog(options)
    if ts is None:
        ts = IcebergSink(catalog).checkpoint()
        if ts is None:
            raise ConfigError("no checkpoint in the catalog yet: give --ts")
    wanted = {f"{d}.{t}".lower() for d, t in options.tables}
    filt = options.table_filter()
    snapshot = _upstream_snapshot(options, ts, lambda d, t: filt.allows(d, t)
                                  and (not wanted or f"{d}.{t}".lower() in wanted))
    names = [f"{d}.{t}" for d, t in options.tables] or None
    report = verify_mirrors(catalog, snapshot, ts, names)
    print(report.format(), file=out)
    return 0 if report.ok else 1


def _upstream_snapshot(options: DrainerConfig, ts: int,
                       allows: Callable[[str, str], bool]) -> dict[str, list[dict[str, Any]]]:
    """The upstream's tables at ``ts``, read over its MySQL port (``[upstream] dsn``)."""
    from sink.mysql.snapshot import read_snapshot
    from sink.mysql.target import MySQLTarget

    return read_snapshot(MySQLTarget.from_dsn(options.upstream.dsn), ts, allows)


def _verify_mysql(options: DrainerConfig, dsn: str, ts: int | None, out: TextIO) -> int:
    from sink.mysql.checkpoint import CheckpointTable
    from sink.mysql.target import MySQLTarget
    from sink.mysql.verify import verify_downstream

    to = options.syncer.to
    conn = MySQLTarget.from_dsn(dsn, params=to.params).connect()
    try:
        if ts is None:
            table = CheckpointTable(conn, cluster_id_of(options), to.checkpoint.schema_, to.checkpoint.table)
            cp = table.load()
            if cp is None:
                raise ConfigError("no checkpoint row on the downstream yet: give --ts")
            if not cp.consistent:
                print(f"note: the checkpoint at {cp.commit_ts} is not consistent (a run is applying or "
                      f"stopped uncleanly)", file=out)
            ts = cp.commit_ts
        filt = options.table_filter()
        snapshot = _upstream_snapshot(options, ts, filt.allows)
        report = verify_downstream(conn, snapshot, ts, filt)
    finally:
        conn.close()
    print(report.format(), file=out)
    return 0 if report.ok else 1
