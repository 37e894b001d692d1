"""``binlake drain`` / ``verify`` as a user runs them: subprocesses, the plan, refusals, a drain
killed mid-commit and re-run, filters, and the Parquet sink."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from binlake.drain_config import DrainerConfig
from tests.drain.conftest import Env, read_table
from tests.drain.crashing_cli import CRASH_STATUS
from transform import failpoints

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def cli_args(o: DrainerConfig) -> list[str]:
    return ["--registry", o.registry, "--pd-urls", o.pd_urls, "--upstream-status-url", o.upstream.status_url,
            "--upstream-dsn", o.upstream.dsn, "--warehouse", o.iceberg.warehouse, "--initial-commit-ts", "0"]


def binlake(*args: str, failpoints: tuple[str, ...] = (), cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``binlake ARGS…`` in a child process; with ``failpoints`` (``NAME=N``), the child exits with
    ``CRASH_STATUS`` when one fires (``tests/drain/crashing_cli.py``)."""
    cmd = ["-m", "tests.drain.crashing_cli", *failpoints, "--"] if failpoints else ["-m", "binlake.cli"]
    return subprocess.run([sys.executable, *cmd, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=cwd)


def test_dry_run_prints_the_plan_and_a_too_high_to_ts_is_refused(env: Env) -> None:
    env.sql("create table p (id int primary key)")
    wm = env.settle()
    r = binlake("drain", "--dry-run", *cli_args(env.options), cwd=env.root)
    assert r.returncode == 0, r.stderr
    assert "range (from_ts, to_ts] = (0, " in r.stdout and "pump pump-1" in r.stdout and "pump pump-2" in r.stdout
    assert not Path(env.options.iceberg.warehouse, "test").exists()               # nothing written
    r = binlake("drain", "--dry-run", "--to-ts", str(wm * 2), *cli_args(env.options), cwd=env.root)
    assert r.returncode == 1
    assert "above the pumps' watermark" in r.stderr
    r = binlake("drain", "--config", str(env.root / "missing.toml"), cwd=env.root)
    assert r.returncode == 1 and "missing.toml does not exist" in r.stderr


def test_a_drain_killed_mid_commit_and_rerun_equals_an_uninterrupted_run(env: Env) -> None:
    crash_mid_commit(env)
    env.sql("insert into c values (3, 'c3')")                              # more work arrives meanwhile
    rerun_equals_an_uninterrupted_run(env, ("a", "b", "c"))


def test_a_drain_passes_every_stage_failpoint_in_order(env: Env) -> None:
    env.sql("create table s (id int primary key)")
    env.sql("insert into s values (1)")
    seen: list[str] = []
    failpoints.enable("drain-stage", seen.append)
    try:
        env.drain()
    finally:
        failpoints.disable("drain-stage")
    assert seen == ["plan", "pull", "pair", "pair", "decode", "collect", "written", "ddl-recorded", "checkpoint"]


def test_a_drain_killed_after_writing_before_its_checkpoint_and_rerun_equals_an_uninterrupted_run(env: Env) -> None:
    for t in ("a", "b"):
        env.sql(f"create table {t} (id int primary key, v varchar(10))")
        env.sql(f"insert into {t} values (1, '{t}1'), (2, '{t}2')")
    env.settle()
    r = binlake("drain", *cli_args(env.options), failpoints=("drain-stage=ddl-recorded",), cwd=env.root)
    assert r.returncode == CRASH_STATUS, r.stderr[-2000:]
    assert env.catalog().table_exists("test.b")                 # every table written, the checkpoint not
    env.sql("update a set v = 'x' where id = 1")
    rerun_equals_an_uninterrupted_run(env, ("a", "b"))


def crash_mid_commit(env: Env) -> subprocess.CompletedProcess:
    """Tables a, b, c with changes from both servers, drained by a CLI killed right after its 3rd table
    commit (b's changelog committed, b's mirror not); returns the killed run."""
    for t in ("a", "b", "c"):
        env.sql(f"create table {t} (id int primary key, v varchar(10))")
        env.sql(f"insert into {t} values (1, '{t}1'), (2, '{t}2')")
        env.sql(f"update {t} set v = 'x' where id = 1", server=1)
    env.settle()
    r = binlake("drain", *cli_args(env.options), "--spark-master", "local[2]", failpoints=("sink-commit=3",),
                cwd=env.root)
    assert r.returncode == CRASH_STATUS, r.stderr[-2000:]
    cat = env.catalog()
    assert cat.table_exists("test.a") and cat.table_exists("test.b__changelog")
    assert not cat.table_exists("test.b") or cat.load_table("test.b").current_snapshot() is None
    return r


def rerun_equals_an_uninterrupted_run(env: Env, tables: tuple[str, ...]) -> None:
    """Re-run the drain a crash interrupted; every table and changelog equals a fresh drain of the
    same range, and the upstream."""
    rerun = env.drain()
    assert rerun["checkpoint_before"] is None and rerun["checkpoint_after"] == rerun["to_ts"]
    control = env.fresh_options("control")
    env.drain(control, from_ts=0, to_ts=rerun["to_ts"])
    cat, cat2 = env.catalog(), env.catalog(control)
    order = [("_tidb_commit_ts", "ascending"), ("id", "ascending")]
    for t in tables:
        for ident in (f"test.{t}", f"test.{t}__changelog"):
            got, want = read_table(cat, ident).sort_by(order), read_table(cat2, ident).sort_by(order)
            assert got.to_pylist() == want.to_pylist(), ident
    env.verify(rerun["to_ts"])


def test_filters_and_the_parquet_sink(env: Env) -> None:
    from sink.parquet.files import read_changelog

    env.sql("create database other")
    env.sql("create table keep (id int primary key, v int)")
    env.sql("create table skip_me (id int primary key)")
    env.sql("create table other.o (id int primary key)")
    env.sql("insert into keep values (1, 1), (2, 2); insert into skip_me values (1)")
    env.sql("insert into other.o values (5)")
    env.sql("update keep set v = 20 where id = 2")
    opts = env.options.model_copy(deep=True)
    opts.syncer.ignore_table = [("test", "skip_me")]
    opts.syncer.replicate_do_db = ["test"]
    report = env.drain(opts)
    assert {t["table"] for t in report["tables"]} == {"test.keep"}
    cat = env.catalog()
    assert not cat.table_exists("test.skip_me") and not cat.table_exists("other.o")
    # the same range into Parquet files
    pq_opts = env.options.model_copy(deep=True)
    pq_opts.syncer.db_type = "parquet"
    pq_opts.parquet.dir = str(env.root / "cdc")
    pq_opts.data_dir = str(env.root / "pq-drainer")
    pq = env.drain(pq_opts, to_ts=report["to_ts"])
    assert {t["table"] for t in pq["tables"]} == {"test.keep", "test.skip_me", "other.o"}
    log = read_changelog(str(env.root / "cdc"), "test", "keep")
    assert [(r["_tidb_op"], r["id"], r["v"]) for r in log.to_pylist()] == [("I", 1, 1), ("I", 2, 2), ("U", 2, 20)]
    assert pa.types.is_int32(log.schema.field("v").type)
    saved = json.loads(Path(pq_opts.data_dir, "reports", f"run-{pq['to_ts']}.json").read_text())
    assert saved["sink"] == "parquet" and saved["checkpoint_after"] == pq["to_ts"]


def test_a_change_to_a_table_the_history_does_not_know_fails_the_run_by_name(env: Env) -> None:
    from ingest import binlog as bl
    from schemas import binlog_pb2
    from transform.errors import DrainError
    from upstream.local import PumpWriter

    env.sql("create table known (id int primary key)")
    start = env.cluster.ts()
    pv = binlog_pb2.PrewriteValue(schema_version=1, mutations=[
        binlog_pb2.TableMutation(table_id=987654, inserted_rows=[b"\x00"], sequence=[binlog_pb2.Insert])])
    writer = PumpWriter(env.pumps[0].addr, env.cluster.cluster_id)
    try:
        writer.write(bl.marshal_gogo(binlog_pb2.Binlog(tp=bl.PREWRITE, start_ts=start, prewrite_key=b"k",
                                                       prewrite_value=pv.SerializeToString())))
        writer.write(bl.marshal_gogo(binlog_pb2.Binlog(tp=bl.COMMIT, start_ts=start, commit_ts=env.cluster.ts(),
                                                       prewrite_key=b"k")))
    finally:
        writer.close()
    with pytest.raises(DrainError, match="changes table id 987654, which the DDL history does not know"):
        env.drain()
    assert env.catalog().list_namespaces() in ([], [("_binlake",)])      # nothing written, no checkpoint
    assert not env.catalog().table_exists("test.known")


def test_a_ddl_job_missing_from_the_history_is_waited_for_then_the_run_completes(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """A TiDB that dies between a DDL's binlog and moving its job to the history leaves the job out
    until its next DDL owner finishes it: the run reads the history again until the job is there."""
    import binlake.drain
    from transform.history import JobNotInHistory
    from upstream.status_api import _Handler

    env.sql("create table late (id int primary key)")
    env.sql("insert into late values (1)")
    env.sql("alter table late add column note varchar(8) default 'x'")
    env.sql("insert into late values (2, 'y')")
    hidden = max(j.id for j in env.cluster.catalog.jobs())
    real, reads = _Handler._history, []

    def lagging(handler: _Handler, q: dict[str, str]) -> list[Any]:   # /ddl/history without the ALTER, twice
        reads.append(q)
        return [j for j in real(handler, q) if j.id != hidden or len(reads) > 2]

    monkeypatch.setattr(_Handler, "_history", lagging)
    monkeypatch.setattr(binlake.drain, "JOB_WAIT_SECONDS", 5.0)
    env.options.spark.in_process_below = 64 << 20
    report = env.drain()
    waits = [line for line in env.outputs[-1].splitlines() if f"DDL job {hidden} is not in" in line]
    assert len(waits) == 2 and "reading the history again in 1 s" in waits[0], env.outputs[-1]
    rows = env.catalog().load_table("test.late").scan().to_arrow().sort_by("id").to_pylist()
    assert [(r["id"], r["note"]) for r in rows] == [(1, "x"), (2, "y")]
    assert report["checkpoint_after"] == report["to_ts"]

    # a job that never arrives: the run gives up after the wait, with the error by name
    env.sql("alter table late add column more int")
    env.sql("insert into late values (3, 'z', 3)")
    gone = max(j.id for j in env.cluster.catalog.jobs())
    monkeypatch.setattr(_Handler, "_history", lambda handler, q: [j for j in real(handler, q) if j.id != gone])
    monkeypatch.setattr(binlake.drain, "JOB_WAIT_SECONDS", 2.0)
    with pytest.raises(JobNotInHistory, match=f"DDL job {gone} is not in the upstream's DDL history"):
        env.drain()
    assert sorted(r["id"] for r in env.catalog().load_table("test.late").scan().to_arrow().to_pylist()) == [1, 2]


def test_spark_settings_from_the_config_and_flags_reach_the_session(env: Env) -> None:
    """``[spark.conf]`` and ``--spark-conf`` go to Spark verbatim (the flag over the file); the run
    report shows what the live session holds."""
    env.sql("create table s (id int primary key)")
    env.sql("insert into s values (1)")
    env.settle()
    conf = env.root / "drainer.toml"
    conf.write_text('[spark]\nmaster = "local[1]"\n[spark.conf]\n"spark.sql.shuffle.partitions" = 5\n'
                    '"spark.sql.files.maxRecordsPerFile" = 1234\n')
    report_path = env.root / "report.json"
    r = binlake("drain", "--config", str(conf), *cli_args(env.options), "--report", str(report_path),
                "--spark-conf", "spark.sql.shuffle.partitions=7", "--in-process-below", "0", cwd=env.root)
    assert r.returncode == 0, r.stderr[-2000:]
    spark = json.loads(report_path.read_text())["spark"]
    assert spark["master"] == "local[1]"
    settings = spark["settings"]
    assert settings["spark.sql.shuffle.partitions"] == "7"             # the flag over the file
    assert settings["spark.sql.files.maxRecordsPerFile"] == "1234"     # the file over Spark's default
    assert settings["spark.sql.adaptive.enabled"] == "false"           # a local default
    r = binlake("drain", "--dry-run", *cli_args(env.options), "--spark-conf", "sql.shuffle.partitions=7",
                cwd=env.root)
    assert r.returncode == 1
    assert "command line: spark.conf: 'sql.shuffle.partitions' is not a Spark setting" in r.stderr


def test_the_driver_holds_no_rows_a_run_bigger_than_max_result_size_succeeds(env: Env) -> None:
    """With ``spark.driver.maxResultSize`` at 1 MiB, a run of ~4 MiB of row changes still drains:
    only metadata (segment counts, data file descriptions) reaches the driver."""
    env.sql("create table big (id int primary key, pad varchar(2000))")
    for i in range(20):
        values = ", ".join(f"({i * 100 + j}, '{'x' * 2000}')" for j in range(100))
        env.sql(f"insert into big values {values}")
    env.settle()
    report_path = env.root / "big.json"
    r = binlake("drain", *cli_args(env.options), "--spark-master", "local[2]", "--report", str(report_path),
                "--spark-conf", "spark.driver.maxResultSize=1m", "--in-process-below", "0", cwd=env.root)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["spark"]["settings"]["spark.driver.maxResultSize"] == "1m"
    assert {t["table"]: t["rows"] for t in report["tables"]}["test.big"] == {"I": 2000, "U": 0, "D": 0}
    assert env.catalog().load_table("test.big").scan().to_arrow().num_rows == 2000
    env.verify(report["to_ts"])


def test_a_transaction_stored_on_both_pumps_is_written_once(env: Env) -> None:
    """A client that retried on another pump leaves the same prewrite and commit on both: the
    drain writes the transaction's rows once."""
    from ingest import binlog as bl
    from schemas import binlog_pb2
    from upstream.local import PumpWriter
    from upstream.rowcodec import encode_row

    env.sql("create table twice (id int primary key, v varchar(10))")
    env.sql("insert into twice values (1, 'one')")
    schema = env.cluster.catalog.current()
    info = schema.table("test", "twice").info
    writers = [PumpWriter(p.addr, env.cluster.cluster_id) for p in env.pumps]
    try:
        for key in (2, 3):
            start = env.cluster.ts()
            pv = binlog_pb2.PrewriteValue(schema_version=schema.version, mutations=[binlog_pb2.TableMutation(
                table_id=info.id, inserted_rows=[encode_row(info, "insert", None, {"id": key, "v": f"v{key}"})],
                sequence=[binlog_pb2.Insert])])
            prewrite = binlog_pb2.Binlog(tp=bl.PREWRITE, start_ts=start, prewrite_key=b"k",
                                         prewrite_value=pv.SerializeToString())
            commit = binlog_pb2.Binlog(tp=bl.COMMIT, start_ts=start, commit_ts=env.cluster.ts(), prewrite_key=b"k")
            for w in writers:
                w.write(bl.marshal_gogo(prewrite))
                w.write(bl.marshal_gogo(commit))
    finally:
        for w in writers:
            w.close()
    env.sql("update twice set v = 'uno' where id = 1")
    report = env.drain()
    assert {t["table"]: t["rows"] for t in report["tables"]}["test.twice"] == {"I": 3, "U": 1, "D": 0}
    log = read_table(env.catalog(), "test.twice__changelog")
    assert sorted(log.column("id").to_pylist()) == [1, 1, 2, 3]
    mirror = read_table(env.catalog(), "test.twice").select(["id", "v"]).to_pylist()
    assert sorted(mirror, key=lambda r: r["id"]) == [{"id": 1, "v": "uno"}, {"id": 2, "v": "v2"},
                                                     {"id": 3, "v": "v3"}]
