"""A column's values converted to its new type as TiDB converts them when a column-type change
rewrites the column (``MODIFY/CHANGE COLUMN`` with a reorg: TiDB backfills the new column from the
old one with ``table.CastValue``, i.e. ``types.Datum.ConvertTo``, and writes no binlog for it).

binlake converts only what it can convert exactly as TiDB does; :func:`unsupported` names the type
pairs it does not take, and :func:`convert_value` raises :class:`ConversionError` for a value TiDB
would have truncated, rounded with a warning or refused (a DDL that succeeded in strict mode never
has such a value; one run in a lax ``sql_mode`` may). NULL stays NULL.

============================  ==================================================================
to                            from
============================  ==================================================================
CHAR/VARCHAR/TEXT (text)      INT/YEAR as decimal text; DECIMAL keeping its scale (``1.50``);
                              FLOAT/DOUBLE in Go's ``FormatFloat(f, 'f', -1, 32|64)``; DATE
                              ``YYYY-MM-DD``; DATETIME ``YYYY-MM-DD HH:MM:SS[.fsp digits]``; TIME,
                              ENUM, SET, JSON and text as their text; binary strings when UTF-8.
                              The result must fit the new length.
BINARY/VARBINARY/BLOB         the same text as bytes; BINARY(n) padded with ``\\0`` to n bytes
INT family (signed/unsigned)  INT, YEAR; DECIMAL/FLOAT/DOUBLE rounded half away from zero; text
                              that is an integer; the result must be in the new range
DECIMAL(M,D)                  INT, DECIMAL, FLOAT/DOUBLE (their shortest decimal), text that is a
                              number; rounded half away from zero to D digits; must fit M
FLOAT/DOUBLE                  INT, DECIMAL, FLOAT/DOUBLE, text that is a number
DATE/DATETIME                 DATE; DATETIME whose fraction fits the new precision (to DATETIME);
                              text ``YYYY-MM-DD[ HH:MM:SS[.f]]``
============================  ==================================================================
"""
from __future__ import annotations

import datetime as dt
import decimal
import re
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa

from transform.codec import mysqltypes as mt
from transform.codec.errors import CodecError
from transform.codec.model import ColumnInfo, arrow_type

F = mt.Family
_NUMBERS = (F.INT, F.YEAR, F.DECIMAL, F.FLOAT, F.DOUBLE)
_TEXTUAL = (F.DATE, F.DATETIME, F.DURATION, F.ENUM, F.SET, F.JSON, F.STRING)
_SOURCES: dict[F, tuple[F, ...]] = {
    F.STRING: (*_NUMBERS, *_TEXTUAL),
    F.INT: (F.INT, F.YEAR, F.DECIMAL, F.FLOAT, F.DOUBLE, F.STRING),
    F.DECIMAL: (F.INT, F.DECIMAL, F.FLOAT, F.DOUBLE, F.STRING),
    F.FLOAT: (F.INT, F.DECIMAL, F.FLOAT, F.DOUBLE, F.STRING),
    F.DOUBLE: (F.INT, F.DECIMAL, F.FLOAT, F.DOUBLE, F.STRING),
    F.DATE: (F.DATE, F.STRING),
    F.DATETIME: (F.DATE, F.DATETIME, F.STRING),
}
_CONTEXT = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP)   # MyDecimal: 65 digits, half away from 0
_INT_TEXT = re.compile(r"\s*[+-]?\d+\s*")
_NUMBER_TEXT = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")
_DATE_TEXT = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?: (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?)?")


class ConversionError(CodecError):
    """A value binlake cannot convert to the new column type exactly as TiDB did."""


def unsupported(old: ColumnInfo, new: ColumnInfo) -> str | None:
    """Why binlake does not convert ``old``'s values to ``new``'s type (None: it does)."""
    sources = _SOURCES.get(new.family, ())
    if old.family not in sources:
        return (f"binlake does not convert {old.mysql_type.name} values to {new.mysql_type.name} "
                f"as TiDB does")
    return None


def convert_value(v: Any, old: ColumnInfo, new: ColumnInfo) -> Any:
    """``v`` (a value of ``old`` as ``decode_row`` or an Arrow read gives it) as TiDB's backfill
    stores it in ``new``, in ``decode_row``'s form; :class:`ConversionError` when it cannot be."""
    if v is None:
        return None
    reason = unsupported(old, new)
    if reason is not None:
        raise ConversionError(reason)
    match new.family:
        case F.STRING:
            return _to_string(_text(v, old), new)
        case F.INT:
            return _to_int(v, old, new)
        case F.DECIMAL:
            return _to_decimal(v, old, new)
        case F.FLOAT | F.DOUBLE:
            return _to_float(v, old, new)
        case _:
            return _to_time(v, old, new)


def convert_array(values: pa.Array | pa.ChunkedArray, old: ColumnInfo, new: ColumnInfo) -> pa.Array:
    """An Arrow column of ``old`` (``arrow_type(old)`` or a type Iceberg promoted it to) converted
    value by value (:func:`convert_value`) into ``arrow_type(new)``."""
    typ = arrow_type(new)
    out = [_arrow(new, typ, convert_value(v, old, new)) for v in values.to_pylist()]
    return pa.array(out, typ)


def _arrow(col: ColumnInfo, typ: pa.DataType, v: Any) -> Any:
    if v is None:
        return None
    if pa.types.is_decimal(typ):
        return Decimal(v)
    if pa.types.is_string(typ) and isinstance(v, Decimal):
        return format(v, "f")
    return v


# -- to strings --------------------------------------------------------------------------------

def _text(v: Any, old: ColumnInfo) -> str | bytes:
    """``Datum.ConvertTo`` string: the text TiDB gives a value of ``old``."""
    match old.family:
        case F.INT | F.YEAR:
            return str(int(v))
        case F.DECIMAL:
            return format(_scaled(Decimal(v), old.decimal_scale[1]), "f")
        case F.FLOAT:
            return str(np.format_float_positional(np.float32(v), unique=True, trim="-"))
        case F.DOUBLE:
            return str(np.format_float_positional(np.float64(v), unique=True, trim="-"))
        case F.DATE:
            return v.isoformat() if isinstance(v, dt.date) else str(v)
        case F.DATETIME:
            if not isinstance(v, dt.datetime):
                return str(v)   # a zero date decode_row keeps as TiDB's text
            text = v.strftime("%Y-%m-%d %H:%M:%S")
            return text + "." + f"{v.microsecond:06d}"[:old.fsp] if old.fsp else text
        case _:
            return v if isinstance(v, bytes) else str(v)


def _to_string(text: str | bytes, new: ColumnInfo) -> str | bytes:
    flen = new.type.flen
    if new.binary:
        data = text if isinstance(text, bytes) else text.encode()
        if 0 < flen < len(data):
            raise ConversionError(f"{len(data)} bytes do not fit {new.mysql_type.name}({flen})")
        return data.ljust(flen, b"\0") if new.tp == mt.TYPE_STRING and flen > 0 else data
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise ConversionError(f"binary value {text[:16]!r}… is not UTF-8 text") from None
    if 0 < flen < len(text):
        raise ConversionError(f"{text[:32]!r} ({len(text)} characters) does not fit {new.mysql_type.name}({flen})")
    return text


# -- to numbers --------------------------------------------------------------------------------

def _number(v: Any, old: ColumnInfo) -> Decimal | float:
    """A numeric value of ``old`` as an exact Decimal (a float as its float)."""
    match old.family:
        case F.FLOAT | F.DOUBLE:
            return float(v)
        case F.STRING:
            text = v.decode() if isinstance(v, bytes) else str(v)
            if not _NUMBER_TEXT.fullmatch(text):
                raise ConversionError(f"{text[:32]!r} is not a number")
            return Decimal(text.strip())
        case _:
            return Decimal(v)


def _to_int(v: Any, old: ColumnInfo, new: ColumnInfo) -> int:
    if old.family is F.STRING:
        text = v.decode() if isinstance(v, bytes) else str(v)
        if not _INT_TEXT.fullmatch(text):
            raise ConversionError(f"{text[:32]!r} is not an integer")
        n = int(text)
    else:
        num = _number(v, old)
        d = _shortest(num) if isinstance(num, float) else num
        n = int(d.quantize(Decimal(1), context=_CONTEXT))
    bits = new.mysql_type.int_bits
    low, high = (0, (1 << bits) - 1) if new.unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if not low <= n <= high:
        raise ConversionError(f"{n} is out of range for {new.mysql_type.name}{' unsigned' if new.unsigned else ''}")
    return n


def _to_decimal(v: Any, old: ColumnInfo, new: ColumnInfo) -> Decimal:
    num = _number(v, old)
    d = _shortest(num) if isinstance(num, float) else num
    prec, scale = new.decimal_scale
    out = _scaled(d, scale)
    if len(out.as_tuple().digits) > prec and out != 0:
        raise ConversionError(f"{format(out, 'f')} does not fit decimal({prec},{scale})")
    return out


def _to_float(v: Any, old: ColumnInfo, new: ColumnInfo) -> float:
    num = _number(v, old)
    f = float(num)
    if new.family is F.FLOAT:
        f32 = np.float32(f)
        if not np.isfinite(f32):
            raise ConversionError(f"{f} is out of range for float")
        return float(f32)
    return f


def _shortest(f: float) -> Decimal:
    """A double as the shortest decimal that reads back as it (TiDB's ``MyDecimal.FromFloat64``)."""
    return Decimal(repr(f))


def _scaled(d: Decimal, scale: int) -> Decimal:
    return d.quantize(Decimal(1).scaleb(-scale), context=_CONTEXT)


# -- to dates ----------------------------------------------------------------------------------

def _to_time(v: Any, old: ColumnInfo, new: ColumnInfo) -> dt.date:
    if old.family is F.STRING:
        text = (v.decode() if isinstance(v, bytes) else str(v)).strip()
        m = _DATE_TEXT.fullmatch(text)
        if m is None:
            raise ConversionError(f"{text[:32]!r} is not a date or datetime")
        y, mo, d, hh, mi, ss, frac = m.groups()
        try:
            value: dt.date = dt.datetime(int(y), int(mo), int(d), int(hh or 0), int(mi or 0), int(ss or 0),
                                         int((frac or "0").ljust(6, "0")))
        except ValueError:
            raise ConversionError(f"{text!r} is not a valid date") from None
    elif isinstance(v, dt.datetime):
        value = v.replace(tzinfo=None)
    elif isinstance(v, dt.date):
        value = dt.datetime(v.year, v.month, v.day)
    else:
        raise ConversionError(f"{v!r} is not a valid date")   # a zero date
    assert isinstance(value, dt.datetime)
    if new.family is F.DATE:
        if value.time() != dt.time():
            raise ConversionError(f"{value} has a time of day, which DATE rounds")
        return value.date()
    if value.microsecond % 10 ** (6 - new.fsp):
        raise ConversionError(f"{value} has more fractional digits than datetime({new.fsp})")
    return value
