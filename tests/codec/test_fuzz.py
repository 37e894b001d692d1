"""Fuzzing: random and mutated bytes fed to the row decoder and the batch decoder. Only
``CodecError`` may escape; whatever the batch path accepts must equal the row path."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.codec import strategies as S
from tests.codec.tables import PK, col, table
from tests.codec.test_batch import expected_columns
from transform.codec import jsonbinary
from transform.codec import mysqltypes as mt
from transform.codec.batch import decode_batch
from transform.codec.datums import decode_datums
from transform.codec.errors import CodecError
from transform.codec.model import TableInfo
from transform.codec.rows import KINDS, decode_row
from upstream.rowcodec import encode_row

ALL = S.pk_table()
ROWID = S.rowid_table()
SMALL = table(40, "small", [
    col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "n", mt.TYPE_SHORT),
    col(3, "d", mt.TYPE_NEWDECIMAL, flen=9, decimal=3), col(4, "s", mt.TYPE_VARCHAR, flen=20, charset="utf8mb4"),
    col(5, "t", mt.TYPE_DATETIME, decimal=6), col(6, "j", mt.TYPE_JSON), col(7, "e", mt.TYPE_ENUM, elems=["x", "y"]),
    col(8, "ts", mt.TYPE_TIMESTAMP), col(9, "u", mt.TYPE_LONGLONG, flag=mt.UNSIGNED_FLAG),
], pk_is_handle=True)


def mutate(rng: random.Random, data: bytes) -> bytes:
    """Apply 1-3 random byte-level mutations."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(6)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            b[min(i, len(b) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            b[min(i, len(b) - 1)] = rng.randrange(256)
        elif op == 2 and b:
            del b[min(i, len(b) - 1)]
        elif op == 3:
            b.insert(i, rng.choice([0x00, 0x01, 0x02, 0x06, 0x08, 0x09, 0x0A, 0x80, 0xFF, rng.randrange(256)]))
        elif op == 4:
            del b[i:]
        else:
            j = rng.randrange(len(b) + 1)
            b[i:i] = b[min(i, j):max(i, j)][:16]
    return bytes(b)


def only_codec_errors(t: TableInfo, kind: str, data: bytes) -> None:
    try:
        decode_row(t, kind, data)
    except CodecError:
        pass


def test_random_bytes() -> None:
    rng = random.Random(20240229)
    for _ in range(2500):
        n = rng.randrange(0, 64)
        prefix = rng.choice([b"", b"\x08", b"\x08\x02", b"\x08\x02\x08", b"\x08\x02\x08\x04"])
        data = prefix + bytes(rng.randrange(256) for _ in range(n))
        for t in (ALL, ROWID, SMALL):
            only_codec_errors(t, rng.choice(KINDS), data)
        try:
            decode_datums(data)
        except CodecError:
            pass


@given(S.rows_for(ALL), S.rows_for(ALL), st.randoms(use_true_random=False))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_rows(a: dict, b: dict, rng: random.Random) -> None:
    b["id"] = a["id"]
    valid = [("insert", encode_row(ALL, "insert", None, a)), ("update", encode_row(ALL, "update", a, b)),
             ("delete", encode_row(ALL, "delete", b, None))]
    for kind, data in valid:
        for _ in range(3):
            only_codec_errors(ALL, kind, mutate(rng, data))
            only_codec_errors(ALL, rng.choice(KINDS), mutate(rng, data))


def test_mutated_json_binary() -> None:
    rng = random.Random(7)
    docs = ['{"a": [1, 2, {"b": null}], "c": "dé"}', "[[[[]]]]", '{"k": 1.5, "z": [true, false]}', '"x"',
            '{"' + "k" * 300 + '": ' + '"v"' * 1 + "}"]
    for _ in range(1500):
        tc, raw = jsonbinary.from_text(rng.choice(docs))
        data = mutate(rng, bytes([tc]) + raw)
        if not data:
            continue
        try:
            jsonbinary.to_text(data[0], data, 1)
        except CodecError:
            pass
        try:
            jsonbinary.decode_value(data[0], data, 1)
        except CodecError:
            pass


def _small_rows() -> st.SearchStrategy[dict]:
    return S.rows_for(SMALL)


@given(st.lists(st.tuples(st.sampled_from(KINDS), _small_rows(), _small_rows()), min_size=1, max_size=6),
       st.randoms(use_true_random=False))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_batches_agree_with_rows(changes: list, rng: random.Random) -> None:
    kinds, payloads = [], []
    for kind, a, b in changes:
        b["id"] = a["id"]
        data = encode_row(SMALL, kind, a if kind != "insert" else None, b if kind != "delete" else None)
        if rng.random() < 0.2:
            data = mutate(rng, data)
        kinds.append(kind)
        payloads.append(data)
    try:
        expected = expected_columns(SMALL, kinds, payloads)
    except CodecError:
        with pytest.raises(CodecError):
            decode_batch(SMALL, kinds, payloads)
        return
    batch = decode_batch(SMALL, kinds, payloads)
    for name, values in expected.items():
        assert batch.column(name).to_pylist() == values, name


def test_mutated_batches_deterministic() -> None:
    """Batches of valid and mutated rows: the batch decoder accepts exactly what the row decoder
    accepts, with the same values (both outcomes are exercised many times)."""
    rng = random.Random(11)
    base = [encode_row(SMALL, "insert", None, {"id": i, "n": i, "d": None, "s": "héllo", "t": None,
                                               "j": '{"a": [1, "x"]}', "e": "y", "ts": None, "u": 5})
            for i in range(5)]
    outcomes = {"ok": 0, "error": 0}
    for _ in range(500):
        payloads = [mutate(rng, b) if rng.random() < 0.15 else b for b in base]
        kinds = ["insert" if rng.random() < 0.95 else rng.choice(KINDS) for _ in payloads]
        try:
            expected = expected_columns(SMALL, kinds, payloads)
        except CodecError:
            outcomes["error"] += 1
            with pytest.raises(CodecError):
                decode_batch(SMALL, kinds, payloads)
            continue
        outcomes["ok"] += 1
        batch = decode_batch(SMALL, kinds, payloads)
        for name, values in expected.items():
            assert batch.column(name).to_pylist() == values, name
    assert outcomes["ok"] > 100 and outcomes["error"] > 100
