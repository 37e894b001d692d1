"""The protos carry TiDB's exact names and numbers, and the committed generated modules are current."""
from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from schemas import binlake_pb2, binlog_pb2, cistern_pb2, pdpb_pb2, pump_pb2, secondary_binlog_pb2
from schemas.generate import PROTOS, generate

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def test_generated_modules_are_current(tmp_path: Path) -> None:
    generate(tmp_path)
    for proto in PROTOS:
        stem = proto.removesuffix(".proto")
        for suffix in ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi"):
            fresh, committed = tmp_path / "schemas" / f"{stem}{suffix}", SCHEMAS / f"{stem}{suffix}"
            assert committed.exists(), f"{committed.name} missing: run `make proto`"
            assert filecmp.cmp(fresh, committed, shallow=False), f"{committed.name} is stale: run `make proto`"


def _fields(message: type) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}


@pytest.mark.parametrize("message, expected", [
    (binlog_pb2.Binlog, {"tp": 1, "start_ts": 2, "commit_ts": 3, "prewrite_key": 4, "prewrite_value": 5,
                         "ddl_query": 6, "ddl_job_id": 7, "ddl_schema_state": 8}),
    (binlog_pb2.TableMutation, {"table_id": 1, "inserted_rows": 2, "updated_rows": 3, "deleted_ids": 4,
                                "deleted_pks": 5, "deleted_rows": 6, "sequence": 7}),
    (binlog_pb2.PrewriteValue, {"schema_version": 1, "mutations": 2}),
    (pump_pb2.WriteBinlogReq, {"clusterID": 1, "payload": 2}),
    (pump_pb2.WriteBinlogResp, {"errmsg": 1}),
    (pump_pb2.PullBinlogReq, {"clusterID": 1, "startFrom": 2}),
    (pump_pb2.PullBinlogResp, {"entity": 1}),
    (pump_pb2.Pos, {"suffix": 1, "offset": 2}),
    (pump_pb2.Meta, {"startTs": 1, "commitTs": 2}),
    (pump_pb2.Entity, {"pos": 1, "payload": 2, "checksum": 3, "meta": 4}),
    (cistern_pb2.DumpBinlogResp, {"commitTS": 1, "payload": 2, "ddljob": 3}),
    (pdpb_pb2.TsoRequest, {"header": 1, "count": 2, "dc_location": 3}),
    (pdpb_pb2.TsoResponse, {"header": 1, "count": 2, "timestamp": 3}),
    (pdpb_pb2.Timestamp, {"physical": 1, "logical": 2, "suffix_bits": 3}),
    (secondary_binlog_pb2.Column, {"is_null": 1, "int64_value": 2, "uint64_value": 3, "double_value": 4,
                                   "bytes_value": 5, "string_value": 6}),
    (secondary_binlog_pb2.ColumnInfo, {"name": 1, "mysql_type": 2, "is_primary_key": 3, "flen": 4, "decimal": 5}),
    (secondary_binlog_pb2.Row, {"columns": 1}),
    (secondary_binlog_pb2.TableMutation, {"type": 1, "row": 2, "change_row": 3}),
    (secondary_binlog_pb2.Key, {"name": 1, "column_names": 2}),
    (secondary_binlog_pb2.Table, {"schema_name": 1, "table_name": 2, "column_info": 3, "mutations": 4,
                                  "unique_keys": 5}),
    (secondary_binlog_pb2.DMLData, {"tables": 1}),
    (secondary_binlog_pb2.DDLData, {"schema_name": 1, "table_name": 2, "ddl_query": 3}),
    (secondary_binlog_pb2.Binlog, {"type": 1, "commit_ts": 2, "dml_data": 3, "ddl_data": 4, "time_zone": 5}),
])
def test_tidb_field_numbers(message: type, expected: dict[str, int]) -> None:
    assert _fields(message) == expected


def test_packages_and_service_paths() -> None:
    assert binlog_pb2.DESCRIPTOR.package == "binlog"
    assert pump_pb2.DESCRIPTOR.services_by_name["Pump"].full_name == "binlog.Pump"
    assert cistern_pb2.DESCRIPTOR.services_by_name["Cistern"].full_name == "binlog.Cistern"
    assert pdpb_pb2.DESCRIPTOR.services_by_name["PD"].full_name == "pdpb.PD"
    assert binlake_pb2.DESCRIPTOR.services_by_name["PumpScan"].full_name == "binlake.v1.PumpScan"
    assert secondary_binlog_pb2.DESCRIPTOR.package == "slave.binlog"
    assert [(v.name, v.number) for v in secondary_binlog_pb2.MutationType.DESCRIPTOR.values] == \
        [("Insert", 0), ("Update", 1), ("Delete", 2)]
    assert [v.name for v in binlog_pb2.BinlogType.DESCRIPTOR.values] == \
        ["Prewrite", "Commit", "Rollback", "PreDDL", "PostDDL"]
    assert [(v.name, v.number) for v in binlog_pb2.MutationType.DESCRIPTOR.values] == \
        [("Insert", 0), ("Update", 1), ("DeleteID", 2), ("DeletePK", 3), ("DeleteRow", 4)]


def test_gogo_style_bytes_decode() -> None:
    """Bytes as Go's gogoproto writes them (zero fields present, unpacked repeated enums)."""
    # tp=Commit, start_ts=5, commit_ts=7, ddl_job_id=0, ddl_schema_state=0
    go_binlog = bytes.fromhex("0801" "1005" "1807" "3800" "4000")
    b = binlog_pb2.Binlog.FromString(go_binlog)
    assert (b.tp, b.start_ts, b.commit_ts, b.ddl_job_id) == (binlog_pb2.Commit, 5, 7, 0)
    # TableMutation{table_id=9, sequence=[Insert, Update, DeleteRow]} unpacked: one 0x38 tag per element
    go_mutation = bytes.fromhex("0809" "3800" "3801" "3804")
    m = binlog_pb2.TableMutation.FromString(go_mutation)
    assert list(m.sequence) == [0, 1, 4]
    assert m.SerializeToString() == go_mutation
