"""The run report's models and the JSON Schema in docs/ that the DAGs validate reports against."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from binlake.report import SCHEMA_FILE, PlanReport, PumpPlan, RunReport, parse_report, schema_text
from sink.base import TableReport

REPO = Path(__file__).resolve().parents[2]


def _run() -> RunReport:
    return RunReport(cluster_id=7, from_ts=10, to_ts=20, sink="iceberg", checkpoint_before=10, checkpoint_after=20,
                     data_dir="d", batch_id="b1",
                     pumps=[PumpPlan(node_id="p1", addr="127.0.0.1:8250", protocol="PumpScan", watermark=21)],
                     stages={"plan": 0.1}, tables=[TableReport(table="db.t", rows={"I": 3}, ddl=["alter table t"])],
                     counts={"stale_row_changes": 0})


def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text())


def test_the_schema_in_docs_is_the_models_schema() -> None:
    assert SCHEMA_FILE == REPO / "docs" / "run-report.schema.json"
    assert SCHEMA_FILE.read_text() == schema_text(), "regenerate it: .venv/bin/python -m binlake.report"


def test_the_restore_reports_schema_in_docs_is_its_models_schema() -> None:
    from binlake import restore_report

    assert restore_report.SCHEMA_FILE == REPO / "docs" / "restore-report.schema.json"
    assert restore_report.SCHEMA_FILE.read_text() == restore_report.schema_text(), \
        "regenerate it: .venv/bin/python -m binlake.restore_report"


def test_reports_round_trip_and_validate_against_the_schema() -> None:
    plan = PlanReport(cluster_id=7, from_ts=10, to_ts=20, sink="mysql", checkpoint_before=None,
                      checkpoint_after=None, dry_run=True, data_dir="d")
    for report in (_run(), plan):
        text = report.model_dump_json()
        jsonschema.validate(json.loads(text), _schema())
        assert parse_report(text) == report
    assert isinstance(parse_report(plan.model_dump_json()), PlanReport)
    assert _run().rows_written() == 3


@pytest.mark.parametrize("change", [
    lambda r: r.pop("to_ts"),
    lambda r: r.update(kind="other"),
    lambda r: r.update(version=2),
    lambda r: r.update(surprise=1),
    lambda r: r["tables"][0].update(rows={"I": "three"}),
])
def test_a_report_of_another_shape_is_refused_by_both(change: Any) -> None:
    doc = json.loads(_run().model_dump_json())
    change(doc)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, _schema())
    with pytest.raises(ValidationError):
        parse_report(json.dumps(doc))


def test_the_dags_check_reports_against_the_schema_file(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("binlake_airflow", REPO / "dags" / "binlake_airflow.py")
    assert spec and spec.loader
    dags = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dags)
    doc = json.loads(_run().model_dump_json())
    monkeypatch.setenv(dags.SCHEMA_ENV, str(SCHEMA_FILE))
    dags.check_report(doc)
    doc.pop("cluster_id")
    with pytest.raises(jsonschema.ValidationError):
        dags.check_report(doc)
