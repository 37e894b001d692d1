"""The Drainer's hot path: many binlog row payloads of one table → one Arrow ``RecordBatch``.

The decoder is vectorised with numpy: all payloads of a chunk are concatenated, and the
(column id, value) pairs of every row are walked one pair index at a time across all rows at
once (varints, lengths and flags computed on whole arrays). Records are then grouped by
(image, column) and each column is decoded in one go by its type. No Python object is built
per row or per value on this path, except for TIME and wide DECIMAL values and the JSON values
``jsonbinary.to_text_many`` leaves to the scalar renderer (floats, dates, escaped strings, …).
Chunks (``chunk_rows``, sized to stay cache-friendly) share the output columns, which are
gathered once at the end.

Rows the vectorised walk does not accept (unexpected flags, clustered-handle prefixes, malformed
bytes, out-of-range values, …) are decoded one by one with :func:`transform.codec.rows.decode_row`,
which either decodes them (the results are patched in) or raises its precise ``CodecError``.

Output columns:
- ``_tidb_op``: ``"I"``, ``"U"`` or ``"D"``;
- ``_tidb_handle``: the int64 handle (``_tidb_rowid`` or int PK; NULL for clustered tables);
- one column per table column: the after-image (the before-image for deletes), typed per
  ``model.arrow_type``; values Iceberg cannot hold (zero and invalid dates) are
  NULL and counted in the schema metadata key ``binlake.invalid_times``;
- ``_tidb_before``: a struct of the before-image for updates, NULL for inserts and deletes.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa

from transform.codec import jsonbinary, mydecimal
from transform.codec import mysqltypes as mt
from transform.codec.errors import CodecError
from transform.codec.model import ColumnInfo, TableInfo, arrow_type
from transform.codec.rows import DELETE, INSERT, UPDATE, decode_row, row_shape
from transform.codec.values import FLOAT32_MAX, InvalidTime, duration_text, int_range, make_unflatten

OP_COLUMN = "_tidb_op"
HANDLE_COLUMN = "_tidb_handle"
BEFORE_COLUMN = "_tidb_before"
INVALID_TIMES_KEY = b"binlake.invalid_times"

_KIND_CODE = {INSERT: 0, UPDATE: 1, DELETE: 2}
_OP_LETTERS = ("I", "U", "D")   # by kind; a list, not an Arrow array: pa.array at import would import pandas
_PAD = 32
_PAD_BYTES = b"\x00" * _PAD

# byte size of a decimal payload after (prec, frac), or -1 when (prec, frac) is invalid
_DEC_SIZE = np.full((256, 256), -1, dtype=np.int64)
for _p in range(1, mydecimal.MAX_DECIMAL_WIDTH + 1):
    for _f in range(0, min(_p, mydecimal.MAX_DECIMAL_SCALE) + 1):
        _DEC_SIZE[_p, _f] = mydecimal.bin_size(_p, _f)

_POW10 = np.array([10 ** i for i in range(19)], dtype=np.int64)
_U64 = np.uint64


# ---------------------------------------------------------------------------------------------
# vectorised primitives (positions are int64 arrays into the padded uint8 buffer)

def _uvarint(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Go uvarints at ``pos``: (values uint64, end positions, ok mask)."""
    b = buf[pos].astype(np.uint64)
    val = b & _U64(0x7F)
    end = pos + 1
    ok = np.ones(pos.shape[0], dtype=bool)
    idx = np.flatnonzero(b & _U64(0x80))
    for j in range(1, 10):
        if idx.size == 0:
            break
        bj = buf[pos[idx] + j].astype(np.uint64)
        if j == 9:
            ok[idx[bj > 1]] = False
        val[idx] |= (bj & _U64(0x7F)) << _U64(7 * j)
        end[idx] += 1
        idx = idx[(bj & _U64(0x80)) != 0]
    ok[idx] = False
    return val, end, ok


def _varint_end(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """End positions of the Go varints at ``pos`` (values not computed); (ends, ok mask)."""
    end = pos + 1
    ok = np.ones(pos.shape[0], dtype=bool)
    idx = np.flatnonzero(buf[pos] >= 0x80)
    for j in range(1, 10):
        if idx.size == 0:
            return end, ok
        bj = buf[pos[idx] + j]
        if j == 9:
            ok[idx[bj > 1]] = False
        end[idx] += 1
        idx = idx[bj >= 0x80]
    ok[idx] = False
    return end, ok


def _small_varint(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Signed varints at ``pos`` with a fast path for the one-byte case (column ids)."""
    b = buf[pos]
    if not (b >= 0x80).any():
        v = b.astype(np.int64)
        return (v >> 1) ^ -(v & 1), pos + 1, np.ones(pos.shape[0], dtype=bool)
    u, e, ok = _uvarint(buf, pos)
    return _zigzag(u), e, ok


def _zigzag(u: np.ndarray) -> np.ndarray:
    """Signed values of zigzag-encoded uint64s (Go's ``binary.Varint``)."""
    return ((u >> _U64(1)) ^ (_U64(0) - (u & _U64(1)))).view(np.int64)


def _u32le(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """4 bytes little-endian at ``pos`` as int64."""
    words: np.ndarray = _unaligned(buf, "<u4")[pos]
    return words.astype(np.int64)


def _be8(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """8 bytes big-endian at ``pos`` as uint64."""
    words: np.ndarray = _unaligned(buf, ">u8")[pos]
    return words.astype(np.uint64)


def _unaligned(buf: np.ndarray, dtype: str) -> np.ndarray:
    """A view of ``buf`` with one ``dtype`` integer starting at every byte (no copy)."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((max(buf.shape[0] - size + 1, 0),), dtype, buffer=buf, strides=(1,))


def _datum_end(buf: np.ndarray, vs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """End positions of the datums whose flag byte is at ``vs``; (ends, ok mask)."""
    flag = buf[vs]
    end = np.empty(vs.shape[0], dtype=np.int64)
    ok = np.ones(vs.shape[0], dtype=bool)
    p = vs + 1
    m = (flag == 8) | (flag == 9)
    if m.any():
        e, k = _varint_end(buf, p[m])
        end[m] = e
        ok[m] = k
    m = flag == 2
    if m.any():
        u, e, k = _uvarint(buf, p[m])
        n = _zigzag(u)
        k &= (n >= 0) & (n < (1 << 40))
        end[m] = e + np.where(k, n, 0)
        ok[m] = k
    m = flag == 0
    end[m] = p[m]
    m = (flag == 5) | (flag == 3) | (flag == 4) | (flag == 7)
    end[m] = p[m] + 8
    m = flag == 6
    if m.any():
        q = p[m]
        size = _DEC_SIZE[buf[q], buf[q + 1]]
        end[m] = q + 2 + size
        ok[m] = size >= 0
    m = flag == 10
    if m.any():
        q = p[m]
        tc = buf[q]
        e = np.zeros(q.shape[0], dtype=np.int64)
        k = np.zeros(q.shape[0], dtype=bool)
        c = (tc == 1) | (tc == 3)
        if c.any():
            size = _u32le(buf, q[c] + 5)
            e[c] = q[c] + 1 + size
            k[c] = size >= 8
        c = tc == 4
        e[c] = q[c] + 2
        k[c] = True
        c = (tc == 9) | (tc == 10) | (tc == 11)
        e[c] = q[c] + 9
        k[c] = True
        c = tc == 12
        if c.any():
            u, ee, kk = _uvarint(buf, q[c] + 1)
            kk &= u < _U64(1 << 40)
            e[c] = ee + np.where(kk, u, 0).astype(np.int64)
            k[c] = kk
        end[m] = e
        ok[m] = k
    bad = ~np.isin(flag, (0, 2, 3, 4, 5, 6, 7, 8, 9, 10))
    ok[bad] = False
    end[bad] = p[bad]
    return end, ok


# ---------------------------------------------------------------------------------------------
# per-column value decoders: (buf, value-flag positions) -> (Arrow array, bad mask, invalid count)

_Result = tuple[pa.Array, np.ndarray, int]
_Decoder = Callable[[np.ndarray, np.ndarray], _Result]

def _ints(buf: np.ndarray, vs: np.ndarray, signed: bool) -> tuple[np.ndarray, np.ndarray]:
    u, _, ok = _uvarint(buf, vs + 1)
    return (_zigzag(u) if signed else u), ok


def _int_col(col: ColumnInfo, typ: pa.DataType) -> _Decoder:
    family = col.family
    unsigned = col.unsigned and family is mt.Family.INT
    bit_width = col.type.flen if col.type.flen > 0 else 64
    lo, hi = int_range(col) if family is not mt.Family.BIT else (0, 2 ** 64 - 1)

    def dec(buf: np.ndarray, vs: np.ndarray) -> _Result:
        v, ok = _ints(buf, vs, not (unsigned or family is mt.Family.BIT))
        if family is mt.Family.BIT:
            if bit_width < 64:
                ok &= (v >> _U64(bit_width)) == 0
            return pa.array(v.view(np.int64), pa.int64()), ~ok, 0
        if unsigned:
            if hi < 2 ** 64 - 1:
                ok &= v <= _U64(hi)
        elif lo > -(2 ** 63) or hi < 2 ** 63 - 1:
            ok &= (v >= lo) & (v <= hi)
        if typ == pa.int32():
            return pa.array(np.where(ok, v, 0).astype(np.int32), pa.int32()), ~ok, 0
        if typ == pa.int64():
            return pa.array(v.astype(np.int64) if unsigned else v, pa.int64()), ~ok, 0
        return pa.array(v, pa.uint64()).cast(typ), ~ok, 0
    return dec


def _float_col(col: ColumnInfo, typ: pa.DataType) -> _Decoder:
    def dec(buf: np.ndarray, vs: np.ndarray) -> _Result:
        u = _be8(buf, vs + 1)
        top = (u >> _U64(63)) != 0
        u = np.where(top, u & _U64(0x7FFFFFFFFFFFFFFF), ~u)
        f = u.view(np.float64)
        if typ == pa.float32():
            a = np.abs(f)
            bad = np.isnan(f) | ((a > FLOAT32_MAX) & ~np.isinf(f))
            with np.errstate(over="ignore", invalid="ignore"):
                return pa.array(f.astype(np.float32), pa.float32()), bad, 0
        return pa.array(f, pa.float64()), np.zeros(len(vs), bool), 0
    return dec


def _decimal_col(col: ColumnInfo, typ: pa.DataType) -> _Decoder:
    prec, scale = col.decimal_scale
    intg = prec - scale
    size = mydecimal.bin_size(prec, scale)
    lead_d, full_i, full_f, trail_d = intg % 9, intg // 9, scale // 9, scale % 9
    unflatten = make_unflatten(col)

    def slow(buf: np.ndarray, vs: np.ndarray) -> _Result:
        vals: list[Any] = []
        bad = np.zeros(len(vs), bool)
        raw = buf.base if isinstance(buf.base, bytes) else buf.tobytes()
        for j, p in enumerate(vs.tolist()):
            try:
                from transform.codec.datums import decode_decimal_payload
                v, _ = decode_decimal_payload(raw, p + 1)
            except CodecError:
                bad[j] = True
                vals.append(None)
                continue
            try:
                d = unflatten(v)
            except CodecError:
                bad[j] = True
                vals.append(None)
                continue
            vals.append(format(d, "f") if pa.types.is_string(typ) else d)
        try:
            return pa.array(vals, typ), bad, 0
        except (pa.ArrowInvalid, ArithmeticError):
            return pa.nulls(len(vs), typ), np.ones(len(vs), bool), 0

    if prec > 18 or not pa.types.is_decimal(typ):
        return slow

    def dec(buf: np.ndarray, vs: np.ndarray) -> _Result:
        p = vs + 1
        same = (buf[p] == prec) & (buf[p + 1] == scale)
        if not same.all():
            arr_f, bad_f, _ = dec(buf, vs[same]) if same.any() else (pa.array([], typ), np.zeros(0, bool), 0)
            arr_s, bad_s, _ = slow(buf, vs[~same])
            order = np.empty(len(vs), dtype=np.int64)
            order[np.flatnonzero(same)] = np.arange(same.sum())
            order[np.flatnonzero(~same)] = same.sum() + np.arange((~same).sum())
            bad = np.empty(len(vs), bool)
            bad[same] = bad_f
            bad[~same] = bad_s
            return pa.concat_arrays([arr_f, arr_s]).take(pa.array(order)), bad, 0
        b = buf[(p + 2)[:, None] + np.arange(size)].astype(np.int64)
        neg = (b[:, 0] & 0x80) == 0
        b[:, 0] ^= 0x80
        b[neg] ^= 0xFF
        ok = np.ones(len(vs), bool)
        unscaled = np.zeros(len(vs), dtype=np.int64)
        pos = 0

        def chunk(nbytes: int) -> np.ndarray:
            nonlocal pos
            v = np.zeros(len(vs), dtype=np.int64)
            for i in range(nbytes):
                v = (v << 8) | b[:, pos + i]
            pos += nbytes
            return v
        if lead_d:
            v = chunk(mydecimal.DIG2BYTES[lead_d])
            ok &= v < _POW10[lead_d]
            unscaled = v
        for _ in range(full_i):
            v = chunk(4)
            ok &= v <= mydecimal.WORD_MAX
            unscaled = unscaled * 1_000_000_000 + v
        for _ in range(full_f):
            v = chunk(4)
            ok &= v <= mydecimal.WORD_MAX
            unscaled = unscaled * 1_000_000_000 + v
        if trail_d:
            v = chunk(mydecimal.DIG2BYTES[trail_d])
            ok &= v < _POW10[trail_d]
            unscaled = unscaled * _POW10[trail_d] + v
        unscaled = np.where(neg, -unscaled, unscaled)
        pair = np.empty((len(vs), 2), dtype=np.int64)
        pair[:, 0] = unscaled
        pair[:, 1] = np.where(unscaled < 0, -1, 0)
        arr = pa.Array.from_buffers(typ, len(vs), [None, pa.py_buffer(pair)])
        return arr, ~ok, 0
    return dec


_EPOCH_Y = np.datetime64("1970", "Y")


def _time_col(col: ColumnInfo, typ: pa.DataType) -> _Decoder:
    date_only = col.family is mt.Family.DATE

    def dec(buf: np.ndarray, vs: np.ndarray) -> _Result:
        u, _, ok = _uvarint(buf, vs + 1)
        ok &= (u >> _U64(63)) == 0
        p = u.astype(np.int64)
        us = p & 0xFFFFFF
        ymdhms = p >> 24
        ymd = ymdhms >> 17
        day = ymd & 31
        ym = ymd >> 5
        year, month = ym // 13, ym % 13
        hms = ymdhms & 0x1FFFF
        sec, minute, hour = hms & 63, (hms >> 6) & 63, hms >> 12
        ok &= (hour <= 23) & (minute <= 59) & (sec <= 59) & (us <= 999_999) & (year <= 9999)
        if date_only:
            ok &= (hour == 0) & (minute == 0) & (sec == 0) & (us == 0)
        valid = ok & (year >= 1) & (month >= 1) & (day >= 1)
        y = np.where(valid, year, 1970)
        mo = np.where(valid, month, 1)
        mstart = (y - 1970).astype("timedelta64[Y]") + _EPOCH_Y
        mstart = mstart.astype("datetime64[M]") + (mo - 1).astype("timedelta64[M]")
        dim = ((mstart + np.timedelta64(1, "M")).astype("datetime64[D]")
               - mstart.astype("datetime64[D]")).astype(np.int64)
        valid &= day <= dim
        days = mstart.astype("datetime64[D]").astype(np.int64) + np.where(valid, day, 1) - 1
        invalid = int((ok & ~valid).sum())
        mask = pa.array(~valid)
        if date_only:
            arr = pa.array(days.astype(np.int32), pa.date32(), mask=~valid)
        else:
            t = days * 86_400_000_000 + ((hour * 60 + minute) * 60 + sec) * 1_000_000 + us
            arr = pa.Array.from_buffers(typ, len(vs), [None, pa.py_buffer(np.ascontiguousarray(t))])
            arr = pa.compute.if_else(mask, pa.nulls(len(vs), typ), arr)
        return arr, ~ok, invalid
    return dec


def _enum_col(col: ColumnInfo, typ: pa.DataType) -> _Decoder:
    elems = pa.array([""] + list(col.type.elems), pa.string())
    n = len(col.type.elems)

    def dec(buf: np.ndarray, vs: np.ndarray) -> _Result:
        u, ok = _ints(buf, vs, False)
        ok &= u <= _U64(n)
        idx = np.where(ok, u, 0).astype(np.int64)
        return elems.take(pa.array(idx)), ~ok, 0
    return dec


def _set_col(col: ColumnInfo, typ: pa.DataType) -> _Decoder:
    elems = col.type.elems
    n = len(elems)

    def dec(buf: np.ndarray, vs: np.ndarray) -> _Result:
        u, ok = _ints(buf, vs, False)
        if n < 64:
            ok &= (u >> _U64(n)) == 0
        u = np.where(ok, u, 0)
        uniq, inv = np.unique(u, return_inverse=True)
        names = pa.array([",".join(e for i, e in enumerate(elems) if int(m) >> i & 1) for m in uniq.tolist()],
                         pa.string())
        return names.take(pa.array(inv.astype(np.int64))), ~ok, 0
    return dec


def _string_col(col: ColumnInfo, typ: pa.DataType) -> _Decoder:
    is_text = pa.types.is_string(typ)

    def dec(buf: np.ndarray, vs: np.ndarray) -> _Result:
        m = len(vs)
        u, start, ok = _uvarint(buf, vs + 1)
        n = _zigzag(u)
        ok &= n >= 0
        start = np.where(ok, start, vs + 1)
        end = np.where(ok, start + n, vs + 1)
        if m == 0:
            return pa.array([], typ), ok, 0
        # Zero-copy view over the chunk buffer: an array of 2m-1 elements whose offsets are
        # [s0, e0, s1, e1, ...] (values sorted by position, gaps between them as odd elements);
        # one ``take`` of the even elements copies the values out in C++.
        order = np.argsort(start, kind="stable")
        offsets = np.empty(2 * m, dtype=np.int64)
        offsets[0::2] = start[order]
        offsets[1::2] = end[order]
        view = pa.Array.from_buffers(pa.large_binary(), 2 * m - 1,
                                     [None, pa.py_buffer(offsets), pa.py_buffer(buf)])
        rank = np.empty(m, dtype=np.int64)
        rank[order] = np.arange(0, 2 * m, 2, dtype=np.int64)
        arr = view.take(pa.array(rank))
        bad = ~ok
        if not is_text:
            return arr.cast(typ), bad, 0
        try:
            return arr.cast(pa.large_string()).cast(typ), bad, 0
        except pa.ArrowInvalid:  # invalid UTF-8 somewhere: find the rows, null them out
            for j, v in enumerate(arr.to_pylist()):
                try:
                    v.decode("utf-8")
                except UnicodeDecodeError:
                    bad[j] = True
            clean = pa.compute.if_else(pa.array(bad), pa.nulls(m, pa.large_binary()), arr)
            return clean.cast(pa.large_string()).cast(typ), bad, 0
    return dec


def _json_col(col: ColumnInfo, typ: pa.DataType) -> _Decoder:
    """JSON values are rendered to text all at once (``jsonbinary.to_text_many``: vectorised,
    with the scalar renderer for the values it does not take itself)."""
    def dec(buf: np.ndarray, vs: np.ndarray) -> _Result:
        raw = buf.base if isinstance(buf.base, bytes) else buf.tobytes()  # no copy of the chunk
        ends, _ = _datum_end(buf, vs)
        arr, bad = jsonbinary.to_text_many(raw, vs + 1, ends)
        return arr.cast(typ), bad, 0
    return dec


def _duration_col(col: ColumnInfo, typ: pa.DataType) -> _Decoder:
    fsp = col.fsp

    def dec(buf: np.ndarray, vs: np.ndarray) -> _Result:
        v, ok = _ints(buf, vs, True)
        return pa.array([duration_text(x, fsp) for x in v.tolist()], pa.string()), ~ok, 0
    return dec


_DECODERS: dict[mt.Family, Callable[[ColumnInfo, pa.DataType], _Decoder]] = {
    mt.Family.INT: _int_col, mt.Family.YEAR: _int_col, mt.Family.BIT: _int_col, mt.Family.FLOAT: _float_col,
    mt.Family.DOUBLE: _float_col, mt.Family.DECIMAL: _decimal_col, mt.Family.DATE: _time_col,
    mt.Family.DATETIME: _time_col, mt.Family.TIMESTAMP: _time_col, mt.Family.DURATION: _duration_col,
    mt.Family.ENUM: _enum_col, mt.Family.SET: _set_col, mt.Family.JSON: _json_col, mt.Family.STRING: _string_col,
    mt.Family.GEOMETRY: _string_col,
}


def _column_decoder(col: ColumnInfo, typ: pa.DataType) -> tuple[int, _Decoder]:
    """(expected datum flag, vectorised decoder) for a column."""
    t = col.mysql_type
    return t.flag_for(col.unsigned), _DECODERS[t.family](col, typ)


# ---------------------------------------------------------------------------------------------
# Python value -> Arrow value (for filled defaults and scalar-decoded rows)

def arrow_value(col: ColumnInfo, typ: pa.DataType, v: Any) -> Any:
    """Convert a column-level Python value (``decode_row`` output) to what ``typ`` holds."""
    if v is None or isinstance(v, InvalidTime):
        return None
    if pa.types.is_decimal(typ) and isinstance(v, int):
        return Decimal(v)
    if col.family is mt.Family.BIT:
        return v - (1 << 64) if v >= 1 << 63 else v
    if pa.types.is_string(typ) and isinstance(v, Decimal):
        return format(v, "f")
    return v


def _pyarray(col: ColumnInfo, typ: pa.DataType, values: list[Any]) -> pa.Array:
    """An Arrow array of column-level Python values."""
    return pa.array([arrow_value(col, typ, v) for v in values], typ)


# ---------------------------------------------------------------------------------------------

class _ColumnOut:
    """Blocks of Arrow values plus, per row, which block element holds its value.

    One per output column for the whole call; each chunk adds its blocks and fills its rows of
    ``idx`` through :meth:`rows`, and :meth:`build` gathers the column once at the end."""

    def __init__(self, n: int, typ: pa.DataType) -> None:
        self.typ = typ
        self.blocks: list[pa.Array] = [pa.nulls(1, typ)]
        self.size = 1
        self.idx = np.zeros(n, dtype=np.int64)  # 0 = the NULL slot

    def add(self, arr: pa.Array) -> int:
        base = self.size
        self.blocks.append(arr)
        self.size += len(arr)
        return base

    def rows(self, start: int, stop: int) -> _RowsView:
        """The output of rows ``start:stop`` (one chunk): same blocks, a view of ``idx``."""
        return _RowsView(self, start, stop)

    def build(self) -> pa.Array:
        blocks = [b if b.type == self.typ else b.cast(self.typ) for b in self.blocks]
        idx = self.idx
        if len(blocks) == 2 and len(blocks[1]) == len(idx) and (np.diff(idx) == 1).all() and (idx[:1] == 1).all():
            return blocks[1]  # one block, already in row order
        return pa.concat_arrays(blocks).take(pa.array(idx))


def _fill(out: _RowsView, miss: np.ndarray, col: ColumnInfo, typ: pa.DataType, missing: Any,
          invalid_fill_cols: list[np.ndarray]) -> None:
    """Give the rows ``miss`` the column's fill ``missing`` (its origin default, or NULL); rows filled
    with a zero date are noted in ``invalid_fill_cols``."""
    if isinstance(missing, InvalidTime):
        invalid_fill_cols.append(miss)
    fill = arrow_value(col, typ, missing)
    if fill is not None:
        out.idx[miss] = out.add(pa.array([fill], typ))


class _RowsView:
    """One chunk's window on a :class:`_ColumnOut`: ``idx`` is a view of the chunk's rows and
    :meth:`add` appends to the shared blocks."""
    __slots__ = ("typ", "idx", "add")

    def __init__(self, out: _ColumnOut, start: int, stop: int) -> None:
        self.typ = out.typ
        self.idx = out.idx[start:stop]
        self.add = out.add


def decode_batch(table: TableInfo, kinds: Sequence[str], payloads: Sequence[bytes],
                 chunk_rows: int = 16384) -> pa.RecordBatch:
    """Decode many row payloads of ``table`` into one ``RecordBatch`` (see the module doc for the
    columns). ``kinds[i]`` is ``"insert"``, ``"update"`` or ``"delete"`` for ``payloads[i]``.

    Values equal what :func:`transform.codec.rows.decode_row` gives, converted to the column's Arrow
    type. Raises the ``CodecError`` of the first malformed row (its ``row`` attribute is the
    row's index in ``payloads``).
    """
    if len(kinds) != len(payloads):
        raise ValueError("kinds and payloads differ in length")
    n = len(payloads)
    shape = row_shape(table)
    types = [arrow_type(c) for c in shape.cols]
    main_out = [_ColumnOut(n, t) for t in types]
    before_out = [_ColumnOut(n, t) for t in types]
    kind = np.zeros(n, dtype=np.int64)
    handle = np.zeros(n, dtype=np.int64)
    has_handle = np.zeros(n, dtype=bool)
    invalid_times = 0
    # The hot path allocates many short-lived objects but never a reference cycle: the collector's
    # settings for it are the process's (a Spark worker's: transform/worker.py), not the codec's.
    for i in range(0, n, chunk_rows):
        j = min(i + chunk_rows, n)
        invalid_times += _decode_chunk(table, kinds[i:j], payloads[i:j], i,
                                       [o.rows(i, j) for o in main_out], [o.rows(i, j) for o in before_out],
                                       kind[i:j], handle[i:j], has_handle[i:j])
    main_arrays = [o.build() for o in main_out]
    before_arrays = [o.build() for o in before_out]
    if table.is_common_handle:
        handle_arr = pa.nulls(n, pa.int64())
    elif shape.pk_index >= 0:
        pk_arr = main_arrays[shape.pk_index]
        if pa.types.is_decimal(pk_arr.type):
            pk_arr = pk_arr.cast(pa.uint64())
        handle_arr = pk_arr.cast(pa.int64(), safe=False)
    else:
        handle_arr = pa.array(handle, pa.int64(), mask=~has_handle)
    fields = [pa.field(c.name, t) for c, t in zip(shape.cols, types)]
    before = pa.StructArray.from_arrays(before_arrays, fields=fields, mask=pa.array(kind != 1))
    ops = pa.array(_OP_LETTERS, pa.string()).take(pa.array(kind))
    schema = output_schema(table).with_metadata({INVALID_TIMES_KEY: str(invalid_times).encode()})
    return pa.RecordBatch.from_arrays([ops, handle_arr, *main_arrays, before], schema=schema)


def output_schema(table: TableInfo) -> pa.Schema:
    """The schema :func:`decode_batch` produces for ``table``."""
    fields = [pa.field(c.name, arrow_type(c)) for c in table.columns]
    return pa.schema([pa.field(OP_COLUMN, pa.string(), nullable=False), pa.field(HANDLE_COLUMN, pa.int64()),
                      *fields, pa.field(BEFORE_COLUMN, pa.struct(fields))])


def _decode_chunk(table: TableInfo, kinds: Sequence[str], payloads: Sequence[bytes], base_row: int,
                  main_out: list[_RowsView], before_out: list[_RowsView], kind_out: np.ndarray,
                  handle_out: np.ndarray, has_handle_out: np.ndarray) -> int:
    """Decode one chunk into the callers' column outputs (row views of this chunk) and op-code,
    handle and handle-validity arrays; returns the chunk's count of invalid times."""
    shape = row_shape(table)
    cols = shape.cols
    ncols = len(cols)
    n = len(payloads)
    karr = np.asarray(kinds, dtype=object) if n else np.zeros(0, dtype=object)
    kind = np.full(n, -1, dtype=np.int64)
    for name, code in _KIND_CODE.items():
        kind[karr == name] = code
    if (kind < 0).any():
        raise ValueError(f"unknown row kind {karr[kind < 0][0]!r}")
    is_ins, is_upd, is_del = kind == 0, kind == 1, kind == 2
    lens = np.fromiter(map(len, payloads), dtype=np.int64, count=n)
    starts = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(lens[:-1], out=starts[1:])
    ends = starts + lens
    raw = b"".join([*payloads, _PAD_BYTES])  # one copy: no "+ pad" re-copy of the chunk
    buf = np.frombuffer(raw, dtype=np.uint8)
    bad = lens == 0
    bad |= is_upd & (lens == 1)
    if table.is_common_handle:
        bad[:] = True

    handle = np.zeros(n, dtype=np.int64)
    has_handle = np.zeros(n, dtype=bool)
    cur = starts.copy()
    # insert prefix: one varint handle datum
    ins = np.flatnonzero(is_ins & ~bad)
    if ins.size:
        f = buf[cur[ins]]
        u, e, ok = _uvarint(buf, cur[ins] + 1)
        ok &= (f == 8) & (e <= ends[ins])
        bad[ins[~ok]] = True
        handle[ins] = _zigzag(u)
        has_handle[ins] = ok
        cur[ins] = e
    # a lone NilFlag means "no columns"
    empty = (ends - cur == 1) & (buf[np.minimum(cur, len(raw) - 1)] == 0) & ~is_upd
    active = np.flatnonzero(~bad & ~empty & (cur < ends))

    rec_row, rec_cid, rec_vs, rec_flag, rec_k = [], [], [], [], []
    max_pairs = 2 * (ncols + 2)
    k = 0
    while active.size:
        if k >= max_pairs:
            bad[active] = True
            break
        p = cur[active]
        f = buf[p]
        cid, vs, ok = _small_varint(buf, p + 1)
        ok &= (f == 8) & (vs < ends[active])
        ve, ok2 = _datum_end(buf, np.where(ok, vs, p))
        ok &= ok2 & (ve <= ends[active])
        bad[active[~ok]] = True
        good = active[ok]
        rec_row.append(good)
        rec_cid.append(cid[ok])
        rec_vs.append(vs[ok])
        rec_flag.append(buf[vs[ok]])
        rec_k.append(np.full(good.size, k, dtype=np.int64))
        cur[good] = ve[ok]
        active = good[ve[ok] < ends[good]]
        k += 1

    if rec_row:
        R_row = np.concatenate(rec_row)
        R_cid = np.concatenate(rec_cid)
        R_vs = np.concatenate(rec_vs)
        R_flag = np.concatenate(rec_flag)
        R_k = np.concatenate(rec_k)
    else:
        R_row = R_cid = R_vs = R_k = np.zeros(0, dtype=np.int64)
        R_flag = np.zeros(0, dtype=np.uint8)
    npairs = np.bincount(R_row, minlength=n)
    bad |= is_upd & (npairs % 2 == 1)
    half = npairs // 2
    in_before = is_upd[R_row] & (R_k < half[R_row])

    ids = np.array([c.id for c in cols], dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    pos = np.searchsorted(sorted_ids, R_cid)
    posc = np.minimum(pos, max(ncols - 1, 0))
    known = (pos < ncols) & (sorted_ids[posc] == R_cid) if ncols else np.zeros(len(R_cid), bool)
    colidx = np.where(known, order[posc], ncols)

    # the _tidb_rowid handle (column id -1) of updates/deletes (an insert's handle is its prefix)
    rid = (R_cid == mt.EXTRA_HANDLE_ID) & ~known & ~is_ins[R_row]
    for img_mask in (rid & ~in_before, rid & in_before):
        if img_mask.any():
            rows = R_row[img_mask]
            okf = R_flag[img_mask] == 8
            cnt = np.bincount(rows, minlength=n)
            bad[rows[~okf]] = True
            bad[cnt > 1] = True
            if not (img_mask & in_before).any():
                v, ok = _ints(buf, R_vs[img_mask], True)
                handle[rows] = v
                has_handle[rows] = okf & ok
                bad[rows[~ok]] = True

    # group records by (image, column) with a radix sort on a small key
    key = (in_before.astype(np.int64) * (ncols + 1) + colidx).astype(np.int16 if ncols < 16000 else np.int64)
    perm = np.argsort(key, kind="stable")
    counts = np.bincount(key.astype(np.int64), minlength=2 * (ncols + 1))
    bounds = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])

    types = [o.typ for o in main_out]
    invalid_times = 0
    invalid_fill_cols: list[np.ndarray] = []  # per column: rows filled with a zero-date default
    present = np.zeros((2, ncols, n), dtype=bool) if n * ncols < 50_000_000 else None
    for image in (0, 1):
        outs = before_out if image else main_out
        for ci, c in enumerate(cols):
            g = perm[bounds[image * (ncols + 1) + ci]:bounds[image * (ncols + 1) + ci + 1]]
            rows = R_row[g]
            flags = R_flag[g]
            vs = R_vs[g]
            cnt = np.bincount(rows, minlength=n)
            bad |= cnt > 1
            if present is not None:
                present[image, ci, rows] = True
            out = outs[ci]
            expected, decoder = _column_decoder(c, types[ci])
            okf = (flags == expected)
            bad[rows[~okf & (flags != 0)]] = True
            sel = np.flatnonzero(okf)
            if sel.size:
                arr, badv, inv = decoder(buf, vs[sel])
                invalid_times += inv
                bad[rows[sel][badv]] = True
                b0 = out.add(arr)
                out.idx[rows[sel]] = b0 + np.arange(sel.size)
            # missing columns: fill; an update lacking a column lacks it in both images (a row written
            # before the column was added), and both get the fill, as decode_row gives them
            if image == 1:
                miss = is_upd.copy()
                miss[rows] = False
                if miss.any():
                    _fill(out, miss, c, types[ci], shape.missing(ci), invalid_fill_cols)
            if image == 0:
                miss = np.ones(n, dtype=bool)
                miss[rows] = False
                if ci == shape.pk_index:
                    fill_rows = np.flatnonzero(miss & is_ins)
                    hv = handle[fill_rows]
                    lo, hi = int_range(c)
                    if shape.pk_unsigned:
                        harr = pa.array(hv.view(np.uint64), pa.uint64())
                        bad[fill_rows[hv.view(np.uint64) > _U64(hi)]] = True
                    else:
                        harr = pa.array(hv, pa.int64())
                        bad[fill_rows[(hv < lo) | (hv > hi)]] = True  # the scalar path names the error
                    try:
                        harr = harr.cast(types[ci], safe=False)
                    except pa.ArrowInvalid:
                        bad[fill_rows] = True
                        harr = pa.nulls(len(fill_rows), types[ci])
                    b0 = out.add(harr)
                    out.idx[fill_rows] = b0 + np.arange(fill_rows.size)
                    miss &= ~is_ins
                if miss.any():
                    _fill(out, miss, c, types[ci], shape.missing(ci), invalid_fill_cols)
    if present is not None and ncols:
        bad |= (is_upd & (present[0] != present[1])).any(axis=0)

    # hidden-rowid tables: updates and deletes must carry -1; int-PK tables: handle = PK value
    if shape.extra_handle:
        bad |= ~has_handle & ~is_ins & ~bad & ~(is_del & (lens == 1))

    bad_rows = np.flatnonzero(bad)
    invalid_times += sum(int((m & ~bad).sum()) for m in invalid_fill_cols)
    if bad_rows.size:
        scalar = []
        for r in bad_rows.tolist():
            try:
                scalar.append(decode_row(table, kinds[r], payloads[r]))
            except CodecError as e:
                e.row = base_row + r
                e.message = f"row {base_row + r}: {e.message}"
                raise
        # per row: the image of the main columns (after, before for deletes), the before-image of updates
        mains: list[dict[str, Any]] = []
        befores: list[dict[str, Any] | None] = []
        for ch in scalar:
            main = ch.after if ch.kind != DELETE else ch.before
            assert main is not None, "decode_row gives inserts and updates an after-image, deletes a before-image"
            mains.append(main)
            befores.append(ch.before if ch.kind == UPDATE else None)
        for ci, c in enumerate(cols):
            main_vals = [main[c.name] for main in mains]
            b0 = main_out[ci].add(_pyarray(c, types[ci], main_vals))
            main_out[ci].idx[bad_rows] = b0 + np.arange(bad_rows.size)
            bvals = [before[c.name] if before is not None else None for before in befores]
            b1 = before_out[ci].add(_pyarray(c, types[ci], bvals))
            before_out[ci].idx[bad_rows] = b1 + np.arange(bad_rows.size)
            invalid_times += sum(isinstance(v, InvalidTime) for v in main_vals + bvals)
    if bad_rows.size and not table.is_common_handle and shape.pk_index < 0:
        for r, ch in zip(bad_rows.tolist(), scalar):
            has_handle[r] = isinstance(ch.handle, int)
            if has_handle[r]:
                handle[r] = ch.handle
    kind_out[:] = kind
    handle_out[:] = handle
    has_handle_out[:] = has_handle
    return invalid_times
