"""Property tests: encode → decode is the identity for every datum flag and column type, and the
comparable encodings keep order."""
from __future__ import annotations

import datetime
import json
import struct
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.codec import strategies as S
from tests.codec.tables import col, table
from transform.codec import jsonbinary, mydecimal
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
    encode_datum,
    encode_datums,
)
from transform.codec.errors import CodecError
from transform.codec.mydecimal import EXACT
from transform.codec.rows import decode_row
from transform.codec.values import packed_from_value
from transform.codec.varint import decode_uvarint, encode_cmp_float, encode_cmp_int, encode_memcmp_bytes, encode_uvarint
from upstream.rowcodec import _encoder_for, encode_row

I64 = st.integers(-(2 ** 63), 2 ** 63 - 1)
U64 = st.integers(0, 2 ** 64 - 1)

datums = st.one_of(
    st.none(), I64, U64.map(Uint), I64.map(KeyInt), U64.map(KeyUint), I64.map(Duration),
    st.floats(allow_nan=False), st.binary(max_size=100), st.binary(max_size=40).map(KeyBytes),
    S.json_values.map(lambda o: Json(S.json_text(o))),
    st.integers(1, 65).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, min(p, 30)))).flatmap(
        lambda pf: st.integers(-(10 ** pf[0] - 1), 10 ** pf[0] - 1).map(
            lambda u: DecimalDatum(Decimal(u).scaleb(-pf[1], context=EXACT), pf[0], pf[1]))),
)


DATETIME_TABLE = table(50, "dt", [col(1, "id", mt.TYPE_LONGLONG, flag=mt.PRI_KEY_FLAG | mt.NOT_NULL_FLAG),
                                   col(2, "at", mt.TYPE_DATETIME, decimal=6)], pk_is_handle=True)


@given(st.lists(datums, max_size=12))
@settings(max_examples=300, deadline=None)
def test_datums_round_trip(values: list) -> None:
    raw = encode_datums(values)
    got = decode_datums(raw)
    assert got == values
    assert [type(g) for g in got] == [type(v) for v in values]
    assert encode_datums(got) == raw


@given(I64, I64)
def test_cmp_int_keeps_order(a: int, b: int) -> None:
    assert (a < b) == (encode_cmp_int(a) < encode_cmp_int(b))


@given(st.floats(allow_nan=False), st.floats(allow_nan=False))
def test_cmp_float_keeps_order(a: float, b: float) -> None:
    if a != b:
        assert (a < b) == (encode_cmp_float(a) < encode_cmp_float(b))


@given(st.binary(max_size=30), st.binary(max_size=30))
def test_memcmp_bytes_keeps_order(a: bytes, b: bytes) -> None:
    assert (a < b) == (encode_memcmp_bytes(a) < encode_memcmp_bytes(b))


@given(st.integers(1, 65).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, min(p, 30)))), st.data())
@settings(max_examples=300, deadline=None)
def test_decimal_bin_round_trip_and_order(pf: tuple[int, int], data: st.DataObject) -> None:
    prec, frac = pf
    lim = 10 ** prec - 1
    a, b = (Decimal(data.draw(st.integers(-lim, lim))).scaleb(-frac, context=EXACT) for _ in range(2))
    ea, eb = mydecimal.encode_bin(a, prec, frac), mydecimal.encode_bin(b, prec, frac)
    assert len(ea) == mydecimal.bin_size(prec, frac)
    da = mydecimal.decode_bin(ea, 0, prec, frac)[0]
    assert da == a and da.as_tuple().exponent == -frac
    assert (a < b) == (ea < eb)  # the binary form is memcomparable


@given(S.json_values)
@settings(max_examples=300, deadline=None)
def test_json_text_round_trip(obj: object) -> None:
    text = S.json_text(obj)
    tc, raw = jsonbinary.from_text(text)
    assert jsonbinary.to_text(tc, raw) == text
    assert jsonbinary.dumps(jsonbinary.decode_value(tc, raw)) == text
    assert jsonbinary.peek_end(bytes([tc]) + raw, 0) == len(raw) + 1
    assert jsonbinary.from_text(jsonbinary.to_text(tc, raw)) == (tc, raw)


def test_deep_and_large_json() -> None:
    deep = "[" * 300 + "1" + "]" * 300
    tc, raw = jsonbinary.from_text(deep)
    assert jsonbinary.to_text(tc, raw) == "[" * 300 + "1" + "]" * 300
    nested = {"k": {"k": {"k": [1, {"z": "é🙂"}]}}}
    tc, raw = jsonbinary.from_text(json.dumps(nested))
    assert json.loads(jsonbinary.to_text(tc, raw)) == nested
    big = {f"key{i:05d}": ["x" * 100, i, i * 0.5, None, True] for i in range(3000)}
    tc, raw = jsonbinary.from_text(json.dumps(big))
    assert len(raw) > 65536 * 2
    assert json.loads(jsonbinary.to_text(tc, raw)) == big


PK = S.pk_table()
ROWID = S.rowid_table()
UPK = S.unsigned_pk_table()


@given(S.rows_for(PK), S.rows_for(PK))
@settings(max_examples=150, deadline=None)
def test_rows_round_trip_pk_handle(a: dict, b: dict) -> None:
    ins = encode_row(PK, "insert", None, a)
    r = decode_row(PK, "insert", ins)
    assert r.after == a and r.handle == a["id"] and r.before is None
    b["id"] = a["id"]
    upd = encode_row(PK, "update", a, b)
    r = decode_row(PK, "update", upd)
    assert (r.before, r.after, r.handle) == (a, b, a["id"])
    dele = encode_row(PK, "delete", b, None)
    r = decode_row(PK, "delete", dele)
    assert (r.before, r.after, r.handle) == (b, None, a["id"])
    assert encode_row(PK, "update", r.before, r.before) == dele + dele


@given(S.rows_for(ROWID), S.rows_for(ROWID), I64)
@settings(max_examples=150, deadline=None)
def test_rows_round_trip_rowid(a: dict, b: dict, h: int) -> None:
    r = decode_row(ROWID, "insert", encode_row(ROWID, "insert", None, a, handle=h))
    assert r.after == a and r.handle == h
    r = decode_row(ROWID, "update", encode_row(ROWID, "update", a, b, handle=h))
    assert (r.before, r.after, r.handle) == (a, b, h)
    r = decode_row(ROWID, "delete", encode_row(ROWID, "delete", b, None, handle=h))
    assert (r.before, r.handle) == (b, h)


def _by_id(table, image: dict | None) -> dict | None:
    return None if image is None else {c.id: image[c.name] for c in table.columns if c.name in image}


@given(st.sampled_from([PK, ROWID]), I64, st.data())
@settings(max_examples=150, deadline=None)
def test_images_keyed_by_column_id_encode_the_same(table, h: int, data: st.DataObject) -> None:
    a, b = data.draw(S.rows_for(table)), data.draw(S.rows_for(table))
    handle = None
    if table is PK:
        b["id"] = a["id"]
    else:
        handle = h
    for kind, before, after in (("insert", None, a), ("update", a, b), ("delete", b, None)):
        by_name = encode_row(table, kind, before, after, handle)
        assert encode_row(table, kind, _by_id(table, before), _by_id(table, after), handle, by_id=True) == by_name


@given(S.rows_for(UPK, null_rate=False))
def test_unsigned_pk_handle(a: dict) -> None:
    raw = encode_row(UPK, "insert", None, a)
    # the handle datum is the int64 bit pattern of the unsigned PK
    signed = a["id"] - 2 ** 64 if a["id"] >= 2 ** 63 else a["id"]
    assert decode_datums(raw)[0] == signed
    r = decode_row(UPK, "insert", raw)
    assert r.after == a and r.handle == a["id"]


@given(st.floats(width=32, allow_nan=False))
def test_float32_exact(v: float) -> None:
    assert struct.unpack("<f", struct.pack("<f", v))[0] == v


@given(st.integers(1, 65).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, min(p, 30)))),
       st.integers(-(10 ** 70), 10 ** 70), st.integers(-35, 5))
@settings(max_examples=500, deadline=None)
def test_decimal_bin_exact_path_matches_the_digit_string_path(pf: tuple[int, int], unscaled: int, exp: int) -> None:
    """The strict encoder (integer arithmetic) gives the non-strict (digit string) encoder's bytes
    whenever the value fits, and refuses exactly when the value overflows or has extra digits."""
    prec, frac = pf
    value = Decimal(unscaled).scaleb(exp, context=EXACT)
    negative, ip, fp = mydecimal.split_digits(value)
    fits = len(ip) <= prec - frac and not fp[frac:].strip("0")
    if fits:
        assert mydecimal.encode_bin(value, prec, frac) == mydecimal.encode_bin(value, prec, frac, strict=False)
    else:
        try:
            mydecimal.encode_bin(value, prec, frac)
        except mydecimal.DecimalError as e:
            assert ("overflows" in str(e)) == (len(ip) > prec - frac)
        else:
            raise AssertionError(f"{value} encoded at ({prec},{frac}) although it does not fit")


@given(U64)
@settings(max_examples=500, deadline=None)
def test_uvarint_is_go_leb128(v: int) -> None:
    want = bytearray()
    x = v
    while True:                      # Go's binary.PutUvarint, spelled out
        if x < 0x80:
            want.append(x)
            break
        want.append((x & 0x7F) | 0x80)
        x >>= 7
    assert encode_uvarint(v) == bytes(want)
    assert decode_uvarint(bytes(want), 0) == (v, len(want))


@pytest.mark.parametrize("v", [-1, 2 ** 64])
def test_uvarint_refuses_out_of_range(v: int) -> None:
    with pytest.raises(CodecError, match="uvarint out of range"):
        encode_uvarint(v)


@given(st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 12, 31, 23, 59, 59)))
@settings(max_examples=300, deadline=None)
def test_datetime_pair_encoder_matches_the_generic_datum(v: datetime.datetime) -> None:
    plan = _encoder_for(DATETIME_TABLE)
    i = next(k for k, c in enumerate(plan.cols) if c.tp == mt.TYPE_DATETIME)
    col = plan.cols[i]
    assert plan.pair[i](v) == encode_datum(col.id) + encode_datum(Uint(packed_from_value(v, col.tp)))
