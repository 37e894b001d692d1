"""Column types and values: a sqlglot ``DataType`` becomes TiDB's ``FieldType`` (flags, Flen, Decimal,
charset as TiDB fills them), and a SQL value becomes the Python value ``upstream.rowcodec.encode_row``
takes for that column (MySQL strict mode: out-of-range or too-long values are errors).
"""
from __future__ import annotations

import datetime as dt
import json
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from sqlglot import exp

from transform.codec import mysqltypes as mt
from transform.codec.datums import EncodedJson
from transform.codec.errors import CodecError
from transform.codec.model import ColumnInfo, FieldType
from transform.codec.values import (
    InvalidTime,
    duration_ns,
    duration_text,
    int_range,
    packed_from_value,
    time_from_packed,
)
from upstream.errors import SQLError, UnsupportedSQL

F = mt.Family

UTC = dt.UTC
T = exp.DataType.Type

# sqlglot type -> (tp, unsigned)
_INTS = {
    T.TINYINT: (mt.TYPE_TINY, False), T.UTINYINT: (mt.TYPE_TINY, True),
    T.SMALLINT: (mt.TYPE_SHORT, False), T.USMALLINT: (mt.TYPE_SHORT, True),
    T.MEDIUMINT: (mt.TYPE_INT24, False), T.UMEDIUMINT: (mt.TYPE_INT24, True),
    T.INT: (mt.TYPE_LONG, False), T.UINT: (mt.TYPE_LONG, True),
    T.BIGINT: (mt.TYPE_LONGLONG, False), T.UBIGINT: (mt.TYPE_LONGLONG, True),
    T.BOOLEAN: (mt.TYPE_TINY, False),
}
_INT_FLEN = {mt.TYPE_TINY: (4, 3), mt.TYPE_SHORT: (6, 5), mt.TYPE_INT24: (9, 8), mt.TYPE_LONG: (11, 10),
             mt.TYPE_LONGLONG: (20, 20)}
_TEXTS = {T.TINYTEXT: (mt.TYPE_TINY_BLOB, 255), T.TEXT: (mt.TYPE_BLOB, 65535),
          T.MEDIUMTEXT: (mt.TYPE_MEDIUM_BLOB, 16777215), T.LONGTEXT: (mt.TYPE_LONG_BLOB, 4294967295)}
_BLOBS = {T.TINYBLOB: (mt.TYPE_TINY_BLOB, 255), T.BLOB: (mt.TYPE_BLOB, 65535),
          T.MEDIUMBLOB: (mt.TYPE_MEDIUM_BLOB, 16777215), T.LONGBLOB: (mt.TYPE_LONG_BLOB, 4294967295)}
_CHARS = {T.CHAR: (mt.TYPE_STRING, False), T.VARCHAR: (mt.TYPE_VARCHAR, False),
          T.BINARY: (mt.TYPE_STRING, True), T.VARBINARY: (mt.TYPE_VARCHAR, True)}


def _params(dtype: exp.DataType) -> list[Any]:
    out = []
    for p in dtype.expressions:
        node = p.this if isinstance(p, exp.DataTypeParam) else p
        if isinstance(node, exp.Literal):
            out.append(node.this if node.is_string else int(node.this))
        else:
            out.append(node.sql("mysql"))
    return out


def field_type(dtype: exp.DataType, charset: str = "utf8mb4", collate: str = "utf8mb4_bin",
               unsigned: bool = False) -> FieldType:
    """TiDB's FieldType for a column type (flags other than UNSIGNED/BINARY are added by the caller)."""
    t = dtype.this
    params = _params(dtype)
    if t in _INTS:
        tp, uns = _INTS[t]
        uns = uns or unsigned
        flen = params[0] if params else (1 if t == T.BOOLEAN else _INT_FLEN[tp][1 if uns else 0])
        return FieldType(tp, mt.UNSIGNED_FLAG if uns else 0, flen, 0, "binary", "binary")
    if t in (T.DECIMAL, T.UDECIMAL):
        prec = params[0] if params else 10
        scale = params[1] if len(params) > 1 else 0
        if not (1 <= prec <= 65 and 0 <= scale <= 30 and scale <= prec):
            raise SQLError(f"invalid DECIMAL({prec},{scale})")
        return FieldType(mt.TYPE_NEWDECIMAL, mt.UNSIGNED_FLAG if (unsigned or t == T.UDECIMAL) else 0,
                         prec, scale, "binary", "binary")
    if t == T.FLOAT:
        return FieldType(mt.TYPE_FLOAT, mt.UNSIGNED_FLAG if unsigned else 0, 12, -1, "binary", "binary")
    if t == T.DOUBLE:
        return FieldType(mt.TYPE_DOUBLE, mt.UNSIGNED_FLAG if unsigned else 0, 22, -1, "binary", "binary")
    if t == T.DATE:
        return FieldType(mt.TYPE_DATE, mt.BINARY_FLAG, 10, 0, "binary", "binary")
    if t in (T.DATETIME, T.TIMESTAMP, T.TIMESTAMPTZ, T.TIMESTAMPLTZ, T.TIME):
        fsp = params[0] if params else 0
        if not 0 <= fsp <= 6:
            raise SQLError(f"invalid fractional seconds precision {fsp}")
        if t == T.TIME:
            return FieldType(mt.TYPE_DURATION, mt.BINARY_FLAG, 10 + (fsp + 1 if fsp else 0), fsp, "binary", "binary")
        tp = mt.TYPE_DATETIME if t == T.DATETIME else mt.TYPE_TIMESTAMP
        return FieldType(tp, mt.BINARY_FLAG, 19 + (fsp + 1 if fsp else 0), fsp, "binary", "binary")
    if t == T.YEAR:
        return FieldType(mt.TYPE_YEAR, mt.UNSIGNED_FLAG | mt.ZEROFILL_FLAG, 4, 0, "binary", "binary")
    if t == T.BIT:
        width = params[0] if params else 1
        if not 1 <= width <= 64:
            raise SQLError(f"invalid BIT({width})")
        return FieldType(mt.TYPE_BIT, mt.UNSIGNED_FLAG, width, 0, "binary", "binary")
    if t == T.JSON:
        return FieldType(mt.TYPE_JSON, mt.BINARY_FLAG, 4294967295, 0, "binary", "binary")
    if t in (T.ENUM, T.SET):
        elems = tuple(str(p) for p in params)
        if not elems:
            raise SQLError(f"{t.value} needs at least one element")
        if t == T.ENUM:
            return FieldType(mt.TYPE_ENUM, 0, max(len(e) for e in elems), 0, charset, collate, elems)
        return FieldType(mt.TYPE_SET, 0, sum(len(e) for e in elems) + len(elems) - 1, 0, charset, collate, elems)
    if t in _CHARS:
        tp, binary = _CHARS[t]
        if tp == mt.TYPE_VARCHAR and not params:
            raise SQLError("VARCHAR needs a length")
        flen = params[0] if params else 1
        if binary:
            return FieldType(tp, mt.BINARY_FLAG, flen, 0, "binary", "binary")
        return FieldType(tp, 0, flen, 0, charset, collate)
    if t in _TEXTS:
        tp, flen = _TEXTS[t]
        return FieldType(tp, 0, flen, 0, charset, collate)
    if t in _BLOBS:
        tp, flen = _BLOBS[t]
        return FieldType(tp, mt.BINARY_FLAG, flen, 0, "binary", "binary")
    raise UnsupportedSQL(f"column type {dtype.sql('mysql')}")


def type_class(ft: FieldType) -> str:
    """A coarse class used to decide whether MODIFY COLUMN keeps the stored values valid."""
    match mt.family_of(ft.tp):
        case F.INT:
            return "uint" if ft.flag & mt.UNSIGNED_FLAG else "int"
        case F.STRING:
            return "bytes" if ft.charset == "binary" else "text"
        case F.FLOAT | F.DOUBLE:
            return "float"
    return mt.type_to_str(ft.tp, ft.charset)


# ---------------------------------------------------------------------------------------------
# values

class _Default:
    """The ``DEFAULT`` keyword in VALUES."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = _Default()


def _as_decimal(v: Any, col: ColumnInfo) -> Decimal:
    try:
        if isinstance(v, float):
            d = Decimal(repr(v))
        else:
            if isinstance(v, bytes):
                v = v.decode()
            d = Decimal(str(v).strip()) if not isinstance(v, Decimal) else v
        if d.is_finite():
            return d
    except (InvalidOperation, ValueError, UnicodeDecodeError):
        pass
    raise SQLError(f"Incorrect {mt.type_to_str(col.tp, col.type.charset)} value: {v!r} for column "
                   f"'{col.name}'")


def _round_micro(value: dt.datetime, fsp: int) -> dt.datetime:
    if fsp >= 6:
        return value
    unit = 10 ** (6 - fsp)
    micro = value.microsecond
    if not micro % unit:
        return value
    rounded = (micro + unit // 2) // unit * unit
    return value.replace(microsecond=0) + dt.timedelta(microseconds=rounded)


_SLOW = object()


def _fast_coercer(col: ColumnInfo) -> Any:
    """A shortcut for the commonest (column type, Python type) pairs, giving exactly ``coerce``'s
    result for them and ``_SLOW`` for anything else (then the general code runs)."""
    family, name = mt.family_of(col.tp), col.name
    if family is F.INT:
        lo, hi = int_range(col)

        def integer(v: Any) -> Any:
            if type(v) is not int:
                return _SLOW
            if not lo <= v <= hi:
                raise SQLError(f"Out of range value for column '{name}'")
            return v
        return integer
    if family is F.STRING and not col.binary:
        flen = col.type.flen

        def text(v: Any) -> Any:
            if type(v) is not str:
                return _SLOW
            if len(v) > flen >= 0:
                raise SQLError(f"Data too long for column '{name}'")
            return v
        return text
    if family is F.DECIMAL:
        prec, scale = col.decimal_scale
        quantum = Decimal((0, (1,), -scale))
        limit = prec - scale
        unsigned = col.unsigned

        def decimal(v: Any) -> Any:
            if type(v) is not Decimal or not v.is_finite():
                return _SLOW
            try:
                d = v.quantize(quantum, rounding=ROUND_HALF_UP)
            except InvalidOperation:
                return _SLOW
            if (d != 0 and d.adjusted() >= limit) or (unsigned and d < 0):
                raise SQLError(f"Out of range value for column '{name}'")
            return d
        return decimal
    if family is F.DATETIME:
        fsp = col.fsp

        def datetime(v: Any) -> Any:
            if type(v) is not dt.datetime or v.tzinfo is not None:
                return _SLOW
            try:
                return _round_micro(v, fsp)
            except OverflowError:
                return _SLOW
        return datetime
    return None


def coerce(col: ColumnInfo, v: Any) -> Any:
    """Convert a SQL value (int, float, Decimal, str, bytes, bool, date/datetime, None) to ``col``'s
    Python value (see ``transform.codec.values``); raise :class:`SQLError` naming the column when it does not fit."""
    if v is None:
        if not col.nullable:
            raise SQLError(f"[table:1048]Column '{col.name}' cannot be null")
        return None
    cached = col.__dict__.get("_binlake_coerce", _SLOW)
    if cached is _SLOW:
        cached = col.__dict__["_binlake_coerce"] = _fast_coercer(col)
    if cached is not None:
        out = cached(v)
        if out is not _SLOW:
            return out
    tp = col.tp
    name = col.name
    try:
        match mt.family_of(tp):
            case F.INT | F.YEAR:
                if isinstance(v, bool):
                    v = int(v)
                if isinstance(v, (float, Decimal)) or isinstance(v, str):
                    d = _as_decimal(v, col).quantize(Decimal(1), rounding=ROUND_HALF_UP)
                    v = int(d)
                if isinstance(v, bytes):
                    v = int.from_bytes(v, "big")
                if tp == mt.TYPE_YEAR and 0 < v < 100:
                    v += 2000 if v < 70 else 1900
                lo, hi = int_range(col)
                if tp == mt.TYPE_YEAR:
                    if v != 0 and not 1901 <= v <= 2155:
                        raise SQLError(f"Out of range value for column '{name}'")
                elif not lo <= v <= hi:
                    raise SQLError(f"Out of range value for column '{name}'")
                return int(v)
            case F.BIT:
                if isinstance(v, (bytes, bytearray)):
                    v = int.from_bytes(v, "big")
                v = int(v)
                width = col.type.flen if col.type.flen > 0 else 1
                if v < 0 or v >> width:
                    raise SQLError(f"Data too long for column '{name}'")
                return v
            case F.FLOAT | F.DOUBLE:
                f = float(_as_decimal(v, col)) if isinstance(v, (str, bytes)) else float(v)
                if col.unsigned and f < 0:
                    raise SQLError(f"Out of range value for column '{name}'")
                if tp == mt.TYPE_FLOAT:
                    import struct
                    f = struct.unpack("<f", struct.pack("<f", f))[0]
                return f
            case F.DECIMAL:
                prec, scale = col.decimal_scale
                d = _as_decimal(v, col).quantize(Decimal((0, (1,), -scale)), rounding=ROUND_HALF_UP)
                if d != 0 and d.adjusted() >= prec - scale:
                    raise SQLError(f"Out of range value for column '{name}'")
                if col.unsigned and d < 0:
                    raise SQLError(f"Out of range value for column '{name}'")
                return d
            case F.DATE | F.DATETIME | F.TIMESTAMP:
                fsp = col.fsp
                if isinstance(v, dt.datetime) and tp == mt.TYPE_TIMESTAMP and v.tzinfo is None:
                    v = v.replace(tzinfo=UTC)
                if isinstance(v, (int, Decimal)) and not isinstance(v, bool):
                    raise SQLError(f"Incorrect {mt.type_to_str(tp, '')} value: {v!r} for column '{name}'")
                if isinstance(v, bytes):
                    v = v.decode()
                if isinstance(v, dt.datetime) and tp not in (mt.TYPE_DATE, mt.TYPE_NEWDATE):
                    v = _round_micro(v, fsp)
                elif isinstance(v, dt.datetime):
                    v = v.date()
                elif isinstance(v, str) and tp in (mt.TYPE_DATE, mt.TYPE_NEWDATE):
                    v = v.strip().split(" ")[0].split("T")[0]
                out = time_from_packed(packed_from_value(v, tp), tp)
                if isinstance(out, dt.datetime) and not isinstance(out, InvalidTime):
                    out = _round_micro(out, fsp)
                return out
            case F.DURATION:
                fsp = col.fsp
                if isinstance(v, bytes):
                    v = v.decode()
                ns = duration_ns(v)
                unit = 10 ** (9 - fsp)
                ns = (abs(ns) + unit // 2) // unit * unit * (-1 if ns < 0 else 1)
                if abs(ns) > (838 * 3600 + 59 * 60 + 59) * 10 ** 9:
                    raise SQLError(f"Out of range value for column '{name}'")
                return duration_text(ns, fsp)
            case F.ENUM:
                elems = col.type.elems
                if isinstance(v, int) and not isinstance(v, bool):
                    if not 0 < v <= len(elems):
                        raise SQLError(f"Data truncated for column '{name}'")
                    return elems[v - 1]
                s = v.decode() if isinstance(v, bytes) else str(v)
                for e in elems:
                    if e == s or e.casefold() == s.casefold():
                        return e
                raise SQLError(f"Data truncated for column '{name}': {s!r} is not an element")
            case F.SET:
                elems = col.type.elems
                if isinstance(v, int) and not isinstance(v, bool):
                    if v < 0 or v >> len(elems):
                        raise SQLError(f"Data truncated for column '{name}'")
                    return ",".join(e for i, e in enumerate(elems) if v >> i & 1)
                s = v.decode() if isinstance(v, bytes) else str(v)
                wanted = {p.casefold() for p in s.split(",") if p != ""}
                known = {e.casefold() for e in elems}
                if not wanted <= known:
                    raise SQLError(f"Data truncated for column '{name}': {s!r} has unknown elements")
                return ",".join(e for e in elems if e.casefold() in wanted)
            case F.JSON:
                text = v.decode() if isinstance(v, bytes) else v if isinstance(v, str) else json.dumps(v)
                try:
                    doc = json.loads(text)
                except (ValueError, RecursionError):
                    raise SQLError(f"Invalid JSON text for column '{name}': {text[:60]!r}") from None
                return EncodedJson.of(doc)  # TiDB's canonical JSON text (with its binary, for the row writer)
            case F.STRING:
                if col.binary:
                    b = v if isinstance(v, bytes) else str(_plain(v)).encode("utf-8")
                    if len(b) > col.type.flen >= 0:
                        raise SQLError(f"Data too long for column '{name}'")
                    if tp == mt.TYPE_STRING and len(b) < col.type.flen:
                        b = b + b"\x00" * (col.type.flen - len(b))
                    return b
                s = v.decode("utf-8") if isinstance(v, bytes) else str(_plain(v))
                if len(s) > col.type.flen >= 0:
                    raise SQLError(f"Data too long for column '{name}'")
                return s
    except (CodecError, ValueError, OverflowError, UnicodeDecodeError, InvalidOperation, TypeError) as e:
        if isinstance(e, SQLError):
            raise
        raise SQLError(f"Incorrect value {v!r} for column '{name}': {e}") from None
    raise UnsupportedSQL(f"values of column type {mt.type_to_str(tp, col.type.charset)}")


def _plain(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float):
        return repr(v)
    return v


def default_text(col: ColumnInfo, value: Any) -> Any:
    """How TiDB stores a default in ColumnInfo JSON (a string; None for NULL)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        fsp = col.fsp
        return text + (f".{value.microsecond:06d}"[: fsp + 1] if fsp else "")
    if isinstance(value, dt.date):
        return value.isoformat()
    if col.family is F.BIT:
        width = max(1, (col.type.flen + 7) // 8)
        return int(value).to_bytes(width, "big").decode("latin-1")
    return str(value)


def zero_text(col: ColumnInfo) -> Any:
    """The origin default TiDB gives a NOT NULL column added without a default (its zero value)."""
    match mt.family_of(col.tp):
        case F.INT | F.YEAR | F.FLOAT | F.DOUBLE | F.DECIMAL:
            return "0"
        case F.DATE:
            return "0000-00-00"
        case F.DATETIME | F.TIMESTAMP:
            return "0000-00-00 00:00:00"
        case F.DURATION:
            return "00:00:00"
        case F.ENUM:
            return col.type.elems[0] if col.type.elems else ""
        case F.JSON:
            return "null"
        case F.BIT:
            return "\x00"
    return ""
