"""binlake's DAGs under a real Airflow (its own virtualenv, ``make airflow-env``) with a real metadata
DB: every DAG file imports; ``binlake_incremental`` drains the emulator's binlogs from two real pumps
on local Spark and passes the quality gate, then skips when nothing new arrived (and
``binlake_maintenance`` plans a dry run over that warehouse); ``binlake_backfill``
fills a fresh warehouse with exactly a ts range in two chunks and resumes a chunk killed midway.

Each ``dag.test()`` runs in Airflow's interpreter (``tests/dags/run_dag.py``); its tasks run binlake's
CLI from this virtualenv, as a deployment's Airflow would.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pyarrow.compute as pc
import pytest

from binlake.drain import run_verify_command
from binlake.drain_config import DrainerConfig
from ingest.config import load_config
from ingest.scan_client import ScanClient
from sink.iceberg.plugin import catalog_for as open_iceberg_catalog
from tests.drain.conftest import cluster_with_pumps
from upstream.cluster import Cluster
from upstream.local import PumpProcess

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
AIRFLOW_PYTHON = Path(os.environ.get("BINLAKE_AIRFLOW_PYTHON", REPO / ".venv-airflow" / "bin" / "python"))
RUNNER = Path(__file__).with_name("run_dag.py")
CRASH_ONCE = Path(__file__).with_name("crash_once.py")
SCHEMA = REPO / "docs" / "run-report.schema.json"


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``AIRFLOW_HOME`` with a migrated SQLite metadata DB and the DAGs serialized into it."""
    if not AIRFLOW_PYTHON.exists():
        pytest.fail(f"no Airflow at {AIRFLOW_PYTHON}: run `make airflow-env` (make test does)")
    home = tmp_path_factory.mktemp("airflow")
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS), "BINLAKE_BIN": str(Path(sys.executable).with_name("binlake")),
           "BINLAKE_REPORT_SCHEMA": str(SCHEMA)}   # the DAGs validate every report they read
    airflow = str(AIRFLOW_PYTHON.with_name("airflow"))
    for cmd in (["db", "migrate"], ["dags", "reserialize"]):
        done = subprocess.run([airflow, *cmd], env=env, capture_output=True, text=True, cwd=home)
        assert done.returncode == 0, f"airflow {' '.join(cmd)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return env


def run_dag(env: dict[str, str], dag_id: str, conf: dict[str, Any] | None = None,
            extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """``dag.test()`` of ``dag_id``: the run's state, its tasks' states and their XCom return values."""
    args = [str(AIRFLOW_PYTHON), str(RUNNER), str(DAGS), dag_id, json.dumps(conf or {})]
    done = subprocess.run(args, env={**env, **(extra_env or {})}, capture_output=True, text=True, timeout=600,
                          cwd=env["AIRFLOW_HOME"])
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"dag.test({dag_id}):\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT "):])
    result["log"] = done.stdout + done.stderr
    return result


def test_every_dag_imports(airflow_env: dict[str, str]) -> None:
    done = subprocess.run([str(AIRFLOW_PYTHON), str(RUNNER), str(DAGS), "--import-errors"], env=airflow_env,
                          capture_output=True, text=True, timeout=120)
    result = json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])
    assert result["errors"] == {}
    assert result["dags"] == ["binlake_backfill", "binlake_incremental", "binlake_maintenance"]


@dataclass
class Upstream:
    """The emulator with two pumps that send no fake binlogs (a watermark moves only with commits)."""

    cluster: Cluster
    pumps: list[PumpProcess]
    root: Path
    registry: str
    spilled: int = 0

    def watermark(self) -> int:
        """The pumps' minimum watermark."""
        marks = []
        for p in self.pumps:
            with ScanClient(p.addr, self.cluster.cluster_id) as c:
                marks.append(c.watermark().max_commit_ts)
        return min(marks)

    def write_until_drainable(self, table: str, first: int, count: int, pause: float = 0.0) -> int:
        """Insert rows ``first…first+count-1`` into ``table``, one per transaction, alternating the two
        TiDB servers, then more until the minimum watermark passes the last of them; returns it."""
        for i in range(first, first + count):
            self.cluster.execute(f"insert into {table} values ({i}, 'row {i}')", server=i % 2)
            time.sleep(pause)
        assert self.cluster.flush(30)
        last = self.cluster.ts()
        for _ in range(300):   # a pump's watermark passes `last` with its next commit
            if self.watermark() >= last:
                return self.watermark()
            self.spilled += 1
            self.cluster.execute(f"insert into dags.spill values ({self.spilled})", server=self.spilled % 2)
            time.sleep(0.2)
        pytest.fail(f"the pumps' watermark did not pass the writes' ts {last} after 300 more commits")

    def config(self, name: str, **iceberg: str) -> Path:
        """A drainer.toml for a warehouse ``name`` under the root (relative paths, as a deployment's)."""
        path = self.root / f"{name}.toml"
        extra = "".join(f'{k} = "{v}"\n' for k, v in iceberg.items())
        path.write_text(f'registry = "{self.registry}"\npd-urls = "{self.cluster.tso_url}"\n'
                        f'data-dir = "{name}-drainer"\n'
                        f'[upstream]\nstatus-url = "{self.cluster.status_url}"\ndsn = "{self.cluster.mysql_dsn}"\n'
                        f'[iceberg]\nwarehouse = "{name}-warehouse"\n{extra}'
                        f'[spark]\nmaster = "local[2]"\n')
        return path


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    root = tmp_path_factory.mktemp("dags-upstream")
    with cluster_with_pumps(root, fake_binlog_interval="3600") as (cluster, pumps, registry):
        cluster.execute("create database dags; create table dags.orders (id int primary key, note varchar(40)); "
                        "create table dags.spill (id int primary key)")
        yield Upstream(cluster, pumps, root, registry)


def _options(conf: Path) -> DrainerConfig:
    """The drainer options of a DAG's config, with its relative paths resolved as binlake resolves them."""
    here = Path.cwd()
    os.chdir(conf.parent)
    try:
        options = load_config(DrainerConfig, str(conf), {})
        options.data_dir = str(Path(options.data_dir).resolve())
        options.iceberg.warehouse = str(Path(options.iceberg.warehouse).resolve())
        return options
    finally:
        os.chdir(here)


def _verify(options: DrainerConfig, ts: int) -> None:
    out = io.StringIO()
    assert run_verify_command(options, ts, out=out) == 0, out.getvalue()


def test_incremental_drains_gates_then_skips(airflow_env: dict[str, str], upstream: Upstream) -> None:
    conf = upstream.config("incremental")
    wm = upstream.write_until_drainable("dags.orders", 1, 12)
    env = {"AIRFLOW_VAR_BINLAKE_DRAINER_CONF": str(conf)}   # the config through an Airflow Variable

    first = run_dag(airflow_env, "binlake_incremental", extra_env=env)
    assert first["tasks"] == {"plan": "success", "drain": "success", "quality_gate": "success"}, first["log"][-8000:]
    report = first["xcom"]["drain"]
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    assert report["kind"] == "run" and report["to_ts"] >= wm and report["checkpoint_after"] == report["to_ts"]
    assert first["xcom"]["quality_gate"] == report["to_ts"]
    orders = next(t for t in report["tables"] if t["table"] == "dags.orders")
    assert orders["rows"]["I"] == 12
    assert '"checkpoint_after"' in first["log"]   # the report is in the task log too
    options = _options(conf)
    _verify(options, report["to_ts"])

    assert upstream.watermark() == report["to_ts"]   # nothing new: the watermark stands still
    second = run_dag(airflow_env, "binlake_incremental", extra_env=env)
    assert second["state"] == "success"
    assert second["tasks"] == {"plan": "success", "drain": "skipped", "quality_gate": "skipped"}
    catalog = open_iceberg_catalog(options)
    assert len(catalog.load_table(("dags", "orders")).history()) == 1   # no second commit

    maintenance = run_dag(airflow_env, "binlake_maintenance", {"dry_run": True, "retention": "0s"}, extra_env=env)
    assert maintenance["tasks"] == {"maintain": "success"}, maintenance["log"][-8000:]
    assert "dags.orders" in maintenance["log"] and "dry run" in maintenance["log"]
    assert len(catalog.load_table(("dags", "orders")).history()) == 1   # a dry run changes nothing


def test_incremental_without_config_fails_clearly(airflow_env: dict[str, str]) -> None:
    result = run_dag(airflow_env, "binlake_incremental", extra_env={"BINLAKE_DRAINER_CONF": ""})
    assert result["tasks"]["plan"] == "failed"
    assert "no drainer.toml" in result["log"]


def test_backfill_fills_exactly_the_range_in_chunks_and_resumes(airflow_env: dict[str, str],
                                                                upstream: Upstream, tmp_path: Path) -> None:
    assert upstream.cluster.flush(30)
    lo = upstream.cluster.ts()
    upstream.write_until_drainable("dags.orders", 100, 9, pause=0.25)
    hi = upstream.watermark()
    upstream.write_until_drainable("dags.orders", 200, 3)   # after the range: must stay out
    seconds = (((hi >> 18) - (lo >> 18)) // 2 + 2) / 1000   # two chunks
    conf = upstream.config("backfill-src")
    params = {"config": str(conf), "from_ts": lo, "to_ts": hi, "warehouse": str(tmp_path / "backfill"),
              "chunk_seconds": seconds}

    # the second chunk's drain dies after its first table commit (as kill -9 would)
    marker = tmp_path / "crash-pending"
    marker.write_text("")
    crashing = {"BINLAKE_BIN": f"{sys.executable} {CRASH_ONCE} {marker} {lo}"}
    killed = run_dag(airflow_env, "binlake_backfill", params, extra_env=crashing)
    assert killed["tasks"] == {"validate": "success", "backfill": "failed"}, killed["log"][-8000:]
    assert not marker.exists(), "the crash was not triggered"
    planned = killed["xcom"]["validate"]
    assert len(planned["chunks"]) == 2
    finished = sorted(p.name for p in Path(planned["progress"]).glob("chunk-*.json"))
    assert finished == [f"chunk-{planned['chunks'][0]['to_ts']}.json"]   # the first chunk only

    resumed = run_dag(airflow_env, "binlake_backfill", params)
    assert resumed["tasks"] == {"validate": "success", "backfill": "success"}, resumed["log"][-8000:]
    assert "chunk 1/" in resumed["log"] and "finished earlier" in resumed["log"]
    chunks = resumed["xcom"]["backfill"]
    assert len(chunks) == 2 and [c["from_ts"] for c in chunks][0] == lo and chunks[-1]["to_ts"] == hi

    options = _options(conf)
    options.iceberg.warehouse = str(tmp_path / "backfill")
    catalog = open_iceberg_catalog(options)
    log = catalog.load_table(("dags", "orders__changelog")).scan().to_arrow()
    ts = log["_tidb_commit_ts"]
    assert pc.min(ts).as_py() > lo and pc.max(ts).as_py() <= hi   # exactly the range
    ids = sorted(log["id"].to_pylist())
    assert ids == list(range(100, 109)), ids    # each change once, none from before or after
    mirror = catalog.load_table(("dags", "orders")).scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["note"]) for r in mirror) == [(i, f"row {i}") for i in range(100, 109)]

    # another range into that warehouse (no chunk of it finished there) is refused
    later = run_dag(airflow_env, "binlake_backfill", {**params, "from_ts": hi + 1, "to_ts": upstream.watermark()})
    assert later["tasks"]["validate"] == "failed"
    assert "already holds data up to ts" in later["log"]


def test_backfill_refuses_a_bad_range(airflow_env: dict[str, str], upstream: Upstream) -> None:
    conf = upstream.config("refused")
    hi = upstream.watermark()
    above = run_dag(airflow_env, "binlake_backfill",
                    {"config": str(conf), "from_ts": 1, "to_ts": hi + (60_000 << 18), "warehouse": "fresh"})
    assert above["tasks"]["validate"] == "failed"
    assert "above the pumps' watermark" in above["log"]
    backwards = run_dag(airflow_env, "binlake_backfill",
                        {"config": str(conf), "from_ts": hi, "to_ts": hi - 1, "warehouse": "fresh"})
    assert backwards["tasks"]["validate"] == "failed"
    assert "must be below to_ts" in backwards["log"]
