"""The ``binlake`` command: ``pump``, ``ctl``, ``drain``, ``verify``, ``check``, ``maintain``, ``restore`` and
``reparo`` subcommands."""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from binlake.process import COMMANDS, command_done, configure_process, local_spark, startup_done
from schemas.errors import BinlakeError  # standard library only: naming errors loads no stage (no pyarrow)

if TYPE_CHECKING:
    from binlake.drain_config import DrainerConfig

log = logging.getLogger("binlake")


def _setup_logging(level: str = "info", log_file: str = "") -> None:
    handlers: list[logging.Handler] = [logging.FileHandler(log_file) if log_file else logging.StreamHandler()]
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=handlers, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _pump_parser(sub: Any) -> None:
    p = sub.add_parser("pump", help="run a Pump daemon",
                       description="Run a Pump: stores the binlogs TiDB sends and serves them to drainers.")
    p.add_argument("--config", help="pump.toml (TiDB Binlog key names)")
    flags = [("--addr", "addr", "gRPC listen address host:port"),
             ("--advertise-addr", "advertise-addr", "address registered for clients"),
             ("--status-addr", "status-addr", "HTTP status API address host:port"),
             ("--data-dir", "data-dir", "data directory"),
             ("--pd-urls", "pd-urls", "PD (TSO) URLs, comma separated"),
             ("--registry", "registry", "file://PATH or etcd://HOST:PORT (default: PD's etcd at --pd-urls)"),
             ("--node-id", "node-id", "node id (default hostname:port, kept in DATA_DIR/.node)"),
             ("--gc", "gc", "retention: days, or a duration like 12h"),
             ("--upstream-status-url", "upstream-status-url", "TiDB status API URL for lost commits"),
             ("--log-level", "log-level", "debug, info, warning, error"),
             ("--log-file", "log-file", "log to this file instead of stderr")]
    for flag, key, text in flags:
        p.add_argument(flag, dest=key, help=text)
    p.add_argument("--cluster-id", dest="cluster-id", type=int, help="cluster id (default: from PD)")
    p.add_argument("--gen-binlog-interval", dest="gen-binlog-interval", type=float,
                   help="seconds between fake binlogs when idle (default 3)")
    p.add_argument("--heartbeat-interval", dest="heartbeat-interval", type=float,
                   help="seconds between registry heartbeats (default 2)")
    p.add_argument("--sync-log", dest="storage.sync-log", type=_parse_bool,
                   help="fdatasync every write batch (default true)")
    p.add_argument("--pump-scan", dest="pump-scan", type=_parse_bool,
                   help="serve binlake.v1.PumpScan (default true); false: only TiDB's binlog.Pump, as TiDB "
                        "Binlog's pump")
    p.set_defaults(run=_run_pump)


def _parse_bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _run_pump(args: argparse.Namespace) -> int:
    from ingest.config import load_config, print_warnings
    from ingest.pump.config import PumpConfig
    from ingest.pump.pump import Pump

    overrides = {k: v for k, v in vars(args).items() if k not in ("config", "run", "command")}
    options = load_config(PumpConfig, args.config, overrides)
    print_warnings(options, args.config)
    _setup_logging(options.log_level, options.log_file)
    pump = Pump(options)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        log.info("signal %d: pausing pump", signum)
        stop.set()

    # Before start: a signal while the pump starts (it is online once start returns) still pauses it.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, on_signal)
    pump.start()
    startup_done()
    while not pump.wait(0.2):
        if stop.is_set():
            pump.pause()
    return 0


def _ctl_parser(sub: Any) -> None:
    p = sub.add_parser("ctl", help="binlogctl: list and change pumps and drainers",
                       description="binlogctl's commands against the registry and the nodes' HTTP APIs.")
    from ingest.ctl import COMMANDS, LOCAL_COMMANDS  # imported by ``main``, after it has set the process up

    p.add_argument("cmd", choices=[*COMMANDS, *LOCAL_COMMANDS])
    p.add_argument("--registry", default=None,
                   help="registry URI (default file://registry.json); --pd-urls implies etcd://")
    p.add_argument("--pd-urls", default=None, help="PD URLs: use PD's etcd as the registry (as binlogctl)")
    p.add_argument("--node-id", default="", help="node to change")
    p.add_argument("--state", default="", help="state for update-pump/update-drainer")
    p.add_argument("--show-offline-nodes", action="store_true", help="list offline nodes too")
    p.add_argument("--text", default="", help="encrypt: the text (a password) to encrypt as TiDB Binlog does")
    p.add_argument("--data-dir", default="binlog_position", help="generate_meta: where the savepoint file goes")
    p.add_argument("--time-zone", default="",
                   help="times in this zone (an IANA name or Local): generate_meta's savepoint, the node lists")
    p.add_argument("--ssl-ca", default="", help="CA the nodes' certificates are checked against (TLS)")
    p.add_argument("--ssl-cert", default="", help="client certificate for the nodes' HTTPS APIs (with --ssl-key)")
    p.add_argument("--ssl-key", default="", help="key of --ssl-cert")
    p.set_defaults(run=_run_ctl)


def _run_ctl(args: argparse.Namespace) -> int:
    from ingest import ctl
    from ingest.registry import load_registry
    from ingest.security import SecurityConfig

    security = SecurityConfig(ssl_ca=args.ssl_ca, ssl_cert=args.ssl_cert, ssl_key=args.ssl_key)
    tz = ctl.time_zone(args.time_zone)
    if args.cmd == ctl.ENCRYPT:
        print(ctl.encrypt_line(args.text))
        return 0
    if args.cmd == ctl.GENERATE_META:
        print(ctl.generate_meta(args.pd_urls or "http://127.0.0.1:2379", args.data_dir, tz, security))
        return 0
    uri = args.registry or args.pd_urls or "file://registry.json"
    registry = load_registry(uri, security=security)
    try:
        print(ctl.run_command(registry, args.cmd, node_id=args.node_id, state=args.state,
                              show_offline=args.show_offline_nodes, tz=tz, security=security))
        return 0
    finally:
        registry.close()


_DRAIN_FLAGS = [("--registry", "registry", str, "file://PATH or etcd://HOST:PORT (where the pumps register)"),
                ("--pd-urls", "pd-urls", str, "PD URLs (the cluster id comes from PD)"),
                ("--cluster-id", "cluster-id", int, "cluster id (instead of asking PD)"),
                ("--upstream-status-url", "upstream.status-url", str, "TiDB status API (DDL history)"),
                ("--upstream-dsn", "upstream.dsn", str,
                 "TiDB's MySQL port, mysql://USER:PASS@HOST:4000 (what verify reads at a ts)"),
                ("--tables", "tables", str, "only these tables: db.t,db2.t2 (the checkpoint does not move)"),
                ("--log-file", "log-file", str, "log to this file instead of stderr"),
                ("--initial-commit-ts", "initial-commit-ts", int,
                 "where a sink never written starts (-1: PD's current ts, kept in DATA_DIR)")]


def _spark_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spark-master", dest="spark.master", help="default local[*]")
    p.add_argument("--spark-conf", dest="spark_conf", type=_key_value, action="append", metavar="KEY=VALUE",
                   help="a Spark setting, verbatim (repeatable; over [spark.conf])")


def _in_process_flag(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--in-process-below", dest="spark.in-process-below", type=int, metavar="BYTES",
                   help=f"{text} (default 67108864; 0: always on Spark)")


def _drainer_flags(p: argparse.ArgumentParser, sinks: bool = True) -> None:
    p.add_argument("--config", help="drainer.toml (TiDB Binlog key names)")
    for flag, key, typ, text in _DRAIN_FLAGS:
        p.add_argument(flag, dest=key, type=typ, help=text, metavar=flag[2:].upper().replace("-", "_"))
    if sinks:
        _sink_flags(p, shared=True)


def _sink_flags(p: argparse.ArgumentParser, shared: bool) -> None:
    """The registered sinks' flags: those every drainer command takes (``shared``), or drain's own."""
    from sink.registry import specs

    for spec in specs():
        for f in spec.flags:
            if f.shared != shared:
                continue
            names = [f.flag, f.short] if f.short else [f.flag]
            meta = f.metavar or f.flag[2:].upper().replace("-", "_")
            if f.kind == "switch":
                p.add_argument(*names, dest=f.key, action="store_const", const=True, help=f.help)
            elif f.kind == "pairs":
                p.add_argument(*names, dest=f.key, type=_key_value, action="append", metavar="KEY=VALUE",
                               help=f.help)
            else:
                p.add_argument(*names, dest=f.key, type=f.type, metavar=meta, help=f.help)


def _drain_parser(sub: Any, sinks: bool = True) -> None:
    p = sub.add_parser("drain", help="run one Drainer batch: pumps -> Spark -> Iceberg/Parquet",
                       description="Drain the commit_ts range (checkpoint, min pump watermark] into the sink.")
    _drainer_flags(p, sinks)
    if sinks:
        from sink.registry import names

        p.add_argument("--sink", dest="syncer.db-type", choices=names(), help=f"default {names()[0]}")
        _sink_flags(p, shared=False)
    p.add_argument("--spark-master", dest="spark.master", help="default local[*]")
    _in_process_flag(p, "compute the range in this process, without Spark, while the binlogs pulled total at "
                        "most BYTES")
    p.add_argument("--splits-per-pump", dest="spark.splits-per-pump", type=int, metavar="N",
                   help="at least this many pull tasks (ts sub-ranges) per pump (default 1; at least one per core)")
    p.add_argument("--compressor", dest="compressor", choices=["", "gzip"],
                   help="gzip: ask pumps read through PullBinlogs (TiDB Binlog's) for a gzip stream")
    p.add_argument("--spark-conf", dest="spark_conf", type=_key_value, action="append", metavar="KEY=VALUE",
                   help="a Spark setting, verbatim (repeatable; over [spark.conf] and binlake's local defaults)")
    p.add_argument("--from-ts", type=int, help="start of the range (exclusive; default the checkpoint)")
    p.add_argument("--to-ts", type=int, help="end of the range (inclusive; default the pumps' watermark)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    p.add_argument("--write-plan", action="store_true",
                   help="with --dry-run: also print the sink's plan of each table (Iceberg: created, evolved, "
                        "reset, backfilled, which files are read), for which the range is pulled and decoded on "
                        "Spark; nothing is written")
    p.add_argument("--follow", action="store_true",
                   help="keep running ranges back to back as an online drainer (SIGTERM stops it cleanly)")
    p.add_argument("--interval", type=float, help="--follow: seconds between runs (default: detect-interval, 5)")
    p.add_argument("--addr", dest="addr", help="--follow: gRPC address pumps notify (default 127.0.0.1:8249)")
    p.add_argument("--status-addr", dest="status-addr",
                   help="--follow: HTTP /status, /metrics, /state (default 127.0.0.1:8259)")
    p.add_argument("--pushgateway", dest="metrics-addr", metavar="URL",
                   help="push the run's metrics to this Prometheus Pushgateway (metrics-addr); they are always "
                        "written to DATA_DIR/metrics.prom")
    p.add_argument("--report", help="write the run report JSON here (default DATA_DIR/reports/run-TO.json); with "
                        "--dry-run, or when there is nothing to drain, the plan is written here")
    p.set_defaults(run=_run_drain)


def _verify_parser(sub: Any, sinks: bool = True) -> None:
    p = sub.add_parser("verify", help="compare what the sink holds at a ts with the upstream read at that ts",
                       description="Read every table of the upstream over the MySQL protocol at a ts "
                                   "(SET @@tidb_snapshot, --upstream-dsn) and compare it key by key with "
                                   "what the configured sink holds at that ts, or with another target "
                                   "(--against).")
    _drainer_flags(p, sinks)
    p.add_argument("--ts", type=int, help="the run end (to_ts) to compare at (default: the checkpoint)")
    if sinks:
        from sink.registry import specs

        schemes = ", ".join(f"{sch}:// ({s.names[0]})" for s in specs() for sch in s.against_schemes)
        p.add_argument("--against", metavar="URI",
                       help=f"compare this target (at its checkpoint) instead of the configured sink: {schemes}")
    p.set_defaults(run=_run_verify)


def _restore_parser(sub: Any, sinks: bool = True) -> None:
    p = sub.add_parser("restore", help="rebuild the upstream's tables as they were at a ts, from the lake",
                       description="Rebuild every table (or --tables) as it was at --ts from the Iceberg "
                                   "mirrors and changelogs: the newest mirror state at or before the ts plus "
                                   "the changelog's changes up to it, computed on Spark (in this process "
                                   "when the lake files to read are small: --in-process-below). A mysql:// or "
                                   "tidb:// target gets the tables by replaying the upstream's DDL history "
                                   "up to the ts and TiDB Binlog's checkpoint row at the ts; iceberg://NS "
                                   "gets tables NS.<db>.<table> in the lake's catalog.")
    _drainer_flags(p, sinks)
    p.add_argument("--ts", type=int, required=True, help="the upstream ts to restore")
    p.add_argument("--into", required=True, metavar="URI",
                   help="mysql://USER:PASS@HOST:PORT, tidb://…, or iceberg://NAMESPACE")
    p.add_argument("--replace", action="store_true",
                   help="drop the databases (or the namespace's tables) the restore would create first")
    p.add_argument("--report", metavar="FILE",
                   help="write what was restored (tables, rows, base snapshot, changelog tail, seconds) as JSON "
                        "(docs/restore-report.schema.json)")
    _spark_flags(p)
    _in_process_flag(p, "load in this process, without Spark, when the lake files to read total at most BYTES")
    p.set_defaults(run=_run_restore)


def _check_parser(sub: Any, sinks: bool = True) -> None:
    p = sub.add_parser("check", help="quality gates (Great Expectations) on the Iceberg run that ended at a ts",
                       description="Validate the changelog rows a run appended and the mirrors at its end "
                                   "with Great Expectations on Spark: _tidb_op in {I,U,D}, _tidb_commit_ts in "
                                   "the run's range, keys non-null and unique, row counts as in the run report, "
                                   "no NULL in NOT NULL columns. Exit 1 naming each failed expectation; results "
                                   "and data docs go to DATA_DIR/quality/<to_ts>/. Needs binlake[quality].")
    _drainer_flags(p, sinks)
    p.add_argument("--ts", type=int, help="the to_ts of the run to check (default: the checkpoint)")
    p.add_argument("--report", help="the run report (default DATA_DIR/reports/run-TS.json)")
    _spark_flags(p)
    p.set_defaults(run=_run_check)


def _maintain_parser(sub: Any, sinks: bool = True) -> None:
    p = sub.add_parser("maintain", help="Iceberg table maintenance: expire snapshots, compact small files, "
                                        "remove orphan files",
                       description="For every binlake table of the drainer's catalog (--tables: those upstream "
                                   "tables' mirrors and changelogs): remove tidb-ts-* tags older than "
                                   "--tag-retention and expire snapshots older than --retention (never the "
                                   "current one or a tagged one), rewrite each partition's small data files "
                                   "as target-size files on Spark, folding in the position deletes of a "
                                   "mirror's data files they remove 20% or more of (one commit per table; "
                                   "a partition's other delete files become one), and delete files "
                                   "under the table's location that nothing references and that are older "
                                   "than --orphan-age. Report: DATA_DIR/reports/maintain-<utc time>.json.")
    _drainer_flags(p, sinks)
    p.add_argument("--retention", default="7d", help="expire snapshots older than this (default 7d; e.g. 12h, 0s)")
    p.add_argument("--tag-retention", default="30d",
                   help="keep tidb-ts-<ts> tags (and their snapshots) whose ts is younger than this (default 30d)")
    p.add_argument("--orphan-age", default="3d",
                   help="remove unreferenced files only when older than this (default 3d)")
    p.add_argument("--dry-run", action="store_true", help="print what each step would do and change nothing")
    p.add_argument("--report", help="write the report JSON here (default DATA_DIR/reports/maintain-<utc time>.json)")
    _spark_flags(p)
    p.set_defaults(run=_run_maintain)


def _key_value(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _drainer_options(args: argparse.Namespace) -> DrainerConfig:
    from binlake.drain_config import drainer_model
    from ingest.config import load_config, print_warnings
    from sink.registry import specs

    # the flags whose dest is a config key: the shared ones, and every dotted one (``spark.master``, …)
    keys = [k for _, k, _, _ in _DRAIN_FLAGS] + ["addr", "status-addr", "metrics-addr"]
    keys += [k for k in vars(args) if "." in k and k not in keys]
    overrides: dict[str, Any] = {k: getattr(args, k, None) for k in keys}
    for spec in specs():
        for f in spec.flags:
            value = getattr(args, f.key, None)
            overrides[f.key] = dict(value) if f.kind == "pairs" and value else value
    if getattr(args, "spark_conf", None):
        overrides["spark.conf"] = dict(args.spark_conf)
    options = load_config(drainer_model(), args.config, overrides)
    print_warnings(options, args.config)
    return options


def _spark_command_options(args: argparse.Namespace) -> DrainerConfig:
    """The drainer options of a command that starts Spark, with logging set up and, for a local
    master, the local Spark's process settings."""
    from transform.spark import is_local

    options = _drainer_options(args)
    _setup_logging(options.log_level, options.log_file)
    if is_local(options.spark.master):
        local_spark()
    return options


def _run_drain(args: argparse.Namespace) -> int:
    from binlake.drain import run_drain_command
    from ingest.config import ConfigError

    options = _spark_command_options(args)
    if args.follow:
        from binlake.follow import run_follow

        if args.from_ts is not None or args.to_ts is not None or args.dry_run:
            raise ConfigError("--follow runs from the checkpoint on: no --from-ts, --to-ts or --dry-run")
        return run_follow(options, args.interval, sys.stdout)
    if args.write_plan and not args.dry_run:
        raise ConfigError("--write-plan goes with --dry-run")
    run_drain_command(options, args.from_ts, args.to_ts, args.dry_run, args.report, out=sys.stdout,
                      write_plan=args.write_plan)
    return 0


def _run_verify(args: argparse.Namespace) -> int:
    from binlake.drain import run_verify_command

    options = _drainer_options(args)
    return run_verify_command(options, args.ts, against=args.against)


def _run_check(args: argparse.Namespace) -> int:
    from binlake.check import run_check_command

    options = _spark_command_options(args)
    return run_check_command(options, args.ts, out=sys.stdout, report_file=args.report)


def _run_restore(args: argparse.Namespace) -> int:
    from binlake.restore import run_restore_command

    options = _spark_command_options(args)
    run_restore_command(options, args.ts, args.into, args.replace, out=sys.stdout, report_path=args.report)
    return 0


def _run_maintain(args: argparse.Namespace) -> int:
    from binlake.maintain import run_maintain_command

    options = _spark_command_options(args)
    run_maintain_command(options, args.retention, args.tag_retention, args.orphan_age, args.dry_run, args.report,
                         out=sys.stdout)
    return 0


def _reparo_parser(sub: Any) -> None:
    p = sub.add_parser("reparo", help="TiDB Binlog's reparo: replay db-type file's protobuf files into "
                                      "MySQL/TiDB, or print them",
                       description="Read the protobuf files TiDB Binlog's or binlake's db-type file wrote in "
                                   "data-dir and replay the binlogs between start-tso and stop-tso into "
                                   "[dest-db] (dest-type mysql) or print them as reparo does (dest-type "
                                   "print). Takes reparo.toml; a flag overrides its key.")
    p.add_argument("--config", help="reparo.toml")
    p.add_argument("--data-dir", help="the directory of protobuf files")
    p.add_argument("--start-datetime", help="from this local time (YYYY-MM-DD HH:MM:SS)")
    p.add_argument("--stop-datetime", help="up to this local time")
    p.add_argument("--start-tso", type=int, help="from this commit ts (included)")
    p.add_argument("--stop-tso", type=int, help="up to this commit ts (included; 0: no end)")
    p.add_argument("--dest-type", choices=["mysql", "print"], help="replay into [dest-db] or print (default)")
    p.add_argument("--txn-batch", type=int, help="DMLs per downstream transaction (default 20)")
    p.add_argument("-c", "--worker-count", type=int, help="parallel appliers (default 16)")
    p.add_argument("--safe-mode", action="store_true", default=None, help="INSERT as REPLACE, UPDATE as "
                   "DELETE + REPLACE: a range replayed again converges")
    p.set_defaults(run=_run_reparo)


def _run_reparo(args: argparse.Namespace) -> int:
    from binlake.reparo import run_reparo_command

    keys = ("data_dir", "start_datetime", "stop_datetime", "start_tso", "stop_tso", "dest_type", "txn_batch",
            "worker_count", "safe_mode")
    return run_reparo_command(args.config, {k.replace("_", "-"): getattr(args, k) for k in keys})


_NO_SINK_COMMANDS = ("pump", "ctl", "reparo")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of every subcommand. The sinks' own flags (from their registered specs)
    are left out when ``command`` is one that runs no sink, so that a pump imports no sink module."""
    parser = argparse.ArgumentParser(prog="binlake", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sinks = command not in _NO_SINK_COMMANDS
    _pump_parser(sub)
    _ctl_parser(sub)
    _drain_parser(sub, sinks)
    _verify_parser(sub, sinks)
    _maintain_parser(sub, sinks)
    _check_parser(sub, sinks)
    _restore_parser(sub, sinks)
    _reparo_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``binlake`` command, its exit status returned (1 with one clear line on errors)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in COMMANDS:   # first: the parser imports grpc, which reads its settings once
        configure_process(command)
    args = build_parser(command).parse_args(argv)
    try:
        return int(args.run(args))
    except BinlakeError as exc:  # a named error of any stage: one line (anything else is a bug: a traceback)
        print(f"binlake {args.command}: error: {exc}", file=sys.stderr)
        return 1


def console() -> NoReturn:
    """The ``binlake`` console script: :func:`main`, then the process exits (what the command held is
    left to the operating system, ``binlake.process.command_done``)."""
    code = main()
    command_done()
    sys.exit(code)


if __name__ == "__main__":
    console()
