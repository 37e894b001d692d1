"""Drainer metrics: every run writes Prometheus text to DATA_DIR/metrics.prom and pushes it to a
Pushgateway (an HTTP server here that records what it is sent), a failed run included; a real pump
and a real drain into MariaDB export every series TiDB Binlog's Grafana dashboard and alert rules
query; a binlog that does not decode fails the run and is counted; binlake's own Grafana dashboard
names only series binlake exports."""
from __future__ import annotations

import json
import os
import re
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import crc32c
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ingest import binlog as bl
from ingest.errors import MalformedBinlog
from ingest.pump.storage.vlog import HEADER, RECORD_MAGIC, LogFile
from tests.drain.conftest import Env, committed_ts, make_env
from tests.drain.test_mysql_sink import mysql_options
from tests.servers import MariaDBServer
from transform.errors import UndecodableBinlog

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
    delay = "binlog_drainer_checkpoint_delay_seconds"                       # a histogram: its observations
    assert got[(f"{delay}_count", ())] == 1                                  # one run observed
    # a lake sink hands the run over as one item (its commit batch), and runs no downstream query
    handed_over = got[("binlog_drainer_execute_duration_time_count", ())]   # a count of items, not a time
    assert handed_over == 1
    query_family = "binlog_drainer_query_duration_time"                   # downstream queries: none here
    queried = [name for name, _ in got if name.startswith(query_family)]
    assert queried == []
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
# (metrics/alertmanager/binlog.rules.yml) query of a pump and a drainer: metric → (type, labels the process sets;
# ``instance`` and ``job`` come from the push or the scrape). tidb_server_critical_error_total is TiDB's own.
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
    "binlog_drainer_read_binlog_size": ("histogram", {"nodeID"}),
    "binlog_drainer_binlog_reach_duration_time": ("histogram", {"nodeID"}),
    "binlog_drainer_error_count": ("counter", {"type"}),
    "binlog_drainer_event": ("counter", {"type"}),
    "binlog_drainer_execute_duration_time": ("histogram", set()),
    "binlog_drainer_query_duration_time": ("histogram", {"type"}),
    "binlog_drainer_ddl_jobs_total": ("counter", set()),
    "binlog_drainer_queue_size": ("gauge", {"name"}),
}
# the dashboard's node row, of pumps and drainers alike (Go's runtime collector in TiDB Binlog)
NODE_ROW = {
    "go_goroutines": ("gauge", set()),
    "go_memstats_heap_inuse_bytes": ("gauge", set()),
}
# histogram buckets TiDB Binlog declares (ExponentialBuckets start, ×2, count), by metric
B1, B2, B3 = (5e-05, 18), (5e-05, 20), (16, 25)
BUCKETS = {"binlog_pump_rpc_duration_seconds": B1, "binlog_pump_storage_write_binlog_size": B3,
           "binlog_pump_storage_write_binlog_duration_time": B2,
           "binlog_drainer_read_binlog_size": B3, "binlog_drainer_binlog_reach_duration_time": B1,
           "binlog_drainer_execute_duration_time": B1, "binlog_drainer_query_duration_time": B1}


def _exposition(text: str) -> tuple[dict[str, str], dict[str, list[tuple[dict[str, str], float]]]]:
    """(metric → TYPE, sample name → [(labels, value)]) of a text exposition, names as written."""
    types = {m.group(1): m.group(2) for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M)}
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for m in re.finditer(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return types, out


def _holds(text: str, expected: dict[str, tuple[str, set[str]]], with_data: set[str]) -> None:
    """Each metric of ``expected`` has its TYPE and exactly its labels; those in ``with_data`` have a
    series (a histogram: one with an observation); histograms have TiDB Binlog's bucket bounds."""
    types, got = _exposition(text)
    for name, (kind, labels) in expected.items():
        assert types.get(name) == kind, f"{name}: TYPE {types.get(name)}, TiDB Binlog's is {kind}"
        series = got.get(f"{name}_bucket" if kind == "histogram" else name, [])
        if name in with_data:
            observed = got.get(f"{name}_count", []) if kind == "histogram" else series
            assert any(kind != "histogram" or n > 0 for _, n in observed), f"{name}: no data"
        for sample_labels, _ in series:
            assert set(sample_labels) - {"le"} == labels, f"{name}: labels {sorted(sample_labels)}"
    for name, (start, count) in BUCKETS.items():
        if f"{name}_bucket" in got:
            bounds = sorted({float(lb["le"]) for lb, _ in got[f"{name}_bucket"]})
            assert bounds[:-1] == pytest.approx([start * 2 ** i for i in range(count)]) and bounds[-1] == float("inf")


@pytest.fixture
def maria(mariadb_server: MariaDBServer) -> MariaDBServer:
    mariadb_server.reset("test")
    return mariadb_server


@pytest.fixture
def mixed(tmp_path: Path, spark: Any) -> Iterator[Env]:
    """pump-1 serves PumpScan, pump-2 only PullBinlogs (TiDB's protocol): both pull paths count."""
    with make_env(tmp_path, pull_only=("pump-2",)) as e:
        yield e


def test_a_pump_and_a_drain_export_what_tidb_binlogs_dashboard_queries(mixed: Env, maria: MariaDBServer,
                                                                        gateway: Gateway) -> None:
    """Into MariaDB (the MySQL sink: TiDB Binlog's query and worker queue series are its loader's)."""
    env = mixed
    options = mysql_options(env, maria)
    options.metrics_addr = gateway.addr
    env.sql("create table dash (id int primary key, v int)")
    env.sql("insert into dash values (1, 1), (2, 2)")
    env.sql("update dash set v = 3 where id = 1; delete from dash where id = 2")
    report = env.drain(options)
    pump_texts = []
    for pump in env.pumps:
        with urllib.request.urlopen(f"http://{pump.addr}/metrics", timeout=10) as r:   # on the gRPC port, as TiDB's
            text = r.read().decode()
        pump_texts.append(text)
        _holds(text, PUMP_DASHBOARD | NODE_ROW, set(PUMP_DASHBOARD | NODE_ROW) - {"binlog_pump_storage_error_count"})
        _, got = _exposition(text)
        writes = got["binlog_pump_rpc_duration_seconds_count"]
        assert any(lb == {"method": "WriteBinlog", "label": "succ"} and n > 0 for lb, n in writes)
        assert {lb["type"] for lb, _ in got["binlog_pump_storage_write_binlog_size_count"]} == {"single", "batch"}
        assert {lb["type"] for lb, _ in got["binlog_pump_storage_storage_size_bytes"]} == {"capacity", "available"}
    text = (Path(options.data_dir) / "metrics.prom").read_text()
    _holds(text, DRAINER_DASHBOARD | NODE_ROW, set(DRAINER_DASHBOARD | NODE_ROW))
    _, got = _exposition(text)
    nodes = {p["node_id"] for p in report["pumps"]}
    assert {p["protocol"] for p in report["pumps"]} == {"PumpScan", "PullBinlogs"}
    assert {lb["nodeID"] for lb, _ in got["binlog_drainer_pump_position"]} == nodes
    # every pump sent binlogs (real ones, fake ones), counted per pump, whichever protocol it serves
    for name in ("binlog_drainer_read_binlog_size", "binlog_drainer_binlog_reach_duration_time"):
        counts = {lb["nodeID"]: n for lb, n in got[f"{name}_count"]}
        assert set(counts) == nodes and all(n > 0 for n in counts.values()), name
        inf = {lb["nodeID"]: n for lb, n in got[f"{name}_bucket"] if lb["le"] == "+Inf"}
        assert inf == counts
    # each transaction arrives as its commit at least (a scan sends its prewrite too; fake binlogs come on top)
    assert sum(n for _, n in got["binlog_drainer_read_binlog_size_count"]) >= report["counts"]["transactions"]
    # the MySQL sink: an item per transaction and DDL, its statements and commits, its flushes per worker
    execute = got["binlog_drainer_execute_duration_time_count"][0][1]
    assert execute >= 4   # the CREATE TABLE and the three DML transactions
    query_kinds = {lb["type"] for lb, n in got["binlog_drainer_query_duration_time_count"] if n > 0}
    assert query_kinds == {"exec", "commit"}   # statements of both kinds ran (a label check)
    queues = {lb["name"]: n for lb, n in got["binlog_drainer_queue_size"]}
    assert queues["syncer_input"] == 0 and sum(n for name, n in queues.items() if name.startswith("worker_")) > 0
    assert set(queues) - {"syncer_input"} <= {f"worker_{i}" for i in range(10)}
    # binlake exports the error series at 0 before any error (TiDB's Go drainer exports none until one)
    assert got["binlog_drainer_error_count"] == [({"type": "unmarshal_binlog"}, 0.0)]
    assert got["go_goroutines"][0][1] >= 1 and got["go_memstats_heap_inuse_bytes"][0][1] > 1 << 20
    # the push (job binlog, instance = node id) carries the file's text
    method, path, body = gateway.pushes[-1]
    assert path.startswith("/metrics/job/binlog/") and path.endswith(f"/instance/{options.node_id}")
    assert body == text
    # binlake's own dashboard names only series a pump or the drainer exports
    exported = exported_names([*pump_texts, text])
    assert dashboard_metrics(BINLAKE_DASHBOARD) <= exported, dashboard_metrics(BINLAKE_DASHBOARD) - exported


@pytest.mark.parametrize("kind", [bl.COMMIT, bl.PREWRITE], ids=["commit-in-pull", "prewrite-in-decode"])
def test_a_binlog_that_does_not_decode_fails_the_run_and_counts_as_unmarshal_binlog(env: Env, kind: int) -> None:
    """A record of a pump's value log whose payload is no binlog (its checksum made right, so the pump
    sends it): the pull task (a commit) or the decode task (a prewrite) fails on it, the run fails by
    name and ``binlog_drainer_error_count{type="unmarshal_binlog"}`` counts it."""
    env.sql("create table bad (id int primary key)")
    ts = committed_ts(env.sql("insert into bad values (1)"))
    env.settle()
    assert corrupt_record(env, kind, ts.pop()), "the transaction's record is on no pump"
    with pytest.raises(UndecodableBinlog, match="does not decode") as failed:
        env.drain()
    assert ("pull" if kind == bl.COMMIT else "decode") in str(failed.value)
    got = samples((Path(env.options.data_dir) / "metrics.prom").read_text())
    assert got[("binlog_drainer_error_count_total", (("type", "unmarshal_binlog"),))] == 1   # (the parser adds _total)
    assert got[("binlake_drain_runs_total", (("outcome", "failed"),))] == 1


def corrupt_record(env: Env, kind: int, commit_ts: int) -> bool:
    """Overwrite, in whichever pump's value log holds it, the payload of the ``kind`` record of the
    transaction committed at ``commit_ts`` with bytes that are no protobuf, and fix its CRC32C."""
    for pump in env.pumps:
        for path in sorted((pump.data_dir / "value").glob("*.vlog")):
            log = LogFile(path.parent, int(path.stem))
            try:
                records = list(log.scan())
            finally:
                log.close()
            starts = {bl.parse(p).start_ts for _, p in records if bl.parse(p).commit_ts == commit_ts}
            for offset, payload in records:
                b = bl.parse(payload)
                if b.tp == kind and (b.commit_ts == commit_ts if kind == bl.COMMIT else b.start_ts in starts):
                    garbage = b"\xff" * len(payload)
                    with pytest.raises(MalformedBinlog):
                        bl.parse(garbage)
                    fd = os.open(path, os.O_WRONLY)
                    try:
                        os.pwrite(fd, HEADER.pack(RECORD_MAGIC, len(garbage), crc32c.crc32c(garbage)) + garbage,
                                  offset)
                    finally:
                        os.close(fd)
                    return True
    return False


BINLAKE_DASHBOARD = Path(__file__).parents[2] / "conf" / "grafana" / "binlake.json"
_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                 "offset", "inf", "nan"}


def promql_metrics(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: its identifiers that are not functions, keywords,
    label names (inside ``{…}`` or a ``by``/``without`` list), strings, durations or numbers."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)          # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)                        # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)                       # ranges
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)(\s*\()?", expr):
        if not m.group(2) and m.group(1).lower() not in _PROMQL_WORDS:
            names.add(m.group(1))
    return names


def dashboard_metrics(path: Path) -> set[str]:
    """Every metric name the dashboard's panel targets and query variables read."""
    dash = json.loads(path.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if v["type"] == "query"]
    names = set()
    for e in exprs:
        names |= promql_metrics(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", e))
    return names


def exported_names(texts: list[str]) -> set[str]:
    """The sample names the expositions' metric families have (a histogram's ``_bucket``, ``_count``
    and ``_sum``), whether or not a series has been observed yet."""
    names = set()
    for text in texts:
        types, got = _exposition(text)
        names |= set(got)
        for name, kind in types.items():
            names |= {name + s for s in ("_bucket", "_count", "_sum")} if kind == "histogram" else {name}
    return names


def test_promql_metrics_finds_metric_names_only() -> None:
    assert promql_metrics('histogram_quantile(0.99, sum(rate(a_bucket{x="y{z}"}[1m])) by (le, nodeID))') \
        == {"a_bucket"}
    assert promql_metrics("time() - b{instance=~\"$i\"} / 262144 + increase(c_total[1h]) > bool 1e3") \
        == {"b", "c_total"}


def test_binlakes_grafana_dashboard_is_grafana_json_over_binlakes_own_series() -> None:
    dash = json.loads(BINLAKE_DASHBOARD.read_text())
    assert isinstance(dash["schemaVersion"], int) and dash["title"] and dash["uid"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and all(t["expr"] and t["refId"] for t in panel["targets"]), panel["title"]
    names = dashboard_metrics(BINLAKE_DASHBOARD)
    # binlake's own series: none of TiDB Binlog's dashboard's (that dashboard reads those)
    assert names and not names & {n + s for n in PUMP_DASHBOARD | DRAINER_DASHBOARD for s in ("", "_bucket", "_count")}
    assert {n for n in names if n.startswith("binlake_drain_")} >= {
        "binlake_drain_last_run_success", "binlake_drain_runs_total", "binlake_drain_last_run_timestamp_seconds",
        "binlake_drain_checkpoint_delay_seconds", "binlake_drain_last_run_to_ts", "binlake_drain_last_run_row_changes",
        "binlake_drain_last_run_stage_seconds", "binlake_drain_stale_row_changes_total"}


def test_bucket_counts_count_a_value_on_a_bound_in_its_bucket_one_by_one_or_vectorised() -> None:
    import numpy as np

    from ingest.metrics_text import BucketCounts

    values = [0.5, 1.0, 1.5, 2.0, 9.0]          # 1.0 and 2.0 lie on bounds: le is inclusive
    one, many = BucketCounts((1.0, 2.0)), BucketCounts((1.0, 2.0))
    for v in values:
        one.observe(v)
    many.observe_many(np.array(values))
    assert one == many and one.counts == [2, 2, 1] and one.total == sum(values)
    one.merge(many)
    assert one.cumulative() == [("1.0", 4.0), ("2.0", 8.0), ("+Inf", 10.0)]
    with pytest.raises(ValueError, match="different bucket bounds"):
        one.merge(BucketCounts((1.0,)))
