"""``jsonbinary.to_text_many`` (vectorised) gives exactly what ``to_text`` gives, value by value,
including which values are rejected."""
from __future__ import annotations

import json
import random
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from transform.codec import jsonbinary as jb
from transform.codec.errors import CodecError

EDGE_DOCS = [
    '{"a": 1, "b": [1, 2, -3], "c": {"d": null, "e": true, "f": false}}',
    "[]", "{}", '"x"', '""', "1", "0", "-1", "null", "true", "false", "[[[[]]]]", "[{}, [], {}]",
    "-9223372036854775808", "9223372036854775807", "18446744073709551615", "1.5", "-0.0", "1e300",
    '[0, 9, 10, 99, 100, 12345678901234567, -10, -9223372036854775808, 18446744073709551615]',
    '[1.25, "a\\nb", "q\\"", "back\\\\slash", {"k\\t": 1}, "\\u0001"]',
    '{"é测": "测试", "emoji": "😀", "del": "\\u007f", "ls": "\\u2028"}',
    '"' + "x" * 127 + '"', '"' + "x" * 128 + '"', '"' + "y" * 5000 + '"',
    '{"' + "k" * 200 + '": 1}', '{"": ""}', '[null, true, false, [null], {"n": null}]',
    json.dumps({"sku": "S123", "n": 7, "tags": ["a", "b"]}, sort_keys=True),
    "[" * 300 + "1" + "]" * 300,
    json.dumps(list(range(1000))),
    json.dumps({f"k{i:04d}": i for i in range(300)}),
]


def pack(docs_binary: list[bytes], gap: bytes = b"zz") -> tuple[bytes, list[int], list[int]]:
    """Concatenate (type code + value) binaries with junk between them, as in a row chunk."""
    raw, offs, ends = bytearray(), [], []
    for d in docs_binary:
        raw += gap
        offs.append(len(raw))
        raw += d
        ends.append(len(raw))
    return bytes(raw), offs, ends


def scalar(raw: bytes, offs: list[int], ends: list[int]) -> list[str | None]:
    out: list[str | None] = []
    for o, e in zip(offs, ends):
        try:
            out.append(jb.to_text(raw[o], raw, o + 1, e))
        except CodecError:
            out.append(None)
    return out


def assert_same(raw: bytes, offs: list[int], ends: list[int]) -> None:
    arr, bad = jb.to_text_many(raw, offs, ends)
    want = scalar(raw, offs, ends)
    assert arr.to_pylist() == want
    assert bad.tolist() == [w is None for w in want]


def binary(text: str) -> bytes:
    tc, v = jb.from_text(text)
    return bytes([tc]) + v


def test_edge_documents_match_scalar_renderer() -> None:
    raw, offs, ends = pack([binary(t) for t in EDGE_DOCS])
    assert_same(raw, offs, ends)
    arr, bad = jb.to_text_many(raw, offs, ends)
    assert arr.to_pylist()[: 3] == [EDGE_DOCS[0], "[]", "{}"]
    assert not bad.any()


def test_empty_and_unpadded_input() -> None:
    arr, bad = jb.to_text_many(b"", [], [])
    assert len(arr) == 0 and bad.size == 0
    # the last value ends at the very end of the buffer (no padding to read past)
    for t in ['"abc"', "[1, 2]", '{"a": [true]}', "12", "2.5"]:
        d = binary(t)
        assert_same(d, [0], [len(d)])


def test_malformed_values_are_rejected_like_the_scalar_path() -> None:
    good = binary('{"a": [1, "xy", null], "b": {"c": 2.5}}')
    docs = [
        good[:-1],                              # truncated
        bytes([0x0C, 0x05]) + b"ab",             # string longer than its buffer
        bytes([0x0C]) + b"\xff" * 11,            # endless uvarint
        bytes([0x0C, 0x02]) + b"\xff\xfe",       # invalid UTF-8
        bytes([0x0C, 0x03]) + b"\xed\xa0\x80",   # UTF-8-encoded surrogate
        bytes([0x04, 0x07]),                     # unknown literal
        bytes([0x07, 0x00]),                     # unknown type code
        bytes([0x09, 1, 2, 3]),                  # short int
        bytes([0x0B]) + struct.pack("<d", float("nan")),
        bytes([0x03]) + struct.pack("<II", 1, 4),          # container size below its header
        bytes([0x03]) + struct.pack("<II", 5, 13) + b"\x09\x00\x00\x00\x00",  # count too large
        bytes([0x03]) + struct.pack("<IIBI", 1, 13, 0x09, 200),  # entry offset outside container
        bytes([0x01]) + struct.pack("<IIIHBI", 1, 19, 300, 1, 0x04, 1),  # key outside container
        bytes([0x03]) + struct.pack("<IIBI", 1, 13, 0x04, 9),    # unknown inline literal
        bytes([0x03]) + struct.pack("<IIBI", 1, 13, 0x77, 8),    # unknown entry type
        good,
    ]
    # a self-referencing array (each entry points at the array itself): the work budget stops it
    loop = bytearray(struct.pack("<II", 3, 8 + 15))
    for _ in range(3):
        loop += struct.pack("<BI", 0x03, 0)
    docs.append(bytes([0x03]) + bytes(loop))
    raw, offs, ends = pack(docs)
    assert_same(raw, offs, ends)
    _, bad = jb.to_text_many(raw, offs, ends)
    assert bad[:-2].all() and not bad[-2] and bad[-1]


def test_random_corruption_matches_scalar_renderer() -> None:
    rng = random.Random(5)
    raw, offs, ends = pack([binary(t) for t in EDGE_DOCS[:-3]])
    for _ in range(60):
        rb = bytearray(raw)
        for _ in range(rng.randint(1, 20)):
            rb[rng.randrange(len(rb))] = rng.randrange(256)
        assert_same(bytes(rb), offs, ends)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30)


@settings(max_examples=150, deadline=None)
@given(st.lists(json_values, min_size=1, max_size=12))
def test_generated_documents_match_scalar_renderer(values: list) -> None:
    raw, offs, ends = pack([binary(json.dumps(v)) for v in values])
    assert_same(raw, offs, ends)


def test_batch_json_column_across_chunks_and_fallback_rows() -> None:
    """decode_batch (vectorised JSON, rows split over chunks, a scalar-fallback row in a later
    chunk, hidden-rowid handles) equals decode_row row by row."""
    from tests.codec.tables import col, table
    from tests.codec.test_batch import check
    from transform.codec import mysqltypes as mt
    from transform.codec.datums import Uint, encode_datums
    from upstream.rowcodec import encode_row

    t = table(40, "t", [col(1, "n", mt.TYPE_LONG), col(2, "j", mt.TYPE_JSON)])
    docs = [None, '{"a": "q\\"", "b": [1.5, -2, null]}', '"tab\\there"', "[]", '{"é": "测"}', "1e-07",
            '{"k": {"k": {"k": [true, false]}}}', '"' + "z" * 200 + '"', "18446744073709551615"]
    kinds, payloads = [], []
    for i, d in enumerate(docs * 3):
        if i == 13:  # an unsigned datum in a signed column: this row takes the scalar path
            kinds.append("insert")
            payloads.append(encode_datums([i]) + encode_datums([1, Uint(5), 2, None]))
            continue
        row = {"n": i, "j": d}
        if i % 3 == 1:
            kinds.append("update")
            payloads.append(encode_row(t, "update", dict(row, j=docs[(i + 1) % len(docs)]), row, handle=i))
        elif i % 3 == 2:
            kinds.append("delete")
            payloads.append(encode_row(t, "delete", row, None, handle=i))
        else:
            kinds.append("insert")
            payloads.append(encode_row(t, "insert", None, row, handle=i))
    for chunk_rows in (4, 65536):
        check(t, kinds, payloads, chunk_rows=chunk_rows)


def test_batch_single_block_in_row_order() -> None:
    """An insert-only batch in one chunk: NOT NULL columns come out of one block in row order
    (no gather); nullable ones are gathered. Both equal decode_row."""
    from tests.codec.tables import PK, col, table
    from tests.codec.test_batch import check
    from transform.codec import mysqltypes as mt
    from upstream.rowcodec import encode_row

    t = table(41, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "j", mt.TYPE_JSON, flag=mt.NOT_NULL_FLAG),
                        col(3, "v", mt.TYPE_VARCHAR, flen=9)], pk_is_handle=True)
    rows = [{"id": i, "j": f'{{"i": {i}}}', "v": None if i % 2 else "x"} for i in range(10)]
    b = check(t, ["insert"] * 10, [encode_row(t, "insert", None, r) for r in rows])
    assert b.column("j").to_pylist()[3] == '{"i": 3}'
