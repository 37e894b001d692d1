"""The vectorised batch path gives exactly what decode_row gives, converted to Arrow types."""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.codec import strategies as S
from tests.codec.tables import PK, col, table
from tests.codec.test_rows import _defaults_table
from tests.codec.util import h
from transform.codec import mysqltypes as mt
from transform.codec.batch import BEFORE_COLUMN, HANDLE_COLUMN, INVALID_TIMES_KEY, OP_COLUMN, arrow_value, decode_batch
from transform.codec.datums import Uint, encode_datums
from transform.codec.errors import CodecError
from transform.codec.model import TableInfo, arrow_type
from transform.codec.rows import decode_row
from upstream.rowcodec import encode_row


def expected_columns(t: TableInfo, kinds: list[str], payloads: list[bytes]) -> dict[str, list[Any]]:
    """What decode_batch must produce, computed row by row with decode_row."""
    out: dict[str, list[Any]] = {OP_COLUMN: [], HANDLE_COLUMN: [], BEFORE_COLUMN: []}
    for c in t.columns:
        out[c.name] = []
    for k, p in zip(kinds, payloads):
        r = decode_row(t, k, p)
        out[OP_COLUMN].append({"insert": "I", "update": "U", "delete": "D"}[k])
        hd = r.handle if isinstance(r.handle, int) else None
        out[HANDLE_COLUMN].append(hd - 2 ** 64 if hd is not None and hd >= 2 ** 63 else hd)
        image = r.before if k == "delete" else r.after
        for c in t.columns:
            out[c.name].append(arrow_value(c, arrow_type(c), image[c.name]))
        out[BEFORE_COLUMN].append(
            {c.name: arrow_value(c, arrow_type(c), r.before[c.name]) for c in t.columns} if k == "update" else None)
    return out


def check(t: TableInfo, kinds: list[str], payloads: list[bytes], chunk_rows: int = 65536) -> pa.RecordBatch:
    batch = decode_batch(t, kinds, payloads, chunk_rows=chunk_rows)
    exp = expected_columns(t, kinds, payloads)
    assert batch.num_rows == len(payloads)
    for name, values in exp.items():
        assert batch.column(name).to_pylist() == values, name
    return batch


def _changes(t: TableInfo, rowid: bool) -> st.SearchStrategy:
    rows = S.rows_for(t)
    return st.lists(st.tuples(st.sampled_from(["insert", "update", "delete"]), rows, rows,
                              st.integers(-(2 ** 63), 2 ** 63 - 1)), max_size=12)


def _encode(t: TableInfo, changes: list, rowid: bool) -> tuple[list[str], list[bytes]]:
    kinds, payloads = [], []
    for kind, a, b, hd in changes:
        if not rowid:
            b["id"] = a["id"]
        handle = hd if rowid else None
        if kind == "insert":
            payloads.append(encode_row(t, kind, None, a, handle=handle))
        elif kind == "update":
            payloads.append(encode_row(t, kind, a, b, handle=handle))
        else:
            payloads.append(encode_row(t, kind, a, None, handle=handle))
        kinds.append(kind)
    return kinds, payloads


PKT = S.pk_table()
ROWID = S.rowid_table()


@given(_changes(PKT, False))
@settings(max_examples=30, deadline=None)
def test_batch_equals_rows_pk_table(changes: list) -> None:
    kinds, payloads = _encode(PKT, changes, False)
    check(PKT, kinds, payloads, chunk_rows=7)


@given(_changes(ROWID, True))
@settings(max_examples=30, deadline=None)
def test_batch_equals_rows_rowid_table(changes: list) -> None:
    kinds, payloads = _encode(ROWID, changes, True)
    check(ROWID, kinds, payloads)


def test_batch_shape_and_ops() -> None:
    t = table(30, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "v", mt.TYPE_VARCHAR, flen=9)], pk_is_handle=True)
    kinds = ["insert", "update", "delete"]
    payloads = [encode_row(t, "insert", None, {"id": 1, "v": "a"}),
                encode_row(t, "update", {"id": 1, "v": "a"}, {"id": 1, "v": "b"}),
                encode_row(t, "delete", {"id": 1, "v": "b"}, None)]
    b = check(t, kinds, payloads)
    assert b.schema.names == [OP_COLUMN, HANDLE_COLUMN, "id", "v", BEFORE_COLUMN]
    assert b.column(OP_COLUMN).to_pylist() == ["I", "U", "D"]
    assert b.column("v").to_pylist() == ["a", "b", "b"]
    assert b.column(BEFORE_COLUMN).to_pylist() == [None, {"id": 1, "v": "a"}, None]
    assert b.column(HANDLE_COLUMN).to_pylist() == [1, 1, 1]


def test_batch_defaults_zero_dates_and_fallback_rows() -> None:
    t = _defaults_table()
    kinds = ["insert", "insert", "insert"]
    payloads = [h("08 02 00"),
                encode_datums([2, 2, Uint(7)]),  # a uint datum in a signed column: scalar fallback
                encode_row(t, "insert", None, {"id": 3, "d": "0000-00-00 00:00:00"})]
    b = check(t, kinds, payloads)
    assert b.column("a").to_pylist() == [42, 7, 42]
    assert b.column("d").to_pylist() == [None, None, None]
    assert int(b.schema.metadata[INVALID_TIMES_KEY]) == 3


def test_batch_clustered_table_uses_row_path() -> None:
    t = table(31, "t", [col(1, "a", mt.TYPE_VARCHAR, flag=PK, flen=10, charset="utf8mb4"),
                        col(2, "b", mt.TYPE_LONG)], common_pk=["a"])
    payloads = [encode_row(t, "insert", None, {"a": "x", "b": 1}),
                encode_row(t, "delete", {"a": "x", "b": 1}, None)]
    b = check(t, ["insert", "delete"], payloads)
    assert b.column(HANDLE_COLUMN).null_count == 2


def test_batch_error_names_row() -> None:
    t = table(32, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "v", mt.TYPE_LONG)], pk_is_handle=True)
    good = encode_row(t, "insert", None, {"id": 1, "v": 2})
    with pytest.raises(CodecError) as e:
        decode_batch(t, ["insert"] * 3, [good, good, good[:-1]])
    assert e.value.row == 2 and e.value.column_id == 2
    with pytest.raises(ValueError):
        decode_batch(t, ["upsert"], [good])


def test_empty_batch() -> None:
    t = table(33, "t", [col(1, "id", mt.TYPE_LONG, flag=PK)], pk_is_handle=True)
    b = decode_batch(t, [], [])
    assert b.num_rows == 0 and b.schema.names == [OP_COLUMN, HANDLE_COLUMN, "id", BEFORE_COLUMN]


def test_rowid_in_insert_row_is_ignored_like_decode_row() -> None:
    t = table(34, "t", [col(1, "a", mt.TYPE_LONG)])
    raw = encode_datums([7, 1, 5, -1, 99])  # handle 7, a=5, then a stray (-1, 99) pair
    assert decode_row(t, "insert", raw).handle == 7
    b = check(t, ["insert"], [raw])
    assert b.column(HANDLE_COLUMN).to_pylist() == [7]


@pytest.mark.parametrize("tp, flag, handle", [(mt.TYPE_LONG, PK, 2281701376), (mt.TYPE_TINY, PK, 300),
                                              (mt.TYPE_TINY, PK | mt.UNSIGNED_FLAG, 256),
                                              (mt.TYPE_LONG, PK | mt.UNSIGNED_FLAG, -1)])
def test_int_pk_handle_outside_the_column_is_refused(tp: int, flag: int, handle: int) -> None:
    """An insert's handle is its int PK column's value: one the column cannot hold (only mutated
    bytes carry one) is a CodecError on both paths, never an Arrow error or a wrapped value."""
    t = table(77, "pkh", [col(1, "id", tp, flag=flag), col(2, "v", mt.TYPE_LONG)], pk_is_handle=True)
    payload = encode_datums([handle]) + encode_datums([2, 7])
    with pytest.raises(CodecError, match="out of the column's range"):
        decode_row(t, "insert", payload)
    good = encode_datums([1]) + encode_datums([2, 7])
    with pytest.raises(CodecError):
        decode_batch(t, ["insert", "insert"], [good, payload])
    assert decode_batch(t, ["insert"], [good]).column("id").to_pylist() == [1]


def test_an_update_written_before_a_column_was_added_gets_its_default_in_both_images() -> None:
    """A row of a transaction begun before ADD COLUMN, committed after it and decoded with the table
    that has the column, lacks it in both images: TiDB Binlog fills both with the column's original
    default, as decode_row does."""
    old = table(30, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "v", mt.TYPE_LONG)], pk_is_handle=True)
    new = table(30, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "v", mt.TYPE_LONG),
                          col(3, "d", mt.TYPE_VARCHAR, flen=8, origin_default="dflt", default="dflt")],
                pk_is_handle=True)
    payloads = [encode_row(old, "update", {"id": 1, "v": 1}, {"id": 1, "v": 2}),
                encode_row(old, "insert", None, {"id": 2, "v": 5})]
    kinds = ["update", "insert"]
    got = decode_batch(new, kinds, payloads)
    assert got.column(BEFORE_COLUMN).to_pylist()[0] == {"id": 1, "v": 1, "d": "dflt"}
    assert got.column("d").to_pylist() == ["dflt", "dflt"]
    assert {k: got.column(k).to_pylist() for k in expected_columns(new, kinds, payloads)} == \
        expected_columns(new, kinds, payloads)
