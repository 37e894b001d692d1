"""TiDB's JSON binary format (``types.BinaryJSON``) to and from JSON text.

Layout (all integers little-endian): a type code byte, then the value. Objects and arrays are
``count u32, size u32`` (size includes this 8-byte header), then entries (objects: key entries
``offset u32, length u16`` then value entries; arrays: value entries), each value entry being
``type u8, offset u32`` relative to the container's start, with literals inlined in the offset
field. Keys are sorted by bytes. Decoding checks every offset against the enclosing buffer and
bounds the work done, so hostile input raises :class:`JSONBinaryError` rather than hanging.
"""
from __future__ import annotations

import base64
import json
import math
import re
import struct
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transform.codec.errors import CodecError, JSONBinaryError, TruncatedError
from transform.codec.varint import INT64_MAX, INT64_MIN, UINT64_MAX, decode_uvarint, encode_uvarint

OBJECT = 0x01
ARRAY = 0x03
LITERAL = 0x04
INT64 = 0x09
UINT64 = 0x0A
FLOAT64 = 0x0B
STRING = 0x0C
OPAQUE = 0x0D
DATE = 0x0E
DATETIME = 0x0F
TIMESTAMP = 0x10
DURATION = 0x11

LIT_NULL = 0x00
LIT_TRUE = 0x01
LIT_FALSE = 0x02

MAX_DEPTH = 400
HEADER = 8
KEY_ENTRY = 6
VALUE_ENTRY = 5
MAX_KEY_LEN = 0xFFFF

_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_I64 = struct.Struct("<q")
_Q64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")
_ENTRY = struct.Struct("<BI")
_KEYENT = struct.Struct("<IH")
_HDR = struct.Struct("<II")
_KNOWN = frozenset((OBJECT, ARRAY, LITERAL, INT64, UINT64, FLOAT64, STRING, OPAQUE, DATE,
                    DATETIME, TIMESTAMP, DURATION))


# ---------------------------------------------------------------------------------------------
# length peeking (PeekBytesAsJSON)

def peek_end(buf: bytes, off: int) -> int:
    """Given the offset of a JSON type code byte, return the offset just past the value."""
    n = len(buf)
    if off >= n:
        raise TruncatedError("truncated JSON: missing type code", off)
    tc = buf[off]
    p = off + 1
    if tc == OBJECT or tc == ARRAY:
        if p + HEADER > n:
            raise TruncatedError("truncated JSON container header", p)
        size: int = _U32.unpack_from(buf, p + 4)[0]
        if size < HEADER:
            raise JSONBinaryError(f"JSON container size {size} below its header", p + 4)
        end = p + size
    elif tc == STRING:
        ln, q = decode_uvarint(buf, p)
        end = q + ln
    elif tc in (INT64, UINT64, FLOAT64, DATE, DATETIME, TIMESTAMP):
        end = p + 8
    elif tc == LITERAL:
        end = p + 1
    elif tc == OPAQUE:
        ln, q = decode_uvarint(buf, p + 1) if p + 1 <= n else (0, p + 1)
        end = q + ln
    elif tc == DURATION:
        end = p + 12
    else:
        raise JSONBinaryError(f"unknown JSON type code 0x{tc:02X}", off)
    if end > n:
        raise TruncatedError("truncated JSON value", off)
    return end


# ---------------------------------------------------------------------------------------------
# binary -> Python object -> text

class _Reader:
    __slots__ = ("buf", "budget")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.budget = len(buf) + 16

    def value(self, tc: int, off: int, end: int, depth: int) -> Any:
        """Decode the value of type ``tc`` starting at ``off``; it must lie within ``end``."""
        self.budget -= 1
        if self.budget < 0:
            raise JSONBinaryError("JSON binary values overlap (work budget exceeded)", off)
        buf = self.buf
        if tc == OBJECT or tc == ARRAY:
            return self.container(tc, off, end, depth)
        if tc == STRING:
            ln, p = decode_uvarint(buf, off)
            if p + ln > end:
                raise JSONBinaryError("JSON string runs outside its buffer", off)
            try:
                return bytes(buf[p:p + ln]).decode("utf-8")
            except UnicodeDecodeError as e:
                raise JSONBinaryError("JSON string is not valid UTF-8", p + e.start) from None
        if tc == INT64 or tc == UINT64 or tc == FLOAT64:
            if off + 8 > end:
                raise JSONBinaryError("JSON number runs outside its buffer", off)
            if tc == INT64:
                return _I64.unpack_from(buf, off)[0]
            if tc == UINT64:
                return _Q64.unpack_from(buf, off)[0]
            f = _F64.unpack_from(buf, off)[0]
            if not math.isfinite(f):
                raise JSONBinaryError("JSON float is not finite", off)
            return f
        if tc == LITERAL:
            if off + 1 > end:
                raise JSONBinaryError("JSON literal runs outside its buffer", off)
            return _literal(buf[off], off)
        if tc == OPAQUE:
            if off + 1 > end:
                raise JSONBinaryError("JSON opaque runs outside its buffer", off)
            typ = buf[off]
            ln, p = decode_uvarint(buf, off + 1)
            if p + ln > end:
                raise JSONBinaryError("JSON opaque runs outside its buffer", off)
            return f"base64:type{typ}:" + base64.b64encode(bytes(buf[p:p + ln])).decode()
        if tc in (DATE, DATETIME, TIMESTAMP):
            if off + 8 > end:
                raise JSONBinaryError("JSON time runs outside its buffer", off)
            return _core_time_text(_Q64.unpack_from(buf, off)[0], tc == DATE)
        if tc == DURATION:
            if off + 12 > end:
                raise JSONBinaryError("JSON duration runs outside its buffer", off)
            return _duration_text(_I64.unpack_from(buf, off)[0])
        raise JSONBinaryError(f"unknown JSON type code 0x{tc:02X}", off)

    def container(self, tc: int, off: int, end: int, depth: int) -> Any:
        buf = self.buf
        count, size, cend, is_obj = _container_header(buf, tc, off, end, depth)
        self.budget -= count
        if self.budget < 0:
            raise JSONBinaryError("JSON binary values overlap (work budget exceeded)", off)
        ventries = off + HEADER + (count * KEY_ENTRY if is_obj else 0)
        values = []
        for i in range(count):
            etc, eoff = _ENTRY.unpack_from(buf, ventries + i * VALUE_ENTRY)
            if etc == LITERAL:
                values.append(_literal(eoff & 0xFF, ventries + i * VALUE_ENTRY + 1))
                continue
            if etc not in _KNOWN:
                raise JSONBinaryError(f"unknown JSON type code 0x{etc:02X}", ventries + i * VALUE_ENTRY)
            if eoff >= size:
                raise JSONBinaryError("JSON value offset outside its container", ventries + i * VALUE_ENTRY + 1)
            values.append(self.value(etc, off + eoff, cend, depth + 1))
        if not is_obj:
            return values
        obj: dict[str, Any] = {}
        for i in range(count):
            koff, klen = _KEYENT.unpack_from(buf, off + HEADER + i * KEY_ENTRY)
            if koff + klen > size:
                raise JSONBinaryError("JSON key outside its container", off + HEADER + i * KEY_ENTRY)
            try:
                key = bytes(buf[off + koff:off + koff + klen]).decode("utf-8")
            except UnicodeDecodeError as e:
                raise JSONBinaryError("JSON key is not valid UTF-8", off + koff + e.start) from None
            obj[key] = values[i]
        return obj


def _container_header(buf: bytes, tc: int, off: int, end: int, depth: int) -> tuple[int, int, int, bool]:
    """(element count, size, end offset, is object) of the container at ``off``, checked against
    ``end``, its entry tables and the nesting limit."""
    if depth > MAX_DEPTH:
        raise JSONBinaryError(f"JSON nested deeper than {MAX_DEPTH}", off)
    if off + HEADER > end:
        raise JSONBinaryError("JSON container header runs outside its buffer", off)
    count, size = _HDR.unpack_from(buf, off)
    cend = off + size
    if size < HEADER or cend > end:
        raise JSONBinaryError(f"JSON container size {size} outside its buffer", off + 4)
    is_obj = tc == OBJECT
    if HEADER + count * (VALUE_ENTRY + KEY_ENTRY if is_obj else VALUE_ENTRY) > size:
        raise JSONBinaryError(f"JSON container count {count} exceeds its size", off)
    return count, size, cend, is_obj


def _literal(v: int, off: int) -> Any:
    if v == LIT_NULL:
        return None
    if v == LIT_TRUE:
        return True
    if v == LIT_FALSE:
        return False
    raise JSONBinaryError(f"unknown JSON literal 0x{v:02X}", off)


def _core_time_text(ct: int, date_only: bool) -> str:
    """A JSON date ``YYYY-MM-DD``, or a JSON datetime/timestamp ``YYYY-MM-DD HH:MM:SS.ffffff``
    (TiDB prints times inside JSON with all 6 fractional digits, whatever their fsp)."""
    year = ct >> 50
    month = (ct >> 46) & 0xF
    day = (ct >> 41) & 0x1F
    if date_only:
        return f"{year:04d}-{month:02d}-{day:02d}"
    hour = (ct >> 36) & 0x1F
    minute = (ct >> 30) & 0x3F
    second = (ct >> 24) & 0x3F
    micro = (ct >> 4) & 0xFFFFF
    return f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}.{micro:06d}"


def _duration_text(ns: int) -> str:
    """A JSON duration ``[-]HH:MM:SS.ffffff``: always 6 fractional digits (the stored fsp is not
    used), microseconds truncated, hours not capped."""
    sign = "-" if ns < 0 else ""
    secs, frac = divmod(abs(ns), 1_000_000_000)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    return f"{sign}{h:02d}:{m:02d}:{s:02d}.{frac // 1000:06d}"


def decode_value(typecode: int, buf: bytes, off: int = 0, end: int | None = None) -> Any:
    """Decode one JSON binary value (type code given separately) into Python objects.

    Objects become dicts (key order as stored), arrays lists, int64/uint64 ints, float64 floats,
    literals None/True/False, opaque/date/time/duration values their TiDB text forms.
    """
    if end is None:
        end = len(buf)
    try:
        return _Reader(buf).value(typecode, off, end, 0)
    except struct.error:
        raise JSONBinaryError("JSON binary runs outside its buffer", off) from None
    except RecursionError:
        raise JSONBinaryError("JSON nested too deeply", off) from None


def to_text(typecode: int, buf: bytes, off: int = 0, end: int | None = None) -> str:
    """Decode one JSON binary value to the text TiDB prints for it: ``", "`` / ``": "`` separators,
    keys in stored order, doubles by :func:`float_text`, strings by :func:`quote`, datetimes and
    durations with 6 fractional digits, opaque values as ``"base64:typeN:…"``.

    Same text as ``dumps(decode_value(...))``, rendered directly from the bytes (the Drainer's
    hot path). Raises :class:`JSONBinaryError` on malformed input.
    """
    if end is None:
        end = len(buf)
    try:
        return _text(buf, typecode, off, end, 0, [end - off + 16])
    except struct.error:
        raise JSONBinaryError("JSON binary runs outside its buffer", off) from None
    except RecursionError:
        raise JSONBinaryError("JSON nested too deeply", off) from None


def dumps(obj: Any) -> str:
    """TiDB's JSON text of a decoded value (see :func:`to_text`): ``", "`` / ``": "`` separators,
    dict keys in the dict's order, floats by :func:`float_text`, strings by :func:`quote`.
    Raises :class:`CodecError` for a non-finite float or a value JSON cannot hold."""
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if isinstance(obj, str):
        return quote(obj)
    if isinstance(obj, int):
        return str(int(obj))
    if isinstance(obj, float):
        return float_text(obj)
    if isinstance(obj, (list, tuple)):
        return "[" + ", ".join(dumps(v) for v in obj) + "]"
    if isinstance(obj, dict):
        return "{" + ", ".join(quote(str(k)) + ": " + dumps(v) for k, v in obj.items()) + "}"
    raise CodecError(f"cannot render {type(obj).__name__} as JSON")


def float_text(f: float) -> str:
    """A JSON double as TiDB prints it (Go's ``encoding/json`` rule): the shortest digits that read
    back as ``f``; positional when ``1e-6 <= |f| < 1e21`` or ``f`` is zero, with no ``.0`` for a
    whole number (``10000000000``, ``-2``, ``-0``); otherwise ``d[.ddd]e±X`` with no leading zero
    in the exponent (``1e-7``, ``1.5e+21``). Raises :class:`CodecError` for NaN and infinities."""
    r = _float_repr(f)  # Python's repr has the same shortest digits, in another layout
    if "e" not in r:
        if r[-2:] == ".0":
            return r[:-2]
        if r in ("inf", "-inf", "nan"):
            raise CodecError(f"JSON cannot hold the float {r}")
        return r
    a = abs(f)
    if a < 1e-6 or a >= 1e21:
        mant, _, exp = r.partition("e")
        return mant + "e" + exp[0] + exp[1:].lstrip("0")
    return format(Decimal(r).normalize(), "f")  # 1e-06 ... 1e+20 as Python writes them: positional


def quote(s: str) -> str:
    """A JSON string as TiDB quotes it: ``\\"``, ``\\\\``, ``\\n``, ``\\r``, ``\\t``; every other
    control character as ``\\u00xx`` (``\\b`` and ``\\f`` too); U+2028 and U+2029 as ``\\u2028`` /
    ``\\u2029``; everything else, ``<``, ``>``, ``&`` and DEL included, as is."""
    if _RARE_ESCAPES.search(s) is None:
        return _encode_basestring(s)
    return '"' + s.translate(_ESCAPES) + '"'


_LITERAL_TEXT = {LIT_NULL: "null", LIT_TRUE: "true", LIT_FALSE: "false"}
_encode_basestring = json.encoder.encode_basestring  # agrees with TiDB but for the characters below
_RARE_ESCAPES = re.compile("[\b\f\u2028\u2029]")
_ESCAPES = {c: f"\\u{c:04x}" for c in range(0x20)}
_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord('"'): '\\"', ord("\\"): "\\\\",
                 0x2028: "\\u2028", 0x2029: "\\u2029"})
_float_repr = float.__repr__
_KEY_STRUCTS: dict[int, struct.Struct] = {}
_VALUE_STRUCTS: dict[int, struct.Struct] = {}


def _entries(cache: dict[int, struct.Struct], fmt: str, count: int) -> struct.Struct:
    st = cache.get(count)
    if st is None:
        st = struct.Struct("<" + fmt * count)
        if count <= 256:
            cache[count] = st
    return st


def _text(buf: bytes, tc: int, off: int, end: int, depth: int, budget: list[int]) -> str:
    """The JSON text of the value of type ``tc`` at ``off`` (which must lie before ``end``)."""
    if tc == STRING:
        ln = buf[off] if off < end else 0x80
        if ln < 0x80:
            p = off + 1
        else:
            ln, p = decode_uvarint(buf, off)
        if p + ln > end:
            raise JSONBinaryError("JSON string runs outside its buffer", off)
        try:
            return quote(buf[p:p + ln].decode("utf-8"))
        except UnicodeDecodeError as e:
            raise JSONBinaryError("JSON string is not valid UTF-8", p + e.start) from None
    if tc == OBJECT or tc == ARRAY:
        count, size, cend, is_obj = _container_header(buf, tc, off, end, depth)
        budget[0] -= count + 1
        if budget[0] < 0:
            raise JSONBinaryError("JSON binary values overlap (work budget exceeded)", off)
        ventries = off + HEADER + (count * KEY_ENTRY if is_obj else 0)
        vals = _entries(_VALUE_STRUCTS, "BI", count).unpack_from(buf, ventries)
        items = []
        vit = iter(vals)
        i = 0
        for etc, eoff in zip(vit, vit):
            if etc == LITERAL:
                t = _LITERAL_TEXT.get(eoff & 0xFF)
                if t is None:
                    raise JSONBinaryError(f"unknown JSON literal 0x{eoff & 0xFF:02X}", ventries + i * VALUE_ENTRY + 1)
            elif eoff >= size:
                raise JSONBinaryError("JSON value offset outside its container", ventries + i * VALUE_ENTRY + 1)
            else:
                vpos = off + eoff
                if etc == STRING:  # inlined: the most common scalar
                    ln = buf[vpos]
                    if ln < 0x80 and vpos + 1 + ln <= cend:
                        try:
                            t = quote(buf[vpos + 1:vpos + 1 + ln].decode("utf-8"))
                        except UnicodeDecodeError as e:
                            raise JSONBinaryError("JSON string is not valid UTF-8", vpos + 1 + e.start) from None
                    else:
                        t = _text(buf, etc, vpos, cend, depth + 1, budget)
                elif etc == INT64 and vpos + 8 <= cend:
                    t = str(_I64.unpack_from(buf, vpos)[0])
                else:
                    t = _text(buf, etc, vpos, cend, depth + 1, budget)
            items.append(t)
            i += 1
        if not is_obj:
            return "[" + ", ".join(items) + "]"
        keys = _entries(_KEY_STRUCTS, "IH", count).unpack_from(buf, off + HEADER)
        kit = iter(keys)
        out = []
        i = 0
        for koff, klen in zip(kit, kit):
            if koff + klen > size:
                raise JSONBinaryError("JSON key outside its container", off + HEADER + i * KEY_ENTRY)
            try:
                out.append(quote(buf[off + koff:off + koff + klen].decode("utf-8")) + ": " + items[i])
            except UnicodeDecodeError as e:
                raise JSONBinaryError("JSON key is not valid UTF-8", off + koff + e.start) from None
            i += 1
        return "{" + ", ".join(out) + "}"
    if tc == INT64 or tc == UINT64 or tc == FLOAT64:
        if off + 8 > end:
            raise JSONBinaryError("JSON number runs outside its buffer", off)
        if tc == INT64:
            return str(_I64.unpack_from(buf, off)[0])
        if tc == UINT64:
            return str(_Q64.unpack_from(buf, off)[0])
        f = _F64.unpack_from(buf, off)[0]
        if not math.isfinite(f):
            raise JSONBinaryError("JSON float is not finite", off)
        return float_text(f)
    if tc == LITERAL:
        if off + 1 > end:
            raise JSONBinaryError("JSON literal runs outside its buffer", off)
        t = _LITERAL_TEXT.get(buf[off])
        if t is None:
            raise JSONBinaryError(f"unknown JSON literal 0x{buf[off]:02X}", off)
        return t
    return dumps(_Reader(buf).value(tc, off, end, depth))


# ---------------------------------------------------------------------------------------------
# text / Python object -> binary

def from_text(text: str | bytes) -> tuple[int, bytes]:
    """Parse JSON text and return (type code, value bytes) exactly as TiDB encodes it."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise CodecError(f"invalid JSON text: {e}") from None
    return from_object(obj)


def from_object(obj: Any) -> tuple[int, bytes]:
    """Encode a Python JSON value (dict/list/str/int/float/bool/None) as (type code, value bytes).

    Ints that fit int64 are Int64, else those that fit uint64 are Uint64, else Float64 (TiDB's
    parse rule). Object keys are sorted by their UTF-8 bytes; a key longer than 65535 bytes and
    non-finite floats are rejected with :class:`CodecError`.
    """
    try:
        return _encode(obj, 0)
    except RecursionError:
        raise CodecError("JSON nested too deeply") from None


def _encode(obj: Any, depth: int) -> tuple[int, bytes]:
    if obj is None:
        return LITERAL, b"\x00"
    if obj is True:
        return LITERAL, b"\x01"
    if obj is False:
        return LITERAL, b"\x02"
    if isinstance(obj, str):
        raw = obj.encode("utf-8")
        return STRING, encode_uvarint(len(raw)) + raw
    if isinstance(obj, int):
        if INT64_MIN <= obj <= INT64_MAX:
            return INT64, _I64.pack(obj)
        if 0 <= obj <= UINT64_MAX:
            return UINT64, _Q64.pack(obj)
        obj = float(obj)
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise CodecError(f"JSON cannot hold the float {obj}")
        return FLOAT64, _F64.pack(obj)
    if depth > MAX_DEPTH:
        raise CodecError(f"JSON nested deeper than {MAX_DEPTH}")
    if isinstance(obj, (list, tuple)):
        return ARRAY, _container([], [_encode(v, depth + 1) for v in obj])
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if not isinstance(k, str):
                raise CodecError(f"JSON object key must be a string, got {type(k).__name__}")
            kb = k.encode("utf-8")
            if len(kb) > MAX_KEY_LEN:
                raise CodecError("JSON object key longer than 65535 bytes")
            items.append((kb, v))
        items.sort(key=lambda kv: kv[0])
        return OBJECT, _container([k for k, _ in items], [_encode(v, depth + 1) for _, v in items])
    raise CodecError(f"cannot encode {type(obj).__name__} as JSON")


def _container(keys: list[bytes], values: list[tuple[int, bytes]]) -> bytes:
    count = len(values)
    head = HEADER + len(keys) * KEY_ENTRY + count * VALUE_ENTRY
    key_entries = bytearray()
    pos = head
    for k in keys:
        key_entries += _KEYENT.pack(pos, len(k))
        pos += len(k)
    value_entries = bytearray()
    data = bytearray()
    for tc, raw in values:
        if tc == LITERAL:
            value_entries += _ENTRY.pack(tc, raw[0])
        else:
            value_entries += _ENTRY.pack(tc, pos + len(data))
            data += raw
    size = pos + len(data)
    if size > 0xFFFFFFFF:
        raise CodecError("JSON document larger than 4 GiB")
    return b"".join((_HDR.pack(count, size), key_entries, value_entries, *keys, data))


# ---------------------------------------------------------------------------------------------
# many values at once (the Drainer's hot path)
#
# The values are walked one nesting level at a time across all documents with numpy: level 0
# holds the documents' root values, level k+1 the entries of level k's containers. The text
# length of every value is then computed bottom-up, its position in the output top-down, and the
# text written with a few vectorised scatters (punctuation, key and string bytes copied from the
# buffer, integer digits). Anything this path does not render itself (floats, opaque, date/time,
# strings that need escaping, invalid UTF-8, any malformed or suspicious input) falls back to
# :func:`to_text` for that document, so the text and the errors are exactly the scalar path's.

_K_BAD, _K_STR, _K_INT, _K_UINT, _K_LIT, _K_OBJ, _K_ARR, _K_PY = range(8)
_KIND_OF_TC = np.full(256, _K_BAD, dtype=np.int8)
_KIND_OF_TC[STRING] = _K_STR
_KIND_OF_TC[INT64] = _K_INT
_KIND_OF_TC[UINT64] = _K_UINT
_KIND_OF_TC[LITERAL] = _K_LIT
_KIND_OF_TC[OBJECT] = _K_OBJ
_KIND_OF_TC[ARRAY] = _K_ARR
for _tc in (FLOAT64, OPAQUE, DATE, DATETIME, TIMESTAMP, DURATION):
    _KIND_OF_TC[_tc] = _K_PY
_LIT_LEN = np.array([4, 4, 5], dtype=np.int64)
_LIT_BYTES = [np.frombuffer(t.encode(), dtype=np.uint8) for t in ("null", "true", "false")]
_POW10_U64 = np.array([10 ** k for k in range(20)], dtype=np.uint64)


class _Level:
    """The values at one nesting level (parallel arrays, one element per value)."""
    __slots__ = ("doc", "kind", "off", "end", "parent", "sep", "klen", "kpos", "length", "src",
                 "lit", "py", "cont", "cnt", "start")

    def __init__(self, doc: np.ndarray, kind: np.ndarray, off: np.ndarray, end: np.ndarray) -> None:
        self.doc, self.kind, self.off, self.end = doc, kind, off, end
        m = doc.shape[0]
        self.parent: np.ndarray | None = None        # index of the container in the previous level
        self.sep = np.zeros(m, dtype=np.int64)       # 2 when ", " precedes this entry, else 0
        self.klen = np.full(m, -4, dtype=np.int64)   # object entries: key length; -4 otherwise
        self.kpos = np.zeros(m, dtype=np.int64)      # object entries: start of the key bytes
        self.length = np.zeros(m, dtype=np.int64)    # length of the value's text
        self.src = np.zeros(m, dtype=np.int64)       # strings: start of the bytes; ints: offset; py: pool offset
        self.lit = np.zeros(m, dtype=np.int64)       # literals: 0 null, 1 true, 2 false
        self.py = np.zeros(m, dtype=np.uint8)        # type codes (for the scalar renderer)
        self.cont = np.zeros(0, dtype=np.int64)      # containers whose entries form the next level
        self.cnt = np.zeros(0, dtype=np.int64)       # ... and their entry counts
        self.start = np.zeros(m, dtype=np.int64)     # output position of the value's text


def _unaligned(buf: np.ndarray, dtype: str) -> np.ndarray:
    """A view of ``buf`` with one ``dtype`` integer starting at every byte (element ``i`` is the
    integer in bytes ``i:i+size``), for reads at arbitrary offsets without a 2-D gather."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((max(buf.shape[0] - size + 1, 0),), dtype, buffer=buf, strides=(1,))


def _uvarints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Go uvarints at ``pos`` (reads are clipped to the buffer): (values, end positions, ok)."""
    last = buf.shape[0] - 1
    b = buf[np.minimum(pos, last)].astype(np.uint64)
    val = b & np.uint64(0x7F)
    endp = pos + 1
    ok = np.ones(pos.shape[0], dtype=bool)
    idx = np.flatnonzero(b >= 0x80)
    for j in range(1, 10):
        if idx.size == 0:
            break
        bj = buf[np.minimum(pos[idx] + j, last)].astype(np.uint64)
        if j == 9:
            ok[idx[bj > 1]] = False
        val[idx] |= (bj & np.uint64(0x7F)) << np.uint64(7 * j)
        endp[idx] += 1
        idx = idx[bj >= 0x80]
    ok[idx] = False
    return val, endp, ok


def to_text_many(raw: bytes, offs: Sequence[int] | np.ndarray,
                 ends: Sequence[int] | np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """JSON text of many values at once: element ``i`` is ``to_text(raw[offs[i]], raw,
    offs[i] + 1, ends[i])`` (``offs[i]`` is the type code byte, the value lies before ``ends[i]``).

    Returns ``(large_string array, bad mask)``; a value ``to_text`` rejects is NULL and marked bad.
    """
    offs = np.asarray(offs, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    n = offs.shape[0]
    slow = np.zeros(n, dtype=bool)
    if n and (offs.min() < 0 or ends.max() > len(raw) or (offs >= ends).any()):
        slow[(offs < 0) | (ends > len(raw)) | (offs >= ends)] = True
    # (a short buffer gets room for the masked, unused reads at offset 0)
    buf = np.frombuffer(raw if len(raw) >= 16 else bytes(raw) + bytes(16), dtype=np.uint8)
    u16, u32, u64 = _unaligned(buf, "<u2"), _unaligned(buf, "<u4"), _unaligned(buf, "<u8")
    tc0 = buf[np.where(slow, 0, offs)] if n else np.zeros(0, dtype=np.uint8)
    budget = ends - offs + 15
    used = np.zeros(n, dtype=np.int64)
    pool: list[bytes] = []
    pool_len = 0
    lv = _Level(np.arange(n, dtype=np.int64), _KIND_OF_TC[tc0], offs + 1, ends)
    lv.kind[slow] = _K_BAD
    lv.py = tc0
    levels: list[_Level] = []
    depth = 0
    while True:
        levels.append(lv)
        kind, off, end = lv.kind, lv.off, lv.end
        ok = kind != _K_BAD
        # strings
        s = np.flatnonzero(kind == _K_STR)
        if s.size:
            ln, p, k = _uvarints(buf, off[s])
            k &= ln < np.uint64(1 << 40)
            ln = np.where(k, ln, 0).astype(np.int64)
            k &= p + ln <= end[s]
            ok[s] = k
            lv.length[s] = np.where(k, ln + 2, 0)
            lv.src[s] = p
        # integers
        for kd in (_K_INT, _K_UINT):
            s = np.flatnonzero(kind == kd)
            if s.size:
                k = off[s] + 8 <= end[s]
                ok[s] = k
                u = u64[np.where(k, off[s], 0)]
                neg = (u >> np.uint64(63)).astype(bool) if kd == _K_INT else np.zeros(s.size, bool)
                mag = np.where(neg, ~u + np.uint64(1), u)
                ndig = 1 + (mag[:, None] >= _POW10_U64[1:]).sum(axis=1)
                lv.length[s] = np.where(k, ndig + neg, 0)
                lv.src[s] = np.where(k, off[s], 0)
        # literals at the root (entries' literals are resolved when the entries are read)
        if depth == 0:
            s = np.flatnonzero(kind == _K_LIT)
            if s.size:
                k = off[s] + 1 <= end[s]
                v = buf[np.where(k, off[s], 0)].astype(np.int64)
                k &= v <= 2
                ok[s] = k
                lv.lit[s] = np.where(k, v, 0)
                lv.length[s] = np.where(k, _LIT_LEN[np.where(k, v, 0)], 0)
        else:
            s = np.flatnonzero(kind == _K_LIT)
            if s.size:
                lv.length[s] = _LIT_LEN[lv.lit[s]]
        # everything else the scalar renderer does (floats, opaque, times), value by value
        s = np.flatnonzero(kind == _K_PY)
        if s.size:
            for i, o, e in zip(s.tolist(), off[s].tolist(), end[s].tolist()):
                try:
                    t = _text(raw, int(lv.py[i]), o, e, depth, [1 << 62]).encode()
                except Exception:  # noqa: BLE001 - the document's scalar pass raises the real error
                    ok[i] = False
                    continue
                lv.src[i] = pool_len
                lv.length[i] = len(t)
                pool.append(t)
                pool_len += len(t)
        slow[lv.doc[~ok]] = True
        lv.kind = np.where(ok, kind, _K_BAD).astype(np.int8)
        # containers: check the header, then read the entries into the next level
        c = np.flatnonzero(((lv.kind == _K_OBJ) | (lv.kind == _K_ARR)) & ~slow[lv.doc])
        if c.size == 0:
            lv.cont = np.zeros(0, dtype=np.int64)
            lv.cnt = np.zeros(0, dtype=np.int64)
            break
        coff, cend = off[c], end[c]
        k = coff + HEADER <= end[c]
        hdr = np.where(k, coff, 0)
        count = u32[hdr].astype(np.int64)
        size = u32[hdr + 4].astype(np.int64)
        is_obj = lv.kind[c] == _K_OBJ
        k &= (size >= HEADER) & (coff + size <= cend)
        k &= HEADER + count * np.where(is_obj, VALUE_ENTRY + KEY_ENTRY, VALUE_ENTRY) <= size
        k &= depth <= MAX_DEPTH
        slow[lv.doc[c[~k]]] = True
        np.add.at(used, lv.doc[c[k]], count[k] + 1)
        slow |= used > budget
        k &= ~slow[lv.doc[c]]
        c, coff, count, size, is_obj = c[k], coff[k], count[k], size[k], is_obj[k]
        lv.cont, lv.cnt = c, count
        total = int(count.sum())
        first = np.cumsum(count) - count
        parent = np.repeat(np.arange(c.size, dtype=np.int64), count)
        j = np.arange(total, dtype=np.int64) - first[parent]
        p_off = coff[parent]
        p_obj = is_obj[parent]
        p_size = size[parent]
        ventry = p_off + HEADER + np.where(p_obj, count[parent] * KEY_ENTRY, 0) + j * VALUE_ENTRY
        etc = buf[ventry]
        eoff = u32[ventry + 1].astype(np.int64)
        ckind = _KIND_OF_TC[etc]
        is_lit = etc == LITERAL
        lit = np.where(is_lit, eoff & 0xFF, 0)
        cok = np.where(is_lit, lit <= 2, eoff < p_size)
        lit = np.where(cok & is_lit, lit, 0)
        kentry = p_off + HEADER + j * KEY_ENTRY
        koff = np.where(p_obj, u32[np.where(p_obj, kentry, 0)].astype(np.int64), 0)
        klen = np.where(p_obj, u16[np.where(p_obj, kentry + 4, 0)].astype(np.int64), -4)
        cok &= ~p_obj | (koff + klen <= p_size)
        cdoc = lv.doc[c][parent]
        slow[cdoc[~cok]] = True
        nxt = _Level(cdoc, np.where(cok, ckind, _K_BAD).astype(np.int8), p_off + eoff, (coff + size)[parent])
        nxt.parent = parent
        nxt.sep = np.where(j > 0, 2, 0)
        nxt.klen = klen
        nxt.kpos = p_off + koff
        nxt.lit = lit
        nxt.py = etc
        lv = nxt
        depth += 1
    return _layout(raw, buf, levels, slow, pool, n)


def _entry_offsets(lv: _Level, child: _Level) -> np.ndarray:
    """Per entry of ``child`` (the entries of ``lv``'s containers): its text's offset from the
    start of its container's first entry (entry texts include ", " and the key)."""
    total = child.sep + child.klen + 4 + child.length
    csum: np.ndarray = np.cumsum(total) - total
    first = np.cumsum(lv.cnt) - lv.cnt
    return csum - csum[first[child.parent]] if total.size else csum


def _layout(raw: bytes, buf: np.ndarray, levels: list[_Level], slow: np.ndarray, pool: list[bytes],
            n: int) -> tuple[pa.Array, np.ndarray]:
    """Lengths bottom-up, positions top-down, then the text; documents in ``slow`` (and those the
    checks on the written text reject) are rendered by :func:`to_text`."""
    for li in range(len(levels) - 2, -1, -1):
        lv, child = levels[li], levels[li + 1]
        if lv.cont.size:
            total = child.sep + child.klen + 4 + child.length
            cs = np.zeros(total.size + 1, dtype=np.int64)
            np.cumsum(total, out=cs[1:])
            first = np.cumsum(lv.cnt) - lv.cnt
            lv.length[lv.cont] = 2 + cs[first + lv.cnt] - cs[first]
    u64 = _unaligned(buf, "<u8")
    root = levels[0]
    doclen = np.where(slow, 0, root.length)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(doclen, out=offsets[1:])
    root.start = offsets[:-1].copy()
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    copies: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # dest, src, len, doc
    pool_copies: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for li, lv in enumerate(levels):
        if li:
            par = levels[li - 1]
            rel = _entry_offsets(par, lv)
            pstart = par.start[par.cont][lv.parent]
            lv.start = pstart + 1 + rel + lv.sep + lv.klen + 4
        live = ~slow[lv.doc]
        kind, start, length = lv.kind, lv.start, lv.length
        if li:
            e = np.flatnonzero(live)
            es = start[e] - lv.klen[e] - 4 - lv.sep[e]
            s2 = lv.sep[e] > 0
            out[es[s2]] = 0x2C
            out[es[s2] + 1] = 0x20
            o = lv.klen[e] >= 0
            q, kl = (es + lv.sep[e])[o], lv.klen[e][o]
            out[q] = 0x22
            out[q + 1 + kl] = 0x22
            out[q + 2 + kl] = 0x3A
            out[q + 3 + kl] = 0x20
            copies.append((q + 1, lv.kpos[e][o], kl, lv.doc[e][o]))
        s = np.flatnonzero(live & (kind == _K_STR))
        if s.size:
            out[start[s]] = 0x22
            out[start[s] + length[s] - 1] = 0x22
            copies.append((start[s] + 1, lv.src[s], length[s] - 2, lv.doc[s]))
        for kd in (_K_INT, _K_UINT):
            s = np.flatnonzero(live & (kind == kd))
            if s.size:
                _write_ints(out, u64[lv.src[s]], start[s], length[s], kd == _K_INT)
        s = np.flatnonzero(live & (kind == _K_LIT))
        for v, text in enumerate(_LIT_BYTES):
            t = s[lv.lit[s] == v]
            if t.size:
                out[start[t][:, None] + np.arange(text.size)] = text
        s = np.flatnonzero(live & (kind == _K_PY))
        if s.size:
            pool_copies.append((start[s], lv.src[s], length[s]))
        if lv.cont.size:
            c = lv.cont[live[lv.cont]]
            obj = kind[c] == _K_OBJ
            out[start[c]] = np.where(obj, 0x7B, 0x5B)
            out[start[c] + length[c] - 1] = np.where(obj, 0x7D, 0x5D)
    redo = slow.copy()
    if copies:
        dest, src, ln, doc = (np.concatenate(x) for x in zip(*copies))
        si, di = _spans(src, dest, ln)
        vals = buf[si]
        out[di] = vals
        esc = (vals < 0x20) | (vals == 0x22) | (vals == 0x5C)
        lead = np.flatnonzero(vals == 0xE2)  # U+2028 / U+2029 (E2 80 A8 / E2 80 A9) are escaped too
        if lead.size:
            at = si[lead]
            last = buf.shape[0] - 1
            esc[lead] |= (buf[np.minimum(at + 1, last)] == 0x80) & ((buf[np.minimum(at + 2, last)] | 1) == 0xA9)
        if esc.any():  # strings that need escaping: the scalar renderer quotes them
            redo[np.repeat(doc, ln)[esc]] = True
    if pool_copies:
        dest, src, ln = (np.concatenate(x) for x in zip(*pool_copies))
        si, di = _spans(src, dest, ln)
        out[di] = np.frombuffer(b"".join(pool), dtype=np.uint8)[si]
    arr = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out)])
    try:
        arr = arr.cast(pa.large_string())
    except pa.ArrowInvalid:  # invalid UTF-8 in some key or string: find those documents
        for i, v in enumerate(arr.to_pylist()):
            try:
                v.decode("utf-8")
            except UnicodeDecodeError:
                redo[i] = True
        arr = pc.replace_with_mask(arr, pa.array(redo), pa.nulls(int(redo.sum()), pa.large_binary()))
        arr = arr.cast(pa.large_string())
    bad = np.zeros(n, dtype=bool)
    if redo.any():
        idx = np.flatnonzero(redo)
        offs = levels[0].off - 1
        ends = levels[0].end
        texts: list[str | None] = []
        for i in idx.tolist():
            try:
                texts.append(to_text(raw[int(offs[i])], raw, int(offs[i]) + 1, int(ends[i])))
            except CodecError:
                bad[i] = True
                texts.append(None)
        arr = pc.replace_with_mask(arr, pa.array(redo), pa.array(texts, pa.large_string()))
    return arr, bad


def _spans(src: np.ndarray, dest: np.ndarray, ln: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Element positions of the byte spans ``src[i]:src[i]+ln[i]`` and of their destinations."""
    tot = int(ln.sum())
    base = np.cumsum(ln) - ln
    si = np.arange(tot, dtype=np.int64) + np.repeat(src - base, ln)
    return si, si + np.repeat(dest - src, ln)


def _write_ints(out: np.ndarray, u: np.ndarray, start: np.ndarray, length: np.ndarray, signed: bool) -> None:
    """Write the decimal text of the 64-bit integers ``u`` (two's complement when ``signed``)."""
    neg = (u >> np.uint64(63)).astype(bool) if signed else np.zeros(u.size, dtype=bool)
    mag = np.where(neg, ~u + np.uint64(1), u)
    out[start[neg]] = 0x2D
    pos = start + length - 1
    ndig = length - neg
    idx = np.arange(u.size)
    ten = np.uint64(10)
    for k in range(20):
        if k:
            keep = ndig[idx] > k
            idx, mag = idx[keep], mag[keep]
            if idx.size == 0:
                break
        out[pos[idx] - k] = (mag % ten).astype(np.uint8) + 0x30
        mag = mag // ten
