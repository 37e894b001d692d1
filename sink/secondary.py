"""TiDB's secondary binlog (``schemas/secondary_binlog.proto``): one upstream transaction as TiDB
Binlog's Kafka messages and binlake's relay log carry it — one ``Binlog`` per transaction, one ``Table``
per table it writes with its ``column_info`` and ``unique_keys``, new values in ``row``, the old values
of an update in ``change_row``; a DDL as its query.

Values follow TiDB Binlog's ``DatumToColumn``: integers as int64 (uint64 when UNSIGNED), FLOAT/DOUBLE
as double, DECIMAL and every temporal type as text (DATETIME/TIMESTAMP with the column's fractional
digits), ENUM and SET as their index/bitmask (uint64), BIT, binary strings and JSON as bytes, other
strings as text.

Two views of a table: :meth:`Table.of`, the public non-generated columns a MySQL downstream is written
(the relay log, UTC); :meth:`Table.as_tidb_binlog`, what TiDB Binlog's Kafka and file outputs carry:
every public column, generated and hidden ones included, TIMESTAMP in the drainer's local zone (Go's
``time.Local``: :func:`drainer_zone`). A column the decoded rows lack (a virtual generated column, which
TiDB never writes to a row) gets the value TiDB Binlog's ``getDefaultOrZeroValue`` gives it
(:func:`transform.codec.values.missing_value`); an update's generated columns are NULL on both sides,
as TiDB Binlog's update decoder leaves them.

A transaction is serialized by hand (:func:`dml_bytes`: no message object per value), into the bytes
protobuf writes for the same message (``tests/sink/test_secondary_units.py`` holds it to that).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Any, Self

import pyarrow as pa
import pyarrow.compute as pc

from schemas import secondary_binlog_pb2 as sb
from transform import changes as ch
from transform.codec import mysqltypes as mt
from transform.codec.model import ColumnInfo, TableInfo
from transform.codec.values import json_value, missing_value
from transform.codec.varint import encode_uvarint as _varint  # a protobuf varint

OPS = {"I": sb.Insert, "U": sb.Update, "D": sb.Delete}
LETTERS = {v: k for k, v in OPS.items()}


_UTC_NAMES = frozenset(("", "UTC", "Etc/UTC", "UCT", "Etc/UCT", "Universal", "Etc/Universal", "Zulu", "Etc/Zulu"))


def drainer_zone() -> dt.tzinfo | None:
    """The zone TiDB Binlog's drainer renders TIMESTAMP in, Go's ``time.Local`` of this process: ``$TZ``
    when set (empty: UTC; a leading ``:`` dropped; a path read as a zone file), else ``/etc/localtime``;
    UTC when it cannot be loaded, as Go falls back. None stands for UTC."""
    import zoneinfo

    tz = os.environ.get("TZ")
    try:
        if tz is None:
            with open("/etc/localtime", "rb") as f:
                zone: dt.tzinfo = zoneinfo.ZoneInfo.from_file(f, key="Local")
        else:
            tz = tz[1:] if tz.startswith(":") else tz
            if tz in _UTC_NAMES:
                return None
            if tz.startswith("/"):
                with open(tz, "rb") as f:
                    zone = zoneinfo.ZoneInfo.from_file(f, key=tz)
            else:
                zone = zoneinfo.ZoneInfo(tz)
    except (OSError, ValueError, zoneinfo.ZoneInfoNotFoundError):
        return None
    probes = [dt.datetime(y, m, 1, tzinfo=dt.UTC) for y in (1970, 2000, dt.date.today().year) for m in (1, 7)]
    return None if all(p.astimezone(zone).utcoffset() == dt.timedelta(0) for p in probes) else zone


@dataclass(frozen=True)
class Table:
    """A table at one schema version as a downstream has it: its columns, unique keys (column
    positions, the primary key first), BIT columns, the columns' upstream definitions (empty when
    unknown), the positions of its generated columns and the zone TIMESTAMP is rendered in (None:
    UTC)."""

    db: str
    name: str
    columns: tuple[str, ...]
    keys: tuple[tuple[str, tuple[int, ...]], ...]
    bit_columns: frozenset[int] = field(default=frozenset())
    infos: tuple[ColumnInfo, ...] = ()
    generated: frozenset[int] = field(default=frozenset())
    zone: dt.tzinfo | None = None

    @classmethod
    def of(cls, db: str, table: TableInfo) -> Self:
        """``table`` in ``db`` as a MySQL downstream is written: its public, non-generated columns."""
        return cls._of(db, table, tuple(c for c in table.columns if c.state == mt.STATE_PUBLIC
                                        and not c.generated_expr_string and not c.hidden))

    @classmethod
    def as_tidb_binlog(cls, db: str, table: TableInfo, zone: dt.tzinfo | None) -> Self:
        """``table`` in ``db`` as TiDB Binlog's Kafka and file outputs carry it: every public column,
        generated and hidden ones included, TIMESTAMP in ``zone``."""
        table = table.as_defined()
        cols = tuple(c for c in table.columns if c.state == mt.STATE_PUBLIC)
        made = cls._of(db, table, cols)
        generated = frozenset(i for i, c in enumerate(cols) if c.generated_expr_string)
        return dataclasses.replace(made, generated=generated, zone=zone)

    @classmethod
    def _of(cls, db: str, table: TableInfo, cols: tuple[ColumnInfo, ...]) -> Self:
        pos = {c.name.lower(): i for i, c in enumerate(cols)}
        keys: list[tuple[str, tuple[int, ...]]] = []
        handle = table.pk_handle_column
        if table.pk_is_handle and handle is not None and handle.name.lower() in pos:
            keys.append(("PRIMARY", (pos[handle.name.lower()],)))
        for idx in sorted(table.indices, key=lambda i: not i.primary):
            if not (idx.unique or idx.primary) or idx.state != mt.STATE_PUBLIC:
                continue
            names = [ic.name.lower() for ic in idx.columns]
            if all(n in pos for n in names):
                keys.append(("PRIMARY" if idx.primary else idx.name, tuple(pos[n] for n in names)))
        bits = frozenset(i for i, c in enumerate(cols) if c.family is mt.Family.BIT)
        return cls(db, table.name, tuple(c.name for c in cols), tuple(keys), bits, cols)

    @cached_property
    def wire(self) -> _Wire:
        """What every secondary-binlog ``Table`` of this table repeats (:func:`dml_bytes`)."""
        return _wire(self)


Spec = tuple[ColumnInfo | None, mt.Family | None, bool]   # a column's info, its family, unsigned


def spec_of(info: ColumnInfo | None) -> Spec:
    return (info, info.family, info.unsigned) if info is not None else (None, None, False)


_MASK64 = (1 << 64) - 1
_DOUBLE = struct.Struct("<d").pack
_NULL = b"\x08\x01"


def _field(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field: ``tag``, the length, ``body``."""
    return tag + _varint(len(body)) + body


def _text(tag: bytes, text: str) -> bytes:
    return _field(tag, text.encode())


def column_bytes(value: Any, spec: Spec) -> bytes:
    """``value`` as TiDB Binlog's ``DatumToColumn`` renders it for a column of ``spec``: a serialized
    ``Column`` (protobuf's own bytes for it: the one field set)."""
    if value is None:
        return _NULL
    info, family, unsigned = spec
    if family is mt.Family.ENUM and isinstance(value, str) and info is not None:
        elems = [e.lower() for e in info.type.elems]
        return b"\x18" + _varint(elems.index(value.lower()) + 1 if value.lower() in elems else 0)
    if family is mt.Family.SET and isinstance(value, str) and info is not None:
        elems = [e.lower() for e in info.type.elems]
        return b"\x18" + _varint(sum(1 << elems.index(p.lower()) for p in value.split(",") if p and p.lower() in elems))
    if family is mt.Family.BIT and isinstance(value, int) and info is not None:
        return _field(b"\x2a", value.to_bytes(max(1, (max(info.type.flen, 1) + 7) // 8), "big"))
    if family is mt.Family.JSON and isinstance(value, str):
        return _text(b"\x2a", value)
    if isinstance(value, bool):
        return b"\x10" + _varint(int(value))
    if isinstance(value, int):
        return b"\x18" + _varint(value) if unsigned else b"\x10" + _varint(value & _MASK64)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    if isinstance(value, Decimal) and info is not None and family is mt.Family.INT:
        return b"\x18" + _varint(int(value))          # BIGINT UNSIGNED travels as decimal(20,0)
    if isinstance(value, (bytes, bytearray)):
        return _field(b"\x2a", bytes(value))
    if isinstance(value, (Decimal, dt.date, dt.datetime)):
        return _text(b"\x32", str(json_value(value)))
    return _text(b"\x32", str(value))


def column_of(value: Any, spec: Spec) -> sb.Column:
    """``value`` as TiDB Binlog's ``DatumToColumn`` renders it for a column of ``spec``."""
    col = sb.Column()
    col.ParseFromString(column_bytes(value, spec))
    return col


def column_value(col: sb.Column, json: bool) -> Any:
    """A column's value as the relay log holds it (JSON as text)."""
    if col.is_null:
        return None
    if json and col.HasField("bytes_value"):
        return col.bytes_value.decode()
    for name in ("int64_value", "uint64_value", "double_value", "bytes_value", "string_value"):
        if col.HasField(name):
            return getattr(col, name)
    return None


def _int32(v: int) -> int:
    """``v`` as Go's ``int32(v)`` (TiDB's ``Flen`` of LONGTEXT/JSON is 4294967295, written as -1)."""
    return (v + (1 << 31)) % (1 << 32) - (1 << 31)


_BIT_WRAP = 1 << 64


def _timestamp_text(values: list[Any], fsp: int, zone: dt.tzinfo) -> list[Any]:
    """UTC instants as TiDB Binlog prints a TIMESTAMP in ``zone``: ``YYYY-MM-DD HH:MM:SS`` and ``fsp``
    fractional digits."""
    out: list[Any] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        local = v.astimezone(zone)
        text = f"{local:%Y-%m-%d %H:%M:%S}"
        out.append(f"{text}.{local.microsecond:06d}"[:20 + fsp] if fsp else text)
    return out


def utc_text(text: str, zone: dt.tzinfo) -> str:
    """A TIMESTAMP TiDB Binlog printed in ``zone`` as the same instant in UTC (the text a UTC session
    takes); a zero or unreadable value unchanged."""
    try:
        local = dt.datetime.fromisoformat(text)
    except ValueError:
        return text
    utc = local.replace(tzinfo=zone).astimezone(dt.UTC)
    out = f"{utc:%Y-%m-%d %H:%M:%S}"
    digits = len(text) - text.index(".") - 1 if "." in text else 0
    return f"{out}.{utc.microsecond:06d}"[:20 + digits] if digits else out


def _python_values(column: pa.Array | pa.ChunkedArray, bit: bool, fsp: int,
                   zone: dt.tzinfo | None = None) -> list[Any]:
    """One decoded column's values as ``_column`` takes them: DATETIME/TIMESTAMP/DATE as their MySQL
    text (``fsp`` fractional digits, as TiDB prints them; TIMESTAMP in ``zone``, UTC when None), BIT(64)
    values the decoder wrapped into a signed long unwrapped, the rest as Arrow gives them."""
    if pa.types.is_timestamp(column.type) and zone is not None and column.type.tz is not None:
        return _timestamp_text(column.cast(pa.timestamp("us", tz="UTC")).to_pylist(), fsp, zone)
    if pa.types.is_timestamp(column.type):
        text = column.cast(pa.timestamp("us")).cast(pa.string())     # YYYY-MM-DD HH:MM:SS.ffffff
        column = pc.utf8_slice_codeunits(text, 0, 20 + fsp if fsp else 19)
    elif pa.types.is_date32(column.type):
        column = column.cast(pa.string())
    values: list[Any] = column.to_pylist()
    if bit:
        values = [v + _BIT_WRAP if isinstance(v, int) and v < 0 else v for v in values]
    return values


def _missing(info: ColumnInfo, zone: dt.tzinfo | None) -> Any:
    """What TiDB Binlog's drainer fills in for a column a row lacks (``getDefaultOrZeroValue``), a
    TIMESTAMP origin default in ``zone`` (``transTimestampToLocal``: no fractional digits)."""
    value = missing_value(info)
    if isinstance(value, dt.datetime) and info.tp == mt.TYPE_TIMESTAMP and zone is not None:
        return _timestamp_text([value.replace(tzinfo=dt.UTC)], 0, zone)[0]
    return value


Row = tuple[str, tuple[Any, ...], tuple[Any, ...] | None]   # op, new values, old values of an update


def _values(target: Table, source: Any, names: Sequence[str], count: int) -> list[tuple[Any, ...]]:
    """Each row's values of ``target``'s columns from ``source(name)``; a generated column not among
    ``names`` (a virtual one: never written to a row) filled as TiDB Binlog fills it."""
    fsps = [info.fsp for info in target.infos] or [6] * len(target.columns)
    absent = {i for i in target.generated if target.columns[i] not in set(names)}
    return list(zip(*(_python_values(source(n), i in target.bit_columns, fsps[i], target.zone) if i not in absent
                      else [_missing(target.infos[i], target.zone)] * count
                      for i, n in enumerate(target.columns))))


def python_rows(target: Table, rows: pa.Table) -> list[Row]:
    """A decoded piece's row changes as the Python values :func:`encode_dml` takes, in order (an
    update's generated columns NULL on both sides)."""
    ops = rows.column(ch.OP).to_pylist()
    news = _values(target, rows.column, rows.column_names, rows.num_rows)
    olds: list[tuple[Any, ...]] = []
    if "U" in ops and ch.BEFORE in rows.column_names:
        chunks = rows.column(ch.BEFORE).chunks
        before = pa.concat_arrays(chunks) if chunks else pa.array([], rows.schema.field(ch.BEFORE).type)
        olds = _values(target, before.field, [f.name for f in before.type], len(before))
    out: list[Row] = [(op, new, olds[r] if op == "U" and olds else None) for r, (op, new) in enumerate(zip(ops, news))]
    if target.generated and "U" in ops:
        gen = target.generated
        out = [(op, tuple(None if i in gen else v for i, v in enumerate(new)),
                None if old is None else tuple(None if i in gen else v for i, v in enumerate(old)))
               if op == "U" else (op, new, old) for op, new, old in out]
    return out


# how :func:`_row` writes a column's values: ints as int64 and text as text (the rest by column_bytes),
# text as text, every value by column_bytes
_INT64, _PLAIN, _SPECIAL = 0, 1, 2


@dataclass(frozen=True)
class _Wire:
    """What every ``Table`` message of one table repeats: its head (names, ``column_info``), its
    ``unique_keys`` (written after the mutations) and how each column's values are written."""

    head: bytes
    keys: bytes
    specs: tuple[Spec, ...]
    kinds: tuple[int, ...]


def _wire(target: Table) -> _Wire:
    infos: list[ColumnInfo | None] = list(target.infos) or [None] * len(target.columns)
    primary = {target.columns[i] for name, cols in target.keys if name == "PRIMARY" for i in cols}
    head = [_text(b"\x0a", target.db), _text(b"\x12", target.name)]
    for name, info in zip(target.columns, infos):
        head.append(_field(b"\x1a", b"".join((
            _text(b"\x0a", name),
            _text(b"\x12", mt.type_to_str(info.tp, info.type.charset) if info else ""),
            b"\x18" + _varint(name in primary),
            b"\x20" + _varint(_int32(info.type.flen) & _MASK64 if info else 0),
            b"\x28" + _varint(_int32(info.type.decimal) & _MASK64 if info else 0)))))
    keys = b"".join(_field(b"\x2a", _text(b"\x0a", key) + b"".join(_text(b"\x12", target.columns[i]) for i in cols))
                    for key, cols in target.keys)
    specs = tuple(spec_of(info) for info in infos)
    kinds = tuple(_SPECIAL if family in _BY_FAMILY else _PLAIN if unsigned else _INT64 for _, family, unsigned in specs)
    return _Wire(b"".join(head), keys, specs, kinds)


_BY_FAMILY = (mt.Family.ENUM, mt.Family.SET, mt.Family.BIT, mt.Family.JSON)   # values column_bytes maps


def _row(values: Sequence[Any], wire: _Wire) -> bytes:
    """A serialized ``Row`` (the common cases written here, as :func:`column_bytes` writes them)."""
    out = []
    for v, spec, kind in zip(values, wire.specs, wire.kinds):
        t = type(v)
        if t is int and kind == _INT64:
            body = b"\x10" + _varint(v & _MASK64)
        elif t is str and kind != _SPECIAL:
            data = v.encode()
            body = b"\x32" + _varint(len(data)) + data
        else:
            body = column_bytes(v, spec)
        out.append(b"\x0a" + _varint(len(body)) + body)
    return b"".join(out)


_MUTATION = {"I": b"\x08\x00", "U": b"\x08\x01", "D": b"\x08\x02"}


def dml_bytes(commit_ts: int, pieces: Sequence[tuple[Table, list[Row]]]) -> bytes:
    """One DML transaction as a serialized secondary binlog (one ``Table`` per piece of
    :func:`python_rows`): the bytes protobuf writes for it, built without a message per value."""
    tables = []
    for target, rows in pieces:
        wire = target.wire
        mutations = [_field(b"\x22", _MUTATION[op] + _field(b"\x12", _row(new, wire))
                            + (_field(b"\x1a", _row(old, wire)) if old is not None else b""))
                     for op, new, old in rows]
        tables.append(_field(b"\x0a", wire.head + b"".join(mutations) + wire.keys))
    dml = _field(b"\x1a", b"".join(tables)) if tables else b""
    return b"\x08\x00\x10" + _varint(commit_ts & _MASK64) + dml


def encode_dml(commit_ts: int, pieces: Sequence[tuple[Table, list[Row]]]) -> sb.Binlog:
    """One DML transaction as a secondary binlog message (:func:`dml_bytes`)."""
    binlog = sb.Binlog()
    binlog.ParseFromString(dml_bytes(commit_ts, pieces))
    return binlog


def encode_ddl(commit_ts: int, db: str | None, table: str, query: str) -> sb.Binlog:
    """A DDL as a secondary binlog."""
    return sb.Binlog(type=sb.DDL, commit_ts=commit_ts,
                     ddl_data=sb.DDLData(schema_name=db or "", table_name=table, ddl_query=query.encode()))
