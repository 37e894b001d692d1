"""sink.secondary's hand-built serialization against protobuf's own: the same bytes for every kind of value."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import secondary_binlog_pb2 as sb
from sink.secondary import OPS, Row, Table, _int32, column_bytes, dml_bytes, spec_of
from tests.codec.tables import PK, col, table
from transform.codec import mysqltypes as mt

TARGET = Table.of("dé", table(7, "t✓", [
    col(1, "id", mt.TYPE_LONGLONG, flag=PK), col(2, "u", mt.TYPE_LONGLONG, flag=mt.UNSIGNED_FLAG),
    col(3, "e", mt.TYPE_ENUM, elems=["a", "B"]), col(4, "s", mt.TYPE_SET, elems=["x", "y", "z"]),
    col(5, "b", mt.TYPE_BIT, flen=12), col(6, "j", mt.TYPE_JSON), col(7, "f", mt.TYPE_DOUBLE),
    col(8, "dt", mt.TYPE_DATETIME), col(9, "dec", mt.TYPE_NEWDECIMAL, flen=10, decimal=2),
    col(10, "txt", mt.TYPE_BLOB, flen=4294967295), col(11, "bin", mt.TYPE_STRING, flen=4)], pk_is_handle=True))
BARE = Table("d", "bare", ("x", "y"), ())   # no upstream definitions: empty types, no keys

VALUES = st.tuples(
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.one_of(st.integers(0, (1 << 64) - 1), st.decimals(0, 2**64 - 1, places=0)),
    st.sampled_from(["a", "b", "zz"]), st.sampled_from(["", "x", "y,z", "x,q"]), st.integers(0, 4095),
    st.text(max_size=5), st.floats(allow_nan=False), st.datetimes().map(lambda d: d.replace(microsecond=0)),
    st.decimals(-999, 999, places=2), st.text(max_size=200), st.binary(max_size=4))
ROWS = st.lists(st.tuples(st.sampled_from("IUD"), st.lists(st.one_of(st.none(), VALUES), min_size=2, max_size=2)),
                max_size=6)


def _reference(commit_ts: int, pieces: list[tuple[Table, list[Row]]]) -> bytes:
    """The message built field by field with protobuf's API, serialized by protobuf."""
    out = sb.Binlog(type=sb.DML, commit_ts=commit_ts)
    for target, rows in pieces:
        infos: list[Any] = list(target.infos) or [None] * len(target.columns)
        primary = {target.columns[i] for name, cols in target.keys if name == "PRIMARY" for i in cols}
        t = out.dml_data.tables.add(schema_name=target.db, table_name=target.name)
        for name, info in zip(target.columns, infos):
            t.column_info.add(name=name, is_primary_key=name in primary,
                              mysql_type=mt.type_to_str(info.tp, info.type.charset) if info else "",
                              flen=_int32(info.type.flen) if info else 0,
                              decimal=_int32(info.type.decimal) if info else 0)
        for key, cols in target.keys:
            t.unique_keys.add(name=key, column_names=[target.columns[i] for i in cols])
        specs = [spec_of(i) for i in infos]
        for op, new, old in rows:
            m = t.mutations.add(type=OPS[op])
            m.row.columns.extend(sb.Column.FromString(column_bytes(v, s)) for v, s in zip(new, specs))
            if old is not None:
                m.change_row.columns.extend(sb.Column.FromString(column_bytes(v, s)) for v, s in zip(old, specs))
    return out.SerializeToString()


def _column_reference(value: Any, field: str) -> bytes:
    return sb.Column(**{field: value}).SerializeToString()


def test_every_kind_of_value_is_the_column_protobuf_writes() -> None:
    specs = [spec_of(i) for i in TARGET.infos]
    cases = [(None, 0, "is_null", True), (-1, 0, "int64_value", -1), (5, 1, "uint64_value", 5),
             (Decimal(18446744073709551615), 1, "uint64_value", 18446744073709551615),
             ("b", 2, "uint64_value", 2), ("zz", 2, "uint64_value", 0), ("z,x,q", 3, "uint64_value", 5),
             (5, 4, "bytes_value", b"\x00\x05"), ('{"k": "é"}', 5, "bytes_value", '{"k": "é"}'.encode()),
             (-0.0, 6, "double_value", -0.0), (1e300, 6, "double_value", 1e300),
             (dt.datetime(2024, 1, 2, 3, 4, 5), 7, "string_value", "2024-01-02 03:04:05"),
             (Decimal("-1.20"), 8, "string_value", "-1.20"), ("ü" * 100, 9, "string_value", "ü" * 100),
             (b"\x00\xff", 10, "bytes_value", b"\x00\xff"), (True, 0, "int64_value", 1)]
    for value, i, field, expected in cases:
        assert column_bytes(value, specs[i]) == _column_reference(expected, field), (value, field)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, (1 << 63) - 1), ROWS, ROWS)
def test_dml_bytes_are_the_bytes_protobuf_writes(commit_ts: int, rows: list[Any], bare: list[Any]) -> None:
    full = [(op, (new or [None])[0] or (0,) * 11, ((new or [None])[-1] or (1,) * 11) if op == "U" else None)
            for op, new in rows]
    pieces = [(TARGET, full), (BARE, [(op, ("x", None), (None, 2) if op == "U" else None) for op, _ in bare])]
    assert dml_bytes(commit_ts, pieces) == _reference(commit_ts, pieces)
    assert dml_bytes(commit_ts, []) == _reference(commit_ts, [])


# ---------------------------------------------------------------------------------------------
# the drainer's zone: Go's time.Local, TIMESTAMP text in it and back

def test_the_drainers_zone_is_gos_time_local(monkeypatch: Any, tmp_path: Any) -> None:
    import zoneinfo

    from sink.secondary import drainer_zone

    for utc in ("", "UTC", ":UTC", "Etc/UTC", "No/Such_Zone", "/nonexistent/zone"):
        monkeypatch.setenv("TZ", utc)
        assert drainer_zone() is None, utc
    for named in ("Asia/Shanghai", ":Asia/Shanghai"):
        monkeypatch.setenv("TZ", named)
        assert drainer_zone() == zoneinfo.ZoneInfo("Asia/Shanghai")
    path = next(p for p in map(lambda d: f"{d}/America/New_York", zoneinfo.TZPATH) if __import__("os").path.exists(p))
    monkeypatch.setenv("TZ", path)
    zone = drainer_zone()
    assert zone is not None and dt.datetime(2024, 7, 1, tzinfo=zone).utcoffset() == dt.timedelta(hours=-4)


def test_timestamps_are_rendered_in_the_zone_and_read_back_to_utc() -> None:
    import zoneinfo

    import pyarrow as pa

    from sink.secondary import python_rows, utc_text

    ny = zoneinfo.ZoneInfo("America/New_York")
    info = table(9, "z", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "ts", mt.TYPE_TIMESTAMP, decimal=3),
                          col(3, "dt", mt.TYPE_DATETIME)], pk_is_handle=True)
    utc = [dt.datetime(2024, 1, 15, 12, 0, 0, 125000), dt.datetime(2024, 3, 10, 7, 30), None]
    rows = pa.table({"_tidb_op": ["I", "I", "I"], "id": [1, 2, 3],
                     "ts": pa.array(utc, pa.timestamp("us", tz="UTC")), "dt": pa.array(utc, pa.timestamp("us"))})
    local = [new[1] for _, new, _ in python_rows(Table.as_tidb_binlog("d", info, ny), rows)]
    assert local == ["2024-01-15 07:00:00.125", "2024-03-10 03:30:00.000", None]
    assert [new[1:] for _, new, _ in python_rows(Table.as_tidb_binlog("d", info, None), rows)] == [
        ("2024-01-15 12:00:00.125", "2024-01-15 12:00:00"), ("2024-03-10 07:30:00.000", "2024-03-10 07:30:00"),
        (None, None)]
    assert [new[2] for _, new, _ in python_rows(Table.as_tidb_binlog("d", info, ny), rows)][:2] == [
        "2024-01-15 12:00:00", "2024-03-10 07:30:00"]                    # DATETIME has no zone
    assert [utc_text(t, ny) for t in local[:2]] == ["2024-01-15 12:00:00.125", "2024-03-10 07:30:00.000"]
    assert utc_text("0000-00-00 00:00:00", ny) == "0000-00-00 00:00:00"


def test_tidb_binlogs_view_of_a_table_holds_its_generated_columns_and_the_mysql_view_does_not() -> None:
    import pyarrow as pa

    from sink.secondary import python_rows

    cols = [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "a", mt.TYPE_LONG),
            col(3, "v", mt.TYPE_LONG, generated="`a` * 2"),
            col(4, "n", mt.TYPE_LONG, generated="`a` * 3", flag=mt.NOT_NULL_FLAG),
            col(5, "s", mt.TYPE_LONG, generated="`a` + 1", stored=True)]
    full = table(9, "g", cols, pk_is_handle=True)
    lake = full.without_virtual_columns()
    assert [c.name for c in lake.columns] == ["id", "a", "s"] and lake.as_defined() is full
    assert Table.of("d", lake).columns == ("id", "a")
    view = Table.as_tidb_binlog("d", lake, None)
    assert view.columns == ("id", "a", "v", "n", "s") and view.generated == frozenset({2, 3, 4})
    before = pa.array([None, {"id": 1, "a": 1, "s": 2}], pa.struct([("id", pa.int32()), ("a", pa.int32()),
                                                                   ("s", pa.int32())]))
    rows = pa.table({"_tidb_op": ["I", "U"], "id": [1, 1], "a": [1, 5], "s": [2, 6], "_tidb_before": before})
    assert python_rows(view, rows) == [("I", (1, 1, None, 0, 2), None),
                                       ("U", (1, 5, None, None, None), (1, 1, None, None, None))]
