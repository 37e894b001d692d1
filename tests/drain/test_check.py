"""``binlake check``: the Great Expectations gates over a real drain (emulated TiDB, two pumps, local
Spark, SQLite Iceberg catalog), called through ``binlake.cli.main`` with a drainer.toml. It passes on
the drained warehouse and fails, naming the expectation, once a test corrupts it on purpose (a data file
appended with the run's markers, rolled back after the test) or edits the run report."""
from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from binlake.cli import main
from binlake.drain_config import DrainerConfig, SparkSection, UpstreamSection
from sink.iceberg.plugin import IcebergSettings
from tests.drain.conftest import Env, cluster_with_pumps

pytestmark = pytest.mark.integration


@dataclass
class Drained:
    env: Env
    report: dict[str, Any]
    config: Path

    @property
    def to_ts(self) -> int:
        return int(self.report["to_ts"])

    def check(self, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
        """``binlake check --config drainer.toml ARGS…`` as a user runs it: (exit status, stdout, stderr)."""
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        try:
            code = main(["check", "--config", str(self.config), *args])
        finally:   # main's logging setup writes to this test's captured stderr: put the root logger back
            root.handlers[:], root.level = handlers, level
        out = capsys.readouterr()
        return code, out.out, out.err


def _config(path: Path, o: DrainerConfig) -> Path:
    path.write_text(f"""registry = "{o.registry}"
pd-urls = "{o.pd_urls}"
data-dir = "{o.data_dir}"
[upstream]
status-url = "{o.upstream.status_url}"
[iceberg]
warehouse = "{o.iceberg.warehouse}"
[spark]
master = "local[2]"
""")
    return path


@pytest.fixture(scope="module")
def drained(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[Drained]:
    """One drain of a compound-key table with NOT NULL columns (a zero date among them) and a single-key
    table: inserts, updates (one changes the key) and deletes."""
    root = tmp_path_factory.mktemp("check")
    with cluster_with_pumps(root, mysql_addr=None) as (cluster, pumps, registry):
        options = DrainerConfig(registry=registry, pd_urls=cluster.tso_url, data_dir=str(root / "drainer"),
                                upstream=UpstreamSection(status_url=cluster.status_url),
                                iceberg=IcebergSettings(warehouse=str(root / "warehouse")),
                                spark=SparkSection(master="local[2]"))
        env = Env(root, cluster, pumps, options)
        env.sql("create table t (a int, b varchar(8), d date not null, n int not null, v varchar(10), "
                "primary key (a, b))")
        env.sql("create table s (id int primary key, note varchar(10))")
        env.sql("insert into t values (1, 'x', '2024-01-01', 1, 'a'), (2, 'y', '0000-00-00', 2, 'b'), "
                "(3, 'z', '2024-03-01', 3, null)")
        env.sql("update t set v = 'aa' where a = 1", server=1)
        env.sql("update t set a = 4 where a = 3")
        env.sql("delete from t where a = 2", server=1)
        env.sql("insert into s values (1, 'one'), (2, 'two'); delete from s where id = 2")
        report = env.drain()
        rows = {t["table"]: t["rows"] for t in report["tables"]}
        assert rows["test.t"] == {"I": 3, "U": 2, "D": 1} and rows["test.s"] == {"I": 2, "U": 0, "D": 1}
        assert report["nulled_values"] >= 1                   # the zero date
        yield Drained(env, report, _config(root / "drainer.toml", options))


def _markers(tbl: Any) -> dict[str, str]:
    """The run markers of the table's current snapshot (the drained run's)."""
    props = tbl.current_snapshot().summary.additional_properties
    return {k: v for k, v in props.items() if k.startswith("binlake.")}


@pytest.fixture
def restore(drained: Drained) -> Iterator[list[str]]:
    """Tables a test corrupts (``db.table`` appended to the list) go back to their snapshot before it."""
    catalog = drained.env.catalog()
    names: list[str] = []
    before = {n: catalog.load_table(n).current_snapshot().snapshot_id for n in ("test.t", "test.t__changelog")}
    yield names
    for n in names:
        catalog.load_table(n).manage_snapshots().rollback_to_snapshot(before[n]).commit()


def test_passes_on_the_drained_warehouse_and_saves_results_and_data_docs(
        drained: Drained, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = drained.check(capsys)                 # --ts defaults to the checkpoint
    assert code == 0, out + err
    assert f"run ({drained.report['from_ts']}, {drained.to_ts}]" in out and "PASS" in out
    assert "OK   test.t" in out and "OK   test.s" in out and "not reconciled" not in out
    assert "2 zero/invalid date(s) as NULL" in out         # NOT NULL d's zero date (insert, delete): counted
    qdir = Path(drained.env.options.data_dir, "quality", str(drained.to_ts))
    saved = json.loads((qdir / "results.json").read_text())
    assert saved["ok"] is True and saved["failures"] == []
    suites = {v["suite_name"]: v for v in saved["validations"]}
    assert set(suites) == {"test.t", "test.t__changelog", "test.s", "test.s__changelog"}
    assert all(v["success"] for v in suites.values())
    types = {r["expectation_config"]["type"] for r in suites["test.t"]["results"]}
    assert {"expect_compound_columns_to_be_unique", "expect_table_row_count_to_equal"} <= types
    assert "expect_column_values_to_be_unique" in {r["expectation_config"]["type"] for r in suites["test.s"]["results"]}
    assert (qdir / "docs" / "index.html").is_file()
    assert len(list((qdir / "docs" / "validations").rglob("*.html"))) == 4


def test_a_duplicated_mirror_key_fails_naming_the_expectation(
        drained: Drained, restore: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    mirror = drained.env.catalog().load_table("test.t")
    rows = mirror.scan().to_arrow().sort_by("a")
    dup = rows.slice(0, 1)
    dup = dup.set_column(dup.schema.get_field_index("n"), dup.schema.field("n"), pa.array([None], pa.int32()))
    restore.append("test.t")
    mirror.append(dup, snapshot_properties=_markers(mirror))   # a file as if the run had written it
    code, out, err = drained.check(capsys, "--ts", str(drained.to_ts))
    assert code == 1, out + err
    assert "FAIL test.t" in out and "OK   test.s" in out and "FAIL: " in out
    line = next(x for x in out.splitlines() if "expect_compound_columns_to_be_unique" in x)
    assert "test.t (mirror at" in line and "the key (a, b) is unique" in line and "2 of 3 row(s) unexpected" in line
    assert any("expect_column_values_to_not_be_null" in x and "NOT NULL column n" in x for x in out.splitlines())
    assert "observed 3" in next(x for x in out.splitlines() if "rows at " in x and "expect_table_row_count" in x)
    saved = json.loads(Path(drained.env.options.data_dir, "quality", str(drained.to_ts), "results.json").read_text())
    assert saved["ok"] is False
    assert {f["expectation"] for f in saved["failures"]} == {"expect_compound_columns_to_be_unique",
                                                             "expect_column_values_to_not_be_null",
                                                             "expect_table_row_count_to_equal"}


def test_a_changelog_row_outside_the_run_range_fails_naming_the_expectation(
        drained: Drained, restore: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    log = drained.env.catalog().load_table("test.t__changelog")
    row = log.scan().to_arrow().sort_by("_tidb_commit_ts").slice(0, 1)
    late = drained.to_ts + 1000
    row = row.set_column(row.schema.get_field_index("_tidb_commit_ts"), row.schema.field("_tidb_commit_ts"),
                         pa.array([late], pa.int64()))
    restore.append("test.t__changelog")
    log.append(row, snapshot_properties=_markers(log))
    code, out, err = drained.check(capsys)
    assert code == 1, out + err
    line = next(x for x in out.splitlines() if "expect_column_values_to_be_between" in x)
    assert "test.t__changelog (rows of run" in line and "_tidb_commit_ts within the run's range" in line
    assert f"[{drained.to_ts - late}]" in line              # shown as its distance below the run's to_ts
    assert "OK   test.s" in out


@pytest.mark.parametrize("offset", [0, 1], ids=["at-to-ts", "just-after-to-ts"])
def test_the_range_check_is_exact_at_the_range_edge(drained: Drained, restore: list[str], offset: int,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A commit_ts is ~2^58: compared as floats, values within ~64 of an edge of the range came out
    on the wrong side (the demo's changelog rows at from_ts + 1 failed the check)."""
    log = drained.env.catalog().load_table("test.t__changelog")
    row = log.scan().to_arrow().sort_by("_tidb_commit_ts").slice(0, 1)
    ts = drained.to_ts + offset
    row = row.set_column(row.schema.get_field_index("_tidb_commit_ts"), row.schema.field("_tidb_commit_ts"),
                         pa.array([ts], pa.int64()))
    restore.append("test.t__changelog")
    log.append(row, snapshot_properties=_markers(log))
    code, out, err = drained.check(capsys)
    assert code == 1, out + err          # the extra row fails the count against the report either way
    between = [x for x in out.splitlines() if "expect_column_values_to_be_between" in x]
    assert bool(between) == (offset == 1), out


def test_a_count_that_differs_from_the_run_report_fails(
        drained: Drained, capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(drained.env.options.data_dir, "reports", f"run-{drained.to_ts}.json")
    original = path.read_text()
    doc = json.loads(original)
    next(t for t in doc["tables"] if t["table"] == "test.s")["rows"]["U"] = 1
    path.write_text(json.dumps(doc))
    try:
        code, out, err = drained.check(capsys)
    finally:
        path.write_text(original)
    assert code == 1, out + err
    assert "FAIL test.s" in out and "OK   test.t" in out
    line = next(x for x in out.splitlines() if "expect_table_row_count_to_equal" in x)
    assert "rows with _tidb_op = U equal the run report's U = 1; observed 0" in line


def test_a_missing_report_or_great_expectations_is_a_clear_error(
        drained: Drained, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = drained.check(capsys, "--ts", "12345")
    assert code == 1
    assert "binlake check: error: no run report for ts 12345" in err and "run-12345.json does not exist" in err
    import sink.iceberg

    monkeypatch.delattr(sink.iceberg, "quality", raising=False)
    monkeypatch.delitem(sys.modules, "sink.iceberg.quality", raising=False)
    monkeypatch.setitem(sys.modules, "great_expectations", None)
    code, out, err = drained.check(capsys)
    assert code == 1
    assert "needs Great Expectations" in err and "pip install 'binlake[quality]'" in err
