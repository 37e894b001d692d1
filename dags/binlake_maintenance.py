"""``binlake_maintenance``: keep the warehouse's tables healthy, daily.

One task, ``binlake maintain``: expire snapshots older than ``retention`` (the ``tidb-ts-*`` tagged
ones are kept for ``tag_retention``), compact each partition's small files on Spark, remove orphan
files older than ``orphan_age``. With ``dry_run`` it prints the plan and changes nothing. A run
that meets a drain committing to the same table leaves that table for the next day.
"""
from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, task

sys.path.append(str(Path(__file__).resolve().parent))   # binlake_airflow.py, wherever the DAGs are deployed
from binlake_airflow import drainer_conf, run_binlake

with DAG(
    dag_id="binlake_maintenance",
    description="binlake: expire snapshots, compact small files, remove orphan files",
    schedule="@daily",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    params={
        "retention": Param("7d", type="string", description="expire snapshots older than this"),
        "tag_retention": Param("30d", type="string", description="keep tidb-ts-* tagged snapshots this long"),
        "orphan_age": Param("3d", type="string", description="remove unreferenced files older than this"),
        "dry_run": Param(False, type="boolean", description="print the plan only"),
        "config": Param("", type="string", description="drainer.toml (default: Variable binlake_drainer_conf, "
                                                       "then $BINLAKE_DRAINER_CONF)"),
    },
    default_args={"retries": 1, "retry_delay": timedelta(minutes=30), "execution_timeout": timedelta(hours=6)},
    tags=["binlake"],
    doc_md=__doc__,
) as dag:

    @task
    def maintain(params: dict[str, Any]) -> None:
        """``binlake maintain`` with the DAG run's params."""
        args = ["maintain", "--retention", params["retention"], "--tag-retention", params["tag_retention"],
                "--orphan-age", params["orphan_age"]]
        run_binlake(drainer_conf(params), args + (["--dry-run"] if params["dry_run"] else []))

    maintain()
