"""Row layouts beyond the reference vectors: defaults for missing columns, dropped columns,
handles, the sequence walk, and precise errors."""
from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal

import pytest

from schemas import binlog_pb2
from tests.codec.tables import PK, col, table
from tests.codec.util import h
from transform.codec import mysqltypes as mt
from transform.codec.datums import Uint, encode_datums
from transform.codec.errors import (
    CodecError,
    ColumnValueError,
    DecimalError,
    JSONBinaryError,
    RowLayoutError,
    SchemaError,
    TruncatedError,
    UnknownFlagError,
    VarintOverflowError,
)
from transform.codec.model import TableInfo
from transform.codec.rows import decode_row, iter_mutation, without_double_writes
from transform.codec.values import InvalidTime
from upstream.rowcodec import encode_row

UTC = dt.UTC


def _defaults_table() -> TableInfo:
    nn = mt.NOT_NULL_FLAG
    return table(20, "t", [
        col(1, "id", mt.TYPE_LONG, flag=PK),
        col(2, "a", mt.TYPE_LONG, flag=nn, origin_default="42", default="42"),
        col(3, "b", mt.TYPE_VARCHAR, flen=10),  # nullable, no default -> NULL
        col(4, "e", mt.TYPE_ENUM, flag=nn, elems=["x", "y"]),  # not null enum -> first element
        col(5, "z", mt.TYPE_LONG, flag=nn),  # not null, no default -> zero
        col(6, "d", mt.TYPE_DATETIME, flag=nn),  # zero time
        col(7, "s", mt.TYPE_STRING, flag=nn, flen=3, charset="binary", collate="binary"),  # 3 zero bytes
        col(8, "j", mt.TYPE_JSON, flag=nn),
        col(9, "ts", mt.TYPE_TIMESTAMP, origin_default="2020-01-02 03:04:05"),
        col(10, "dec", mt.TYPE_NEWDECIMAL, flag=nn, flen=6, decimal=2, origin_default="1.5"),
        col(11, "st", mt.TYPE_SET, elems=["p", "q"], origin_default="p,q"),
        col(12, "tm", mt.TYPE_DURATION, flag=nn, decimal=2),
    ], pk_is_handle=True)


def test_missing_columns_get_drainer_defaults() -> None:
    t = _defaults_table()
    r = decode_row(t, "insert", h("08 02 00"))  # id=1 and nothing else stored
    assert r.after == {
        "id": 1, "a": 42, "b": None, "e": "x", "z": 0, "d": "0000-00-00 00:00:00", "s": b"\x00\x00\x00",
        "j": "null", "ts": dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC), "dec": Decimal("1.50"),
        "st": "p,q", "tm": "00:00:00.00",
    }
    assert isinstance(r.after["d"], InvalidTime)


def test_bit_origin_default_is_base64() -> None:
    c = col(2, "b", mt.TYPE_BIT, flen=16)
    c["origin_default"] = "\x01\x02"
    c["origin_default_bit"] = base64.b64encode(b"\x01\x02").decode()
    t = table(21, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), c], pk_is_handle=True)
    assert decode_row(t, "insert", h("08 02 00")).after == {"id": 1, "b": 0x0102}


def test_unknown_column_ids_are_ignored() -> None:
    t = table(22, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(3, "c", mt.TYPE_LONG)], pk_is_handle=True)
    # column 2 was dropped after this row was written
    raw = encode_datums([5, 2, b"gone", 3, 7])
    assert decode_row(t, "insert", raw).after == {"id": 5, "c": 7}
    upd = encode_datums([1, 5, 2, b"old", 3, 7, 1, 5, 2, b"new", 3, 8])
    r = decode_row(t, "update", upd)
    assert r.before == {"id": 5, "c": 7} and r.after == {"id": 5, "c": 8}


def test_column_order_follows_table_not_ids() -> None:
    t = table(23, "t", [col(5, "x", mt.TYPE_LONG), col(2, "y", mt.TYPE_LONG)])
    raw = encode_row(t, "insert", None, {"x": 1, "y": 2}, handle=9)
    assert raw == encode_datums([9, 5, 1, 2, 2])
    assert decode_row(t, "insert", raw).after == {"x": 1, "y": 2}


def test_null_with_default_is_written() -> None:
    t = _defaults_table()
    raw = encode_row(t, "insert", None, {"id": 1, "a": None, "b": None})
    assert raw == encode_datums([1, 2, None])  # a has a default: NULL written; b skipped
    assert decode_row(t, "insert", raw).after["a"] is None


def test_virtual_generated_column_not_written() -> None:
    t = table(24, "t", [col(1, "a", mt.TYPE_LONG), col(2, "g", mt.TYPE_LONG, generated="`a` + 1"),
                        col(3, "s", mt.TYPE_LONG, generated="`a` * 2", stored=True)])
    raw = encode_row(t, "update", {"a": 1, "g": 2, "s": 2}, {"a": 2, "g": 3, "s": 4}, handle=1)
    assert raw == encode_datums([1, 1, 3, 2, -1, 1, 1, 2, 3, 4, -1, 1])


def test_timestamp_naive_is_utc_and_aware_is_converted() -> None:
    t = table(25, "t", [col(1, "ts", mt.TYPE_TIMESTAMP)])
    a = encode_row(t, "insert", None, {"ts": dt.datetime(2019, 1, 1)}, handle=1)
    b = encode_row(t, "insert", None, {"ts": dt.datetime(2018, 12, 31, 19, tzinfo=dt.timezone(dt.timedelta(hours=-5)))},
                   handle=1)
    assert a == b


def test_sequence_interleaving_and_empty_sequence() -> None:
    m = binlog_pb2.TableMutation(table_id=1, inserted_rows=[b"i0", b"i1"], updated_rows=[b"u0"],
                                 deleted_rows=[b"d0"])
    assert list(iter_mutation(m)) == [("insert", b"i0"), ("insert", b"i1"), ("update", b"u0"), ("delete", b"d0")]
    m.sequence.extend([binlog_pb2.Insert, binlog_pb2.DeleteRow, binlog_pb2.Update, binlog_pb2.Insert])
    assert list(iter_mutation(m)) == [("insert", b"i0"), ("delete", b"d0"), ("update", b"u0"), ("insert", b"i1")]


def test_partition_reorganization_copies_are_left_out() -> None:
    """While TiDB moves rows between partitions it writes each change twice (to the partition the row
    is in and to the one it moves to), and both land in the logical table's mutation; the copies go,
    what a transaction itself did stays (an insert, delete and insert again of one key)."""
    t = table(1, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "v", mt.TYPE_LONG)], pk_is_handle=True)
    a, b, c = {"id": 7, "v": 1}, {"id": 7, "v": 2}, {"id": 8, "v": 3}
    ins, ins_b, other = (encode_row(t, "insert", None, r) for r in (a, b, c))
    upd = encode_row(t, "update", a, b)
    dele, dele_b = encode_row(t, "delete", a, None), encode_row(t, "delete", b, None)

    def logical(*changes: tuple[str, bytes]) -> list[tuple[str, bytes]]:
        return without_double_writes(t, list(changes))

    ins_, upd_, del_ = "insert", "update", "delete"
    assert logical((ins_, ins), (ins_, ins), (ins_, other)) == [(ins_, ins), (ins_, other)]
    assert logical((del_, dele), (del_, dele)) == [(del_, dele)]
    assert logical((upd_, upd), (upd_, upd)) == [(upd_, upd)]
    assert logical((upd_, upd), (del_, dele)) == [(upd_, upd)]                           # delete-only state
    assert logical((upd_, upd), (del_, dele), (ins_, ins_b)) == [(upd_, upd)]           # the copy moves partitions
    assert logical((upd_, upd), (del_, dele), (ins_, other)) == [(upd_, upd), (ins_, other)]
    assert logical((del_, dele), (ins_, ins_b), (upd_, upd)) == [(del_, dele), (ins_, ins_b)]
    assert logical((del_, dele), (ins_, ins_b), (del_, dele), (ins_, ins_b)) == [(del_, dele), (ins_, ins_b)]
    # what a transaction does itself is kept: the same row deleted, inserted as it was, updated, deleted again
    kept = [(ins_, ins), (del_, dele), (ins_, ins), (upd_, upd), (del_, dele_b), (ins_, ins_b), (del_, dele_b)]
    assert logical(*kept) == kept
    again = [(del_, dele), (ins_, ins), (del_, dele)]
    assert logical(*again) == again


@pytest.mark.parametrize("seq", [
    [binlog_pb2.Insert, binlog_pb2.Insert, binlog_pb2.Insert, binlog_pb2.Update, binlog_pb2.DeleteRow],
    [binlog_pb2.Insert, binlog_pb2.Update, binlog_pb2.DeleteRow],
    [binlog_pb2.Insert, binlog_pb2.Insert, binlog_pb2.Update, binlog_pb2.DeletePK],
])
def test_bad_sequence(seq: list[int]) -> None:
    m = binlog_pb2.TableMutation(table_id=1, inserted_rows=[b"i0", b"i1"], updated_rows=[b"u0"],
                                 deleted_rows=[b"d0"], sequence=seq)
    with pytest.raises(RowLayoutError):
        list(iter_mutation(m))


T = table(26, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "c", mt.TYPE_VARCHAR, flen=5),
                    col(3, "d", mt.TYPE_NEWDECIMAL, flen=10, decimal=2), col(4, "j", mt.TYPE_JSON),
                    col(5, "e", mt.TYPE_ENUM, elems=["a"])], pk_is_handle=True)


@pytest.mark.parametrize("kind,raw,exc,column_id,offset", [
    ("insert", "08", TruncatedError, None, 1),  # handle varint missing
    ("insert", "08 02 08 04 02 0A 61", TruncatedError, 2, 6),  # string shorter than its length
    ("insert", "08 02 08 04 0B", UnknownFlagError, 2, 4),
    ("insert", "08 02 08 04 08 " + "FF " * 10 + "01", VarintOverflowError, 2, 5),
    ("insert", "08 02 08 06 06 50 02 80", DecimalError, 3, 5),  # precision 80 > 65
    ("insert", "08 02 08 06 06 0A 02 80 00", TruncatedError, 3, 7),
    ("insert", "08 02 08 08 0A 03 01 00 00 00 0D 00 00 00 09 FF 00 00 00", JSONBinaryError, 4, None),
    ("insert", "08 02 08 0A 09 05", ColumnValueError, 5, 4),  # enum index 5 of 1 element
    ("insert", "08 02 02 02 61", RowLayoutError, None, 2),  # column id is not a varint
    ("update", "08 02 08 02", RowLayoutError, None, None),  # odd number of pairs
    ("update", "08 02 08 02 08 04 08 02", RowLayoutError, 2, None),  # halves with different ids
    ("delete", "08 02 08 02 08 02 08 04", RowLayoutError, 1, None),  # column twice
])
def test_errors_name_column_and_offset(kind: str, raw: str, exc: type, column_id: int | None,
                                       offset: int | None) -> None:
    with pytest.raises(exc) as e:
        decode_row(T, kind, h(raw))
    assert isinstance(e.value, CodecError)
    if column_id is not None:
        assert e.value.column_id == column_id
        assert f"column id {column_id}" in str(e.value)
    if offset is not None:
        assert e.value.offset == offset
        assert f"byte offset {offset}" in str(e.value)


def test_json_pointing_outside_its_buffer() -> None:
    # an array whose single element entry points past the array's own size
    bad = h("0A 03 01 00 00 00 0D 00 00 00 09 40 00 00 00")
    with pytest.raises(JSONBinaryError):
        decode_row(T, "insert", h("08 02 08 08") + bad)


def test_encode_rejects_bad_values() -> None:
    with pytest.raises(ColumnValueError):
        encode_row(T, "insert", None, {"id": 1, "e": "zzz"})
    with pytest.raises(DecimalError):
        encode_row(T, "insert", None, {"id": 1, "d": Decimal("1.234")})  # would lose a digit
    with pytest.raises(ColumnValueError):
        encode_row(T, "update", {"id": 1}, {"id": 1}, None)  # images must hold every column
    nopk = table(27, "t", [col(1, "a", mt.TYPE_LONG)])
    with pytest.raises(ColumnValueError):
        encode_row(nopk, "insert", None, {"a": 1})  # _tidb_rowid tables need handle=


def test_uint_datum_in_signed_column_still_decodes() -> None:
    t = table(28, "t", [col(1, "a", mt.TYPE_LONG)])
    raw = encode_datums([1, 1, Uint(5)])
    assert decode_row(t, "insert", raw).after == {"a": 5}


def test_clustered_ci_collation_key_in_prefix_is_not_the_value() -> None:
    # new collation, utf8mb4_general_ci: the handle holds a weight string (here not even UTF-8);
    # the true value is in the row (restored data) and wins.
    t = table(29, "t", [col(1, "a", mt.TYPE_VARCHAR, flag=PK, flen=10, collate="utf8mb4_general_ci"),
                        col(2, "b", mt.TYPE_LONG)], common_pk=["a"])
    raw = encode_datums([b"\xff\x00\x41"]) + encode_datums([1, b"Abc", 2, 5])
    r = decode_row(t, "insert", raw)
    assert r.after == {"a": "Abc", "b": 5} and r.handle == ("Abc",)
    with pytest.raises(SchemaError):  # the encoder cannot compute _ci sort keys by itself
        encode_row(t, "insert", None, {"a": "Abc", "b": 5})
    assert encode_row(t, "insert", None, {"a": "Abc", "b": 5}, handle=[b"\xff\x00\x41"]) == raw
