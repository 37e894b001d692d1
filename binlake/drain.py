"""``binlake drain`` and ``binlake verify``: wire the plan, the Spark stages and a sink together.

The sink is whatever registered spec ``[syncer] db-type`` names (:mod:`sink.registry`); these
commands ask its capabilities, never its name."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from binlake.drain_config import DrainerConfig
from binlake.metrics import DrainerMetrics
from binlake.report import PlanReport, PumpPlan, RelayRecovery, RunReport, SparkRun
from binlake.tso_clock import approximate_ts
from ingest.atomic import replace_file
from ingest.config import ConfigError
from ingest.errors import TSOError
from ingest.registry import load_registry
from ingest.registry.base import DRAINER, PAUSED
from ingest.topology import TOPOLOGY_PREFIX, tidb_status_urls
from ingest.tso import TSOClient
from sink.base import PlansWrites, Sink
from sink.plugin import SinkSpec
from sink.registry import spec_for_uri
from transform import failpoints
from transform.event_filter import DML_EVENTS

if TYPE_CHECKING:
    from transform.changes import RunBatch
    from transform.drain import DrainResult
    from transform.history import SchemaHistory
    from transform.plan import Plan


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


INITIAL_TS_FILE = "initial-commit-ts"


def upstream_status_url(options: DrainerConfig, why: str) -> str:
    """``[upstream] status-url``, else the status port of a TiDB server alive in the pumps' registry
    (PD's etcd: ``ingest.topology``); :class:`ConfigError` saying ``why`` the command needs it when
    there is neither."""
    if options.upstream.status_url:
        return options.upstream.status_url
    registry = load_registry(options.registry_uri, security=options.security)
    try:
        urls = tidb_status_urls(registry, https=options.security.enabled)
    finally:
        registry.close()
    if not urls:
        raise ConfigError(f"{why}: set [upstream] status-url / --upstream-status-url (no TiDB server is alive in "
                          f"the registry's {TOPOLOGY_PREFIX}, where TiDB announces its status port)")
    return urls[0]


def initial_ts(options: DrainerConfig, cluster_id: int, keep: bool = True) -> int:
    """Where a sink never written starts: ``initial-commit-ts`` (unset: the sink's default,
    ``DrainerConfig.first_ts``); for -1 (TiDB Binlog's "from now"),
    PD's TSO when first asked, kept (unless not ``keep``: a dry run) in ``DATA_DIR/initial-commit-ts``
    so that every run until the sink's first checkpoint starts at that same ts (nothing committed
    after it is skipped)."""
    first = options.first_ts()
    if first >= 0:
        return first
    path = Path(options.data_dir) / INITIAL_TS_FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = ""
    if text:
        if not text.isdigit():
            raise ConfigError(f"{path} holds {text!r}, not a ts: remove it to start from PD's current ts")
        return int(text)
    if not options.pd_urls:
        raise ConfigError("initial-commit-ts = -1 asks PD for the current ts: give --pd-urls")
    client = TSOClient(options.pd_urls, cluster_id, credentials=options.security.pd_credentials(options.pd_urls))
    try:
        ts = client.get_ts()
    finally:
        client.close()
    if keep:
        replace_file(path, f"{ts}\n".encode())
    return ts


def register_drainer(options: DrainerConfig, checkpoint: int) -> None:
    """Record this batch drainer in the registry as a *paused* drainer at ``checkpoint``.

    Pumps then wait for it before going offline (TiDB's waitSafeToOffline: every drainer that is
    not offline must pass the pump's last ts), so a pump cannot leave with binlogs the next run
    has not drained. Paused, because between runs nobody answers ``Cistern/Notify``. ``updateTS``
    is a TSO, as TiDB Binlog writes it (``binlake.tso_clock``).
    """
    from ingest.registry.presence import Presence

    update_ts = approximate_ts(options)
    registry = load_registry(options.registry_uri, security=options.security)
    try:
        Presence(registry, DRAINER, options.node_id, f"batch:{options.syncer.db_type}").put(
            PAUSED, checkpoint, update_ts)
    finally:
        registry.close()


def open_sink(options: DrainerConfig, cluster_id: int | None, dry_run: bool = False) -> Sink:
    """The configured sink, its state loaded (for ``cluster_id``, refusing another cluster's)."""
    return options.sink_spec().open(options.sink_context(cluster_id, dry_run))


Report = PlanReport | RunReport


def loopback_channel(options: DrainerConfig) -> int | None:
    """The channel whose marked transactions a run leaves out: ``[syncer] channel-id`` when
    ``loopback-control`` is on (TiDB Binlog's, for every db-type), else None."""
    return options.syncer.channel_id if options.syncer.loopback_control else None


def run_drain_command(options: DrainerConfig, from_ts: int | None = None, to_ts: int | None = None,
                      dry_run: bool = False, report_path: str | None = None,
                      out: TextIO = sys.stdout, register: Callable[[int], None] | None = None,
                      metrics: DrainerMetrics | None = None, write_plan: bool = False) -> Report:
    """One run end to end; returns the run report (also printed, and written as JSON). ``register(ts)``
    records the drainer in the registry at ``ts`` (default: a paused batch drainer). Every run but a dry
    one records its outcome in ``metrics`` (default: a fresh registry) and publishes them
    (``DATA_DIR/metrics.prom``, the Pushgateway of ``metrics-addr``), a failed run too. A dry run
    changes nothing anywhere: it reads the sink's checkpoint and the pumps, and writes only
    ``report_path`` when one is given; with ``write_plan`` a sink that plans its writes (Iceberg)
    also prints its plan of each table, for which the range is pulled and decoded on Spark."""
    metrics = metrics or DrainerMetrics()
    try:
        report = _drain(options, from_ts, to_ts, dry_run, report_path, out, register, metrics, write_plan)
    except Exception as e:
        if not dry_run:
            metrics.failed(e)
            metrics.publish(options.data_dir, options.metrics_addr, options.cluster_id or None, options.node_id)
        raise
    if not dry_run:
        metrics.succeeded(report)
        metrics.publish(options.data_dir, options.metrics_addr, report.cluster_id, options.node_id)
    return report


def _drain(options: DrainerConfig, from_ts: int | None, to_ts: int | None, dry_run: bool, report_path: str | None,
           out: TextIO, register: Callable[[int], None] | None, metrics: DrainerMetrics,
           write_plan: bool = False) -> Report:
    register = register or (lambda ts: register_drainer(options, ts))
    from transform.plan import PumpUnreachableError, make_plan

    started = time.perf_counter()
    stages: dict[str, float] = {}
    spec = options.sink_spec()
    caps = spec.capabilities
    if options.tables and not caps.table_subsets:
        raise ConfigError(f"--tables cannot restrict a {options.syncer.db_type} sink run: its checkpoint covers "
                          f"every table (choose tables with [syncer] replicate-do-table)")
    try:
        cluster_id = cluster_id_of(options)
    except TSOError as e:
        return _recover(options, spec, options.cluster_id or None, e, out, dry_run, report_path)
    sink = spec.open(options.sink_context(cluster_id, dry_run))
    sink.observer = metrics.sink_observer
    try:
        checkpoint = sink.checkpoint()
        metrics.observe_checkpoint(checkpoint)
        begin = (from_ts if from_ts is not None
                 else checkpoint if checkpoint is not None else initial_ts(options, cluster_id, keep=not dry_run))
        t0 = time.perf_counter()
        try:
            plan = make_plan(options.registry_uri, cluster_id, begin, to_ts, security=options.security,
                             compressor=options.compressor)
        except PumpUnreachableError as e:
            sink.close()
            return _recover(options, spec, cluster_id, e, out, dry_run, report_path)
        stages["plan"] = time.perf_counter() - t0
        failpoints.inject("drain-stage", "plan")
        print(f"binlake drain: {options.syncer.db_type} sink, checkpoint {checkpoint}", file=out)
        print(plan.describe(), file=out, flush=True)
        common: dict[str, Any] = dict(
            cluster_id=cluster_id, from_ts=plan.from_ts, to_ts=plan.to_ts, sink=options.syncer.db_type,
            checkpoint_before=checkpoint, dry_run=dry_run, data_dir=options.data_dir, stages=stages,
            pumps=[PumpPlan(node_id=p.node_id, addr=p.addr, protocol=p.protocol, watermark=p.watermark)
                   for p in plan.pumps])
        if dry_run and write_plan and not plan.empty and isinstance(sink, PlansWrites):
            _print_write_plan(options, plan, sink, out, metrics, stages)
        if dry_run or plan.empty:
            planned = PlanReport(checkpoint_after=checkpoint, **common)
            if report_path:   # a scheduler asks for the plan (never the default path: a real run's report)
                _write_report(planned, options, report_path, out)
            return planned
        if checkpoint is None and not options.tables:
            register(plan.from_ts)  # pumps wait for this drainer from now on
        status_url = upstream_status_url(options, "the drain reads the DDL history from TiDB's status port")
        plan = replace(plan, upstream=status_url)
        result, history, spark_run = _compute(options, plan, status_url, out, metrics, stages)
        metrics.pending(result.counts.get("transactions", 0))
        t0 = time.perf_counter()
        try:
            _refuse_for_lake(options, result.batch)
            tables = sink.write(result.batch)
        finally:
            result.release()
        stages["sink"] = time.perf_counter() - t0
        failpoints.inject("drain-stage", "written")
        advance = not options.tables and (checkpoint is None or plan.from_ts <= checkpoint < plan.to_ts)
        if advance:
            sink.record_history(history, result.batch)
            failpoints.inject("drain-stage", "ddl-recorded")
            sink.save_checkpoint(result.batch)
            failpoints.inject("drain-stage", "checkpoint")
            register(plan.to_ts)
        note = "" if advance else ("checkpoint not moved: " + ("--tables restricts the run" if options.tables
                                                                else "the range does not continue the checkpoint"))
        report = RunReport(batch_id=result.batch.batch_id, tables=tables, nulled_values=result.batch.nulled_values,
                           counts=result.counts, notes=sink.notes(), note=note, spark=spark_run,
                           checkpoint_after=plan.to_ts if advance else checkpoint, **common)
    finally:
        sink.close()
    report.stages["total"] = time.perf_counter() - started
    _print_report(report, out)
    _write_report(report, options, report_path, out)
    return report


# how long a run waits for a DDL job its range's binlogs name to reach the upstream's history (TiDB
# Binlog's drainer waits 5 minutes for it too): the history is read again and the range computed again
JOB_WAIT_SECONDS = 300.0


def _compute(options: DrainerConfig, plan: Plan, status_url: str, out: TextIO, metrics: DrainerMetrics,
             stages: dict[str, float]) -> tuple[DrainResult, SchemaHistory, SparkRun | None]:
    """The run's changes computed (the DDL history read, pulled, decoded; nothing written), with the
    Spark session's settings. A range whose binlogs stay below ``[spark] in-process-below`` bytes is
    computed in this process without Spark (no settings then); a larger one on Spark. Each stage's
    seconds go to ``stages``. A DDL binlog whose job the history lacks yet (a TiDB died between the
    two transactions that write them) is waited for up to ``JOB_WAIT_SECONDS``, then
    :class:`~transform.history.JobNotInHistory` (transient)."""
    from transform.history import JobNotInHistory, SchemaHistory

    waited, delay = 0.0, 1.0
    while True:
        t0 = time.perf_counter()
        history = SchemaHistory.fetch(status_url)
        stages["history"] = stages.get("history", 0.0) + time.perf_counter() - t0
        try:
            return _compute_with(history, options, plan, out, metrics, stages)
        except JobNotInHistory as exc:
            if waited >= JOB_WAIT_SECONDS:
                raise
            print(f"\n  {exc}: TiDB moves a job to its history just after its DDL binlog commits; reading the "
                  f"history again in {delay:.0f} s (waited {waited:.0f} of {JOB_WAIT_SECONDS:.0f} s)",
                  file=out, flush=True)
            time.sleep(delay)
            waited += delay
            delay = min(delay * 2, 15.0, max(JOB_WAIT_SECONDS - waited, 0.0))


def _compute_with(history: SchemaHistory, options: DrainerConfig, plan: Plan, out: TextIO, metrics: DrainerMetrics,
                  stages: dict[str, float]) -> tuple[DrainResult, SchemaHistory, SparkRun | None]:
    """:func:`_compute` under one reading of the history."""
    caps = options.sink_spec().capabilities
    skip = frozenset() if caps.skips_commit_ts else frozenset(options.syncer.ignore_txn_commit_ts)
    limit = options.spark.in_process_below
    if limit > 0:
        from transform.in_process import RangeTooLarge, run_drain_here

        print(f"  in this process while the range's binlogs stay below {limit} bytes ([spark] in-process-below)",
              file=out, flush=True)
        t0 = time.perf_counter()
        try:
            result = run_drain_here(plan, history, limit, options.table_filter(), progress=ConsoleProgress(out),
                                    per_transaction=caps.per_transaction, skip_commit_ts=skip,
                                    loopback_channel=loopback_channel(options), pulled=metrics.pulled,
                                    event_filter=options.event_filter())
            stages.update(result.stages)
            return result, history, None
        except RangeTooLarge:
            stages["in-process"] = time.perf_counter() - t0
            print(f"\n  the range's binlogs passed {limit} bytes: computing it on Spark", file=out, flush=True)
    from transform.drain import run_drain
    from transform.spark import settings_in_force, spark_session

    t0 = time.perf_counter()
    spark = spark_session(options.spark.master, options.spark.app_name, options.spark.conf,
                          options.spark.class_archive)
    stages["spark-start"] = time.perf_counter() - t0
    spark_run = SparkRun(master=options.spark.master,
                         settings=settings_in_force(spark, options.spark.master, options.spark.conf))
    result = run_drain(spark, plan, history, options.table_filter(), options.spark.splits_per_pump,
                       progress=ConsoleProgress(out), per_transaction=caps.per_transaction, skip_commit_ts=skip,
                       loopback_channel=loopback_channel(options), pulled=metrics.pulled,
                       event_filter=options.event_filter())
    stages.update(result.stages)
    return result, history, spark_run


def _refuse_for_lake(options: DrainerConfig, batch: RunBatch) -> None:
    """A sink that rebuilds tables from rows refuses DDL that changed rows without binlogs, before it
    writes (or plans) anything."""
    from transform.ddl import refuse_for_lake

    if not options.sink_spec().capabilities.replays_ddl:
        refuse_for_lake(batch.ddl, options.table_filter(), options.syncer.db_type)


def _print_write_plan(options: DrainerConfig, plan: Plan, sink: PlansWrites, out: TextIO, metrics: DrainerMetrics,
                      stages: dict[str, float]) -> None:
    """A dry run of a sink that plans its writes: the run computed on Spark and the sink's plan of it
    printed; nothing is written. Without the upstream's status port (the DDL history) only the range
    is planned, and the output says so."""
    try:
        status_url = upstream_status_url(options, "the write plan reads the DDL history from TiDB's status port")
    except ConfigError as e:
        print(f"  write plan: not made ({e})", file=out, flush=True)
        return
    result, history, _ = _compute(options, plan, status_url, out, metrics, stages)
    try:
        _refuse_for_lake(options, result.batch)
        lines = sink.plan_lines(result.batch)
    finally:
        result.release()
    for line in lines:
        print(line, file=out)
    out.flush()


def _write_report(report: Report, options: DrainerConfig, report_path: str | None, out: TextIO) -> None:
    path = Path(report_path) if report_path else Path(options.data_dir) / "reports" / f"run-{report.to_ts}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report.model_dump_json(indent=1))
    print(f"report written to {path}", file=out)


def _recover(options: DrainerConfig, spec: SinkSpec[Any], cluster_id: int | None, cause: Exception, out: TextIO,
             dry_run: bool = False, report_path: str | None = None) -> RunReport:
    """The upstream cannot be reached: let a sink that can recover without it do so (the MySQL sink
    replays its relay log: TiDB Binlog's relay recovery), or re-raise ``cause``. A dry run changes
    nothing: it reports the recovery that would run (and writes only ``report_path``)."""
    if not spec.capabilities.recovery_without_upstream:
        raise cause
    done = spec.recover(options.sink_context(cluster_id, dry_run, spec), cause)
    if done is None:
        raise cause
    verb, be = ("would replay", "would be") if dry_run else ("replayed", "is")
    print(f"binlake drain{' (dry run)' if dry_run else ''}: the upstream cannot be reached ({cause}); {verb} "
          f"{done.records} relay-log records after {done.from_ts} in safe mode: the downstream {be} consistent at "
          f"{done.to_ts}", file=out)
    report = RunReport(cluster_id=done.cluster_id, from_ts=done.from_ts, to_ts=done.to_ts, sink=options.syncer.db_type,
                       checkpoint_before=done.from_ts, checkpoint_after=done.from_ts if dry_run else done.to_ts,
                       dry_run=dry_run, data_dir=options.data_dir,
                       relay_recovery=RelayRecovery(records=done.records, cause=str(cause)))
    if report_path or not dry_run:   # a dry run writes only the report asked for
        _write_report(report, options, report_path, out)
    return report


def _print_report(report: RunReport, out: TextIO) -> None:
    print(f"run {report.batch_id or '-'}: ({report.from_ts}, {report.to_ts}]", file=out)
    for t in report.tables:
        rows = " ".join(f"{op}={n}" for op, n in t.rows.items())
        state = f"skipped ({t.skipped})" if t.skipped else "written"
        ddl = f"  ddl: {len(t.ddl)}" if t.ddl else ""
        print(f"  {t.table:<40} {rows:<28} {state}{ddl}", file=out)
    print(f"  values nulled (zero/invalid dates): {report.nulled_values}", file=out)
    for note in report.notes:
        print(f"  {note}", file=out)
    print("  seconds per stage: " + ", ".join(f"{k} {v:.2f}" for k, v in report.stages.items()), file=out)
    print(f"  checkpoint: {report.checkpoint_before} -> {report.checkpoint_after}", file=out)


def run_verify_command(options: DrainerConfig, ts: int | None, out: TextIO = sys.stdout,
                       against: str | None = None) -> int:
    """Compare what the sink holds at ``ts`` (default: its checkpoint) with the upstream read at ``ts``
    over the MySQL protocol; 0 when equal. ``against`` (a URI, e.g. ``mysql://…``) compares the target
    of the sink whose spec claims its scheme instead of the configured sink."""
    if not options.upstream.dsn:
        raise ConfigError("verify needs --upstream-dsn mysql://USER:PASS@HOST:PORT ([upstream] dsn): TiDB's "
                          "MySQL port, read at the ts with @@tidb_snapshot (the emulator's is 127.0.0.1:4000)")
    spec = spec_for_uri(against) if against else options.sink_spec()
    if not spec.capabilities.verify:
        raise ConfigError(f"the {options.syncer.db_type} sink has no verifier (verify compares "
                          f"{', '.join(s for s in _verifiable())})")
    cluster_id = options.cluster_id or (cluster_id_of(options) if ts is None and options.pd_urls else None)
    verifier = spec.verifier(options.sink_context(cluster_id, spec=spec), against)
    try:
        if ts is None:
            ts = verifier.checkpoint()
            if ts is None:
                raise ConfigError(f"no checkpoint in the {spec.names[0]} sink yet: give --ts")
        for line in verifier.notes():
            print(line, file=out)
        wanted = {f"{d}.{t}".lower() for d, t in options.tables}
        filt, events = options.table_filter(), options.event_filter()
        left_out: list[str] = []   # tables whose row changes a binlog-filter-rule leaves out: not comparable

        def allows(db: str, table: str) -> bool:
            if not filt.allows(db, table) or (wanted and f"{db}.{table}".lower() not in wanted):
                return False
            if any(events.rule_for(db, table, event) is not None for event in DML_EVENTS):
                left_out.append(f"{db}.{table}")
                return False
            return True

        history = _upstream_history(options)
        snapshot = _upstream_snapshot(options, ts, allows, history)
        for name in left_out:
            print(f"note: {name} not compared: [syncer.binlog-filter-rule] leaves out some of its row changes",
                  file=out)
        expired = _ttl_expiry(history, ts)   # asked of a verifier only when a table has TTL (older ones lack it)
        report = verifier.compare(snapshot, ts, [f"{d}.{t}" for d, t in options.tables] or None,
                                  **({"expired": expired} if expired else {}))
    finally:
        verifier.close()
    print(report.format(), file=out)
    return 0 if report.ok else 1


def _upstream_history(options: DrainerConfig) -> SchemaHistory:
    """The upstream's DDL history, which proves a read of it is at the ts and gives the tables' TTL."""
    from transform.history import SchemaHistory

    return SchemaHistory.fetch(upstream_status_url(options, "verify checks its read of the upstream against the "
                                                            "upstream's DDL history"))


def _ttl_expiry(history: SchemaHistory, ts: int) -> dict[str, Any]:
    """Per table with TTL at ``ts`` (``db.table``), which rows TiDB's TTL had expired by then
    (``transform.ttl``), from the upstream's DDL history."""
    from transform.ttl import expired_at

    out: dict[str, Any] = {}
    for version, _ in history.tables_at(ts):
        expired = expired_at(version.table, ts) if version.table is not None else None
        if expired is not None and version.table is not None:
            out[f"{version.db}.{version.table.name}"] = expired
    return out


def _verifiable() -> list[str]:
    from sink.registry import specs

    return [s.names[0] for s in specs() if s.capabilities.verify]


def _upstream_snapshot(options: DrainerConfig, ts: int, allows: Callable[[str, str], bool],
                       history: SchemaHistory) -> dict[str, list[dict[str, Any]]]:
    """The upstream's tables at ``ts``, read over its MySQL port (``[upstream] dsn``), refused unless
    they are the tables ``history`` has at ``ts`` (:mod:`transform.snapshot_proof`)."""
    from sink.mysql.target import MySQLTarget, TLSFiles
    from sink.mysql.upstream_reader import read_snapshot
    from transform.snapshot_proof import differences

    tls = TLSFiles.of(options.upstream.security, "[upstream.security]")
    return read_snapshot(MySQLTarget.from_dsn(options.upstream.dsn, tls=tls), ts, allows,
                         prove=lambda read: differences(history, ts, read, allows))
