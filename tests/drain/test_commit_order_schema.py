"""A DML is decoded with the table in force at its commit position, not at its prewrite's schema
version: a transaction begun before a DROP/ADD COLUMN and committed after the job's DDL binlog (TiDB
lets one begun in the delete-only state do so) is decoded against the newer table, its datums matched
by column id, the dropped column ignored, the added one given its original default."""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from schemas import binlog_pb2
from tests.codec.tables import PK, col, table
from tests.drain.conftest import Env, read_table
from tests.drain.test_mysql_sink import maria, mysql_options, verify_mysql  # noqa: F401 - the fixture
from tests.servers import MariaDBServer
from transform import changes as ch
from transform.codec import mysqltypes as mt
from transform.codec.model import HistoryInfo, Job, TableInfo
from transform.filters import TableFilter
from transform.history import CommitOrder, SchemaHistory
from transform.rowchanges import DecodeContext, decode_transactions
from upstream.rowcodec import encode_row

TID = 70


def _cols(*names: str) -> list[dict[str, Any]]:
    ids = {"id": 1, "a": 2, "gone": 3, "d": 4}
    out = [col(1, "id", mt.TYPE_LONG, flag=PK)]
    for n in names:
        out.append(col(ids[n], n, mt.TYPE_VARCHAR, flen=8, origin_default="dflt", default="dflt") if n == "d"
                   else col(ids[n], n, mt.TYPE_LONG))
    return out


V1 = table(TID, "t", _cols("a", "gone"), pk_is_handle=True)     # created at version 10
V2 = table(TID, "t", _cols("a"), pk_is_handle=True)             # DROP COLUMN gone: version 12 (job 2)
V3 = table(TID, "t", _cols("a", "d"), pk_is_handle=True)        # ADD COLUMN d: version 14 (job 3)


def _job(jid: int, tp: int, version: int, info: TableInfo, finished_ts: int = 0) -> Job:
    return Job(id=jid, type=tp, schema_id=1, table_id=TID, schema_name="test", state=6,
               binlog=HistoryInfo(version, None, info, finished_ts))


HISTORY = SchemaHistory([_job(1, 3, 10, V1, 50), _job(2, 5, 12, V2, 190), _job(3, 5, 14, V3, 290)])


def _dml(start_ts: int, version: int, info: TableInfo, kind: str, before: dict | None, after: dict | None) -> bytes:
    pv = binlog_pb2.PrewriteValue(schema_version=version)
    m = pv.mutations.add(table_id=TID)
    row = encode_row(info, kind, before, after)
    {"insert": m.inserted_rows, "update": m.updated_rows, "delete": m.deleted_rows}[kind].append(row)
    m.sequence.append({"insert": binlog_pb2.Insert, "update": binlog_pb2.Update, "delete": binlog_pb2.DeleteRow}[kind])
    return binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts,
                             prewrite_value=pv.SerializeToString()).SerializeToString()


def _decode(txns: list[tuple[int, int, bytes]], order: CommitOrder, history: SchemaHistory = HISTORY
            ) -> list[tuple[int, int, list[dict[str, Any]]]]:
    """(schema version decoded with, commit ts, rows) of each rows record; a stale record (rows
    dropped) as (its table id, commit ts, [its row count])."""
    rb = pa.record_batch({"start_ts": pa.array([t[0] for t in txns], pa.int64()),
                          "commit_ts": pa.array([t[1] for t in txns], pa.int64()),
                          "payload": pa.array([t[2] for t in txns], pa.binary())})
    ctx = DecodeContext(history, TableFilter(), per_transaction=True, order=order)
    out: list[tuple[int, int, list[Any]]] = []
    for batch in decode_transactions(ctx, [rb]):
        for rec in batch.to_pylist():
            if rec["kind"] == "stale":
                out.append((rec["table_id"], rec["commit_ts"], [rec["rows"]]))
                continue
            if rec["kind"] != "rows":   # which schema versions were written ("written", "written_last")
                continue
            rows = ch.read_segment(rec["data"]).drop_columns(
                [ch.COMMIT_TIME, ch.START_TS, ch.SEQ]).to_pylist()
            out.append((rec["schema_version"], rec["commit_ts"], rows))
    return sorted(out, key=lambda r: r[1])


def test_the_history_gives_the_definition_in_force_at_a_commit_position() -> None:
    order = CommitOrder(from_ts=100, ddl_commits={2: 200, 3: 300})
    # written at version 10: the version-10 table until job 2 commits, then job 2's, then job 3's
    assert HISTORY.version_in_force(TID, 10, 150, order).schema_version == 10
    assert HISTORY.version_in_force(TID, 10, 200, order).schema_version == 10    # not before itself
    assert HISTORY.version_in_force(TID, 10, 201, order).schema_version == 12
    assert HISTORY.version_in_force(TID, 11, 301, order).schema_version == 14
    assert HISTORY.version_in_force(TID, 14, 150, order).schema_version == 14    # a newer prewrite version wins
    # jobs whose DDL binlog is not in the range: in force when finished before the range, else not
    before = CommitOrder(from_ts=400)
    assert HISTORY.version_in_force(TID, 10, 401, before).schema_version == 14
    assert HISTORY.version_in_force(TID, 10, 150, CommitOrder(from_ts=100)).schema_version == 10
    unknown = SchemaHistory([_job(1, 3, 10, V1), _job(2, 5, 12, V2)])           # FinishedTS 0: not known
    assert unknown.version_in_force(TID, 10, 500, CommitOrder(from_ts=400)).schema_version == 10


def test_a_table_id_newer_than_the_dmls_schema_version_is_in_force_once_its_ddl_committed() -> None:
    """TiDB runs each statement of a pessimistic transaction with the newest schema: one begun before
    a TRUNCATE writes the new table id with its older schema version, and commits after the DDL."""
    new_id = TID + 5
    truncated = table(new_id, "t", _cols("a"), pk_is_handle=True)
    history = SchemaHistory([_job(1, 3, 10, V1, 50),
                             Job(id=4, type=11, schema_id=1, table_id=TID, schema_name="test", state=6,
                                 binlog=HistoryInfo(16, None, truncated, 390))])
    order = CommitOrder(from_ts=100, ddl_commits={4: 400})
    assert history.version_in_force(new_id, 15, 401, order).table.id == new_id
    assert history.version_in_force(new_id, 15, 401, order).schema_version == 16
    assert history.version_in_force(new_id, 15, 399, order) is None   # its DDL has not committed yet
    assert history.version_in_force(999, 15, 401, order) is None      # an id the history never had
    assert history.ended(TID, history.version_in_force(TID, 15, 401, order).schema_version)   # the old id ended
    assert history.version_in_force(TID, 15, 399, order).schema_version == 10
    # decoded: the new id's row with the new table; a row the old id took after the TRUNCATE is dropped,
    # counted (TiDB shows it to nobody; TiDB Binlog drops it too)
    pv = binlog_pb2.PrewriteValue(schema_version=15)
    pv.mutations.add(table_id=new_id, inserted_rows=[encode_row(truncated, "insert", None, {"id": 1, "a": 1})],
                     sequence=[binlog_pb2.Insert])
    late_new = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=380,
                                 prewrite_value=pv.SerializeToString()).SerializeToString()
    late_old = _dml(385, 10, V1, "insert", None, {"id": 9, "a": 9, "gone": 9})
    before = _dml(300, 10, V1, "insert", None, {"id": 8, "a": 8, "gone": 8})
    got = _decode([(380, 410, late_new), (385, 420, late_old), (300, 310, before)], order, history)
    assert [(v, c) for v, c, _ in got] == [(10, 310), (16, 410), (TID, 420)]
    assert got[1][2][0]["id"] == 1 and got[2][2] == [1]


def test_a_dml_committed_after_drop_and_add_column_is_decoded_with_the_newer_table() -> None:
    order = CommitOrder(from_ts=100, ddl_commits={2: 200, 3: 300})
    txns = [
        (110, 120, _dml(110, 10, V1, "insert", None, {"id": 1, "a": 1, "gone": 7})),    # before the drop
        (130, 250, _dml(130, 10, V1, "insert", None, {"id": 2, "a": 2, "gone": 8})),    # began before it
        (140, 350, _dml(140, 12, V2, "update", {"id": 1, "a": 1}, {"id": 1, "a": 5})),  # began before ADD
        (310, 360, _dml(310, 14, V3, "insert", None, {"id": 3, "a": 3, "d": "x"})),
    ]
    got = _decode(txns, order)
    assert [(v, c) for v, c, _ in got] == [(10, 120), (12, 250), (14, 350), (14, 360)]
    assert got[0][2][0]["gone"] == 7
    assert got[1][2] == [{"_tidb_op": "I", "_tidb_commit_ts": 250, "id": 2, "a": 2, "_tidb_before": None}]
    assert got[2][2] == [{"_tidb_op": "U", "_tidb_commit_ts": 350, "id": 1, "a": 5, "d": "dflt",
                          "_tidb_before": {"id": 1, "a": 1, "d": "dflt"}}]


# ---------------------------------------------------------------------------------------------
# end to end: the emulator commits transactions across DROP/ADD COLUMN, drained into Iceberg and MariaDB

@pytest.mark.integration
def test_transactions_committed_across_drop_and_add_column_replicate_exactly(env: Env, maria: MariaDBServer) -> None:  # noqa: F811
    from upstream.session import Session

    env.sql("create table w (id int primary key, a int, gone int)")
    env.sql("insert into w values (1, 10, 100), (2, 20, 200)")
    server = env.cluster.server(0)
    stale = Session(server)
    stale.execute("begin; insert into w values (3, 30, 300); update w set a = 21 where id = 2")
    env.sql("alter table w drop column gone", server=1)
    server.faults.commit_across_schema_change(1)
    dropped = stale.execute("commit")[0]
    stale.execute("begin; insert into w values (4, 40); update w set a = 11 where id = 1")
    env.sql("alter table w add column d varchar(8) default 'dflt'", server=1)
    server.faults.commit_across_schema_change(1)
    added = stale.execute("commit")[0]
    assert dropped.commit_ts and added.commit_ts
    env.sql("insert into w values (5, 50, 'e')")

    report = env.drain()                                  # Iceberg
    env.verify(report["to_ts"])
    log = read_table(env.catalog(), "test.w__changelog").to_pylist()
    assert "gone" not in log[0]
    assert sorted((r["_tidb_op"], r["id"], r["a"]) for r in log if r["_tidb_commit_ts"] == dropped.commit_ts) == [
        ("I", 3, 30), ("U", 2, 21)]
    assert sorted((r["_tidb_op"], r["id"], r["d"]) for r in log if r["_tidb_commit_ts"] == added.commit_ts) == [
        ("I", 4, "dflt"), ("U", 1, "dflt")]

    o = mysql_options(env, maria)                          # MariaDB, from the start
    env.drain(o)
    assert maria.query("SELECT id, a, d FROM test.w ORDER BY id") == [
        (1, 11, "dflt"), (2, 21, "dflt"), (3, 30, "dflt"), (4, 40, "dflt"), (5, 50, "e")]
    assert "no differences" in verify_mysql(env, o)
