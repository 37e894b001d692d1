"""Byte vectors derived from TiDB's encoding rules rather than copied from its tests: datums, then full row
payloads, both ways."""
from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import pytest

from tests.codec.tables import PK, col, table
from tests.codec.util import h
from transform.codec import mysqltypes as mt
from transform.codec.datums import (
    DecimalDatum,
    Duration,
    Json,
    KeyBytes,
    KeyInt,
    KeyUint,
    Uint,
    decode_datums,
    encode_datums,
    record_key,
)
from transform.codec.model import ColumnInfo, TableInfo
from transform.codec.rows import decode_row
from transform.codec.values import make_flatten, make_unflatten, pack_time
from upstream.rowcodec import encode_row

UTC = dt.UTC


def both(value: object, hexbytes: str) -> None:
    """encode([value]) is the bytes, and decoding the bytes gives the value back."""
    raw = h(hexbytes)
    assert encode_datums([value]) == raw
    got = decode_datums(raw)
    assert got == [value] and type(got[0]) is type(value)


@pytest.mark.parametrize("v,x", [
    (0, "08 00"), (1, "08 02"), (-1, "08 01"), (2, "08 04"), (63, "08 7E"), (-64, "08 7F"), (64, "08 80 01"),
    (-65, "08 81 01"), (300, "08 D8 04"), (-300, "08 D7 04"), (2147483647, "08 FE FF FF FF 0F"),
    (-2147483648, "08 FF FF FF FF 0F"), (9223372036854775807, "08 FE FF FF FF FF FF FF FF FF 01"),
    (-9223372036854775808, "08 FF FF FF FF FF FF FF FF FF 01"),
])
def test_int64_varint(v: int, x: str) -> None:
    both(v, x)


@pytest.mark.parametrize("v,x", [
    (0, "09 00"), (1, "09 01"), (127, "09 7F"), (128, "09 80 01"), (255, "09 FF 01"), (300, "09 AC 02"),
    (4294967295, "09 FF FF FF FF 0F"), (18446744073709551615, "09 FF FF FF FF FF FF FF FF FF 01"),
])
def test_uint64_uvarint(v: int, x: str) -> None:
    both(Uint(v), x)


@pytest.mark.parametrize("v,x", [
    (KeyInt(0), "03 80 00 00 00 00 00 00 00"), (KeyInt(1), "03 80 00 00 00 00 00 00 01"),
    (KeyInt(-1), "03 7F FF FF FF FF FF FF FF"), (KeyInt(2 ** 63 - 1), "03 FF FF FF FF FF FF FF FF"),
    (KeyInt(-(2 ** 63)), "03 00 00 00 00 00 00 00 00"), (KeyUint(1), "04 00 00 00 00 00 00 00 01"),
    (KeyBytes(b"abc"), "01 61 62 63 00 00 00 00 00 FA"),
    (KeyBytes(b"abcdefgh"), "01 61 62 63 64 65 66 67 68 FF 00×8 F7"),
])
def test_key_forms(v: object, x: str) -> None:
    both(v, x)


def test_record_key() -> None:
    assert record_key(45, 1) == h("74 80 00 00 00 00 00 00 2D 5F 72 80 00 00 00 00 00 00 01")


@pytest.mark.parametrize("v,x", [
    (0.0, "05 80 00 00 00 00 00 00 00"), (-0.0, "05 7F FF FF FF FF FF FF FF"),
    (1.0, "05 BF F0 00 00 00 00 00 00"), (-1.0, "05 40 0F FF FF FF FF FF FF"),
    (0.5, "05 BF E0 00 00 00 00 00 00"), (3.15, "05 C0 09 33 33 33 33 33 33"),
    (float("inf"), "05 FF F0 00 00 00 00 00 00"), (float("-inf"), "05 00 0F FF FF FF FF FF FF"),
])
def test_floats(v: float, x: str) -> None:
    both(v, x)
    got = decode_datums(h(x))[0]
    assert struct.pack(">d", got) == struct.pack(">d", v)  # -0.0 keeps its sign


def _column(tp: int, **kw: object) -> ColumnInfo:
    return ColumnInfo.from_json(col(1, "c", tp, **kw))


def test_float32_widened() -> None:
    c = _column(mt.TYPE_FLOAT)
    d = make_flatten(c)(1.1)
    assert encode_datums([d]) == h("05 BF F1 99 99 A0 00 00 00")
    f32 = struct.unpack("<f", struct.pack("<f", 1.1))[0]
    assert make_unflatten(c)(decode_datums(h("05 BF F1 99 99 A0 00 00 00"))[0]) == f32


@pytest.mark.parametrize("v,x", [
    (b"", "02 00"), (b"a", "02 02 61"), (b"abc", "02 06 61 62 63"), (b"test", "02 08 74 65 73 74"),
    ("测".encode(), "02 06 E6 B5 8B"), (b"z" * 64, "02 80 01" + " 7A" * 64), (b"y" * 200, "02 90 03" + " 79" * 200),
])
def test_strings(v: bytes, x: str) -> None:
    both(v, x)


def test_null() -> None:
    both(None, "00")


DECIMALS = [
    ("0", 10, 0, "06 0A 00 80 00 00 00 00"), ("0.00", 10, 2, "06 0A 02 80 00 00 00 00"),
    ("1", 10, 0, "06 0A 00 80 00 00 00 01"),
    # Not "06 0A 00 7F FF FF FE" (4 bin bytes): DECIMAL(10,0) has 5 bin bytes (see 0 and 1 above), and
    # by MyDecimal's algorithm -1 is 1's bytes inverted with the top bit set:
    ("-1", 10, 0, "06 0A 00 7F FF FF FF FE"),
    ("11.99", 10, 4, "06 0A 04 80 00 0B 26 AC"), ("1.50", 10, 2, "06 0A 02 80 00 00 01 32"),
    ("123.45", 5, 2, "06 05 02 80 7B 2D"), ("-123.45", 5, 2, "06 05 02 7F 84 D2"),
    ("-10.55", 4, 2, "06 04 02 75 C8"), ("12345", 5, 0, "06 05 00 80 30 39"),
    ("12345.000", 10, 3, "06 0A 03 80 00 30 39 00 00"), ("123.450", 10, 3, "06 0A 03 80 00 00 7B 01 C2"),
    ("-123.4500000000", 20, 10, "06 14 0A 7F FF FF FF 84 E5 2D 8B 7F FF"),
    ("0.010", 7, 3, "06 07 03 80 00 00 0A"), ("123.40", 10, 2, "06 0A 02 80 00 00 7B 28"),
    ("0.1", 1, 1, "06 01 01 81"), ("1234567890.1234", 14, 4, "06 0E 04 81 0D FB 38 D2 04 D2"),
    ("-1234567890.1234", 14, 4, "06 0E 04 7E F2 04 C7 2D FB 2D"),
    ("99999999999999999999.99999999999999999999", 40, 20,
     "06 28 14 E3 3B 9A C9 FF 3B 9A C9 FF 3B 9A C9 FF 3B 9A C9 FF 63"),
    ("3.14159", 65, 30, "06 41 1E 80 00×14 03 08 70 7D F0 00×10"),
]


@pytest.mark.parametrize("v,prec,frac,x", DECIMALS)
def test_decimals(v: str, prec: int, frac: int, x: str) -> None:
    assert encode_datums([DecimalDatum(v, prec, frac)]) == h(x)
    got = decode_datums(h(x))[0]
    assert (got.prec, got.frac) == (prec, frac)
    assert got == Decimal(v)
    assert -got.as_tuple().exponent == frac  # rendered at the datum's frac, like MyDecimal.String()
    # and through a DECIMAL(prec, frac) column
    c = _column(mt.TYPE_NEWDECIMAL, flen=prec, decimal=frac)
    assert encode_datums([make_flatten(c)(Decimal(v))]) == h(x)
    u = make_unflatten(c)(got)
    assert u == Decimal(v) and u.as_tuple().exponent == -frac


def test_decimal_natural_precision() -> None:
    assert encode_datums([Decimal("123.45")]) == h("06 05 02 80 7B 2D")


TIMES = [
    ((2019, 1, 1, 0, 0, 0, 0), 0x19A2020000000000, "09 80 80 80 80 80 C0 80 D1 19"),
    ((2011, 11, 11, 10, 10, 10, 123456), 0x198A96A28A01E240, "09 C0 C4 87 D0 A8 D4 A5 C5 19"),
    ((2000, 1, 1, 0, 0, 0, 0), 0x1964420000000000, "09 80 80 80 80 80 C0 90 B2 19"),
    ((1970, 1, 1, 0, 0, 1, 0), 0x1902C20001000000, "09 80 80 80 88 80 C0 B0 81 19"),
    ((9999, 12, 31, 23, 59, 59, 999999), 0x7EF3FF7EFB0F423F, "09 BF 84 BD D8 EF EF FF F9 7E"),
    ((1000, 1, 1, 0, 0, 0, 0), 0x0CB2420000000000, "09 80 80 80 80 80 C0 90 D9 0C"),
    ((2024, 2, 29, 0, 0, 0, 0), 0x19B2BA0000000000, "09 80 80 80 80 80 C0 AE D9 19"),
]


@pytest.mark.parametrize("parts,packed,x", TIMES)
def test_packed_times(parts: tuple, packed: int, x: str) -> None:
    assert pack_time(*parts) == packed
    both(Uint(packed), x)
    c = _column(mt.TYPE_DATETIME, decimal=6)
    value = dt.datetime(*parts)
    assert encode_datums([make_flatten(c)(value)]) == h(x)
    assert make_unflatten(c)(decode_datums(h(x))[0]) == value
    ts = _column(mt.TYPE_TIMESTAMP, decimal=6)
    assert make_unflatten(ts)(decode_datums(h(x))[0]) == value.replace(tzinfo=UTC)


def test_zero_time_and_key_form() -> None:
    both(Uint(0), "09 00")
    assert make_unflatten(_column(mt.TYPE_DATETIME))(Uint(0)) == "0000-00-00 00:00:00"
    assert make_unflatten(_column(mt.TYPE_DATE))(Uint(0)) == "0000-00-00"
    assert encode_datums([make_flatten(_column(mt.TYPE_DATE))("0000-00-00")]) == h("09 00")
    both(KeyUint(0x19A2020000000000), "04 19 A2 02 00 00 00 00 00")


DURATIONS = [
    ("00:00:00", 0, "08 00", "07 80 00 00 00 00 00 00 00"),
    ("00:00:01", 1000000000, "08 80 A8 D6 B9 07", "07 80 00 00 00 3B 9A CA 00"),
    ("10:10:10", 36610000000000, "08 80 D0 DC E0 FD D2 10", "07 80 00 21 4B EE 0B 94 00"),
    ("-00:00:01", -1000000000, "08 FF A7 D6 B9 07", "07 7F FF FF FF C4 65 36 00"),
    ("838:59:59", 3020399000000000, "08 80 D8 CC 97 AE C2 DD 0A", "07 80 0A BB 09 71 79 96 00"),
    ("-838:59:59", -3020399000000000, "08 FF D7 CC 97 AE C2 DD 0A", "07 7F F5 44 F6 8E 86 6A 00"),
    ("12:34:56.789", 45296789000000, "08 80 BD A4 B0 CF CC 14", "07 80 00 29 32 7B 04 8F 40"),
]


@pytest.mark.parametrize("text,ns,row,key", DURATIONS)
def test_durations(text: str, ns: int, row: str, key: str) -> None:
    both(ns, row)
    both(Duration(ns), key)
    c = _column(mt.TYPE_DURATION, decimal=3 if "." in text else 0)
    assert encode_datums([make_flatten(c)(text)]) == h(row)
    assert make_unflatten(c)(decode_datums(h(row))[0]) == text


def test_enum_set_bit_year() -> None:
    enum = _column(mt.TYPE_ENUM, elems=["a", "b"])
    for name, x in (("a", "09 01"), ("b", "09 02"), ("", "09 00")):
        assert encode_datums([make_flatten(enum)(name)]) == h(x)
        assert make_unflatten(enum)(decode_datums(h(x))[0]) == name
    st = _column(mt.TYPE_SET, elems=["a", "b", "c", "d"])
    assert encode_datums([make_flatten(st)("a,c")]) == h("09 05")
    assert make_unflatten(st)(decode_datums(h("09 05"))[0]) == "a,c"
    bit = _column(mt.TYPE_BIT, flen=3)
    assert encode_datums([make_flatten(bit)(0b101)]) == h("09 05")
    assert make_unflatten(bit)(decode_datums(h("09 05"))[0]) == 5
    bit64 = _column(mt.TYPE_BIT, flen=64)
    assert encode_datums([make_flatten(bit64)(2 ** 64 - 1)]) == h("09 FF FF FF FF FF FF FF FF FF 01")
    year = _column(mt.TYPE_YEAR)
    assert encode_datums([make_flatten(year)(2019)]) == h("08 C6 1F")
    assert make_unflatten(year)(decode_datums(h("08 C6 1F"))[0]) == 2019
    assert encode_datums([make_flatten(year)(0)]) == h("08 00")


JSONS = [
    ("null", "0A 04 00"), ("true", "0A 04 01"), ("false", "0A 04 02"), ("0", "0A 09 00×8"),
    ("1", "0A 09 01 00 00 00 00 00 00 00"), ("-1", "0A 09 FF×8"),
    ("9223372036854775808", "0A 0A 00 00 00 00 00 00 00 80"), ("1.5", "0A 0B 00 00 00 00 00 00 F8 3F"),
    ('""', "0A 0C 00"), ('"abc"', "0A 0C 03 61 62 63"), ("[]", "0A 03 00 00 00 00 08 00 00 00"),
    ("{}", "0A 01 00 00 00 00 08 00 00 00"),
    ('[1, "a", null]', "0A 03 03 00 00 00 21 00 00 00 09 17 00 00 00 0C 1F 00 00 00 04 00 00 00 00 "
                       "01 00 00 00 00 00 00 00 01 61"),
    ('{"a": "b"}', "0A 01 01 00 00 00 16 00 00 00 13 00 00 00 01 00 0C 14 00 00 00 61 01 62"),
]


@pytest.mark.parametrize("text,x", JSONS)
def test_json(text: str, x: str) -> None:
    both(Json(text), x)


def test_json_key_order() -> None:
    x = ("0A 01 02 00 00 00 35 00 00 00 1E 00 00 00 01 00 1F 00 00 00 01 00 03 20 00 00 00 09 2D 00 00 00 "
         "61 62 01 00 00 00 0D 00 00 00 04 01 00 00 00 01 00 00 00 00 00 00 00")
    assert encode_datums([Json('{"b":1,"a":[true]}')]) == h(x)
    assert decode_datums(h(x)) == ['{"a": [true], "b": 1}']


# ---------------------------------------------------------------------------------------------
# full row payloads

def _has_id() -> TableInfo:
    return table(1, "hasID", [col(1, "ID", mt.TYPE_LONG, flag=PK), col(2, "NAME", mt.TYPE_VARCHAR, flen=45),
                              col(3, "SEX", mt.TYPE_ENUM, elems=["male", "female"])], pk_is_handle=True)


def test_row_a() -> None:
    t = _has_id()
    row = {"ID": 0, "NAME": "test", "SEX": "female"}
    assert encode_row(t, "insert", None, row) == h("08 00 | 08 04 02 08 74 65 73 74 | 08 06 09 02")
    assert decode_row(t, "insert", h("08 00 | 08 04 02 08 74 65 73 74 | 08 06 09 02")).after == row


def test_row_b_timestamp_in_utc() -> None:
    t = table(2, "t", [col(1, "id", mt.TYPE_LONGLONG, flag=PK), col(2, "c", mt.TYPE_VARCHAR, flen=10),
                       col(3, "d", mt.TYPE_NEWDECIMAL, flag=mt.NOT_NULL_FLAG, flen=10, decimal=2,
                           default="0", origin_default="0"),
                       col(4, "ts", mt.TYPE_TIMESTAMP, decimal=0)], pk_is_handle=True)
    x = h("08 0A | 08 06 06 0A 02 80 00 00 01 32 | 08 08 09 80 80 80 80 80 C0 80 D1 19")
    plus8 = dt.timezone(dt.timedelta(hours=8))
    after = {"id": 5, "c": None, "d": Decimal("1.50"), "ts": dt.datetime(2019, 1, 1, 8, 0, tzinfo=plus8)}
    assert encode_row(t, "insert", None, after) == x
    got = decode_row(t, "insert", x)
    assert got.handle == 5
    assert got.after == {"id": 5, "c": None, "d": Decimal("1.50"), "ts": dt.datetime(2019, 1, 1, tzinfo=UTC)}
    assert got.after["ts"].utcoffset() == dt.timedelta(0)


def _no_pk() -> TableInfo:
    return table(3, "t", [col(1, "a", mt.TYPE_LONG), col(2, "b", mt.TYPE_VARCHAR, flen=10)])


def test_row_c_rowid() -> None:
    t = _no_pk()
    ins = h("08 02 | 08 02 08 02 08 04 02 02 78")
    upd = h("08 02 08 02 08 04 02 02 78 08 01 08 02 | 08 02 08 02 08 04 02 02 79 08 01 08 02")
    dele = h("08 02 08 02 08 04 02 02 79 08 01 08 02")
    assert encode_row(t, "insert", None, {"a": 1, "b": "x"}, handle=1) == ins
    assert encode_row(t, "update", {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, handle=1) == upd
    assert encode_row(t, "delete", {"a": 1, "b": "y"}, None, handle=1) == dele
    i, u, d = decode_row(t, "insert", ins), decode_row(t, "update", upd), decode_row(t, "delete", dele)
    assert (i.handle, i.after) == (1, {"a": 1, "b": "x"})
    assert (u.handle, u.before, u.after) == (1, {"a": 1, "b": "x"}, {"a": 1, "b": "y"})
    assert (d.handle, d.before, d.after) == (1, {"a": 1, "b": "y"}, None)


def test_row_d_only_pk() -> None:
    t = table(4, "t", [col(1, "id", mt.TYPE_LONG, flag=PK)], pk_is_handle=True)
    assert encode_row(t, "insert", None, {"id": 7}) == h("08 0E 00")
    assert decode_row(t, "insert", h("08 0E 00")).after == {"id": 7}


def test_row_e_delete_varchar_pk() -> None:
    t = table(5, "local_binlog2", [col(1, "name", mt.TYPE_VARCHAR, flag=PK, flen=64), col(2, "age", mt.TYPE_LONG)])
    x = h("08 02 02 06 64 65 66 08 04 08 24 08 01 08 04")
    assert encode_row(t, "delete", {"name": "def", "age": 18}, None, handle=2) == x
    d = decode_row(t, "delete", x)
    assert d.before == {"name": "def", "age": 18} and d.handle == 2


def test_row_f_update_delete_no_pk() -> None:
    t = table(6, "local_binlog3", [col(1, "c1", mt.TYPE_LONG), col(2, "c2", mt.TYPE_LONG)])
    upd = h("08 02 08 04 08 04 08 06 08 01 08 06 | 08 02 08 06 08 04 08 06 08 01 08 06")
    dele = h("08 02 08 06 08 04 08 06 08 01 08 06")
    assert encode_row(t, "update", {"c1": 2, "c2": 3}, {"c1": 3, "c2": 3}, handle=3) == upd
    assert encode_row(t, "delete", {"c1": 3, "c2": 3}, None, handle=3) == dele
    u = decode_row(t, "update", upd)
    assert (u.before, u.after, u.handle) == ({"c1": 2, "c2": 3}, {"c1": 3, "c2": 3}, 3)
    assert decode_row(t, "delete", dele).before == {"c1": 3, "c2": 3}


def test_row_g_update_from_null() -> None:
    t = table(7, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "c", mt.TYPE_VARCHAR, flen=5)], pk_is_handle=True)
    x = h("08 02 08 0A 08 04 00 | 08 02 08 0A 08 04 02 02 78")
    assert encode_row(t, "update", {"id": 5, "c": None}, {"id": 5, "c": "x"}) == x
    u = decode_row(t, "update", x)
    assert (u.before, u.after, u.handle) == ({"id": 5, "c": None}, {"id": 5, "c": "x"}, 5)


def test_row_h_clustered_varchar() -> None:
    t = table(8, "t", [col(1, "a", mt.TYPE_VARCHAR, flag=PK, flen=10, collate="utf8mb4_bin"),
                       col(2, "b", mt.TYPE_LONG)], common_pk=["a"])
    on = h("02 06 61 62 63 | 08 02 02 06 61 62 63 08 04 08 02")
    off = h("02 06 61 62 63 | 08 04 08 02")
    assert encode_row(t, "insert", None, {"a": "abc", "b": 1}) == on
    assert encode_row(t, "insert", None, {"a": "abc", "b": 1}, new_collation=False) == off
    assert encode_row(t, "insert", None, {1: "abc", 2: 1}, by_id=True) == on     # images keyed by column id
    for x in (on, off):
        r = decode_row(t, "insert", x)
        assert r.after == {"a": "abc", "b": 1} and r.handle == ("abc",)


def test_row_i_clustered_int_datetime() -> None:
    t = table(9, "t", [col(1, "a", mt.TYPE_LONG, flag=PK), col(2, "b", mt.TYPE_DATETIME, flag=PK, decimal=0),
                       col(3, "c", mt.TYPE_LONG)], common_pk=["a", "b"])
    x = h("08 02 09 80 80 80 80 80 C0 80 D1 19 | 00")
    after = {"a": 1, "b": dt.datetime(2019, 1, 1), "c": None}
    assert encode_row(t, "insert", None, after) == x
    assert encode_row(t, "insert", None, {1: 1, 2: dt.datetime(2019, 1, 1), 3: None}, by_id=True) == x
    r = decode_row(t, "insert", x)
    assert r.after == after and r.handle == (1, dt.datetime(2019, 1, 1))
