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


def test_each_kind_that_changes_rows_without_binlogs_is_refused_naming_the_job() -> None:
    for tp, did in ((20, "deleted the partition's rows"), (23, "deleted the partition's rows"),
                    (42, "swapped the partition's rows"), (25, "brought the dropped table back")):
        message = lake_refusal(_job(7, tp, "pt", 3, "ALTER TABLE pt  …"), 1234, "iceberg")
        assert message is not None and did in message, message
        assert message.startswith("DDL job 7 (") and "committed at ts 1234): `ALTER TABLE pt …`" in message
        assert "To go on:" in message and "[[syncer.ignore-table]]" in message
        assert ("db-type mysql" in message) == (tp in (20, 23)), message
    # CREATE, ADD COLUMN, TRUNCATE TABLE, ADD/REORGANIZE PARTITION, PARTITION BY, REMOVE PARTITIONING, …
    for tp in (3, 5, 11, 19, 61, 64, 57, 68, 71, 72):
        assert lake_refusal(_job(7, tp, "pt", 3, "…"), 1, "iceberg") is None


def test_the_filter_decides_and_partition_jobs_are_not_refused() -> None:
    truncate = DDLJob(50, _job(3, 23, "pt", 3, "ALTER TABLE pt TRUNCATE PARTITION p0", PT))
    exchange = DDLJob(60, _job(4, 42, "nt", 4, "ALTER TABLE pt EXCHANGE PARTITION p0 WITH TABLE nt", NT))
    refuse_for_lake([truncate, exchange], TableFilter(), HISTORY, "parquet")   # transform.partition_drops makes them
    recover = DDLJob(50, _job(3, 25, "pt", 3, "RECOVER TABLE pt", PT))
    refuse_for_lake([recover], TableFilter(ignore_tables=(("d", "pt"),)), HISTORY, "parquet")
    with pytest.raises(UnreplicableDDLError, match="the parquet sink cannot know which rows d.pt holds"):
        refuse_for_lake([recover], TableFilter(), HISTORY, "parquet")
    flashback = DDLJob(70, _job(5, 62, "", 5, "FLASHBACK CLUSTER TO TIMESTAMP '2024-01-01 00:00:00'"))
    with pytest.raises(UnreplicableDDLError, match="set every table back"):
        refuse_for_lake([flashback], TableFilter(do_dbs=("x",)), HISTORY, "iceberg")


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
