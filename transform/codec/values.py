"""Column values: TiDB's ``tablecodec.Unflatten`` (datum → typed column value) and ``flatten``
(column value → datum), plus origin defaults and zero values.

Column-level Python values:

==============================  ===============================================================
column type                     Python value
==============================  ===============================================================
TINYINT … BIGINT [UNSIGNED]     ``int``
FLOAT / DOUBLE                  ``float`` (FLOAT narrowed to float32 precision)
DECIMAL(M,D)                    ``decimal.Decimal`` with D fraction digits
DATE                            ``datetime.date``
DATETIME                        naive ``datetime.datetime``
TIMESTAMP                       ``datetime.datetime`` aware, in UTC
DATE/DATETIME/TIMESTAMP that    :class:`InvalidTime` (a ``str`` such as ``"0000-00-00 00:00:00"``)
Python cannot hold (zero
dates, month/day 0, year 0)
TIME                            ``str`` ``[-]HH:MM:SS[.fraction]`` (hours may exceed 24)
YEAR / BIT                      ``int``
ENUM / SET                      ``str`` (element name / comma-joined names)
CHAR/VARCHAR/TEXT               ``str``; binary charset → ``bytes``
JSON                            ``str`` JSON text
==============================  ===============================================================

:func:`json_value` renders a column value in JSON-friendly form, one set of rules for both sides of
a comparison (the upstream's snapshot and what a sink holds).
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import math
import re
import struct
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from transform.codec import jsonbinary
from transform.codec import mysqltypes as mt
from transform.codec.datums import DecimalDatum, Json, Uint
from transform.codec.errors import CodecError, ColumnValueError
from transform.codec.model import ColumnInfo
from transform.codec.mydecimal import EXACT

UTC = dt.UTC
_F32 = struct.Struct("<f")


class InvalidTime(str):
    """A DATE/DATETIME/TIMESTAMP value Python's datetime cannot hold (MySQL zero dates, month or
    day 0, year 0, Feb 30 under ALLOW_INVALID_DATES), in MySQL's text form."""

    packed: int

    def __new__(cls, text: str, packed: int = 0) -> InvalidTime:
        self = super().__new__(cls, text)
        self.packed = packed
        return self


# ---------------------------------------------------------------------------------------------
# packed time (ToPackedUint / FromPackedUint)

def pack_time(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0,
              micro: int = 0) -> int:
    """TiDB's ``ToPackedUint`` of a broken-down time."""
    if not (0 <= year <= 9999 and 0 <= month <= 12 and 0 <= day <= 31 and 0 <= hour <= 23
            and 0 <= minute <= 59 and 0 <= second <= 59 and 0 <= micro <= 999_999):
        raise ColumnValueError(f"time out of range: {year}-{month}-{day} {hour}:{minute}:{second}.{micro}")
    ymd = ((year * 13 + month) << 5) | day
    hms = (hour << 12) | (minute << 6) | second
    return (((ymd << 17) | hms) << 24) | micro


def unpack_time(packed: int) -> tuple[int, int, int, int, int, int, int]:
    """TiDB's ``FromPackedUint``: (year, month, day, hour, minute, second, microsecond)."""
    ymdhms = packed >> 24
    ymd = ymdhms >> 17
    ym = ymd >> 5
    hms = ymdhms & 0x1FFFF
    return ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, packed & 0xFFFFFF


def _time_text(parts: tuple[int, ...], date_only: bool) -> str:
    y, mo, d, h, mi, s, us = parts
    if date_only:
        return f"{y:04d}-{mo:02d}-{d:02d}"
    text = f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}"
    return text + (f".{us:06d}" if us else "")


def time_from_packed(packed: int, tp: int) -> Any:
    """Unflatten a packed DATE/DATETIME/TIMESTAMP (TIMESTAMP packed in UTC) to a Python value."""
    if packed < 0 or packed >> 63:
        raise ColumnValueError(f"packed time {packed} out of range")
    parts = unpack_time(packed)
    y, mo, d, h, mi, s, us = parts
    if h > 23 or mi > 59 or s > 59 or us > 999_999 or y > 9999:
        raise ColumnValueError(f"packed time {packed:#x} has an invalid field")
    date_only = tp in (mt.TYPE_DATE, mt.TYPE_NEWDATE)
    try:
        if date_only:
            if h or mi or s or us:
                raise ColumnValueError(f"packed DATE {packed:#x} has a time part")
            return dt.date(y, mo, d)
        if tp == mt.TYPE_TIMESTAMP:
            return dt.datetime(y, mo, d, h, mi, s, us, tzinfo=UTC)
        return dt.datetime(y, mo, d, h, mi, s, us)
    except ValueError:
        return InvalidTime(_time_text(parts, date_only), packed)


_TIME_RE = re.compile(r"^\s*(\d{1,4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,6}))?)?\s*$")


def packed_from_value(value: Any, tp: int) -> int:
    """Flatten a DATE/DATETIME/TIMESTAMP value to TiDB's packed uint64 (TIMESTAMP in UTC).

    Accepts ``date``, ``datetime`` (aware values are converted to UTC; a naive value for a
    TIMESTAMP column is taken as UTC), :class:`InvalidTime` and MySQL time text.
    """
    if isinstance(value, InvalidTime) and value.packed:
        return value.packed
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
        if tp in (mt.TYPE_DATE, mt.TYPE_NEWDATE) and (value.hour or value.minute or value.second or value.microsecond):
            raise ColumnValueError(f"DATE value {value} has a time part")
        return pack_time(value.year, value.month, value.day, value.hour, value.minute,
                         value.second, value.microsecond)
    if isinstance(value, dt.date):
        return pack_time(value.year, value.month, value.day)
    if isinstance(value, str):
        m = _TIME_RE.match(value)
        if not m:
            raise ColumnValueError(f"not a MySQL time: {value!r}")
        y, mo, d, h, mi, s, frac = m.groups()
        us = int((frac or "0").ljust(6, "0"))
        return pack_time(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), us)
    raise ColumnValueError(f"cannot use {type(value).__name__} as a time value")


# ---------------------------------------------------------------------------------------------
# TIME (duration in nanoseconds)



def duration_text(ns: int, fsp: int) -> str:
    """``Duration.String()``: ``[-]HH:MM:SS`` plus ``fsp`` fraction digits; more digits are shown
    when the value has sub-``fsp`` precision, so no information is lost."""
    sign = "-" if ns < 0 else ""
    a = -ns if ns < 0 else ns
    secs, frac = divmod(a, 1_000_000_000)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    text = f"{sign}{h:02d}:{m:02d}:{s:02d}"
    digits = max(0, min(fsp, 6))
    fs = f"{frac:09d}"
    if fs[digits:].strip("0"):
        digits = 6 if not fs[6:].strip("0") else 9
    return text + ("." + fs[:digits] if digits else "")


_DUR_RE = re.compile(r"^\s*(-)?(?:(\d+)\s+)?(\d+):(\d{1,2}):(\d{1,2})(?:\.(\d{1,9}))?\s*$")


def duration_ns(value: Any) -> int:
    """Flatten a TIME value (text ``[-][D ]HH:MM:SS[.f]``, ``timedelta`` or int ns) to nanoseconds."""
    if isinstance(value, bool):
        raise ColumnValueError("bool is not a TIME value")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, dt.timedelta):
        return (value.days * 86400 + value.seconds) * 1_000_000_000 + value.microseconds * 1000
    if isinstance(value, str):
        m = _DUR_RE.match(value)
        if not m:
            raise ColumnValueError(f"not a MySQL TIME: {value!r}")
        neg, days, h, mi, s, frac = m.groups()
        if int(mi) > 59 or int(s) > 59:
            raise ColumnValueError(f"not a MySQL TIME: {value!r}")
        ns = ((int(days or 0) * 24 + int(h)) * 3600 + int(mi) * 60 + int(s)) * 1_000_000_000
        ns += int((frac or "0").ljust(9, "0"))
        return -ns if neg else ns
    raise ColumnValueError(f"cannot use {type(value).__name__} as a TIME value")


# ---------------------------------------------------------------------------------------------
# per-column unflatten / flatten functions, one factory per type family

Unflatten = Callable[[Any], Any]
Flatten = Callable[[Any], Any]
F = mt.Family
FLOAT32_MAX = 3.4028234663852886e38


def _family(col: ColumnInfo) -> mt.Family:
    t = mt.mysql_type(col.tp)
    if t is None:
        raise ColumnValueError(f"column {col.name}: unsupported type code {col.tp}")
    return t.family


def int_range(col: ColumnInfo) -> tuple[int, int]:
    """The (min, max) an integer or YEAR column can hold."""
    if col.tp == mt.TYPE_YEAR:
        return 0, 2155
    bits = col.mysql_type.int_bits
    if col.unsigned:
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _as_int(col: ColumnInfo, d: Any) -> int:
    if type(d) is float or not isinstance(d, int):
        raise ColumnValueError(f"column {col.name}: expected an integer datum, got {type(d).__name__}")
    return int(d)


def _unflatten_int(col: ColumnInfo) -> Unflatten:
    lo, hi = int_range(col)
    name = col.name

    def integer(d: Any) -> int:
        v = _as_int(col, d)
        if not lo <= v <= hi:
            raise ColumnValueError(f"column {name}: {v} out of the column's range {lo}..{hi}")
        return v
    return integer


def _unflatten_bit(col: ColumnInfo) -> Unflatten:
    width = col.type.flen if col.type.flen > 0 else 64

    def bit(d: Any) -> int:
        v = _as_int(col, d)
        if v < 0 or v >> width:
            raise ColumnValueError(f"column {col.name}: BIT({width}) value {v} too wide")
        return v
    return bit


def _unflatten_float(col: ColumnInfo) -> Unflatten:
    def f32(d: Any) -> float:
        if type(d) is not float:
            raise ColumnValueError(f"column {col.name}: expected a float datum")
        if d != d or (abs(d) > FLOAT32_MAX and abs(d) != float("inf")):
            raise ColumnValueError(f"column {col.name}: {d} does not fit a FLOAT")
        return float(_F32.unpack(_F32.pack(d))[0])
    return f32


def _unflatten_double(col: ColumnInfo) -> Unflatten:
    def f64(d: Any) -> float:
        if type(d) is not float:
            raise ColumnValueError(f"column {col.name}: expected a float datum")
        return d
    return f64


def _unflatten_decimal(col: ColumnInfo) -> Unflatten:
    prec, scale = col.decimal_scale
    q = Decimal((0, (1,), -scale))
    name = col.name

    def dec(d: Any) -> Decimal:
        if not isinstance(d, Decimal):
            raise ColumnValueError(f"column {name}: expected a decimal datum")
        v = Decimal(d)
        if getattr(d, "frac", None) == scale and getattr(d, "prec", None) == prec:
            return v
        try:
            r = v.quantize(q, context=EXACT)
        except InvalidOperation:
            r = None
        if r is None or r != v or (r != 0 and r.adjusted() >= prec - scale):
            raise ColumnValueError(f"column {name}: decimal {v} does not fit DECIMAL({prec},{scale})")
        return r
    return dec


def _unflatten_time(col: ColumnInfo) -> Unflatten:
    tp = col.tp
    return lambda d: time_from_packed(_as_int(col, d), tp)


def _unflatten_duration(col: ColumnInfo) -> Unflatten:
    fsp = col.fsp
    return lambda d: duration_text(_as_int(col, d), fsp)


def _unflatten_enum(col: ColumnInfo) -> Unflatten:
    elems = col.type.elems

    def enum(d: Any) -> str:
        i = _as_int(col, d)
        if i == 0:
            return ""
        if i < 0 or i > len(elems):
            raise ColumnValueError(f"column {col.name}: enum index {i} out of range 1..{len(elems)}")
        return elems[i - 1]
    return enum


def _unflatten_set(col: ColumnInfo) -> Unflatten:
    elems = col.type.elems

    def set_(d: Any) -> str:
        mask = _as_int(col, d)
        if mask < 0 or mask >> len(elems):
            raise ColumnValueError(f"column {col.name}: set bitmask {mask:#x} has bits beyond {len(elems)} elements")
        return ",".join(e for i, e in enumerate(elems) if mask >> i & 1)
    return set_


def _unflatten_json(col: ColumnInfo) -> Unflatten:
    def js(d: Any) -> str:
        if not isinstance(d, Json):
            raise ColumnValueError(f"column {col.name}: expected a JSON datum")
        return str(d)
    return js


def _unflatten_bytes(col: ColumnInfo) -> Unflatten:
    def raw(d: Any) -> bytes:
        if not isinstance(d, bytes):
            raise ColumnValueError(f"column {col.name}: expected a bytes datum")
        return bytes(d)
    return raw


def _unflatten_string(col: ColumnInfo) -> Unflatten:
    if col.binary:
        return _unflatten_bytes(col)

    def text(d: Any) -> str:
        if not isinstance(d, bytes):
            raise ColumnValueError(f"column {col.name}: expected a bytes datum")
        try:
            return d.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ColumnValueError(f"column {col.name}: string is not valid UTF-8 at {e.start}") from None
    return text


_UNFLATTEN: dict[mt.Family, Callable[[ColumnInfo], Unflatten]] = {
    F.INT: _unflatten_int, F.YEAR: _unflatten_int, F.BIT: _unflatten_bit, F.FLOAT: _unflatten_float,
    F.DOUBLE: _unflatten_double, F.DECIMAL: _unflatten_decimal, F.DATE: _unflatten_time,
    F.DATETIME: _unflatten_time, F.TIMESTAMP: _unflatten_time, F.DURATION: _unflatten_duration,
    F.ENUM: _unflatten_enum, F.SET: _unflatten_set, F.JSON: _unflatten_json, F.STRING: _unflatten_string,
    F.GEOMETRY: _unflatten_bytes,
}


def make_unflatten(col: ColumnInfo) -> Unflatten:
    """Return a function turning one non-NULL datum of ``col`` into its column-level value.

    Raises :class:`ColumnValueError` when the datum's kind does not fit the column type.
    """
    return _UNFLATTEN[_family(col)](col)


def _check_int(name: str, v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ColumnValueError(f"column {name}: expected an int, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise ColumnValueError(f"column {name}: {v} out of range {lo}..{hi}")
    return int(v)


def _flatten_int(col: ColumnInfo) -> Flatten:
    name = col.name
    if col.unsigned:
        return lambda v: Uint(_check_int(name, v, 0, (1 << 64) - 1))
    return lambda v: _check_int(name, v, -(1 << 63), (1 << 63) - 1)


def _flatten_year(col: ColumnInfo) -> Flatten:
    return lambda v: _check_int(col.name, v, 0, 2155)


def _flatten_bit(col: ColumnInfo) -> Flatten:
    def bit(v: Any) -> Uint:
        if isinstance(v, (bytes, bytearray)):
            v = int.from_bytes(v, "big")
        return Uint(_check_int(col.name, v, 0, (1 << 64) - 1))
    return bit


def _flatten_float(col: ColumnInfo) -> Flatten:
    return lambda v: _F32.unpack(_F32.pack(float(v)))[0]


def _flatten_double(col: ColumnInfo) -> Flatten:
    return lambda v: float(v)


def _flatten_decimal(col: ColumnInfo) -> Flatten:
    prec, scale = col.decimal_scale
    return lambda v: DecimalDatum(Decimal(v), prec, scale)


def _flatten_time(col: ColumnInfo) -> Flatten:
    tp = col.tp
    return lambda v: Uint(packed_from_value(v, tp))


def _flatten_duration(col: ColumnInfo) -> Flatten:
    return duration_ns


def _flatten_enum(col: ColumnInfo) -> Flatten:
    index = {e: i + 1 for i, e in enumerate(col.type.elems)}
    folded = {e.casefold(): i + 1 for i, e in enumerate(col.type.elems)}
    name = col.name

    def enum(v: Any) -> Uint:
        if isinstance(v, int) and not isinstance(v, bool):
            return Uint(_check_int(name, v, 0, len(index)))
        if v == "":
            return Uint(0)
        i = index.get(v) or folded.get(str(v).casefold())
        if i is None:
            raise ColumnValueError(f"column {name}: {v!r} is not an enum element")
        return Uint(i)
    return enum


def _flatten_set(col: ColumnInfo) -> Flatten:
    bits = {e: 1 << i for i, e in enumerate(col.type.elems)}
    name = col.name

    def set_(v: Any) -> Uint:
        if isinstance(v, int) and not isinstance(v, bool):
            return Uint(_check_int(name, v, 0, (1 << len(bits)) - 1))
        mask = 0
        for part in (str(v).split(",") if v else []):
            if part not in bits:
                raise ColumnValueError(f"column {name}: {part!r} is not a set element")
            mask |= bits[part]
        return Uint(mask)
    return set_


def _flatten_json(col: ColumnInfo) -> Flatten:
    def js(v: Any) -> Json:
        if isinstance(v, (str, bytes)):
            return Json(v.decode("utf-8") if isinstance(v, bytes) else v)
        return Json(json.dumps(v))
    return js


def _flatten_bytes(col: ColumnInfo) -> Flatten:
    def s(v: Any) -> bytes:
        if isinstance(v, str):
            return v.encode("utf-8")
        if isinstance(v, (bytes, bytearray, memoryview)):
            return bytes(v)
        raise ColumnValueError(f"column {col.name}: cannot write {type(v).__name__} as a string")
    return s


_FLATTEN: dict[mt.Family, Callable[[ColumnInfo], Flatten]] = {
    F.INT: _flatten_int, F.YEAR: _flatten_year, F.BIT: _flatten_bit, F.FLOAT: _flatten_float,
    F.DOUBLE: _flatten_double, F.DECIMAL: _flatten_decimal, F.DATE: _flatten_time, F.DATETIME: _flatten_time,
    F.TIMESTAMP: _flatten_time, F.DURATION: _flatten_duration, F.ENUM: _flatten_enum, F.SET: _flatten_set,
    F.JSON: _flatten_json, F.STRING: _flatten_bytes, F.GEOMETRY: _flatten_bytes,
}


def make_flatten(col: ColumnInfo) -> Flatten:
    """Return a function turning one non-None column value into the datum TiDB writes for it
    (the inverse of :func:`make_unflatten`)."""
    return _FLATTEN[_family(col)](col)


# ---------------------------------------------------------------------------------------------
# defaults for missing columns (drainer getDefaultOrZeroValue)

def zero_value(col: ColumnInfo) -> Any:
    """TiDB's ``GetZeroValue`` as a column-level value."""
    match _family(col):
        case F.INT | F.YEAR | F.BIT:
            return 0
        case F.FLOAT | F.DOUBLE:
            return 0.0
        case F.DECIMAL:
            return Decimal((0, (0,), -col.decimal_scale[1]))
        case F.DATE:
            return InvalidTime("0000-00-00", 0)
        case F.DATETIME | F.TIMESTAMP:
            return InvalidTime("0000-00-00 00:00:00", 0)
        case F.DURATION:
            return duration_text(0, col.fsp)
        case F.ENUM | F.SET:
            return ""
        case F.JSON:
            return "null"
        case F.STRING if not col.binary:
            return ""
        case F.STRING | F.GEOMETRY:
            if col.tp == mt.TYPE_STRING and col.type.flen > 0:
                return b"\x00" * col.type.flen
            return b""


def parse_default(col: ColumnInfo, text: Any) -> Any:
    """A column's ``origin_default`` (TiDB's JSON form, usually a string) as a column value."""
    family = _family(col)
    try:
        match family:
            case F.BIT:
                raw = col.origin_default_bit
                if raw:
                    return int.from_bytes(base64.b64decode(raw), "big")
                if isinstance(text, str):
                    return int.from_bytes(text.encode("latin-1"), "big")
                return int(text)
            case F.INT | F.YEAR:
                return int(Decimal(str(text)))
            case F.FLOAT | F.DOUBLE:
                return make_unflatten(col)(float(text))
            case F.DECIMAL:
                return make_unflatten(col)(DecimalDatum(Decimal(str(text))))
            case F.DATE | F.DATETIME | F.TIMESTAMP:
                return time_from_packed(packed_from_value(str(text), col.tp), col.tp)
            case F.DURATION:
                return duration_text(duration_ns(str(text)), col.fsp)
            case F.ENUM | F.SET:
                return make_unflatten(col)(make_flatten(col)(text))
            case F.JSON:
                return text if isinstance(text, str) else jsonbinary.dumps(text)   # TiDB's text
            case F.STRING | F.GEOMETRY:
                if col.binary:
                    return text.encode("utf-8") if isinstance(text, str) else bytes(text)
                return str(text)
    except (ValueError, ArithmeticError, TypeError, CodecError) as e:
        raise ColumnValueError(f"column {col.name}: bad origin default {text!r}: {e}") from None


def missing_value(col: ColumnInfo) -> Any:
    """The value drainer fills in for a column absent from a row: origin default, else NULL if
    nullable, else an ENUM's first element, else the zero value."""
    if col.origin_default is not None or (col.tp == mt.TYPE_BIT and col.origin_default_bit):
        return parse_default(col, col.origin_default)
    if col.nullable:
        return None
    if col.tp == mt.TYPE_ENUM and col.type.elems:
        return col.type.elems[0]
    return zero_value(col)


# ---------------------------------------------------------------------------------------------
# JSON-friendly rendering (snapshots and verify)

def json_value(v: Any) -> Any:
    """The JSON-friendly form of one column value:

    ==========================  ===========================================================
    Python value                rendered
    ==========================  ===========================================================
    None / int / str            as is (bool → int; ENUM, SET, TIME, JSON text, zero dates)
    float                       as is; NaN and ±infinity as ``str``
    Decimal                     ``str``, exact, with the column's scale (``"12.30"``)
    date                        ``"YYYY-MM-DD"``
    datetime                    ``"YYYY-MM-DD HH:MM:SS[.ffffff]"``, an aware one in UTC (no zone)
    bytes (binary strings)      standard base64 with padding (as Go renders ``[]byte``)
    anything else               ``str``
    ==========================  ===========================================================
    """
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return str(v) if math.isnan(v) or math.isinf(v) else v
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.UTC).replace(tzinfo=None)
        text = v.strftime("%Y-%m-%d %H:%M:%S")   # glibc does not pad years < 1000
        return f"{text}.{v.microsecond:06d}" if v.microsecond else text
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    return str(v)


def naive_utc(v: Any) -> dt.datetime | None:
    """A date, a datetime (an aware one in UTC) or ISO text (``YYYY-MM-DD[ HH:MM:SS[.f]]``) as a naive
    UTC datetime; None for anything else."""
    if isinstance(v, dt.datetime):
        return v.astimezone(dt.UTC).replace(tzinfo=None) if v.tzinfo else v
    if isinstance(v, dt.date):
        return dt.datetime(v.year, v.month, v.day)
    if isinstance(v, str):
        try:
            return dt.datetime.fromisoformat(v.strip().replace(" ", "T", 1))
        except ValueError:
            return None
    return None
