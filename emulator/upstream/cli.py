"""The ``binlake-emulator`` command: ``serve`` (the TiDB stand-in), ``sql`` (its HTTP SQL client) and
``demo`` (the local demo: the stand-in, two binlake pumps, a workload, drains into a local Iceberg).

A program of its own beside binlake: it drives binlake through binlake's own commands and public
API (``binlake pump`` as children, :mod:`binlake.drain` in-process for the demo); binlake never
imports it."""
from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("binlake-emulator")


def configure_emulator(demo: bool) -> None:
    """The emulator's process settings, made before grpc is imported: binlake's for a harness (it runs
    pumps as children; the demo runs drains and checks in this process on a local Spark; gRPC's fork
    handlers off, its children exec at once), and for the demo the drain driver's collector
    thresholds (its drains run here). The user's environment wins."""
    from binlake.process import DRIVER_GC_THRESHOLDS, HARNESS, configure_process

    configure_process(HARNESS)
    if demo:
        gc.set_threshold(*DRIVER_GC_THRESHOLDS)
        gc.freeze()


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="the TiDB stand-in: TSO, status API, SQL, binlogs, workloads",
                       description="Emulate a TiDB cluster towards pumps and drainers: PD-compatible TSO, "
                                   "TiDB status API (/ddl/history, /schema, /mvcc/hex), SQL over the "
                                   "MySQL protocol (port 4000, e.g. `mysql -h127.0.0.1 -P4000 -uroot`) "
                                   "and POST /binlake/sql with TiDB binlog writing, optional workload. "
                                   "`binlake-emulator sql` is the HTTP client.")
    p.add_argument("--config", help="upstream.toml")
    p.add_argument("--tso-addr", dest="tso-addr", help="TSO listen address (default 127.0.0.1:2379)")
    p.add_argument("--status-addr", dest="status-addr", help="status API address (default 127.0.0.1:10080)")
    p.add_argument("--mysql-addr", dest="mysql-addr",
                   help="MySQL protocol address (default 127.0.0.1:4000, TiDB's port; empty: none)")
    p.add_argument("--registry", help="pump registry (file://PATH or etcd://HOST:PORT); empty: no binlog")
    p.add_argument("--cluster-id", dest="cluster-id", type=int, help="cluster id")
    p.add_argument("--servers", type=int, help="number of emulated TiDB servers")
    p.add_argument("--workload", choices=["", "mixed", "churn"], help="run a workload")
    p.add_argument("--rate", type=float, help="workload transactions per second (0 = unthrottled)")
    p.add_argument("--duration", type=float, help="workload seconds (0 = until stopped)")
    p.add_argument("--seed", type=int, help="workload seed")
    p.add_argument("--workers", type=int, help="workload threads")
    p.add_argument("--log-level", dest="log-level", help="debug, info, warning, error")
    p.add_argument("--cpu-affinity", dest="cpu-affinity",
                   help='pin the emulator to these CPUs, e.g. "0" or "0,2" or "1-3" (default: any)')
    p.add_argument("--gc-threshold", dest="gc-threshold", type=int,
                   help="first-generation GC threshold (default 50000; 0 = CPython's default)")
    p.add_argument("--pump-client", dest="pump-client", choices=["thread", "process"],
                   help="where each server's pump client runs (default thread: in this process)")
    p.set_defaults(run=_run_serve)


def _sql_parser(sub: Any) -> None:
    q = sub.add_parser("sql", help="run SQL on a running emulator (stdin shell when no SQL is given)")
    q.add_argument("--status-url", default="http://127.0.0.1:10080", help="the emulator's status API URL")
    q.add_argument("--server", type=int, default=0, help="which emulated TiDB server runs it")
    q.add_argument("--db", default="test", help="current database")
    q.add_argument("sql", nargs="?", help="SQL statements; omitted: read statements from stdin")
    q.set_defaults(run=_run_sql)


def _demo_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the local demo (emulator + two pumps + workload -> Spark -> Iceberg)")
    p.add_argument("--dir", default="demo", help="working directory, wiped first (default ./demo)")
    p.add_argument("--transactions", type=int, default=400)
    p.set_defaults(run=_run_demo)


def _run_sql(args: argparse.Namespace) -> int:
    from upstream.client import StatusClient, print_answer, shell

    client = StatusClient(args.status_url)
    if args.sql:
        return 0 if print_answer(client.sql(args.sql, args.server, args.db)) else 1
    return shell(client, args.server, args.db)


def _run_serve(args: argparse.Namespace) -> int:
    from ingest.config import load_config
    from upstream.cluster import Cluster
    from upstream.config import UpstreamConfig
    from upstream.tuning import parse_cpus, pin_process, tune_gc

    keys = ("tso-addr", "status-addr", "mysql-addr", "registry", "cluster-id", "servers", "workload", "rate",
            "duration", "seed", "workers", "log-level", "cpu-affinity", "gc-threshold", "pump-client")
    opts = load_config(UpstreamConfig, args.config, {k: getattr(args, k, None) for k in keys})
    cpus = parse_cpus(opts.cpu_affinity) if opts.cpu_affinity else None
    _setup_logging(opts.log_level)
    client_cpus = None
    if cpus is not None:
        client_cpus = (os.sched_getaffinity(0) - cpus) or None   # pump client processes: the CPUs left
        pin_process(cpus)           # before any thread starts: they all inherit it
        log.info("pinned to CPU(s) %s", ",".join(map(str, sorted(cpus))))
    cluster = Cluster(registry=opts.registry or None, cluster_id=opts.cluster_id, servers=opts.servers,
                      tso_addr=opts.tso_addr, status_addr=opts.status_addr, mysql_addr=opts.mysql_addr or None,
                      clustered_default=opts.clustered_default, ignore_error=opts.ignore_error,
                      pump_client_process=opts.pump_client == "process", pump_client_cpus=client_cpus)
    log.info("PD-compatible TSO at %s, TiDB status API at %s, MySQL protocol at %s (cluster id %d, "
             "%d server(s), registry %s)", cluster.tso_url, cluster.status_url, cluster.mysql_dsn or "none",
             opts.cluster_id, opts.servers, opts.registry or "none")
    tune_gc(opts.gc_threshold)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        if opts.workload:
            from upstream.workload import Workload

            wl = Workload(cluster, seed=opts.seed, churn=opts.workload == "churn", ddl_interval=opts.ddl_interval)
            wl.setup()

            def stop_workload() -> None:
                stop.wait()
                wl.stop.set()

            threading.Thread(target=stop_workload, daemon=True).start()
            stats = wl.run(rate=opts.rate, duration=opts.duration, workers=opts.workers)
            log.info("workload done: %d committed (%.0f txn/s), %d aborted, %d DDL, %d errors",
                     stats.committed, stats.tps, stats.aborted, stats.ddls, len(stats.errors))
            if opts.duration > 0:
                return 0
        stop.wait()
    finally:
        cluster.flush(10)
        cluster.close()
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    from upstream.demo import run_demo

    return run_demo(Path(args.dir), args.transactions)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="binlake-emulator", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    _sql_parser(sub)
    _demo_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``binlake-emulator`` console script; exit status 1 with one line on the
    emulator's and binlake's named errors."""
    from schemas.errors import BinlakeError

    argv = list(sys.argv[1:] if argv is None else argv)
    configure_emulator(demo="demo" in argv[:1])   # first: the parser's imports load grpc
    args = build_parser().parse_args(argv)
    from upstream.errors import UpstreamError

    try:
        return int(args.run(args))
    except (UpstreamError, BinlakeError, OSError) as exc:
        print(f"binlake-emulator {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
