"""MySQL types as TiDB numbers them (``FieldType.Tp``), column flags and schema states, and the one
table of per-type facts every type-directed piece of binlake consults.

Each type code maps to a :class:`MySQLType`: its SQL name, its :class:`Family` (how TiDB stores
its values in a row and what Python value a column of it holds) and the datum flag TiDB writes a
row value with. Code that behaves per type (decoding, encoding, Arrow types, defaults, the
emulator's SQL coercion) dispatches on the family — ``match mysql_type(tp).family`` or a
``dict[Family, …]`` — instead of listing type codes again.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

TYPE_TINY = 1
TYPE_SHORT = 2
TYPE_LONG = 3
TYPE_FLOAT = 4
TYPE_DOUBLE = 5
TYPE_NULL = 6
TYPE_TIMESTAMP = 7
TYPE_LONGLONG = 8
TYPE_INT24 = 9
TYPE_DATE = 10
TYPE_DURATION = 11
TYPE_DATETIME = 12
TYPE_YEAR = 13
TYPE_NEWDATE = 14
TYPE_VARCHAR = 15
TYPE_BIT = 16
TYPE_TIDB_VECTOR_FLOAT32 = 0xE1   # TiDB's VECTOR: binlake does not handle it
TYPE_JSON = 0xF5
TYPE_NEWDECIMAL = 0xF6
TYPE_ENUM = 0xF7
TYPE_SET = 0xF8
TYPE_TINY_BLOB = 0xF9
TYPE_MEDIUM_BLOB = 0xFA
TYPE_LONG_BLOB = 0xFB
TYPE_BLOB = 0xFC
TYPE_VAR_STRING = 0xFD
TYPE_STRING = 0xFE
TYPE_GEOMETRY = 0xFF

NOT_NULL_FLAG = 1
PRI_KEY_FLAG = 2
UNIQUE_KEY_FLAG = 4
MULTIPLE_KEY_FLAG = 8
UNSIGNED_FLAG = 32
ZEROFILL_FLAG = 64
BINARY_FLAG = 128
AUTO_INCREMENT_FLAG = 512
NO_DEFAULT_VALUE_FLAG = 4096
ON_UPDATE_NOW_FLAG = 8192

STATE_NONE = 0
STATE_DELETE_ONLY = 1
STATE_DELETE_REORGANIZATION = 4
STATE_PUBLIC = 5

EXTRA_HANDLE_ID = -1
EXTRA_HANDLE_NAME = "_tidb_rowid"

BINARY_CHARSET = "binary"

# datum flags of row values (``transform.codec.datums`` has the full list)
_VARINT, _UVARINT, _FLOAT, _DECIMAL, _BYTES, _JSON = 0x08, 0x09, 0x05, 0x06, 0x02, 0x0A


class Family(enum.Enum):
    """Types that TiDB stores and binlake handles alike."""

    INT = "int"              # TINYINT … BIGINT: varint (uvarint when UNSIGNED), Python int
    YEAR = "year"            # YEAR: varint, int
    BIT = "bit"              # BIT(M): uvarint, int
    FLOAT = "float"          # FLOAT: comparable float64 narrowed to float32, float
    DOUBLE = "double"        # DOUBLE: comparable float64, float
    DECIMAL = "decimal"      # DECIMAL(M,D): MyDecimal, Decimal
    DATE = "date"            # DATE: packed time uvarint, date
    DATETIME = "datetime"    # DATETIME: packed time uvarint, naive datetime
    TIMESTAMP = "timestamp"  # TIMESTAMP: packed time uvarint (UTC), aware datetime
    DURATION = "duration"    # TIME: varint nanoseconds, text
    ENUM = "enum"            # ENUM: uvarint index, element text
    SET = "set"              # SET: uvarint bitmask, comma-joined text
    JSON = "json"            # JSON: JSON binary, JSON text
    STRING = "string"        # CHAR/VARCHAR/TEXT/BLOB: bytes (text unless the binary charset)
    GEOMETRY = "geometry"    # GEOMETRY: bytes


@dataclass(frozen=True)
class MySQLType:
    """The facts of one type code."""

    code: int
    name: str           # TiDB's ``TypeToStr`` (non-binary charset)
    family: Family
    datum_flag: int     # the flag of a row value's datum (signed types; UNSIGNED ints use uvarint)
    int_bits: int = 0   # storage width of the INT family
    blob: bool = False  # one of the TEXT/BLOB types

    def flag_for(self, unsigned: bool) -> int:
        """The datum flag of a row value of a column of this type."""
        return _UVARINT if unsigned and self.family is Family.INT else self.datum_flag


TYPES: dict[int, MySQLType] = {t.code: t for t in (
    MySQLType(TYPE_TINY, "tinyint", Family.INT, _VARINT, int_bits=8),
    MySQLType(TYPE_SHORT, "smallint", Family.INT, _VARINT, int_bits=16),
    MySQLType(TYPE_INT24, "mediumint", Family.INT, _VARINT, int_bits=24),
    MySQLType(TYPE_LONG, "int", Family.INT, _VARINT, int_bits=32),
    MySQLType(TYPE_LONGLONG, "bigint", Family.INT, _VARINT, int_bits=64),
    MySQLType(TYPE_YEAR, "year", Family.YEAR, _VARINT),
    MySQLType(TYPE_BIT, "bit", Family.BIT, _UVARINT),
    MySQLType(TYPE_FLOAT, "float", Family.FLOAT, _FLOAT),
    MySQLType(TYPE_DOUBLE, "double", Family.DOUBLE, _FLOAT),
    MySQLType(TYPE_NEWDECIMAL, "decimal", Family.DECIMAL, _DECIMAL),
    MySQLType(TYPE_DATE, "date", Family.DATE, _UVARINT),
    MySQLType(TYPE_NEWDATE, "date", Family.DATE, _UVARINT),
    MySQLType(TYPE_DATETIME, "datetime", Family.DATETIME, _UVARINT),
    MySQLType(TYPE_TIMESTAMP, "timestamp", Family.TIMESTAMP, _UVARINT),
    MySQLType(TYPE_DURATION, "time", Family.DURATION, _VARINT),
    MySQLType(TYPE_ENUM, "enum", Family.ENUM, _UVARINT),
    MySQLType(TYPE_SET, "set", Family.SET, _UVARINT),
    MySQLType(TYPE_JSON, "json", Family.JSON, _JSON),
    MySQLType(TYPE_VARCHAR, "varchar", Family.STRING, _BYTES),
    MySQLType(TYPE_VAR_STRING, "var_string", Family.STRING, _BYTES),
    MySQLType(TYPE_STRING, "char", Family.STRING, _BYTES),
    MySQLType(TYPE_TINY_BLOB, "tinytext", Family.STRING, _BYTES, blob=True),
    MySQLType(TYPE_BLOB, "text", Family.STRING, _BYTES, blob=True),
    MySQLType(TYPE_MEDIUM_BLOB, "mediumtext", Family.STRING, _BYTES, blob=True),
    MySQLType(TYPE_LONG_BLOB, "longtext", Family.STRING, _BYTES, blob=True),
    MySQLType(TYPE_GEOMETRY, "geometry", Family.GEOMETRY, _BYTES),
)}


def mysql_type(code: int) -> MySQLType | None:
    """The facts of a type code, or None for a code binlake does not handle (NULL, vectors, …)."""
    return TYPES.get(code)


def family_of(code: int) -> Family | None:
    """The family of a type code, or None for a code binlake does not handle."""
    t = TYPES.get(code)
    return t.family if t is not None else None


def _codes(*families: Family) -> frozenset[int]:
    return frozenset(t.code for t in TYPES.values() if t.family in families)


INT_TYPES = _codes(Family.INT)
STRING_TYPES = _codes(Family.STRING)
BLOB_TYPES = frozenset(t.code for t in TYPES.values() if t.blob)


def type_to_str(tp: int, charset: str) -> str:
    """TiDB's ``TypeToStr``: the SQL type name of a type code (binary charset aware)."""
    t = TYPES.get(tp)
    if t is None:
        return "null" if tp == TYPE_NULL else "unknown"
    name = t.name
    if charset == BINARY_CHARSET:
        if t.blob:
            name = name.replace("text", "blob")
        elif tp in (TYPE_STRING, TYPE_VARCHAR, TYPE_VAR_STRING):
            name = name.replace("char", "binary")
    return name
