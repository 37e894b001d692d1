"""TiDB's JSON text, byte for byte, from hand-built TiDB JSON binary (the text a TiDB of the
tidb-binlog era, v7.0, returns over its MySQL port and writes into binlogs' consumers):

- doubles in Go's shortest form, positional from 1e-6 up to 1e21 (no ``.0``: ``10000000000``,
  ``-2``, ``-0``), exponent form outside it with the exponent's leading zero dropped (``1e-7``,
  ``1e+21``);
- datetimes, timestamps and durations always with 6 fractional digits; dates without a time part;
- strings quoted as TiDB does: ``\\n``, ``\\r``, ``\\t``, ``\\"``, ``\\\\``, every other control
  character as ``\\u00XX`` (``\\b``, ``\\f`` too), U+2028/U+2029 escaped, ``<>&`` and DEL as is.
"""
from __future__ import annotations

import struct

import pytest

from tests.codec.tables import PK, col, table
from transform.codec import jsonbinary as jb
from transform.codec import mysqltypes as mt
from transform.codec.batch import decode_batch
from transform.codec.datums import EncodedJson
from transform.codec.model import ColumnInfo
from transform.codec.rows import decode_row
from transform.codec.values import parse_default
from upstream.rowcodec import encode_row


def double(f: float) -> tuple[int, bytes]:
    return jb.FLOAT64, struct.pack("<d", f)


def core_time(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0, us: int = 0) -> int:
    return y << 50 | mo << 46 | d << 41 | h << 36 | mi << 30 | s << 24 | us << 4


def time_value(tc: int, ct: int) -> tuple[int, bytes]:
    return tc, struct.pack("<Q", ct)


def json_time_of_day(ns: int, fsp: int) -> tuple[int, bytes]:
    return jb.DURATION, struct.pack("<qI", ns, fsp)


def string(s: str) -> tuple[int, bytes]:
    raw = s.encode("utf-8")
    return jb.STRING, bytes([len(raw)]) + raw


def array(*items: tuple[int, bytes]) -> tuple[int, bytes]:
    """An array of scalars (no literals) in TiDB's layout."""
    head = jb.HEADER + len(items) * jb.VALUE_ENTRY
    entries, data = bytearray(), bytearray()
    for tc, raw in items:
        entries += struct.pack("<BI", tc, head + len(data))
        data += raw
    return jb.ARRAY, struct.pack("<II", len(items), head + len(data)) + bytes(entries) + bytes(data)


def obj(*items: tuple[str, tuple[int, bytes]]) -> tuple[int, bytes]:
    """An object of scalars (keys given in byte order) in TiDB's layout."""
    keys = [k.encode("utf-8") for k, _ in items]
    head = jb.HEADER + len(items) * (jb.KEY_ENTRY + jb.VALUE_ENTRY)
    kent, vent, data = bytearray(), bytearray(), bytearray()
    pos = head
    for k in keys:
        kent += struct.pack("<IH", pos, len(k))
        pos += len(k)
    for _, (tc, raw) in items:
        vent += struct.pack("<BI", tc, pos + len(data))
        data += raw
    body = bytes(kent) + bytes(vent) + b"".join(keys) + bytes(data)
    return jb.OBJECT, struct.pack("<II", len(items), pos + len(data)) + body


def texts(value: tuple[int, bytes]) -> set[str]:
    """The text of one value by every renderer: scalar, dumps(decode_value), vectorised."""
    tc, raw = value
    out = {jb.to_text(tc, raw), jb.dumps(jb.decode_value(tc, raw))}
    buf = b"\x00\x00" + bytes([tc]) + raw
    arr, bad = jb.to_text_many(buf, [2], [len(buf)])
    assert not bad.any()
    out.add(arr.to_pylist()[0])
    return out


DOUBLES = [
    (1e10, "10000000000"), (-2.0, "-2"), (1e-7, "1e-7"), (1e21, "1e+21"), (1e20, "100000000000000000000"),
    (123456789012345678.0, "123456789012345680"), (0.1, "0.1"), (1e-6, "0.000001"), (1e-5, "0.00001"),
    (2.5e-5, "0.000025"), (9.99e-7, "9.99e-7"), (1.5e-7, "1.5e-7"), (1e-10, "1e-10"), (1.25e-100, "1.25e-100"),
    (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e+308"), (-1.5e300, "-1.5e+300"),
    (1.2345e21, "1.2345e+21"), (-0.0, "-0"), (0.0, "0"), (1.0, "1"), (1e15, "1000000000000000"),
    (1e16, "10000000000000000"), (12345.678, "12345.678"), (-0.5, "-0.5"), (3.0e-3, "0.003"),
    (2 ** 63 * 1.0, "9223372036854776000"), (0.30000000000000004, "0.30000000000000004"),
]


@pytest.mark.parametrize("f,want", DOUBLES)
def test_double_text_is_gos_shortest_form(f: float, want: str) -> None:
    assert texts(double(f)) == {want}
    assert jb.float_text(f) == want


def test_doubles_inside_containers() -> None:
    assert texts(array(double(1.0), double(2.5), double(1e-7))) == {"[1, 2.5, 1e-7]"}
    assert texts(obj(("a", double(-2.0)), ("b", double(1e10)))) == {'{"a": -2, "b": 10000000000}'}


def test_integers_stay_integers() -> None:
    assert texts((jb.INT64, struct.pack("<q", -(2 ** 63)))) == {"-9223372036854775808"}
    assert texts((jb.UINT64, struct.pack("<Q", 2 ** 64 - 1))) == {"18446744073709551615"}


@pytest.mark.parametrize("tc", [jb.DATETIME, jb.TIMESTAMP])
def test_datetime_always_has_six_fractional_digits(tc: int) -> None:
    assert texts(time_value(tc, core_time(2024, 1, 2, 3, 4, 5))) == {'"2024-01-02 03:04:05.000000"'}
    assert texts(time_value(tc, core_time(2024, 1, 2, 3, 4, 5, 123))) == {'"2024-01-02 03:04:05.000123"'}
    assert texts(time_value(tc, 0)) == {'"0000-00-00 00:00:00.000000"'}


def test_date_has_no_time_part() -> None:
    assert texts(time_value(jb.DATE, core_time(2024, 1, 2))) == {'"2024-01-02"'}


@pytest.mark.parametrize("ns,fsp,want", [
    ((12 * 3600 + 34 * 60 + 56) * 10 ** 9, 0, "12:34:56.000000"),
    ((12 * 3600 + 34 * 60 + 56) * 10 ** 9 + 500_000_000, 3, "12:34:56.500000"),
    (123_456_789, 6, "00:00:00.123456"),
    (-3600 * 10 ** 9, 0, "-01:00:00.000000"),
    (838 * 3600 * 10 ** 9, 2, "838:00:00.000000"),
])
def test_duration_always_has_six_fractional_digits(ns: int, fsp: int, want: str) -> None:
    assert texts(json_time_of_day(ns, fsp)) == {f'"{want}"'}


def test_times_inside_containers() -> None:
    doc = array(time_value(jb.DATETIME, core_time(2024, 1, 2, 3, 4, 5)), json_time_of_day(0, 0),
                time_value(jb.DATE, core_time(1999, 12, 31)))
    assert texts(doc) == {'["2024-01-02 03:04:05.000000", "00:00:00.000000", "1999-12-31"]'}


@pytest.mark.parametrize("s,want", [
    ("a\bb\fc", '"a\\u0008b\\u000cc"'),
    ("\u2028x\u2029", '"\\u2028x\\u2029"'),
    ("<a href='x'>&amp;</a>", "\"<a href='x'>&amp;</a>\""),
    ("\x7f\x00\x1f", '"\x7f\\u0000\\u001f"'),
    ('\n\r\t"\\/', '"\\n\\r\\t\\"\\\\/"'),
    ("é测😀\u2027\u202a", '"é测😀\u2027\u202a"'),
    ("\\b", '"\\\\b"'),
])
def test_string_quoting(s: str, want: str) -> None:
    assert texts(string(s)) == {want}
    assert texts(obj((s, string(s)))) == {"{" + want + ": " + want + "}"}
    assert texts(array(string("ok"), string(s))) == {'["ok", ' + want + "]"}


def test_emulator_and_writer_text() -> None:
    """The emulator's rows (``EncodedJson.of``) carry the same text a TiDB returns."""
    assert EncodedJson.of({"b": 1e10, "a": [-2.0, 1e-7, "\u2028"]}) == '{"a": [-2, 1e-7, "\\u2028"], "b": 10000000000}'
    assert EncodedJson.of(0.1) == "0.1"
    assert jb.dumps({"k": [1.0, None, True, "\f"]}) == '{"k": [1, null, true, "\\u000c"]}'


def test_batch_decoder_renders_tidb_text() -> None:
    """The vectorised row decoder (the Drainer's Arrow path) writes TiDB's text too."""
    t = table(7, "j", [col(1, "id", mt.TYPE_LONGLONG, flag=PK), col(2, "j", mt.TYPE_JSON)], pk_is_handle=True)
    docs = [EncodedJson.of(1e10), EncodedJson.of([{"t": "x\u2028"}]), EncodedJson.of(-0.0)]
    rows = [encode_row(t, "insert", None, {"id": i, "j": d}) for i, d in enumerate(docs)]
    got = decode_batch(t, ["insert"] * len(rows), rows)
    assert got.column("j").to_pylist() == ["10000000000", '[{"t": "x\\u2028"}]', "-0"]
    assert [decode_row(t, "insert", r).after["j"] for r in rows] == got.column("j").to_pylist()


def test_a_json_origin_default_that_is_no_string_becomes_tidb_text() -> None:
    j = ColumnInfo.from_json(col(2, "j", mt.TYPE_JSON))
    assert parse_default(j, 1e10) == "10000000000"
    assert parse_default(j, [1.5e-7, "\u2028"]) == '[1.5e-7, "\\u2028"]'
    assert parse_default(j, '{"a": 1.0}') == '{"a": 1.0}'          # a string is TiDB's text already
