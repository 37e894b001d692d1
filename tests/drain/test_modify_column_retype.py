"""MODIFY COLUMN that TiDB runs as a reorg (the type change needs the stored values converted):
TiDB adds the column again under a new column id, backfills it from the old one without writing
binlogs, and swaps names. The Iceberg mirror must then hold TiDB's converted values for every row
not written since (in the mirror already, or written earlier in the same run), not NULL; a value
binlake cannot convert as TiDB does fails the table naming the DDL and the column. A type change
that keeps the id (INT → BIGINT: no reorg) stays an Iceberg promotion. The history is hand-built
(the emulator keeps a column's id on MODIFY COLUMN), in the shape a real TiDB v7.0 gives it."""
from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.types import LongType, StringType

from schemas import binlog_pb2
from sink.errors import IncompatibleSchemaChange
from sink.iceberg import schema as ks
from sink.iceberg.catalog import open_catalog
from sink.iceberg.maintain import TableMaintenance, expire_snapshots
from sink.iceberg.pit import TableAt, table_at
from sink.iceberg.pit_tasks import load_tables
from sink.iceberg.writer import IcebergSink
from sink.lake import MaintainOptions
from sink.restore import RowWriter, WriterSession
from tests.codec.tables import PK, col, table
from tests.drain.conftest import read_table
from transform import changes as ch
from transform.codec import mysqltypes as mt
from transform.codec.model import HistoryInfo, Job, TableInfo
from transform.drain import assemble
from transform.filters import TableFilter
from transform.history import MODIFY_COLUMN, CommitOrder, SchemaHistory, replaced_columns
from transform.rowchanges import OUT_SCHEMA, DecodeContext, decode_transactions
from upstream.rowcodec import encode_row

TID = 90
CLUSTER = 9090
VARCHAR = {"tp": mt.TYPE_VARCHAR, "flen": 20}
# column name → (TiDB column id, type) per schema version; each MODIFY with a reorg gives a new id
CREATE: dict[str, tuple[int, dict[str, Any]]] = {
    "id": (1, {"tp": mt.TYPE_LONG, "flag": PK}), "a": (2, {"tp": mt.TYPE_LONG}), "b": (3, {"tp": mt.TYPE_LONG}),
    "d": (4, {"tp": mt.TYPE_NEWDECIMAL, "flen": 10, "decimal": 2}), "s": (5, VARCHAR),
    "dt": (6, {"tp": mt.TYPE_DATE}), "big": (7, {"tp": mt.TYPE_LONGLONG}), "w": (8, {"tp": mt.TYPE_LONG}),
    "n": (9, {"tp": mt.TYPE_LONG})}
# job id → (query, column, new id (the old one: no reorg), new type)
MODIFIES: dict[int, tuple[str, str, int, dict[str, Any]]] = {
    2: ("ALTER TABLE t MODIFY COLUMN a VARCHAR(20)", "a", 10, VARCHAR),
    3: ("ALTER TABLE t MODIFY COLUMN d VARCHAR(20)", "d", 11, VARCHAR),
    4: ("ALTER TABLE t MODIFY COLUMN s INT", "s", 12, {"tp": mt.TYPE_LONG}),
    5: ("ALTER TABLE t MODIFY COLUMN dt VARCHAR(20)", "dt", 13, VARCHAR),
    6: ("ALTER TABLE t MODIFY COLUMN big VARCHAR(20)", "big", 14, VARCHAR),
    7: ("ALTER TABLE t MODIFY COLUMN n DECIMAL(12,3)", "n", 15, {"tp": mt.TYPE_NEWDECIMAL, "flen": 12, "decimal": 3}),
    8: ("ALTER TABLE t MODIFY COLUMN w BIGINT", "w", 8, {"tp": mt.TYPE_LONGLONG}),
}
DDL_COMMIT = {j: 100 + 10 * j for j in MODIFIES}    # job j's DDL binlog commits at 120 … 180


def _table(spec: dict[str, tuple[int, dict[str, Any]]]) -> TableInfo:
    return table(TID, "t", [col(cid, name, **typ) for name, (cid, typ) in spec.items()], pk_is_handle=True)


def _versions() -> tuple[list[Job], dict[int, TableInfo]]:
    """The jobs (CREATE at version 10, MODIFY job j at version 10 + j) and the table per version."""
    spec = dict(CREATE)
    infos = {10: _table(spec)}
    jobs = [_job(1, 3, 10, infos[10], "CREATE TABLE t (…)")]
    for jid, (query, name, cid, typ) in MODIFIES.items():
        spec[name] = (cid, typ)
        infos[10 + jid] = _table(spec)
        jobs.append(_job(jid, MODIFY_COLUMN, 10 + jid, infos[10 + jid], query))
    return jobs, infos


def _job(jid: int, tp: int, version: int, info: TableInfo, query: str, finished_ts: int = 0) -> Job:
    return Job(id=jid, type=tp, schema_id=1, table_id=info.id, schema_name="test", state=6, query=query,
               binlog=HistoryInfo(version, {"db_name": {"O": "test", "L": "test"}}, info, finished_ts))


JOBS, INFOS = _versions()
HISTORY = SchemaHistory(JOBS)
# the same jobs with the FinishedTS TiDB gives them (just before each DDL binlog commits): what restore reads
TIMED = SchemaHistory([dataclasses.replace(j, binlog=dataclasses.replace(j.binlog,
                                                                         finished_ts=DDL_COMMIT.get(j.id, 12) - 2))
                       for j in JOBS])
V1, FINAL = INFOS[10], INFOS[18]
ROW1 = {"id": 1, "a": 10, "b": 100, "d": Decimal("1.50"), "s": "42", "dt": dt.date(2024, 2, 29),
        "big": -(2 ** 62), "w": 7, "n": 5}
ROW2 = {"id": 2, "a": -20, "b": 200, "d": Decimal("-0.05"), "s": "-7", "dt": dt.date(1999, 12, 31),
        "big": 2 ** 63 - 1, "w": 8, "n": -6}
ROW4 = {"id": 4, "a": 0, "b": 400, "d": Decimal("0.00"), "s": " 3 ", "dt": dt.date(2000, 1, 1),
        "big": 0, "w": 9, "n": 0}
# what TiDB shows after the DDLs for rows not written since
ROW1_AFTER = {"id": 1, "a": "10", "b": 100, "d": "1.50", "s": 42, "dt": "2024-02-29",
              "big": str(-(2 ** 62)), "w": 7, "n": Decimal("5.000")}
ROW4_AFTER = {"id": 4, "a": "0", "b": 400, "d": "0.00", "s": 3, "dt": "2000-01-01", "big": "0", "w": 9,
              "n": Decimal("0.000")}
ROW2_FINAL = {"id": 2, "a": "-20", "b": 201, "d": "-0.05", "s": -7, "dt": "1999-12-31",
              "big": str(2 ** 63 - 1), "w": 8, "n": Decimal("-6.000")}
ROW3 = {"id": 3, "a": "x", "b": 300, "d": "y", "s": 3, "dt": "z", "big": "b", "w": 2 ** 40, "n": Decimal("1.250")}


def _dml(start_ts: int, version: int, rows: list[tuple[str, bytes]]) -> bytes:
    pv = binlog_pb2.PrewriteValue(schema_version=version)
    m = pv.mutations.add(table_id=TID)
    for kind, row in rows:
        {"insert": m.inserted_rows, "update": m.updated_rows}[kind].append(row)
        m.sequence.append({"insert": binlog_pb2.Insert, "update": binlog_pb2.Update}[kind])
    return binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts,
                             prewrite_value=pv.SerializeToString()).SerializeToString()


def _ddl(start_ts: int, job_id: int) -> bytes:
    return binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts, ddl_job_id=job_id,
                             ddl_query=HISTORY.job(job_id).query.encode()).SerializeToString()


def _txns() -> list[tuple[int, int, bytes]]:
    """Rows 1 and 2 in the first run; row 4 in the second, before the MODIFYs; then row 3 inserted
    and row 2 updated (its b) under the final table, as TiDB writes them (converted values)."""
    out = [(40, 60, _dml(40, 10, [("insert", encode_row(V1, "insert", None, ROW1)),
                                  ("insert", encode_row(V1, "insert", None, ROW2))])),
           (105, 110, _dml(105, 10, [("insert", encode_row(V1, "insert", None, ROW4))]))]
    out += [(ts - 5, ts, _ddl(ts - 5, j)) for j, ts in DDL_COMMIT.items()]
    before2 = dict(ROW2_FINAL, b=200)
    out.append((300, 310, _dml(300, 18, [("insert", encode_row(FINAL, "insert", None, ROW3)),
                                         ("update", encode_row(FINAL, "update", before2, ROW2_FINAL))])))
    return out


def _run(spark: Any, from_ts: int, to_ts: int, txns: list[tuple[int, int, bytes]] | None = None,
         history: SchemaHistory = HISTORY) -> ch.RunBatch:
    txns = [t for t in (txns or _txns()) if from_ts < t[1] <= to_ts]
    rb = pa.record_batch({"start_ts": pa.array([t[0] for t in txns], pa.int64()),
                          "commit_ts": pa.array([t[1] for t in txns], pa.int64()),
                          "payload": pa.array([t[2] for t in txns], pa.binary())})
    order = CommitOrder(from_ts, {j: c for j, c in DDL_COMMIT.items() if from_ts < c <= to_ts})
    ctx = DecodeContext(history, TableFilter(), order=order)
    decoded = pa.Table.from_batches(list(decode_transactions(ctx, [rb])), schema=OUT_SCHEMA)
    run = ch.RunBatch(CLUSTER, from_ts, to_ts, uuid.uuid4().hex[:16])
    assemble(run, decoded.drop_columns(["data"]), history, TableFilter())
    rows = decoded.filter(pa.compute.equal(decoded.column("kind"), "rows"))
    run.frame = spark.createDataFrame(rows.select(["table_id", "schema_version", "commit_ts", "rows", "data"]))
    return run


def _mirror(catalog: Any) -> list[dict[str, Any]]:
    rows = read_table(catalog, "test.t").to_pylist()
    return sorted(({k: v for k, v in r.items() if not k.startswith("_tidb_")} for r in rows), key=lambda r: r["id"])


def test_the_history_pairs_each_rewritten_column_with_its_new_id() -> None:
    pairs = [[(o.id, n.id, n.name) for o, n in replaced_columns(HISTORY.table_at(TID, 9 + j), HISTORY.job(j),
                                                                 HISTORY.table_at(TID, 10 + j))]
             for j in MODIFIES]
    assert pairs == [[(2, 10, "a")], [(4, 11, "d")], [(5, 12, "s")], [(6, 13, "dt")], [(7, 14, "big")],
                     [(9, 15, "n")], []]   # INT → BIGINT keeps the id: no rewrite


@pytest.mark.integration
def test_the_mirror_holds_tidbs_converted_values_after_modify_column(spark: Any, tmp_path: Path) -> None:
    catalog = open_catalog(str(tmp_path / "warehouse"))
    sink = IcebergSink(catalog)
    sink.check_cluster(CLUSTER)
    sink.write(_run(spark, 0, 100))                      # CREATE TABLE, rows 1 and 2
    sink.write(_run(spark, 100, 400))                    # row 4, the MODIFYs, row 3, row 2's update
    assert _mirror(catalog) == [ROW1_AFTER, ROW2_FINAL, ROW3, ROW4_AFTER]
    schema = catalog.load_table("test.t").schema()
    assert isinstance(schema.find_field("a").field_type, StringType)
    assert isinstance(schema.find_field("w").field_type, LongType)        # promoted in place
    assert ks.stored_columns(catalog.load_table("test.t").properties)["10"] == "a"
    # the changelog keeps each change as it was written: the rows before the MODIFY hold no new `a`
    log = read_table(catalog, "test.t__changelog").to_pylist()
    assert sorted(((r["id"], r["a"]) for r in log), key=str) == [(1, None), (2, "-20"), (2, None), (3, "x"), (4, None)]


@pytest.mark.integration
def test_all_in_one_run_the_rows_before_the_modify_are_converted(spark: Any, tmp_path: Path) -> None:
    catalog = open_catalog(str(tmp_path / "warehouse"))
    IcebergSink(catalog).write(_run(spark, 0, 400))
    assert _mirror(catalog) == [ROW1_AFTER, ROW2_FINAL, ROW3, ROW4_AFTER]


def _bad_history() -> tuple[SchemaHistory, list[tuple[int, int, bytes]]]:
    """CREATE TABLE u (id INT PRIMARY KEY, s VARCHAR(20)); a row with s = 'x'; MODIFY s INT (which
    a lax sql_mode lets TiDB run, converting 'x' with a warning)."""
    v1 = table(TID, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(5, "s", mt.TYPE_VARCHAR, flen=20)],
               pk_is_handle=True)
    v2 = table(TID, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(12, "s", mt.TYPE_LONG)], pk_is_handle=True)
    history = SchemaHistory([_job(1, 3, 10, v1, "CREATE TABLE t (…)"),
                             _job(4, MODIFY_COLUMN, 14, v2, "ALTER TABLE t MODIFY COLUMN s INT")])
    txns = [(40, 60, _dml(40, 10, [("insert", encode_row(v1, "insert", None, {"id": 1, "s": "x"}))])),
            (135, 140, binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=135, ddl_job_id=4,
                                         ddl_query=b"ALTER TABLE t MODIFY COLUMN s INT").SerializeToString())]
    return history, txns


@pytest.mark.integration
def test_a_value_binlake_cannot_convert_fails_the_table_naming_the_ddl_and_column(
        spark: Any, tmp_path: Path) -> None:
    history, txns = _bad_history()
    catalog = open_catalog(str(tmp_path / "warehouse"))
    sink = IcebergSink(catalog, spark=spark)
    sink.write(_run(spark, 0, 100, txns, history))
    before = catalog.load_table("test.t").current_snapshot()
    with pytest.raises(IncompatibleSchemaChange,
                       match=r"column 's' is rewritten by DDL 'ALTER TABLE t MODIFY COLUMN s INT'.*"
                             r"'x' is not an integer"):
        sink.write(_run(spark, 100, 400, txns, history))
    mirror = catalog.load_table("test.t")
    assert mirror.current_snapshot() == before and mirror.properties[ks.PROP_TO_TS] == "100"


def test_rows_carry_a_column_rewritten_twice_into_the_final_table_before_images_too() -> None:
    """``rename_columns`` with the run's rewrites: a (INT, id 2) → VARCHAR (id 10) → BIGINT (id 20);
    the after-image and the update's before-image both take the converted value."""
    v1 = table(TID, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "a", mt.TYPE_LONG)], pk_is_handle=True)
    v2 = table(TID, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(10, "a", **VARCHAR)], pk_is_handle=True)
    v3 = table(TID, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(20, "a", mt.TYPE_LONGLONG)], pk_is_handle=True)
    events = [ch.DDLEvent(200, _job(3, MODIFY_COLUMN, 14, v3, "ALTER TABLE t MODIFY a BIGINT"), v3, None, v2),
              ch.DDLEvent(100, _job(2, MODIFY_COLUMN, 12, v2, "ALTER TABLE t MODIFY a VARCHAR(20)"), v2, None, v1)]
    steps = ks.retypes(events)
    assert [(r.old.id, r.new.id) for r in steps] == [(2, 10), (10, 20)]
    before = pa.array([None, {"id": 2, "a": 5}], pa.struct([("id", pa.int32()), ("a", pa.int32())]))
    rows = pa.table({"id": pa.array([1, 2], pa.int32()), "a": pa.array([-1, 6], pa.int32()), ch.BEFORE: before})
    out = ks.rename_columns(rows, ks.column_map(v1), v3, steps)
    assert out.column_names == ["id", ch.BEFORE, "a"] and out.column("a").type == pa.int64()
    assert out.to_pylist() == [{"id": 1, "a": -1, ch.BEFORE: None}, {"id": 2, "a": 6, ch.BEFORE: {"id": 2, "a": 5}}]
    assert ks.rename_columns(rows, ks.column_map(v1), v3).column_names == ["id", ch.BEFORE]   # no rewrites: dropped


def test_a_type_pair_binlake_does_not_convert_is_refused_before_any_row() -> None:
    old = table(TID, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "ts", mt.TYPE_TIMESTAMP)], pk_is_handle=True)
    new = table(TID, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(3, "ts", **VARCHAR)], pk_is_handle=True)
    (step,) = ks.retypes([ch.DDLEvent(100, _job(2, MODIFY_COLUMN, 12, new, "ALTER TABLE t MODIFY ts VARCHAR(20)"),
                                      new, None, old)])
    with pytest.raises(IncompatibleSchemaChange, match=r"column 'ts' is rewritten by DDL 'ALTER TABLE t MODIFY ts "
                                                       r"VARCHAR\(20\)'.*does not convert timestamp values to varchar"):
        step.check()


class _Collect(RowWriter):
    """Restore's rows kept as Arrow IPC, what each Spark task returns to the driver."""

    def open(self) -> WriterSession:
        return _Session()


class _Session(WriterSession):
    def __init__(self) -> None:
        self.rows: list[pa.Table] = []

    def write(self, table: int, rows: pa.Table) -> None:
        self.rows.append(rows)

    def close(self) -> bytes:
        return ch.write_segment(pa.concat_tables(self.rows, promote_options="permissive"))


def _restored(spark: Any, catalog: Any, ts: int) -> tuple[TableAt, list[dict[str, Any]]]:
    where = table_at(catalog, [], "test.t", TIMED.last_table(TID, ts) or FINAL, ts, 0, TIMED)
    _, results = load_tables(spark, [where], _Collect())
    rows = [r for data in results for r in ch.read_segment(data).to_pylist()]
    return where, sorted(({k: v for k, v in r.items() if not k.startswith("_tidb_")} for r in rows),
                         key=lambda r: r["id"])


@pytest.mark.integration
def test_restore_after_the_modifys_converts_the_rows_written_before_them(spark: Any, tmp_path: Path) -> None:
    """Rows 1, 2 (first run) and 4 (second run) are written before the MODIFYs (third run). A restore
    at 350 reads them from the mirror at 115, in the old columns, and must give TiDB's converted
    values (" 3 " → 3, not a cast error); once the snapshots up to 115 are expired, from the changelog,
    where they sit in its kept old columns (not NULL)."""
    catalog = open_catalog(str(tmp_path / "warehouse"))
    sink = IcebergSink(catalog)
    sink.check_cluster(CLUSTER)
    for low, high in ((0, 100), (100, 115), (115, 400)):
        sink.write(_run(spark, low, high, history=TIMED))
    want = [ROW1_AFTER, ROW2_FINAL, ROW3, ROW4_AFTER]
    assert _mirror(catalog) == want
    where, rows = _restored(spark, catalog, 350)
    assert (where.base_ts, where.tail.low if where.tail else None) == (115, 115)
    assert rows == want
    before = dict(ROW2, b=200)
    assert _restored(spark, catalog, 115)[1] == [ROW1, before, ROW4]        # before the MODIFYs: as written
    for name in ("test.t", "test.t__changelog"):
        expire_snapshots(catalog.load_table(name), MaintainOptions(retention_ms=0, tag_retention_ms=0,
                                                                   now_ms=2 ** 62), 2 ** 62, TableMaintenance(name))
    where, rows = _restored(spark, catalog, 350)
    assert (where.base, where.tail.low if where.tail else None) == (None, 0)
    assert rows == want


@pytest.mark.integration
def test_a_column_added_then_rewritten_restores_older_rows_with_its_converted_origin_default(
        spark: Any, tmp_path: Path) -> None:
    """ADD COLUMN c INT DEFAULT 7 after row 1 was written, then MODIFY c VARCHAR (a rewrite under a new
    id): TiDB shows row 1 with c = '7'. A restore from the changelog alone (the mirror's snapshots
    expired) reads row 1 from before the ADD, where c was not, and must give the origin default of the
    column it was added as, converted by the MODIFY; a restore between the two gives 7."""
    t1 = table(TID, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "v", mt.TYPE_LONG)], pk_is_handle=True)
    t2 = table(TID, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "v", mt.TYPE_LONG),
                          col(3, "c", mt.TYPE_LONG, origin_default="7", default="7")], pk_is_handle=True)
    t3 = table(TID, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "v", mt.TYPE_LONG),
                          col(4, "c", mt.TYPE_VARCHAR, flen=20, origin_default="7", default="7")], pk_is_handle=True)
    jobs = [_job(1, 3, 10, t1, "CREATE TABLE t (…)", 8),
            _job(2, 5, 20, t2, "ALTER TABLE t ADD COLUMN c INT DEFAULT 7", 118),
            _job(3, MODIFY_COLUMN, 21, t3, "ALTER TABLE t MODIFY COLUMN c VARCHAR(20)", 128)]
    history = SchemaHistory(jobs)
    txns = [(40, 60, _dml(40, 10, [("insert", encode_row(t1, "insert", None, {"id": 1, "v": 1}))])),
            (115, 120, _ddl_of(115, 2, jobs[1].query)), (125, 130, _ddl_of(125, 3, jobs[2].query)),
            (200, 210, _dml(200, 21, [("insert", encode_row(t3, "insert", None, {"id": 2, "v": 2, "c": "x"}))]))]
    commits = {2: 120, 3: 130}

    def run(low: int, high: int) -> ch.RunBatch:
        picked = [t for t in txns if low < t[1] <= high]
        rb = pa.record_batch({"start_ts": pa.array([t[0] for t in picked], pa.int64()),
                              "commit_ts": pa.array([t[1] for t in picked], pa.int64()),
                              "payload": pa.array([t[2] for t in picked], pa.binary())})
        order = CommitOrder(low, {j: c for j, c in commits.items() if low < c <= high})
        decoded = pa.Table.from_batches(list(decode_transactions(DecodeContext(history, TableFilter(), order=order),
                                                                 [rb])), schema=OUT_SCHEMA)
        batch = ch.RunBatch(CLUSTER, low, high, uuid.uuid4().hex[:16])
        assemble(batch, decoded.drop_columns(["data"]), history, TableFilter())
        rows = decoded.filter(pa.compute.equal(decoded.column("kind"), "rows"))
        batch.frame = spark.createDataFrame(rows.select(["table_id", "schema_version", "commit_ts", "rows", "data"]))
        return batch

    catalog = open_catalog(str(tmp_path / "warehouse"))
    sink = IcebergSink(catalog)
    sink.check_cluster(CLUSTER)
    for low, high in ((0, 100), (100, 300)):
        sink.write(run(low, high))
    for name in ("test.t", "test.t__changelog"):
        expire_snapshots(catalog.load_table(name), MaintainOptions(retention_ms=0, tag_retention_ms=0,
                                                                   now_ms=2 ** 62), 2 ** 62, TableMaintenance(name))

    def restored(ts: int) -> list[dict[str, Any]]:
        where = table_at(catalog, [], "test.t", history.last_table(TID, ts) or t3, ts, 0, history)
        assert where.base is None   # from the changelog alone
        _, results = load_tables(spark, [where], _Collect())
        rows = [r for data in results for r in ch.read_segment(data).to_pylist()]
        return sorted(({k: v for k, v in r.items() if not k.startswith("_tidb_")} for r in rows), key=lambda r: r["id"])

    assert restored(250) == [{"id": 1, "v": 1, "c": "7"}, {"id": 2, "v": 2, "c": "x"}]
    assert restored(125) == [{"id": 1, "v": 1, "c": 7}]


def _ddl_of(start_ts: int, job_id: int, query: str) -> bytes:
    return binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts, ddl_job_id=job_id,
                             ddl_query=query.encode()).SerializeToString()
