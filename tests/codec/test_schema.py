"""TableInfo / ColumnInfo / IndexInfo / Job from TiDB's JSON, back to it, and Arrow types (``arrow_type``; the
mapping is in docs/architecture.md, 4.5)."""
from __future__ import annotations

import copy
import json

import pyarrow as pa
import pytest

from tests.codec.tables import col
from transform.codec import mysqltypes as mt
from transform.codec.errors import SchemaError
from transform.codec.model import ColumnInfo, FieldType, Job, TableInfo, arrow_type


def _tidb_column(cid: int, name: str, tp: int, flag: int, flen: int, dec: int, charset: str, collate: str,
                 elems: list[str] | None = None, default: str | None = None) -> dict:
    return {
        "id": cid, "name": {"O": name, "L": name.lower()}, "offset": cid - 1, "origin_default": default,
        "origin_default_bit": None, "default": default, "default_bit": None, "default_is_expr": False,
        "generated_expr_string": "", "generated_stored": False, "dependences": None,
        "type": {"Tp": tp, "Flag": flag, "Flen": flen, "Decimal": dec, "Charset": charset, "Collate": collate,
                 "Elems": elems, "ElemsIsBinaryLit": None, "Array": False},
        "state": 5, "comment": "", "hidden": False, "change_state_info": None, "version": 2,
    }


# A document shaped like TiDB's `GET /schema?table_id=N` output (TiDB 6.x key set).
TIDB_TABLE = {
    "id": 88, "name": {"O": "Orders", "L": "orders"}, "charset": "utf8mb4", "collate": "utf8mb4_bin",
    "cols": [
        _tidb_column(1, "id", 8, 515, 20, 0, "binary", "binary"),
        _tidb_column(2, "Name", 15, 0, 64, 0, "utf8mb4", "utf8mb4_bin"),
        _tidb_column(3, "state", 247, 0, 0, 0, "utf8mb4", "utf8mb4_bin", ["new", "done"], "new"),
    ],
    "index_info": [{
        "id": 1, "idx_name": {"O": "idx_name", "L": "idx_name"}, "tbl_name": {"O": "", "L": ""},
        "idx_cols": [{"name": {"O": "Name", "L": "name"}, "offset": 1, "length": 10}], "state": 5,
        "backfill_state": 0, "comment": "", "index_type": 1, "is_unique": True, "is_primary": False,
        "is_invisible": False, "is_global": False, "mv_index": False,
    }],
    "constraint_info": None, "fk_info": None, "state": 5, "pk_is_handle": True, "is_common_handle": False,
    "common_handle_version": 0, "comment": "orders", "auto_inc_id": 0, "auto_id_cache": 0, "auto_rand_id": 0,
    "max_col_id": 3, "max_idx_id": 1, "max_fk_id": 0, "max_cst_id": 0, "update_timestamp": 445000000000000000,
    "ShardRowIDBits": 0, "max_shard_row_id_bits": 0, "auto_random_bits": 0, "auto_random_range_bits": 0,
    "pre_split_regions": 0, "partition": None, "compression": "", "view": None, "sequence": None,
    "Lock": None, "version": 5, "tiflash_replica": None, "is_columnar": False, "temp_table_type": 0,
    "cache_table_status": 0, "policy_ref_info": None, "stats_options": None, "exchange_partition_info": None,
    "ttl_info": None,
}


def test_parse_tidb_table_json() -> None:
    t = TableInfo.from_json(json.loads(json.dumps(TIDB_TABLE)))
    assert (t.id, t.name, t.pk_is_handle, t.is_common_handle, t.comment) == (88, "Orders", True, False, "orders")
    assert [c.name for c in t.columns] == ["id", "Name", "state"]
    assert t.pk_handle_column is not None and t.pk_handle_column.name == "id"
    assert t.column_by_id(3).type.elems == ("new", "done")
    assert t.column_by_id(3).origin_default == "new"
    assert t.column_by_id(1).type.flag & mt.PRI_KEY_FLAG and t.column_by_id(1).type.flag & mt.AUTO_INCREMENT_FLAG
    assert t.column_by_id(9) is None
    idx = t.indices[0]
    assert (idx.name, idx.unique, idx.primary) == ("idx_name", True, False)
    assert (idx.columns[0].name, idx.columns[0].length) == ("Name", 10)
    assert not t.has_extra_handle


def test_to_json_round_trip_keeps_every_key() -> None:
    t = TableInfo.from_json(copy.deepcopy(TIDB_TABLE))
    assert t.to_json() == TIDB_TABLE
    assert TableInfo.from_json(t.to_json()) == t


def test_built_table_serialises_with_tidb_shape() -> None:
    t = TableInfo(id=5, name="t", columns=(ColumnInfo(id=1, name="a", offset=0, type=FieldType(tp=mt.TYPE_LONG)),))
    out = t.to_json()
    for key in ("id", "name", "charset", "collate", "cols", "index_info", "state", "pk_is_handle",
                "is_common_handle", "common_handle_version", "max_col_id", "update_timestamp", "ShardRowIDBits",
                "partition", "version"):
        assert key in out
    assert out["name"] == {"O": "t", "L": "t"}
    assert set(out["cols"][0]["type"]) == {"Tp", "Flag", "Flen", "Decimal", "Charset", "Collate", "Elems",
                                           "ElemsIsBinaryLit", "Array"}
    assert json.loads(json.dumps(out)) == out
    back = TableInfo.from_json(out)
    assert back.columns == t.columns and (back.id, back.name, back.max_col_id) == (5, "t", 1)


def _c(tp: int, **kw: object) -> ColumnInfo:
    return ColumnInfo.from_json(col(1, "c", tp, **kw))


@pytest.mark.parametrize("column,expected", [
    (_c(mt.TYPE_TINY), pa.int32()), (_c(mt.TYPE_SHORT), pa.int32()), (_c(mt.TYPE_INT24), pa.int32()),
    (_c(mt.TYPE_LONG), pa.int32()), (_c(mt.TYPE_LONG, flag=mt.UNSIGNED_FLAG), pa.int64()),
    (_c(mt.TYPE_LONGLONG), pa.int64()), (_c(mt.TYPE_LONGLONG, flag=mt.UNSIGNED_FLAG), pa.decimal128(20, 0)),
    (_c(mt.TYPE_NEWDECIMAL, flen=10, decimal=2), pa.decimal128(10, 2)),
    (_c(mt.TYPE_NEWDECIMAL, flen=38, decimal=10), pa.decimal128(38, 10)),
    (_c(mt.TYPE_NEWDECIMAL, flen=39, decimal=10), pa.string()),
    (_c(mt.TYPE_FLOAT), pa.float32()), (_c(mt.TYPE_DOUBLE), pa.float64()), (_c(mt.TYPE_DATE), pa.date32()),
    (_c(mt.TYPE_DATETIME), pa.timestamp("us")), (_c(mt.TYPE_TIMESTAMP), pa.timestamp("us", tz="UTC")),
    (_c(mt.TYPE_DURATION), pa.string()), (_c(mt.TYPE_YEAR), pa.int32()),
    (_c(mt.TYPE_VARCHAR, charset="utf8mb4"), pa.string()), (_c(mt.TYPE_STRING, charset="utf8mb4"), pa.string()),
    (_c(mt.TYPE_BLOB, charset="utf8mb4"), pa.string()), (_c(mt.TYPE_ENUM, elems=["a"]), pa.string()),
    (_c(mt.TYPE_SET, elems=["a"]), pa.string()), (_c(mt.TYPE_JSON), pa.string()),
    (_c(mt.TYPE_VARCHAR, charset="binary", collate="binary"), pa.binary()),
    (_c(mt.TYPE_BLOB, charset="binary", collate="binary"), pa.binary()), (_c(mt.TYPE_BIT, flen=8), pa.int64()),
])
def test_arrow_types(column: ColumnInfo, expected: pa.DataType) -> None:
    assert arrow_type(column) == expected


def test_unsupported_type_and_bad_documents() -> None:
    with pytest.raises(SchemaError):
        arrow_type(_c(mt.TYPE_TIDB_VECTOR_FLOAT32))
    with pytest.raises(SchemaError):
        TableInfo.from_json({"id": 1})
    with pytest.raises(SchemaError):
        TableInfo.from_json({"id": "x", "name": {"O": "t", "L": "t"}, "cols": []})
    bad = copy.deepcopy(TIDB_TABLE)
    bad["cols"][1]["id"] = 1
    with pytest.raises(SchemaError):
        TableInfo.from_json(bad)
    with pytest.raises(SchemaError):
        TableInfo.from_json([])


def test_type_to_str() -> None:
    assert mt.type_to_str(mt.TYPE_BLOB, "utf8mb4") == "text"
    assert mt.type_to_str(mt.TYPE_BLOB, "binary") == "blob"
    assert mt.type_to_str(mt.TYPE_VARCHAR, "binary") == "varbinary"
    assert mt.type_to_str(mt.TYPE_STRING, "binary") == "binary"
    assert mt.type_to_str(mt.TYPE_LONG_BLOB, "utf8mb4") == "longtext"


JOB = {
    "id": 120, "type": 5, "schema_id": 2, "table_id": 88, "schema_name": "shop", "table_name": "orders",
    "state": 6, "err": None, "err_count": 0, "row_count": 0, "raw_args": None, "schema_state": 5,
    "snapshot_ver": 0, "real_start_ts": 445000000000000001, "start_ts": 445000000000000000,
    "dependency_id": 0, "query": "ALTER TABLE orders ADD COLUMN state ENUM('new','done') DEFAULT 'new'",
    "binlog": {"SchemaVersion": 57, "DBInfo": None, "TableInfo": TIDB_TABLE, "FinishedTS": 445000000000000009,
               "MultipleTableInfos": None},
    "version": 1, "reorg_meta": None, "multi_schema_info": None, "priority": 0, "seq_num": 77,
}


def test_job_parse_and_round_trip() -> None:
    j = Job.from_json(copy.deepcopy(JOB))
    assert (j.id, j.type, j.table_id, j.state, j.schema_name) == (120, 5, 88, 6, "shop")
    assert j.binlog.schema_version == 57 and j.binlog.finished_ts == 445000000000000009
    assert j.binlog.table_info is not None and j.binlog.table_info.column_by_id(3).name == "state"
    assert j.to_json() == JOB
    assert Job.from_json(j.to_json()) == j
