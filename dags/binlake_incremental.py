"""``binlake_incremental``: drain what the pumps completed since the checkpoint into the Iceberg
warehouse of the drainer.toml, then gate it.

Every ``BINLAKE_INCREMENTAL_MINUTES`` (default 5), one run at a time, no catch-up:

1. ``plan`` — ``binlake drain --dry-run``: the range (checkpoint, the pumps' minimum watermark]. When
   the watermark has not passed the checkpoint there is nothing to drain and the run's other tasks
   are skipped.
2. ``drain`` — ``binlake drain --to-ts <the plan's end>``; the run report is the task's XCom and is
   printed in its log. A failed drain leaves the checkpoint where it was; the next run retries.
3. ``quality_gate`` — ``binlake check --ts <the run's end>`` (Great Expectations over the run's
   changelog rows and the mirrors); a failed expectation fails the task (no retry: the data will
   not change) and its log names the table and the expectation.
"""
from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException

sys.path.append(str(Path(__file__).resolve().parent))   # binlake_airflow.py, wherever the DAGs are deployed
from binlake_airflow import (
    FAILED_GATE,
    CommandFailed,
    check_report,
    data_dir,
    drainer_conf,
    run_binlake,
    run_with_report,
)

INTERVAL = timedelta(minutes=float(os.environ.get("BINLAKE_INCREMENTAL_MINUTES", "5")))

with DAG(
    dag_id="binlake_incremental",
    description="binlake: drain (checkpoint, watermark] into the lakehouse and check it",
    schedule=INTERVAL,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    params={"config": Param("", type="string", description="drainer.toml (default: Variable binlake_drainer_conf, "
                                                            "then $BINLAKE_DRAINER_CONF)")},
    default_args={"retries": 0, "execution_timeout": timedelta(hours=2)},
    tags=["binlake"],
    doc_md=__doc__,
) as dag:

    @task.short_circuit
    def plan(params: dict[str, Any]) -> dict[str, Any] | bool:
        """The run's range, or False (skip the rest) when the watermark has not passed the checkpoint."""
        report = run_with_report(drainer_conf(params), ["drain", "--dry-run"])
        todo = report["to_ts"] > report["from_ts"]
        print(f"plan: ({report['from_ts']}, {report['to_ts']}]" + ("" if todo else " is empty: nothing to drain"))
        return report if todo else False

    @task
    def drain(planned: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        """One drain up to the planned end; returns (and logs) the run report, which stays where the
        gate and a person look for it (``DATA_DIR/reports/run-<to_ts>.json``)."""
        conf = drainer_conf(params)
        run_binlake(conf, ["drain", "--to-ts", str(planned["to_ts"])])
        path = data_dir(conf, planned) / "reports" / f"run-{planned['to_ts']}.json"
        if not path.exists():   # the range was empty when the drain planned it again
            raise AirflowFailException(f"binlake drain wrote no run report {path}: did another drainer move the "
                                       f"checkpoint past {planned['to_ts']}? The next run starts from it")
        report: dict[str, Any] = json.loads(path.read_text())
        check_report(report)
        print("run report:\n" + json.dumps(report, indent=1))
        return report

    @task
    def quality_gate(report: dict[str, Any], params: dict[str, Any]) -> int:
        """``binlake check`` at the run's end; fails the task on any failed expectation."""
        try:
            run_binlake(drainer_conf(params), ["check", "--ts", str(report["to_ts"])])
        except CommandFailed as e:
            if e.status == FAILED_GATE:
                raise AirflowFailException(f"quality gate failed at ts {report['to_ts']}:\n" + "\n".join(e.tail)) from e
            raise
        return int(report["to_ts"])

    quality_gate(drain(plan()))
