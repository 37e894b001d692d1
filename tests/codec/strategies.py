"""Hypothesis strategies: an all-types table and column-level values for each of its columns."""
from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tests.codec.tables import PK, col, table
from transform.codec import mysqltypes as mt
from transform.codec.model import ColumnInfo, TableInfo
from transform.codec.mydecimal import EXACT
from transform.codec.values import duration_text

UTC = dt.UTC
ENUM = ["small", "medium", "large", "x-large"]
SET = ["a", "b", "c", "d", "e"]
BIN = {"charset": "binary", "collate": "binary"}


def all_types_columns(first_id: int = 2) -> list[dict]:
    """One nullable column of every supported type (ids from ``first_id``)."""
    specs = [
        ("ti", mt.TYPE_TINY, {}), ("uti", mt.TYPE_TINY, {"flag": mt.UNSIGNED_FLAG}),
        ("si", mt.TYPE_SHORT, {}), ("mi", mt.TYPE_INT24, {}), ("i", mt.TYPE_LONG, {}),
        ("ui", mt.TYPE_LONG, {"flag": mt.UNSIGNED_FLAG}), ("bi", mt.TYPE_LONGLONG, {}),
        ("ubi", mt.TYPE_LONGLONG, {"flag": mt.UNSIGNED_FLAG}), ("f", mt.TYPE_FLOAT, {}),
        ("d", mt.TYPE_DOUBLE, {}), ("dec65", mt.TYPE_NEWDECIMAL, {"flen": 65, "decimal": 30}),
        ("dec12", mt.TYPE_NEWDECIMAL, {"flen": 12, "decimal": 2}),
        ("dec30", mt.TYPE_NEWDECIMAL, {"flen": 30, "decimal": 0}),
        ("dt", mt.TYPE_DATE, {}), ("dtm", mt.TYPE_DATETIME, {"decimal": 6}),
        ("ts", mt.TYPE_TIMESTAMP, {"decimal": 6}), ("tm", mt.TYPE_DURATION, {"decimal": 6}),
        ("yr", mt.TYPE_YEAR, {}), ("e", mt.TYPE_ENUM, {"elems": ENUM}), ("s", mt.TYPE_SET, {"elems": SET}),
        ("b1", mt.TYPE_BIT, {"flen": 1}), ("b64", mt.TYPE_BIT, {"flen": 64}),
        ("vc", mt.TYPE_VARCHAR, {"flen": 255}), ("txt", mt.TYPE_BLOB, {"charset": "utf8mb4"}),
        ("ch", mt.TYPE_STRING, {"flen": 10}), ("vb", mt.TYPE_VARCHAR, {"flen": 255, **BIN}),
        ("bl", mt.TYPE_BLOB, BIN), ("j", mt.TYPE_JSON, {}),
    ]
    out = []
    for i, (name, tp, kw) in enumerate(specs):
        kw = dict(kw)
        if tp in mt.STRING_TYPES and "charset" not in kw:
            kw["charset"] = "utf8mb4"
        out.append(col(first_id + i, name, tp, **kw))
    return out


def pk_table() -> TableInfo:
    """All types plus an int PK handle column ``id``."""
    return table(100, "all_pk", [col(1, "id", mt.TYPE_LONGLONG, flag=PK)] + all_types_columns(), pk_is_handle=True)


def rowid_table() -> TableInfo:
    """All types, no primary key (rows keyed by ``_tidb_rowid``)."""
    return table(101, "all_rowid", all_types_columns())


def unsigned_pk_table() -> TableInfo:
    """BIGINT UNSIGNED PK handle plus two columns."""
    return table(102, "upk", [col(1, "id", mt.TYPE_LONGLONG, flag=PK | mt.UNSIGNED_FLAG),
                              col(2, "v", mt.TYPE_VARCHAR, flen=20, charset="utf8mb4"),
                              col(3, "n", mt.TYPE_LONG)], pk_is_handle=True)


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
# (no -0.0: its TiDB text "-0" reads back as the integer 0, so it is no fixed point of text → binary → text)
json_scalar = st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 64 - 1) | \
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != 0 or str(f) == "0.0") | text
json_values = st.recursive(json_scalar, lambda kids: st.lists(kids, max_size=5) |
                           st.dictionaries(text, kids, max_size=5), max_leaves=25)


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _quote(s: str) -> str:
    out = []
    for ch in s:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ord(ch) < 0x20 or ch in "\u2028\u2029":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def json_text(obj: Any) -> str:
    """The JSON text TiDB renders: keys in UTF-8 byte order (= code point order), ", "/": ",
    doubles in Go's shortest form (positional from 1e-6 to 1e21, no ``.0``; else ``1e-7``,
    ``1e+21``), strings escaped as TiDB does (``\\b``/``\\f`` as ``\\u00xx``, U+2028/U+2029)."""
    if isinstance(obj, dict):
        return "{" + ", ".join(json_text(k) + ": " + json_text(obj[k]) for k in sorted(obj)) + "}"
    if isinstance(obj, list):
        return "[" + ", ".join(json_text(v) for v in obj) + "]"
    if isinstance(obj, float):
        a = abs(obj)
        if a != 0 and (a < 1e-6 or a >= 1e21):
            return str(np.format_float_scientific(obj, unique=True, trim="-", exp_digits=1))
        return str(np.format_float_positional(obj, unique=True, trim="-"))
    if isinstance(obj, str):
        return _quote(obj)
    return json.dumps(obj)


MAX_TIME_US = (838 * 3600 + 59 * 60 + 59) * 1_000_000 + 999_999


def _decimal(prec: int, scale: int) -> st.SearchStrategy[Decimal]:
    lim = 10 ** prec - 1
    return st.integers(-lim, lim).map(lambda u: Decimal(u).scaleb(-scale, context=EXACT))


def values_for(c: ColumnInfo) -> st.SearchStrategy[Any]:
    """Column-level values of ``c`` as ``decode_row`` returns them (extremes included)."""
    tp, ft = c.tp, c.type
    if tp in mt.INT_TYPES:
        bits = {mt.TYPE_TINY: 8, mt.TYPE_SHORT: 16, mt.TYPE_INT24: 24, mt.TYPE_LONG: 32, mt.TYPE_LONGLONG: 64}[tp]
        if c.unsigned:
            return st.integers(0, 2 ** bits - 1) | st.sampled_from([0, 2 ** bits - 1])
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return st.integers(lo, hi) | st.sampled_from([lo, hi])
    if tp == mt.TYPE_FLOAT:
        return st.floats(width=32, allow_nan=False)
    if tp == mt.TYPE_DOUBLE:
        return st.floats(allow_nan=False)
    if tp == mt.TYPE_NEWDECIMAL:
        return _decimal(ft.flen, ft.decimal)
    if tp == mt.TYPE_DATE:
        return st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))
    if tp == mt.TYPE_DATETIME:
        return st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999))
    if tp == mt.TYPE_TIMESTAMP:
        return st.datetimes(dt.datetime(1970, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)).map(
            lambda d: d.replace(tzinfo=UTC))
    if tp == mt.TYPE_DURATION:
        return st.integers(-MAX_TIME_US, MAX_TIME_US).map(lambda us: duration_text(us * 1000, 6))
    if tp == mt.TYPE_YEAR:
        return st.sampled_from([0]) | st.integers(1901, 2155)
    if tp == mt.TYPE_ENUM:
        return st.sampled_from([""] + list(ft.elems))
    if tp == mt.TYPE_SET:
        return st.sets(st.sampled_from(ft.elems)).map(lambda s: ",".join(e for e in ft.elems if e in s))
    if tp == mt.TYPE_BIT:
        return st.integers(0, 2 ** ft.flen - 1)
    if tp == mt.TYPE_JSON:
        return json_values.map(json_text)
    if c.binary:
        return st.binary(max_size=60)
    return text


def rows_for(t: TableInfo, null_rate: bool = True) -> st.SearchStrategy[dict]:
    """Full row images of ``t`` (nullable columns sometimes None)."""
    parts = {}
    for c in t.columns:
        s = values_for(c)
        if c.nullable and null_rate:
            s = st.none() | s
        parts[c.name] = s
    return st.fixed_dictionaries(parts)
