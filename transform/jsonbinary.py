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
import struct
from typing import Any

from transform.errors import CodecError, JSONBinaryError, TruncatedError
from transform.varint import INT64_MAX, INT64_MIN, UINT64_MAX, decode_uvarint, encode_uvarint

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
        size = _U32.unpack_from(buf, p + 4)[0]
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
            ns = _I64.unpack_from(buf, off)[0]
            fsp = _U32.unpack_from(buf, off + 8)[0]
            return _duration_text(ns, min(fsp, 6))
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
    year = ct >> 50
    month = (ct >> 46) & 0xF
    day = (ct >> 41) & 0x1F
    if date_only:
        return f"{year:04d}-{month:02d}-{day:02d}"
    hour = (ct >> 36) & 0x1F
    minute = (ct >> 30) & 0x3F
    second = (ct >> 24) & 0x3F
    micro = (ct >> 4) & 0xFFFFF
    text = f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"
    return text + (f".{micro:06d}" if micro else "")


def _duration_text(ns: int, fsp: int) -> str:
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    secs, frac = divmod(ns, 1_000_000_000)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    text = f"{sign}{h:02d}:{m:02d}:{s:02d}"
    if fsp:
        text += "." + f"{frac:09d}"[:fsp]
    return text


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
    """Decode one JSON binary value to JSON text with TiDB's ``", "`` / ``": "`` separators.

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
    """JSON text of a decoded value (UTF-8 kept as is, TiDB-style separators)."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


_LITERAL_TEXT = {LIT_NULL: "null", LIT_TRUE: "true", LIT_FALSE: "false"}
_quote = json.encoder.encode_basestring  # type: ignore[attr-defined]
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
            return _quote(buf[p:p + ln].decode("utf-8"))
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
                            t = _quote(buf[vpos + 1:vpos + 1 + ln].decode("utf-8"))
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
                out.append(_quote(buf[off + koff:off + koff + klen].decode("utf-8")) + ": " + items[i])
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
        return _float_repr(f)
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
