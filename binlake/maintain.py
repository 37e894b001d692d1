"""``binlake maintain``: expire snapshots, compact small files and remove orphan files in the lake a
drain writes (the sink's :class:`sink.lake.Lake`: the Iceberg warehouse), with a printed summary and a
JSON report."""
from __future__ import annotations

import datetime as dt
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from binlake.drain_config import DrainerConfig
from ingest.config import ConfigError, parse_duration
from sink.lake import MaintainOptions, TableDone

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_DAYS = re.compile(r"(\d+(?:\.\d*)?)d")


def parse_age(text: str, flag: str) -> int:
    """A retention or age (``7d``, ``12h``, ``30m``, ``0s``, ``1d12h``: Go durations plus days) in
    milliseconds; :class:`ConfigError` naming ``flag`` when it is not one."""
    s = text.strip()
    days = _DAYS.match(s)
    total = 0.0
    try:
        if days:
            total = float(days.group(1)) * 86400.0
            s = s[days.end():]
        if s or not days:
            total += parse_duration(s)
    except ValueError:
        raise ConfigError(f"{flag} {text!r} is not a duration: expected e.g. 7d, 12h, 30m, 1d12h or 0s") from None
    return int(round(total * 1000))


def run_maintain_command(options: DrainerConfig, retention: str = "7d", tag_retention: str = "30d",
                         orphan_age: str = "3d", dry_run: bool = False, report_path: str | None = None,
                         out: TextIO = sys.stdout, now_ms: int | None = None) -> dict[str, Any]:
    """Maintain every binlake table of the drainer's catalog (``options.tables``: only those
    upstream tables' mirrors and changelogs); prints one line per table and, unless ``dry_run``,
    writes the report to ``report_path`` (default ``DATA_DIR/reports/maintain-<utc time>.json``).
    Returns the report."""
    opts = MaintainOptions(retention_ms=parse_age(retention, "--retention"),
                           tag_retention_ms=parse_age(tag_retention, "--tag-retention"),
                           orphan_age_ms=parse_age(orphan_age, "--orphan-age"), dry_run=dry_run, now_ms=now_ms)
    spec = options.sink_spec()
    if not spec.capabilities.lake:
        raise ConfigError(f"maintain works on the Iceberg warehouse; this drainer's sink is {options.syncer.db_type}")
    lake = spec.lake(spec.settings(options))

    def spark() -> SparkSession:
        from transform.spark import spark_session

        return spark_session(options.spark.master, options.spark.app_name, options.spark.conf,
                          options.spark.class_archive)

    def progress(t: TableDone) -> None:
        print(t.format(dry_run), file=out, flush=True)

    print(f"binlake maintain{' (dry run: nothing is changed)' if dry_run else ''}: {lake.describe()}, "
          f"retention {retention}, tag retention {tag_retention}, orphan age {orphan_age}", file=out, flush=True)
    report = lake.maintain(spark, opts, options.tables, progress)
    print(f"maintained {len(report['tables'])} table(s)", file=out)
    if not dry_run:
        stamp = dt.datetime.fromtimestamp(report["now_ms"] / 1000, dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        path = Path(report_path) if report_path else Path(options.data_dir) / "reports" / f"maintain-{stamp}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1))
        print(f"report written to {path}", file=out)
    return report
