"""TiDB's secondary binlog (``schemas/secondary_binlog.proto``): one upstream transaction as TiDB
Binlog's Kafka messages and binlake's relay log carry it — one ``Binlog`` per transaction, one ``Table``
per table it writes with its ``column_info`` and ``unique_keys``, new values in ``row``, the old values
of an update in ``change_row``; a DDL as its query.

Values follow TiDB Binlog's ``DatumToColumn``: integers as int64 (uint64 when UNSIGNED), FLOAT/DOUBLE
as double, DECIMAL and every temporal type as text (DATETIME/TIMESTAMP with the column's fractional
digits, TIMESTAMP in UTC), ENUM and SET as their index/bitmask (uint64), BIT, binary strings and JSON as
bytes, other strings as text. A table's columns are the public, non-generated ones binlake decodes.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Self

import pyarrow as pa
import pyarrow.compute as pc

from schemas import secondary_binlog_pb2 as sb
from transform import changes as ch
from transform.codec import mysqltypes as mt
from transform.codec.model import ColumnInfo, TableInfo
from transform.codec.values import json_value

OPS = {"I": sb.Insert, "U": sb.Update, "D": sb.Delete}
LETTERS = {v: k for k, v in OPS.items()}


@dataclass(frozen=True)
class Table:
    """A table at one schema version as a downstream has it: its written columns (``of`` a TableInfo: the
    public, non-generated ones), unique keys (column positions, the primary key first), BIT columns and
    the columns' upstream definitions (empty when unknown)."""

    db: str
    name: str
    columns: tuple[str, ...]
    keys: tuple[tuple[str, tuple[int, ...]], ...]
    bit_columns: frozenset[int] = field(default=frozenset())
    infos: tuple[ColumnInfo, ...] = ()

    @classmethod
    def of(cls, db: str, table: TableInfo) -> Self:
        """``table`` in ``db`` as a downstream has it."""
        cols = tuple(c for c in table.columns
                     if c.state == mt.STATE_PUBLIC and not c.generated_expr_string and not c.hidden)
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


Spec = tuple[ColumnInfo | None, mt.Family | None, bool]   # a column's info, its family, unsigned


def spec_of(info: ColumnInfo | None) -> Spec:
    return (info, info.family, info.unsigned) if info is not None else (None, None, False)


def column_of(value: Any, spec: Spec) -> sb.Column:
    """``value`` as TiDB Binlog's ``DatumToColumn`` renders it for a column of ``spec``."""
    if value is None:
        return sb.Column(is_null=True)
    info, family, unsigned = spec
    if family is mt.Family.ENUM and isinstance(value, str) and info is not None:
        elems = [e.lower() for e in info.type.elems]
        return sb.Column(uint64_value=elems.index(value.lower()) + 1 if value.lower() in elems else 0)
    if family is mt.Family.SET and isinstance(value, str) and info is not None:
        elems = [e.lower() for e in info.type.elems]
        mask = sum(1 << elems.index(p.lower()) for p in value.split(",") if p and p.lower() in elems)
        return sb.Column(uint64_value=mask)
    if family is mt.Family.BIT and isinstance(value, int) and info is not None:
        return sb.Column(bytes_value=value.to_bytes(max(1, (max(info.type.flen, 1) + 7) // 8), "big"))
    if family is mt.Family.JSON and isinstance(value, str):
        return sb.Column(bytes_value=value.encode())
    if isinstance(value, bool):
        return sb.Column(int64_value=int(value))
    if isinstance(value, int):
        return sb.Column(uint64_value=value) if unsigned else sb.Column(int64_value=value)
    if isinstance(value, float):
        return sb.Column(double_value=value)
    if isinstance(value, Decimal) and info is not None and family is mt.Family.INT:
        return sb.Column(uint64_value=int(value))          # BIGINT UNSIGNED travels as decimal(20,0)
    if isinstance(value, (bytes, bytearray)):
        return sb.Column(bytes_value=bytes(value))
    if isinstance(value, (Decimal, dt.date, dt.datetime)):
        return sb.Column(string_value=str(json_value(value)))
    return sb.Column(string_value=str(value))


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


def _python_values(column: pa.Array | pa.ChunkedArray, bit: bool, fsp: int) -> list[Any]:
    """One decoded column's values as ``_column`` takes them: DATETIME/TIMESTAMP/DATE as their MySQL
    text (``fsp`` fractional digits, as TiDB prints them; TIMESTAMP in UTC), BIT(64) values the decoder
    wrapped into a signed long unwrapped, the rest as Arrow gives them."""
    if pa.types.is_timestamp(column.type):
        text = column.cast(pa.timestamp("us")).cast(pa.string())     # YYYY-MM-DD HH:MM:SS.ffffff
        column = pc.utf8_slice_codeunits(text, 0, 20 + fsp if fsp else 19)
    elif pa.types.is_date32(column.type):
        column = column.cast(pa.string())
    values: list[Any] = column.to_pylist()
    if bit:
        values = [v + _BIT_WRAP if isinstance(v, int) and v < 0 else v for v in values]
    return values


Row = tuple[str, tuple[Any, ...], tuple[Any, ...] | None]   # op, new values, old values of an update


def _values(target: Table, source: Any) -> list[tuple[Any, ...]]:
    fsps = [info.fsp for info in target.infos] or [6] * len(target.columns)
    return list(zip(*(_python_values(source(n), i in target.bit_columns, fsps[i])
                      for i, n in enumerate(target.columns))))


def python_rows(target: Table, rows: pa.Table) -> list[Row]:
    """A decoded piece's row changes as the Python values :func:`encode_dml` takes, in order."""
    ops = rows.column(ch.OP).to_pylist()
    news = _values(target, rows.column)
    olds: list[tuple[Any, ...]] = []
    if "U" in ops and ch.BEFORE in rows.column_names:
        chunks = rows.column(ch.BEFORE).chunks
        before = pa.concat_arrays(chunks) if chunks else pa.array([], rows.schema.field(ch.BEFORE).type)
        olds = _values(target, before.field)
    return [(op, new, olds[r] if op == "U" and olds else None) for r, (op, new) in enumerate(zip(ops, news))]


def encode_dml(commit_ts: int, pieces: Sequence[tuple[Table, list[Row]]]) -> sb.Binlog:
    """One DML transaction as a secondary binlog (one ``Table`` per piece of :func:`python_rows`)."""
    out = sb.Binlog(type=sb.DML, commit_ts=commit_ts)
    for target, rows in pieces:
        infos: list[ColumnInfo | None] = list(target.infos) or [None] * len(target.columns)
        primary = {target.columns[i] for name, cols in target.keys if name == "PRIMARY" for i in cols}
        table = out.dml_data.tables.add(schema_name=target.db, table_name=target.name)
        for name, info in zip(target.columns, infos):
            table.column_info.add(name=name, is_primary_key=name in primary,
                                  mysql_type=mt.type_to_str(info.tp, info.type.charset) if info else "",
                                  flen=_int32(info.type.flen) if info else 0,
                                  decimal=_int32(info.type.decimal) if info else 0)
        for key, cols in target.keys:
            table.unique_keys.add(name=key, column_names=[target.columns[i] for i in cols])
        specs = [spec_of(info) for info in infos]
        for op, new, old in rows:
            m = table.mutations.add(type=OPS[op])
            m.row.columns.extend(column_of(v, spec) for v, spec in zip(new, specs))
            if old is not None:
                m.change_row.columns.extend(column_of(v, spec) for v, spec in zip(old, specs))
    return out


def encode_ddl(commit_ts: int, db: str | None, table: str, query: str) -> sb.Binlog:
    """A DDL as a secondary binlog."""
    return sb.Binlog(type=sb.DDL, commit_ts=commit_ts,
                     ddl_data=sb.DDLData(schema_name=db or "", table_name=table, ddl_query=query.encode()))
