"""Drainer metrics: every run writes Prometheus text to DATA_DIR/metrics.prom and pushes it to a
Pushgateway (an HTTP server here that records what it is sent), a failed run included."""
from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.drain.conftest import Env

pytestmark = pytest.mark.integration


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(name, sorted labels): value}`` of a Prometheus text exposition."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


class Gateway:
    """A Pushgateway stand-in: records each push's method, path and body."""

    def __init__(self) -> None:
        self.pushes: list[tuple[str, str, str]] = []
        pushes = self.pushes

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                pushes.append((self.command, self.path, body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_PUT = do_POST = _record

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    g = Gateway()
    yield g
    g.server.shutdown()


def test_a_run_writes_and_pushes_its_metrics_and_a_failed_run_says_so(env: Env, gateway: Gateway) -> None:
    env.options.metrics_addr = gateway.addr
    env.sql("create table m (id int primary key, v int)")
    env.sql("insert into m values (1, 1), (2, 2), (3, 3)")
    env.sql("update m set v = 9 where id = 1; delete from m where id = 3")
    report = env.drain()
    text = (Path(env.options.data_dir) / "metrics.prom").read_text()
    got = samples(text)
    rows = next(t["rows"] for t in report["tables"] if t["table"] == "test.m")
    for op, n in rows.items():
        assert got[("binlake_drain_last_run_row_changes", (("op", op), ("table", "test.m")))] == n
    assert rows == {"I": 3, "U": 1, "D": 1}
    assert got[("binlake_drain_last_run_success", ())] == 1
    assert got[("binlake_drain_runs_total", (("outcome", "ok"),))] == 1
    assert got[("binlake_drain_stale_row_changes_total", ())] == report["counts"]["stale_row_changes"] == 0
    assert got[("binlog_drainer_checkpoint_tso", ())] == report["checkpoint_after"] >> 18
    assert got[("binlog_drainer_event_total", (("type", "Insert"),))] >= 3   # (the parser adds _total)
    assert re.search(r'^binlog_drainer_event\{type="Insert"\} \d', text, re.M)   # TiDB's Go name: no _total
    assert "# TYPE binlog_drainer_event counter" in text and "_created" not in text
    assert got[("binlog_drainer_ddl_jobs_total", ())] >= 1                   # the CREATE TABLE
    assert got[("binlog_drainer_checkpoint_delay_seconds_count", ())] == 1   # a histogram, one run observed
    assert {dict(labels)["nodeID"]: v for (name, labels), v in got.items() if name == "binlog_drainer_pump_position"} \
        == {p["node_id"]: p["watermark"] >> 18 for p in report["pumps"]}
    stages = {dict(labels)["stage"]: v for (name, labels), v in got.items()
              if name == "binlake_drain_last_run_stage_seconds"}
    assert stages == report["stages"]                # every stage of the report, value for value
    method, path, body = gateway.pushes[-1]
    assert method == "PUT" and path == (f"/metrics/job/binlog/cluster_id/{env.cluster.cluster_id}"
                                        f"/instance/{env.options.node_id}")
    assert samples(body) == got

    # the next run fails after it has read the checkpoint: the metrics say so and keep that checkpoint
    env.sql("insert into m values (4, 4)")
    broken = env.options.model_copy(deep=True)
    broken.upstream.status_url = ""
    tso_before = env.cluster.ts() >> 18
    with pytest.raises(Exception, match="status-url"):
        env.drain(broken)
    failed = samples((Path(env.options.data_dir) / "metrics.prom").read_text())
    assert failed[("binlake_drain_last_run_success", ())] == 0
    assert failed[("binlake_drain_runs_total", (("outcome", "failed"),))] == 1
    assert failed[("binlog_drainer_checkpoint_tso", ())] == report["checkpoint_after"] >> 18
    # the delay gauge is derived from the kept checkpoint, observed while the failed run was under way:
    # checkpoint + delay, in TSO milliseconds, falls between the TSOs taken before and after that run
    observed_ms = (report["checkpoint_after"] >> 18) + failed[("binlake_drain_checkpoint_delay_seconds", ())] * 1000
    assert tso_before <= observed_ms <= env.cluster.ts() >> 18
    assert samples(gateway.pushes[-1][2]) == failed


def test_stale_row_changes_add_up_over_runs(tmp_path: Path) -> None:
    from binlake.metrics import DrainerMetrics
    from binlake.report import RunReport

    metrics = DrainerMetrics()
    for stale in (5, 0, 2):
        metrics.succeeded(RunReport(cluster_id=1, from_ts=0, to_ts=1 << 18, sink="iceberg", checkpoint_before=None,
                                    checkpoint_after=1 << 18, data_dir=str(tmp_path),
                                    counts={"stale_row_changes": stale}))
    metrics.publish(str(tmp_path))
    assert samples((tmp_path / "metrics.prom").read_text())[("binlake_drain_stale_row_changes_total", ())] == 7


# What TiDB Binlog v8.3's Grafana dashboard (metrics/grafana/binlog.json) and alert rules
# (metrics/alertmanager/binlog.rules.yml) query of a pump and a drainer: metric → (type, labels).
PUMP_DASHBOARD = {
    "binlog_pump_storage_storage_size_bytes": ("gauge", {"type"}),
    "binlog_pump_storage_gc_ts": ("gauge", set()),
    "binlog_pump_storage_max_commit_ts": ("gauge", set()),
    "binlog_pump_rpc_duration_seconds": ("histogram", {"method", "label"}),
    "binlog_pump_storage_write_binlog_size": ("histogram", {"type"}),
    "binlog_pump_storage_write_binlog_duration_time": ("histogram", {"type"}),
    "binlog_pump_storage_error_count": ("counter", {"type"}),      # a series per error type that happened
    "binlog_pump_storage_query_tikv_count": ("counter", set()),
}
DRAINER_DASHBOARD = {
    "binlog_drainer_checkpoint_tso": ("gauge", set()),
    "binlog_drainer_pump_position": ("gauge", {"nodeID"}),
    "binlog_drainer_event": ("counter", {"type"}),
    "binlog_drainer_ddl_jobs_total": ("counter", set()),
}
# histogram buckets TiDB Binlog declares (ExponentialBuckets), by metric
BUCKETS = {"binlog_pump_rpc_duration_seconds": (5e-05, 18), "binlog_pump_storage_write_binlog_size": (16, 25),
           "binlog_pump_storage_write_binlog_duration_time": (5e-05, 20)}


def _exposition(text: str) -> tuple[dict[str, str], dict[str, list[tuple[dict[str, str], float]]]]:
    """(metric → TYPE, sample name → [(labels, value)]) of a text exposition, names as written."""
    types = {m.group(1): m.group(2) for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M)}
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for m in re.finditer(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return types, out


def _holds(text: str, expected: dict[str, tuple[str, set[str]]], with_data: set[str]) -> None:
    types, got = _exposition(text)
    for name, (kind, labels) in expected.items():
        assert types.get(name) == kind, f"{name}: TYPE {types.get(name)}, TiDB Binlog's is {kind}"
        series = got.get(f"{name}_bucket" if kind == "histogram" else name, [])
        if name in with_data:
            assert series, f"{name}: no series"
        for sample_labels, _ in series:
            assert set(sample_labels) - {"le"} == labels, f"{name}: labels {sorted(sample_labels)}"
    for name, (start, count) in BUCKETS.items():
        if name in got or f"{name}_bucket" in got:
            bounds = sorted({float(lb["le"]) for lb, _ in got[f"{name}_bucket"]})
            assert bounds[:-1] == pytest.approx([start * 2 ** i for i in range(count)]) and bounds[-1] == float("inf")


def test_a_pump_and_a_drain_export_what_tidb_binlogs_dashboard_queries(env: Env) -> None:
    import urllib.request

    env.sql("create table dash (id int primary key, v int)")
    env.sql("insert into dash values (1, 1), (2, 2)")
    report = env.drain()
    for pump in env.pumps:
        with urllib.request.urlopen(f"http://{pump.addr}/metrics", timeout=10) as r:   # on the gRPC port, as TiDB's
            text = r.read().decode()
        _holds(text, PUMP_DASHBOARD, set(PUMP_DASHBOARD) - {"binlog_pump_storage_error_count"})
        _, got = _exposition(text)
        writes = got["binlog_pump_rpc_duration_seconds_count"]
        assert any(lb == {"method": "WriteBinlog", "label": "succ"} and n > 0 for lb, n in writes)
        assert {lb["type"] for lb, _ in got["binlog_pump_storage_write_binlog_size_count"]} == {"single", "batch"}
        assert {lb["type"] for lb, _ in got["binlog_pump_storage_storage_size_bytes"]} == {"capacity", "available"}
    text = (Path(env.options.data_dir) / "metrics.prom").read_text()
    _holds(text, DRAINER_DASHBOARD, set(DRAINER_DASHBOARD))
    _, got = _exposition(text)
    assert {lb["nodeID"] for lb, _ in got["binlog_drainer_pump_position"]} == {p["node_id"] for p in report["pumps"]}
