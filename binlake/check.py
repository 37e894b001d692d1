"""``binlake check [--ts T]``: the quality gates of the Iceberg run that ended at ``T``
(``sink/iceberg/quality.py``), from its run report and the catalog, on the drainer's Spark."""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from binlake.drain_config import DrainerConfig
from binlake.report import parse_report
from ingest.config import ConfigError

QUALITY_EXTRA = "binlake[quality]"


class GreatExpectationsMissing(ConfigError):
    """Great Expectations is not installed (the ``binlake[quality]`` extra)."""


def report_path(options: DrainerConfig, ts: int) -> Path:
    """Where ``binlake drain`` wrote the report of the run that ended at ``ts``."""
    return Path(options.data_dir) / "reports" / f"run-{ts}.json"


def quality_dir(options: DrainerConfig, ts: int) -> Path:
    """Where the check of the run that ended at ``ts`` saves GE's results and data docs."""
    return Path(options.data_dir).resolve() / "quality" / str(ts)   # GE wants an absolute docs directory


def _gates_installed() -> None:
    """Great Expectations imports (its import logs each API it registers: quieted); a
    :class:`GreatExpectationsMissing` naming the pip extra otherwise."""
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    try:
        import great_expectations  # noqa: F401
    except ImportError as e:
        raise GreatExpectationsMissing(f"binlake check needs Great Expectations, which is not installed: "
                                       f"pip install '{QUALITY_EXTRA}' ({e})") from e


def run_check_command(options: DrainerConfig, ts: int | None = None, out: TextIO = sys.stdout,
                      report_file: str | None = None) -> int:
    """Check the run that ended at ``ts`` (default: the catalog's checkpoint); print the summary and
    return 0 when every expectation holds, 1 otherwise. A missing run report or catalog checkpoint,
    or a lake without DDL history and no ``[upstream] status-url`` (the NOT NULL flags come from the
    DDL history), is a :class:`ConfigError`."""
    _gates_installed()
    from binlake.restore import lake_history
    from transform.spark import spark_session

    spec = options.sink_spec()
    if not spec.capabilities.lake:
        raise ConfigError(f"check works on the Iceberg warehouse; this drainer's sink is {options.syncer.db_type}")
    lake = spec.lake(spec.settings(options))
    if ts is None:
        ts = lake.checkpoint()
        if ts is None:
            raise ConfigError("no checkpoint in the catalog yet: give --ts (the to_ts of a run)")
    path = Path(report_file) if report_file else report_path(options, ts)
    if not path.exists():
        raise ConfigError(f"no run report for ts {ts}: {path} does not exist (binlake drain writes "
                          f"DATA_DIR/reports/run-<to_ts>.json; is --ts the to_ts of an Iceberg run of this data-dir?)")
    try:
        report = parse_report(path.read_bytes())
    except ValidationError as e:
        raise ConfigError(f"the run report {path} is not a run report: {str(e).splitlines()[0]}") from e
    if report.to_ts != ts:
        raise ConfigError(f"the run report {path} is of the run ending at {report.to_ts}, not {ts}")
    history = lake_history(lake, options, out)
    spark = spark_session(options.spark.master, options.spark.app_name, options.spark.conf,
                          options.spark.class_archive)
    tables = [f"{d}.{t}" for d, t in options.tables] or None
    print(f"binlake check: run ({report.from_ts}, {ts}] from {path}", file=out, flush=True)
    result = lake.check_run(spark, report.model_dump(), history, quality_dir(options, ts), tables)
    print(result.format(), file=out, flush=True)
    return 0 if result.ok else 1
