"""Which DDL jobs the lake sinks refuse (``transform.ddl``): rows changed without binlogs on a table
the drainer replicates stop the run with a message naming the job and what to do."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from transform.changes import DDLJob, RunBatch
from transform.codec.model import HistoryInfo, Job, TableInfo
from transform.ddl import UnreplicableDDLError, lake_refusal, needed_before, refuse_for_lake, written_late
from transform.drain import assemble
from transform.filters import TableFilter
from transform.history import SchemaHistory
from transform.rowchanges import OUT_SCHEMA


def _table(tid: int, name: str) -> TableInfo:
    return TableInfo.from_json({"id": tid, "name": {"O": name, "L": name}, "cols": []})


def _job(jid: int, tp: int, table: str, version: int, query: str, info: TableInfo | None = None,
         **extra: object) -> Job:
    return Job(id=jid, type=tp, schema_id=1, table_id=info.id if info else 0, schema_name="d", table_name=table,
               state=6, query=query, binlog=HistoryInfo(schema_version=version, table_info=info, finished_ts=version),
               extra=dict(extra))


PT, NT = _table(10, "pt"), _table(20, "nt")
HISTORY = SchemaHistory([_job(1, 3, "pt", 1, "CREATE TABLE pt …", PT), _job(2, 3, "nt", 2, "CREATE TABLE nt …", NT)])


def test_what_the_lake_refuses_names_the_job_and_what_to_do() -> None:
    """FLASHBACK DATABASE (every table of a database back with its rows) and FLASHBACK CLUSTER; the
    partition jobs and RECOVER / FLASHBACK TABLE the lake makes (``transform.partition_drops``)."""
    for tp, did in ((63, "brought the dropped database back"), (62, "set every table back")):
        message = lake_refusal(_job(7, tp, "", 3, "FLASHBACK  …"), 1234, "iceberg")
        assert message is not None and did in message, message
        assert message.startswith("DDL job 7 (") and "committed at ts 1234): `FLASHBACK …`" in message
        assert "To go on:" in message and "[[syncer.ignore-table]]" in message
    made = [DDLJob(50 + tp, _job(3, tp, "pt", 3, "ALTER TABLE pt …", PT)) for tp in (20, 23, 25, 42, 64, 71, 72)]
    refuse_for_lake(made, TableFilter(), "parquet")
    flashback = DDLJob(70, _job(5, 62, "", 5, "FLASHBACK CLUSTER TO TIMESTAMP '2024-01-01 00:00:00'"))
    with pytest.raises(UnreplicableDDLError, match="set every table back"):
        refuse_for_lake([flashback], TableFilter(do_dbs=("x",)), "iceberg")
    # FLASHBACK DATABASE comes without a schema name: the database it brought back decides
    database = Job(id=9, type=63, schema_id=0, table_id=0, schema_name="", table_name="", state=6,
                   query="FLASHBACK DATABASE d", binlog=HistoryInfo(schema_version=9, finished_ts=9,
                                                                    db_info={"db_name": {"O": "d", "L": "d"}}))
    refuse_for_lake([DDLJob(80, database)], TableFilter(do_dbs=("x",)), "iceberg")
    with pytest.raises(UnreplicableDDLError, match="database d"):
        refuse_for_lake([DDLJob(80, database)], TableFilter(do_dbs=("d",)), "iceberg")


def test_a_job_needed_before_its_binlog_and_a_partition_drop_written_across() -> None:
    """A transaction written under a job's version before the job's DDL binlog needs the job first; a
    partition drop is needed by one written during it (above every version done before it began);
    one written before it began and committed after it started running makes it unreplayable."""
    multi = _job(7, 61, "pt", 5, "ALTER TABLE pt ADD COLUMN c INT, DROP COLUMN d", PT)
    drop = Job(id=8, type=20, schema_id=1, table_id=PT.id, schema_name="d", table_name="pt", state=6,
               query="ALTER TABLE pt DROP PARTITION p1", real_start_ts=300,
               binlog=HistoryInfo(schema_version=9, table_info=PT, finished_ts=400))
    history = SchemaHistory([*HISTORY.jobs.values(), multi, drop])
    ddl = [DDLJob(100, multi), DDLJob(500, drop)]
    written = {PT.id: [(4, 10), (5, 90), (6, 120), (7, 450)]}
    # job 7 done at FinishedTS 5 < 300: the drop began above version 5
    assert needed_before(ddl, written, history) == {7: 90, 8: 120}
    assert needed_before(ddl, {PT.id: [(4, 10), (5, 110)]}, history) == {}
    assert written_late(ddl, {PT.id: [(5, 299), (6, 700)]}, history) == {}   # real_start_ts 300
    assert written_late(ddl, {PT.id: [(5, 301), (6, 700)]}, history) == {8: 301}


CORPUS = Path(__file__).parents[1] / "codec" / "corpus"


def test_views_have_no_table_in_the_history_and_their_jobs_reach_only_the_ddl_list() -> None:
    """TiDB 8's bootstrap views (``mysql.tidb_mdl_view``, ``sys.schema_unused_indexes``: TableInfos with
    a ``view`` field and columns of type code 0) and a user's CREATE OR REPLACE / DROP VIEW: the history
    gives no definition for them, and a run holding their DDL binlogs lists the jobs (what the MySQL
    sink replays and the lake records) without a table to write."""
    doc = json.loads((CORPUS / "tidb-v8.3" / "ddl_history.json").read_text())
    history = SchemaHistory.from_json(doc)
    views = [j for j in history.jobs.values() if j.type == 21]
    assert {(j.schema_name, j.table_name) for j in views} == {("mysql", "tidb_mdl_view"),
                                                              ("sys", "schema_unused_indexes")}
    for j in views:
        assert history.is_view(j.table_id) and history.version_at(j.table_id, 10**9) is None
    last = max(j.binlog.finished_ts for j in history.jobs.values())
    assert not any(v.table is not None and v.table.is_view for v, _ in history.tables_at(last))

    t = TableInfo.from_json({"id": 500, "name": {"O": "t", "L": "t"}, "cols": []})
    view = TableInfo.from_json({**views[-1].binlog.table_info.to_json(), "id": 501,   # type: ignore[union-attr]
                                "name": {"O": "v", "L": "v"}})
    replaced = TableInfo.from_json({**view.to_json(), "id": 502})   # OR REPLACE: a new id
    jobs = [_job(901, 3, "t", 900, "CREATE TABLE t (id INT)", t), _job(902, 21, "v", 901, "CREATE VIEW v AS …", view),
            _job(903, 21, "v", 902, "CREATE OR REPLACE VIEW v AS …", replaced),
            Job(id=904, type=24, schema_id=1, table_id=502, schema_name="d", table_name="v", state=6,
                query="DROP VIEW v", binlog=HistoryInfo(schema_version=903, finished_ts=903))]
    both = SchemaHistory([*history.jobs.values(), *jobs])
    assert both.is_view(501) and both.is_view(502) and not both.is_view(500)
    without_rows = OUT_SCHEMA.remove(OUT_SCHEMA.get_field_index("data"))
    meta = pa.Table.from_pylist([{"kind": "ddl", "table_id": 0, "schema_version": j.binlog.schema_version,
                                  "commit_ts": 1000 + j.id, "job_id": j.id, "rows": 0, "nulled": 0}
                                 for j in [*views, *jobs]], schema=without_rows)
    run = RunBatch(1, 0, 10**6, "b")
    assemble(run, meta, both, TableFilter())
    assert [d.job.id for d in run.ddl] == sorted(j.id for j in [*views, *jobs])
    assert set(run.tables) == {500}
