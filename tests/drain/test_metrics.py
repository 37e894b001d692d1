"""Drainer metrics: every run writes Prometheus text to DATA_DIR/metrics.prom and pushes it to a
Pushgateway (an HTTP server here that records what it is sent), a failed run included."""
from __future__ import annotations

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
    assert got[("binlog_drainer_event_total", (("type", "Insert"),))] >= 3
    stages = {dict(labels)["stage"]: v for (name, labels), v in got.items()
              if name == "binlake_drain_last_run_stage_seconds"}
    assert stages == report["stages"]                # every stage of the report, value for value
    method, path, body = gateway.pushes[-1]
    assert method == "PUT" and path == f"/metrics/job/binlake_drain/cluster_id/{env.cluster.cluster_id}"
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
    observed_ms = (report["checkpoint_after"] >> 18) + failed[("binlog_drainer_checkpoint_delay_seconds", ())] * 1000
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
