"""The recorded real-TiDB corpus: its file format and the canonical text form both sides compare in.

A corpus directory holds ``binlogs.bin`` (every binlog the pump stored, each as the raw
``binlog.Binlog`` bytes TiDB sent, prefixed with its length as a protobuf uvarint), ``ddl_history.json``
(TiDB's ``/ddl/history`` answer, verbatim), ``expected.json`` (every table read back from TiDB over its
MySQL port in the canonical form below) and ``meta.json``.

Canonical form: a value is TiDB's text for the SELECT expression :func:`select_expr` picks from the
column's ``information_schema`` type, read with the session time zone ``+00:00``, NULL as ``None``.
:func:`render` turns a binlake column value into the same text; :func:`same` compares two texts of a
column, treating FLOAT and DOUBLE as numbers (TiDB's float text is not Python's).
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from transform.codec import mysqltypes as mt
from transform.codec.model import ColumnInfo
from transform.codec.values import InvalidTime
from transform.codec.varint import encode_uvarint

BINLOGS = "binlogs.bin"
DDL_HISTORY = "ddl_history.json"
EXPECTED = "expected.json"
META = "meta.json"

ROWID = "_tidb_rowid"

_BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_DATETIME_FORMAT = "'%Y-%m-%d %H:%i:%s.%f'"


def select_expr(name: str, data_type: str) -> str:
    """The SELECT expression that reads column ``name`` of ``information_schema`` type ``data_type``
    in canonical form."""
    q = f"`{name}`"
    t = data_type.lower()
    if t in ("bit", "year"):
        return f"{q}+0"
    if t == "float":
        return f"CAST({q} AS DOUBLE)"   # TiDB's FLOAT text keeps 6 digits; as DOUBLE it is exact
    if t in ("datetime", "timestamp"):
        return f"DATE_FORMAT({q}, {_DATETIME_FORMAT})"
    if t in ("time", "json"):
        return f"CAST({q} AS CHAR)"
    if t in _BINARY_TYPES:
        return f"HEX({q})"
    return q


def render(col: ColumnInfo, value: Any) -> str | None:
    """A binlake column value (``decode_row``'s Python value) as canonical text."""
    if value is None:
        return None
    family = col.family
    if family in (mt.Family.DATETIME, mt.Family.TIMESTAMP):
        if isinstance(value, InvalidTime):
            return value if "." in value else f"{value}.000000"
        assert isinstance(value, dt.datetime)
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC)
        return (f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
                f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}")
    if family == mt.Family.DATE and isinstance(value, dt.date):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex().upper()
    if isinstance(value, float):
        return repr(value)
    return str(value)


def same(col: ColumnInfo, expected: str | None, got: str | None) -> bool:
    """Whether two canonical texts of ``col`` hold the same value."""
    if expected is None or got is None:
        return expected is got
    if col.family == mt.Family.FLOAT:
        return bool(np.float32(float(expected)) == np.float32(float(got))) or expected == got
    if col.family == mt.Family.DOUBLE:
        return float(expected) == float(got) or expected == got
    return expected == got


def write_binlogs(path: Path, payloads: Iterable[bytes]) -> int:
    """Write ``payloads`` length-delimited to ``path``; return how many."""
    n = 0
    with open(path, "wb") as f:
        for p in payloads:
            f.write(encode_uvarint(len(p)))
            f.write(p)
            n += 1
    return n


def read_binlogs(path: Path) -> Iterator[bytes]:
    """The payloads of a length-delimited binlog file, in file order."""
    data = path.read_bytes()
    off = 0
    while off < len(data):
        size, shift = 0, 0
        while True:
            b = data[off]
            off += 1
            size |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        if off + size > len(data):
            raise ValueError(f"{path}: record at {off} claims {size} bytes, the file has {len(data) - off} left")
        yield data[off:off + size]
        off += size


