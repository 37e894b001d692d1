"""TiDB Binlog's protobuf-file binlog (``schemas/pb_binlog.proto``): one upstream transaction as
db-type ``file`` writes it and reparo reads it.

A DML transaction is one ``Event`` per row change: its schema, table, type and a row of marshalled
``column`` messages (name, MySQL type byte, MySQL type name, value; an update's old value in ``value``
and new value in ``changed_value``). A value is TiDB's datum encoding of the value as TiDB Binlog's
``formatData`` leaves it: DATE/DATETIME/TIMESTAMP/TIME/DECIMAL/JSON as text, ENUM/SET/BIT as unsigned
integers, other values as they are (the same renderings as :mod:`sink.secondary`, BIT aside; TIMESTAMP in
the drainer's zone). The columns are TiDB Binlog's: an insert carries every column (a virtual generated
one as TiDB Binlog fills it), an update its non-generated ones, a delete those a row holds (virtual
generated columns left out). A DDL is
``use `db`; <query>;`` (a CREATE DATABASE: ``<query>;``). :func:`decode_events` reads them back with
reparo's conversions.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from schemas import pb_binlog_pb2 as pbb
from sink.mysql.statements import quote
from sink.secondary import Row, Table, column_of, spec_of
from transform.codec import mysqltypes as mt
from transform.codec.datums import Uint, decode_one, encode_datum

_EVENT = {"I": pbb.Insert, "U": pbb.Update, "D": pbb.Delete}
LETTERS = {v: k for k, v in _EVENT.items()}
_CREATE_DATABASE = re.compile(r"\s*create\s+(database|schema)\b", re.IGNORECASE)
# the MySQL types whose values reparo turns into text (its formatValue)
_TEXT_TYPES = frozenset((mt.TYPE_DATE, mt.TYPE_DATETIME, mt.TYPE_NEWDATE, mt.TYPE_TIMESTAMP, mt.TYPE_DURATION,
                         mt.TYPE_NEWDECIMAL, mt.TYPE_VARCHAR, mt.TYPE_STRING, mt.TYPE_JSON))


def _datum(value: Any, spec: Any, bit: bool) -> bytes:
    col = column_of(value, spec)
    if col.is_null:
        return b"\x00"
    if bit:
        return encode_datum(Uint(int.from_bytes(col.bytes_value, "big")))
    if col.HasField("int64_value"):
        return encode_datum(col.int64_value)
    if col.HasField("uint64_value"):
        return encode_datum(Uint(col.uint64_value))
    if col.HasField("double_value"):
        return encode_datum(col.double_value)
    if col.HasField("bytes_value"):
        return encode_datum(col.bytes_value)
    return encode_datum(col.string_value)


def encode_dml(commit_ts: int, pieces: Sequence[tuple[Table, list[Row]]]) -> pbb.Binlog:
    """One DML transaction (pieces of :func:`sink.secondary.python_rows`)."""
    out = pbb.Binlog(tp=pbb.DML, commit_ts=commit_ts, dml_data=pbb.DMLData())
    for target, rows in pieces:
        specs = [spec_of(info) for info in target.infos]
        heads = [(name, bytes((info.tp,)), mt.type_to_str(info.tp, info.type.charset))
                 for name, info in zip(target.columns, target.infos)]
        bits = target.bit_columns
        virtual = frozenset(i for i in target.generated if target.infos[i].virtual_generated)
        left_out = {"I": frozenset[int](), "U": target.generated, "D": virtual}
        for op, new, old in rows:
            event = out.dml_data.events.add(schema_name=target.db, table_name=target.name, tp=_EVENT[op])
            skip = left_out[op]
            if op == "U" and old is not None:
                values = zip(heads, old, new, specs)
                event.row.extend(pbb.column(name=n, tp=tp, mysql_type=mtype, value=_datum(o, s, i in bits),
                                            changed_value=_datum(v, s, i in bits)).SerializeToString()
                                 for i, ((n, tp, mtype), o, v, s) in enumerate(values) if i not in skip)
            else:
                event.row.extend(pbb.column(name=n, tp=tp, mysql_type=mtype, value=_datum(v, s, i in bits))
                                 .SerializeToString()
                                 for i, ((n, tp, mtype), v, s) in enumerate(zip(heads, new, specs)) if i not in skip)
    return out


def encode_ddl(commit_ts: int, schema: str, query: str) -> pbb.Binlog:
    """A DDL as TiDB Binlog's file output writes it (``use `schema`; query;``)."""
    if schema:
        query = f"{query};" if _CREATE_DATABASE.match(query) else f"use {quote(schema)}; {query};"
    return pbb.Binlog(tp=pbb.DDL, commit_ts=commit_ts, ddl_query=query.encode())


@dataclass(frozen=True)
class Value:
    """One column of a row change read back: its name, MySQL type byte and name, value (an update's old
    value) and an update's new value, converted as reparo converts them."""

    name: str
    tp: int
    mysql_type: str
    value: Any
    changed: Any = None


@dataclass(frozen=True)
class Event:
    """One row change read back from a file."""

    schema: str
    table: str
    op: str
    columns: tuple[Value, ...]


def _reparo_value(raw: bytes, tp: int) -> Any:
    if not raw:
        return None
    value, _ = decode_one(raw, 0)
    if value is None:
        return None
    if tp in _TEXT_TYPES and isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "surrogateescape")
    return value


def decode_events(binlog: pbb.Binlog) -> Iterator[Event]:
    """The row changes of a DML binlog, in order."""
    for event in binlog.dml_data.events:
        cols = []
        for raw in event.row:
            c = pbb.column.FromString(raw)
            tp = c.tp[0] if c.tp else 0
            cols.append(Value(c.name, tp, c.mysql_type, _reparo_value(c.value, tp),
                              _reparo_value(c.changed_value, tp) if c.HasField("changed_value") else None))
        yield Event(event.schema_name, event.table_name, LETTERS[event.tp], tuple(cols))


