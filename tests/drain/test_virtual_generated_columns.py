"""Virtual generated columns are not in the lake: TiDB never writes them to a row or a binlog (it
computes them on read), so the Drainer's tables leave them out (with the indexes naming one), the
decoded rows, the Iceberg mirror and changelog and the Parquet files hold none, and adding one is no
schema change for the lake. Stored generated columns are kept. ``verify`` reads neither side's
virtual columns. The emulator does not take ``AS (…)`` columns, so the history here is hand-built."""
from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from schemas import binlog_pb2
from sink.iceberg import schema as ks
from sink.iceberg.catalog import open_catalog
from sink.iceberg.writer import IcebergSink
from sink.mysql.upstream_reader import read_snapshot
from sink.mysql.verify import verify_table
from sink.parquet.files import ParquetSink
from tests.codec.tables import PK, col, table
from tests.drain.conftest import read_table
from tests.servers import MariaDBServer
from transform import changes as ch
from transform.codec import mysqltypes as mt
from transform.codec.datums import encode_datums
from transform.codec.model import HistoryInfo, IndexColumn, IndexInfo, Job, TableInfo
from transform.codec.rows import decode_row
from transform.drain import assemble
from transform.filters import TableFilter
from transform.history import CommitOrder, HistoryError, SchemaHistory
from transform.rowchanges import OUT_SCHEMA, DecodeContext, decode_transactions
from upstream.rowcodec import encode_row

TID = 80
CLUSTER = 8080


def _cols(*extra: str) -> list[dict[str, Any]]:
    """id (int PK handle), a, v AS (a*2) VIRTUAL, s AS (a+1) STORED, the hidden virtual column of an
    expression index on (a+5), then ``w AS (a+3) VIRTUAL`` / ``b`` when asked for."""
    hidden = col(5, "_V$_ie_0", mt.TYPE_LONGLONG, generated="`a` + 5")
    hidden["hidden"] = True
    out = [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "a", mt.TYPE_LONG),
           col(3, "v", mt.TYPE_LONG, generated="`a` * 2"), col(4, "s", mt.TYPE_LONG, generated="`a` + 1", stored=True),
           hidden]
    more = {"w": col(6, "w", mt.TYPE_LONG, generated="`a` + 3"), "b": col(7, "b", mt.TYPE_LONG)}
    return out + [more[n] for n in extra]


def _with_indexes(t: TableInfo) -> TableInfo:
    """``t`` with TiDB's indexes: UNIQUE uv (v), ias (a, s), the expression index ie."""
    offs = {c.name: c.offset for c in t.columns}
    return dataclasses.replace(t, indices=(
        IndexInfo(1, "uv", "g", (IndexColumn("v", offs["v"]),), unique=True),
        IndexInfo(2, "ias", "g", (IndexColumn("a", offs["a"]), IndexColumn("s", offs["s"]))),
        IndexInfo(3, "ie", "g", (IndexColumn("_V$_ie_0", offs["_V$_ie_0"]),))))


V1 = _with_indexes(table(TID, "g", _cols(), pk_is_handle=True))           # CREATE TABLE: version 10 (job 1)
V2 = _with_indexes(table(TID, "g", _cols("w"), pk_is_handle=True))        # ADD COLUMN w … VIRTUAL: 12 (job 2)
V3 = _with_indexes(table(TID, "g", _cols("w", "b"), pk_is_handle=True))   # ADD COLUMN b INT: 14 (job 3)
QUERIES = {1: "CREATE TABLE g (…)", 2: "ALTER TABLE g ADD COLUMN w INT AS (a + 3) VIRTUAL",
           3: "ALTER TABLE g ADD COLUMN b INT"}


def _job(jid: int, tp: int, version: int, info: TableInfo, finished_ts: int = 0) -> Job:
    return Job(id=jid, type=tp, schema_id=1, table_id=info.id, schema_name="test", state=6, query=QUERIES.get(jid, ""),
               binlog=HistoryInfo(version, {"db_name": {"O": "test", "L": "test"}}, info, finished_ts))


HISTORY = SchemaHistory([_job(1, 3, 10, V1, 50), _job(2, 5, 12, V2, 150), _job(3, 5, 14, V3, 250)])
LAKE = ["id", "a", "s"]


def test_the_history_gives_tables_without_virtual_columns_and_their_indexes() -> None:
    for version, extra in ((10, []), (12, []), (14, ["b"])):
        t = HISTORY.table_at(TID, version)
        assert [c.name for c in t.columns] == LAKE + extra
        assert [c.offset for c in t.columns] == list(range(len(LAKE + extra)))
        assert [(ix.name, [(ic.name, ic.offset) for ic in ix.columns]) for ix in t.indices] == [
            ("ias", [("a", 1), ("s", 2)])]
        assert t.pk_handle_column is not None and t.pk_handle_column.name == "id"
    # adding a virtual column is no change for the lake: same columns, same Iceberg schemas
    before, after = HISTORY.table_at(TID, 10), HISTORY.table_at(TID, 12)
    assert before.columns == after.columns
    assert ks.mirror_schema(before) == ks.mirror_schema(after)
    assert ks.changelog_schema(before) == ks.changelog_schema(after)
    assert ks.column_map(before) == ks.column_map(after)
    # the job keeps TiDB's own TableInfo
    tidb = HISTORY.job(1).binlog.table_info
    assert tidb is not None and "v" in [c.name for c in tidb.columns]


def test_a_clustered_table_keeps_its_key_and_a_virtual_primary_key_is_refused() -> None:
    cols = [col(1, "k", mt.TYPE_VARCHAR, flen=10, flag=PK), col(2, "v", mt.TYPE_LONG, generated="length(`k`)"),
            col(3, "a", mt.TYPE_LONG)]
    clustered = table(81, "c", cols, common_pk=["k"])
    lake = SchemaHistory([_job(4, 3, 20, clustered)]).table_at(81, 20)
    assert [c.name for c in lake.columns] == ["k", "a"]
    assert [(c.name, ic.offset) for c, ic in lake.common_handle_columns] == [("k", 0)]
    raw = encode_row(clustered, "insert", None, {"k": "x", "v": 1, "a": 7})
    assert decode_row(lake, "insert", raw).after == {"k": "x", "a": 7}

    bad = table(82, "p", [col(1, "a", mt.TYPE_LONG), col(2, "v", mt.TYPE_LONG, flag=PK, generated="`a`")],
                common_pk=["v"])
    with pytest.raises(HistoryError, match=r"DDL job 5 .*primary key column\(s\) v are virtual generated"):
        SchemaHistory([_job(5, 3, 30, bad)])


# ---------------------------------------------------------------------------------------------
# a run: TiDB's binlogs decoded and assembled as run_drain does, written by the Iceberg and Parquet sinks

def _dml(start_ts: int, version: int, rows: list[tuple[str, bytes]]) -> bytes:
    pv = binlog_pb2.PrewriteValue(schema_version=version)
    m = pv.mutations.add(table_id=TID)
    for kind, row in rows:
        {"insert": m.inserted_rows, "update": m.updated_rows, "delete": m.deleted_rows}[kind].append(row)
        m.sequence.append({"insert": binlog_pb2.Insert, "update": binlog_pb2.Update,
                           "delete": binlog_pb2.DeleteRow}[kind])
    return binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts,
                             prewrite_value=pv.SerializeToString()).SerializeToString()


def _ddl(start_ts: int, job_id: int) -> bytes:
    return binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts, ddl_job_id=job_id,
                             ddl_query=QUERIES[job_id].encode()).SerializeToString()


def _txns() -> list[tuple[int, int, bytes]]:
    """(start_ts, commit_ts, prewrite) of the run (0, 400]: rows as TiDB writes them (no virtual
    column), and a delete carrying every column's datum, the virtual ones' too."""
    row = {"id": 1, "a": 11, "v": 22, "s": 12, "_V$_ie_0": 16}
    deleted = encode_datums([1, 2, 2, 20, 3, 40, 4, 21, 5, 25])   # id 2, a 20, v 40, s 21, _V$_ie_0 25
    return [
        (40, 60, _dml(40, 10, [("insert", encode_row(V1, "insert", None, row)),
                               ("insert", encode_row(V1, "insert", None, {"id": 2, "a": 20, "s": 21}))])),
        (140, 160, _ddl(140, 2)),
        (170, 180, _dml(170, 12, [("update", encode_row(V2, "update", dict(row, w=14),
                                                        dict(row, a=12, v=24, s=13, w=15))),
                                  ("delete", deleted)])),
        (240, 260, _ddl(240, 3)),
        (270, 280, _dml(270, 14, [("insert", encode_row(V3, "insert", None, {"id": 3, "a": 30, "s": 31, "b": 9}))])),
    ]


def _run(spark: Any, from_ts: int, to_ts: int) -> ch.RunBatch:
    txns = [t for t in _txns() if from_ts < t[1] <= to_ts]
    rb = pa.record_batch({"start_ts": pa.array([t[0] for t in txns], pa.int64()),
                          "commit_ts": pa.array([t[1] for t in txns], pa.int64()),
                          "payload": pa.array([t[2] for t in txns], pa.binary())})
    ctx = DecodeContext(HISTORY, TableFilter(), order=_order(from_ts, to_ts))
    decoded = pa.Table.from_batches(list(decode_transactions(ctx, [rb])), schema=OUT_SCHEMA)
    run = ch.RunBatch(CLUSTER, from_ts, to_ts, uuid.uuid4().hex[:16])
    assemble(run, decoded.drop_columns(["data"]), HISTORY, TableFilter())
    rows = decoded.filter(pa.compute.equal(decoded.column("kind"), "rows"))
    run.frame = spark.createDataFrame(rows.select(["table_id", "schema_version", "commit_ts", "rows", "data"]))
    return run


def _order(from_ts: int, to_ts: int) -> CommitOrder:
    return CommitOrder(from_ts, {j: c for j, c in ((2, 160), (3, 260)) if from_ts < c <= to_ts})


def test_the_decoded_run_and_its_ddl_events_hold_no_virtual_column(spark: Any) -> None:
    run = _run(spark, 0, 400)
    tc = run.tables[TID]
    assert [e.table is not None and [c.name for c in e.table.columns] for e in tc.events] == [LAKE, LAKE + ["b"]]
    assert [[c.name for c in s.table.columns] for s in tc.segments] == [LAKE, LAKE, LAKE + ["b"]]
    assert run.frame is not None
    images = [r for rec in run.frame.collect()
              for r in ch.read_segment(rec["data"]).select(["_tidb_op", *LAKE, "_tidb_before"]).to_pylist()]
    assert sorted((r["_tidb_op"], r["id"], r["a"], r["s"]) for r in images) == [
        ("D", 2, 20, 21), ("I", 1, 11, 12), ("I", 2, 20, 21), ("I", 3, 30, 31), ("U", 1, 12, 13)]
    assert all(set(r["_tidb_before"] or {}) <= set(LAKE + ["b"]) for r in images)


def test_kafka_and_files_carry_the_generated_columns_as_tidb_binlog_does(spark: Any) -> None:
    """TiDB Binlog's Kafka rows have one column per column of the table, generated and hidden ones
    included: a virtual one as its drainer fills it (NULL: nullable, no default), a stored one its
    value, both NULL in an update; its files carry every column in an insert, the non-generated ones
    in an update, and leave the virtual ones out of a delete (binlake has not their values)."""
    from sink.pb_binlog import decode_events
    from sink.pb_binlog import encode_dml as pb_dml
    from sink.secondary import Table, encode_dml, python_rows

    run = _run(spark, 0, 400)
    assert run.frame is not None
    tables = {s.schema_version: Table.as_tidb_binlog("test", s.table, None) for s in run.tables[TID].segments}
    txns = sorted((rec["commit_ts"], [(tables[rec["schema_version"]],
                                       python_rows(tables[rec["schema_version"]], ch.read_segment(rec["data"])))])
                  for rec in run.frame.collect())
    assert len(txns) == 3
    kafka = [encode_dml(ts, pieces).dml_data.tables[0] for ts, pieces in txns]
    assert [[c.name for c in t.column_info] for t in kafka] == [
        ["id", "a", "v", "s", "_V$_ie_0"], ["id", "a", "v", "s", "_V$_ie_0", "w"],
        ["id", "a", "v", "s", "_V$_ie_0", "w", "b"]]
    assert [k.name for k in kafka[0].unique_keys] == ["PRIMARY", "uv"]

    def values(row: Any) -> list[Any]:
        return [None if c.is_null else c.int64_value for c in row.columns]

    first, second, third = kafka
    assert [values(m.row) for m in first.mutations] == [[1, 11, None, 12, None], [2, 20, None, 21, None]]
    update, delete = second.mutations
    assert (values(update.row), values(update.change_row)) == ([1, 12, None, None, None, None],
                                                               [1, 11, None, None, None, None])
    assert values(delete.row) == [2, 20, None, 21, None, None]
    assert values(third.mutations[0].row) == [3, 30, None, 31, None, None, 9]

    files = [list(decode_events(pb_dml(ts, pieces))) for ts, pieces in txns]
    assert [[c.name for c in e.columns] for e in files[0]] == [["id", "a", "v", "s", "_V$_ie_0"]] * 2
    assert [(e.op, [(c.name, c.value, c.changed) for c in e.columns]) for e in files[1]] == [
        ("U", [("id", 1, 1), ("a", 11, 12)]), ("D", [("id", 2, None), ("a", 20, None), ("s", 21, None)])]


@pytest.mark.integration
def test_iceberg_and_parquet_leave_virtual_columns_out_and_adding_one_changes_no_schema(
        spark: Any, tmp_path: Path) -> None:
    catalog = open_catalog(str(tmp_path / "warehouse"))
    sink = IcebergSink(catalog)
    sink.check_cluster(CLUSTER)
    sink.write(_run(spark, 0, 100))                        # CREATE TABLE and two inserts
    mirror, log = catalog.load_table("test.g"), catalog.load_table("test.g__changelog")
    schemas = (mirror.schema(), log.schema())
    assert [f.name for f in mirror.schema().fields if not f.name.startswith("_tidb_")] == LAKE
    sink.write(_run(spark, 100, 200))                      # ADD COLUMN w … VIRTUAL, an update and a delete
    mirror, log = catalog.load_table("test.g"), catalog.load_table("test.g__changelog")
    assert (mirror.schema(), log.schema()) == schemas
    assert (mirror.schema().schema_id, log.schema().schema_id) == (schemas[0].schema_id, schemas[1].schema_id)
    sink.write(_run(spark, 200, 400))                      # ADD COLUMN b INT and an insert
    rows = read_table(catalog, "test.g").to_pylist()
    assert sorted(tuple(r[c] for c in LAKE + ["b"]) for r in rows) == [(1, 12, 13, None), (3, 30, 31, 9)]
    assert set(read_table(catalog, "test.g__changelog").column_names) >= set(LAKE) and not {
        "v", "w", "_V$_ie_0"} & set(read_table(catalog, "test.g__changelog").column_names)

    out = tmp_path / "parquet"
    ParquetSink(str(out)).write(_run(spark, 0, 400))
    for schema_file in sorted(out.rglob("_schema.json")):
        names = [c["name"]["O"] for c in json.loads(schema_file.read_text())["table_info"]["cols"]]
        assert names in (LAKE, LAKE + ["b"]), schema_file
    for data in out.rglob("*.parquet"):
        assert not {"v", "w", "_V$_ie_0"} & set(pq.read_schema(data).names), data


# ---------------------------------------------------------------------------------------------
# verify: TiDB's virtual columns are not compared

class _Cursor:
    """The PyMySQL cursor ``read_snapshot`` drives, answering as TiDB does for one table ``test.g``."""

    def __init__(self, statements: list[str]) -> None:
        self.statements = statements
        self.rows: list[tuple[Any, ...]] = []
        self.description: list[tuple[Any, ...]] = []
        self.snapshot = ""

    def __enter__(self) -> _Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, sql: str, args: Any = None) -> None:
        self.statements.append(sql)
        if sql.startswith("SET @@tidb_snapshot"):
            self.snapshot = args[0]
        elif sql == "SELECT @@tidb_current_ts":          # in a transaction: its start ts, past the read ts
            self.rows = [("99999",)]
        elif sql == "SELECT @@tidb_snapshot":
            self.rows = [(self.snapshot,)]
        elif "information_schema.tables" in sql:
            self.rows = [("test", "g")]
        elif "information_schema.columns" in sql:
            self.rows = [("test", "g", "v"), ("test", "G", "_V$_ie_0")] if "VIRTUAL GENERATED" in sql else []
        elif sql.startswith("SELECT *, _tidb_rowid"):
            import pymysql
            raise pymysql.err.OperationalError(1054, "Unknown column '_tidb_rowid' in 'field list'")
        elif sql.startswith("SELECT *"):
            self.description = [(n, 3) for n in ("id", "a", "v", "s", "_V$_ie_0")]
            self.rows = [(1, 11, 22, 12, 16)]

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


class _Target:
    def __init__(self) -> None:
        self.statements: list[str] = []

    def connect(self) -> Any:
        statements = self.statements

        class Conn:
            decoders: Any = None

            def cursor(self) -> _Cursor:
                return _Cursor(statements)

            def close(self) -> None:
                pass
        return Conn()

    def describe(self) -> str:
        return "tidb"


def test_the_upstream_snapshot_leaves_tidbs_virtual_columns_out() -> None:
    target = _Target()
    got = read_snapshot(target, 1234)  # type: ignore[arg-type]
    assert got == {"test.g": [{"id": 1, "a": 11, "s": 12}]}


@pytest.mark.integration
def test_verify_against_mysql_compares_no_virtual_column_and_keys_by_stored_ones(
        mariadb_server: MariaDBServer) -> None:
    mariadb_server.reset("vgen")
    conn: Any = mariadb_server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE vgen")
            # no primary key: the first unique key (on the virtual column) must not be the match key
            cur.execute("CREATE TABLE vgen.g (a INT, v INT AS (a * 2) VIRTUAL, s INT AS (a + 1) PERSISTENT, "
                        "id INT NOT NULL, UNIQUE KEY a_uv (v), UNIQUE KEY b_id (id))")
            cur.execute("INSERT INTO vgen.g (a, id) VALUES (11, 1), (20, 2)")
        upstream = [{"id": 1, "a": 11, "s": 12}, {"id": 2, "a": 20, "s": 21}]
        result = verify_table(conn, "vgen.g", upstream, 99)
        assert result.ok and result.compared == 2, result
        wrong = [{"id": 1, "a": 11, "s": 12}, {"id": 2, "a": 20, "s": 99}]
        result = verify_table(conn, "vgen.g", wrong, 99)
        assert (result.differing, result.missing, result.extra) == (1, 0, 0), result
        assert result.examples[0].key == {"id": "2"}
    finally:
        conn.close()
