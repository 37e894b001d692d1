"""The MySQL sink's relay log (TiDB Binlog's ``[syncer.relay]``).

Every transaction and DDL is written here before the loader gets it, as one record of TiDB's
binlogfile framing — ``magic u32 LE (471532804) | length u64 LE | payload | CRC-32C(payload) u32 LE``
— whose payload is a secondary binlog (``schemas/secondary_binlog.proto``: one ``Binlog`` per
transaction, new values in ``row``, old values of an update in ``change_row``). Files are
``binlog-<16-digit index>-<YYYYMMDDhhmmss>`` in ``log-dir``, a new one once the current one reaches
``max-file-size``. Unlike TiDB, binlake fsyncs the file before anything written to it is applied.
A file is removed once every transaction in it is applied and the checkpoint passed it (the newest
file stays).

Values follow TiDB's ``DatumToColumn``: integers as int64 (uint64 when UNSIGNED), FLOAT/DOUBLE as
double, DECIMAL and every temporal type as text, ENUM and SET as their index/bitmask (uint64), BIT,
binary strings and JSON as bytes, other strings as text. DDL records carry the statement binlake
runs downstream.
"""
from __future__ import annotations

import datetime as dt
import os
import struct
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import crc32c
import pyarrow as pa
import pyarrow.compute as pc

from schemas import secondary_binlog_pb2 as sb
from sink.errors import SinkError
from sink.mysql.config import DEFAULT_MAX_FILE_SIZE
from sink.mysql.statements import DML, TargetTable
from transform import changes as ch
from transform.codec import mysqltypes as mt
from transform.codec.model import ColumnInfo
from transform.codec.values import json_value

MAGIC = 471532804
_HEAD = struct.Struct("<IQ")
_CRC = struct.Struct("<I")
_OPS = {"I": sb.Insert, "U": sb.Update, "D": sb.Delete}
_LETTERS = {v: k for k, v in _OPS.items()}


class RelayLogError(SinkError):
    """A relay-log file is corrupt (not a torn tail) or cannot be written."""


# ---------------------------------------------------------------------------------------------
# values

_Spec = tuple[ColumnInfo | None, mt.Family | None, bool]   # a column's info, its family, unsigned


def _spec(info: ColumnInfo | None) -> _Spec:
    return (info, info.family, info.unsigned) if info is not None else (None, None, False)


def _column(value: Any, spec: _Spec) -> sb.Column:
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


def _value(col: sb.Column, json: bool) -> Any:
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


def _python_values(column: pa.Array | pa.ChunkedArray, bit: bool) -> list[Any]:
    """One decoded column's values as ``_column`` takes them: DATETIME/TIMESTAMP/DATE as their MySQL
    text (TIMESTAMP in UTC, as ``transform.codec.values.json_value`` renders them), BIT(64) values
    the decoder wrapped into a signed long unwrapped, the rest as Arrow gives them."""
    if pa.types.is_timestamp(column.type):
        text = column.cast(pa.timestamp("us")).cast(pa.string())
        column = pc.replace_substring_regex(text, r"\.000000$", "")
    elif pa.types.is_date32(column.type):
        column = column.cast(pa.string())
    values: list[Any] = column.to_pylist()
    if bit:
        values = [v + _BIT_WRAP if isinstance(v, int) and v < 0 else v for v in values]
    return values


RelayRow = tuple[str, tuple[Any, ...], tuple[Any, ...] | None]   # op, new values, old values of an update


def _values(target: TargetTable, source: Any) -> list[tuple[Any, ...]]:
    return list(zip(*(_python_values(source(n), i in target.bit_columns) for i, n in enumerate(target.columns))))


def python_rows(target: TargetTable, rows: pa.Table) -> list[RelayRow]:
    """A decoded piece's row changes as the Python values the relay log encodes, in order."""
    ops = rows.column(ch.OP).to_pylist()
    news = _values(target, rows.column)
    olds: list[tuple[Any, ...]] = []
    if "U" in ops and ch.BEFORE in rows.column_names:
        chunks = rows.column(ch.BEFORE).chunks
        before = pa.concat_arrays(chunks) if chunks else pa.array([], rows.schema.field(ch.BEFORE).type)
        olds = _values(target, before.field)
    return [(op, new, olds[r] if op == "U" and olds else None) for r, (op, new) in enumerate(zip(ops, news))]


def encode_dml(commit_ts: int, pieces: list[tuple[TargetTable, list[RelayRow]]]) -> sb.Binlog:
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
        specs = [_spec(info) for info in infos]
        for op, new, old in rows:
            m = table.mutations.add(type=_OPS[op])
            m.row.columns.extend(_column(v, spec) for v, spec in zip(new, specs))
            if old is not None:
                m.change_row.columns.extend(_column(v, spec) for v, spec in zip(old, specs))
    return out


def encode_ddl(commit_ts: int, db: str | None, table: str, query: str) -> sb.Binlog:
    """A DDL as a secondary binlog (``query`` is the statement run downstream)."""
    return sb.Binlog(type=sb.DDL, commit_ts=commit_ts,
                     ddl_data=sb.DDLData(schema_name=db or "", table_name=table, ddl_query=query.encode()))


def decode_dml(binlog: sb.Binlog) -> Iterator[DML]:
    """The DMLs of a secondary DML binlog, in order (values as the relay holds them; JSON as text,
    which a MySQL JSON column takes, where a binary string is refused)."""
    for table in binlog.dml_data.tables:
        names = tuple(c.name for c in table.column_info)
        json = [c.mysql_type == "json" for c in table.column_info]
        pos = {n: i for i, n in enumerate(names)}
        keys = tuple((k.name, tuple(pos[c] for c in k.column_names)) for k in table.unique_keys
                     if all(c in pos for c in k.column_names))
        target = TargetTable(table.schema_name, table.table_name, names, keys)
        for m in table.mutations:
            values = [_value(c, j) for c, j in zip(m.row.columns, json)]
            old = [_value(c, j) for c, j in zip(m.change_row.columns, json)] if m.HasField("change_row") else None
            yield DML.of(target, _LETTERS[m.type], values, old, binlog.commit_ts)


# ---------------------------------------------------------------------------------------------
# files

def _frame(payload: bytes) -> bytes:
    return _HEAD.pack(MAGIC, len(payload)) + payload + _CRC.pack(crc32c.crc32c(payload))


def read_records(path: Path, last: bool) -> Iterator[bytes]:
    """The payloads of one relay file. A torn record at the end of the ``last`` file ends it (the
    write it belonged to was never synced, so nothing of it was applied); anything else that does
    not check raises :class:`RelayLogError`."""
    data = path.read_bytes()
    off = 0
    while off < len(data):
        torn = f"torn record at offset {off} of {path}"
        if off + _HEAD.size > len(data):
            if last:
                return
            raise RelayLogError(torn)
        magic, length = _HEAD.unpack_from(data, off)
        if magic != MAGIC:
            raise RelayLogError(f"bad magic {magic:#x} at offset {off} of {path}")
        end = off + _HEAD.size + length + _CRC.size
        if end > len(data):
            if last:
                return
            raise RelayLogError(torn)
        payload = data[off + _HEAD.size:end - _CRC.size]
        if _CRC.unpack_from(data, end - _CRC.size)[0] != crc32c.crc32c(payload):
            if last and end == len(data):
                return
            raise RelayLogError(f"checksum mismatch at offset {off} of {path}")
        yield payload
        off = end


class RelayLog:
    """The relay files under ``directory``: appended and synced by a run, read back by a recovery."""

    def __init__(self, directory: str | Path, max_file_size: int = DEFAULT_MAX_FILE_SIZE) -> None:
        self.dir = Path(directory)
        self.max_file_size = max_file_size
        self.file: Any = None
        self.index = -1
        self.last_ts: dict[Path, int] = {}       # files this process wrote: their newest commit_ts
        self.current: Path | None = None
        self.dirty = False

    def files(self) -> list[Path]:
        """The relay files in index order."""
        if not self.dir.is_dir():
            return []
        return sorted((p for p in self.dir.iterdir() if p.name.startswith("binlog-") and p.is_file()),
                      key=lambda p: int(p.name.split("-")[1]))

    def read(self) -> Iterator[sb.Binlog]:
        """Every record of every file, oldest first."""
        files = self.files()
        for i, path in enumerate(files):
            for payload in read_records(path, last=i == len(files) - 1):
                yield sb.Binlog.FromString(payload)

    def reset(self) -> None:
        """Remove every relay file (a run that pulls from the pumps does not need older ones)."""
        self.close()
        for path in self.files():
            path.unlink()
        self.index = -1

    def append(self, binlog: sb.Binlog) -> None:
        """Write one record (to a new file when the current one is full); :meth:`sync` makes it durable."""
        try:
            if self.file is None or self.file.tell() >= self.max_file_size:
                self._rotate()
            self.file.write(_frame(binlog.SerializeToString()))
        except OSError as e:
            raise RelayLogError(f"cannot write the relay log in {self.dir}: {e}") from None
        assert self.current is not None
        self.last_ts[self.current] = binlog.commit_ts
        self.dirty = True

    def _rotate(self) -> None:
        self.sync()
        if self.file is not None:
            self.file.close()
        self.dir.mkdir(parents=True, exist_ok=True)
        existing = self.files()
        self.index = max(self.index, int(existing[-1].name.split("-")[1]) if existing else -1) + 1
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        self.current = self.dir / f"binlog-{self.index:016d}-{stamp}"
        self.file = open(self.current, "ab")   # kept open across appends
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def sync(self) -> None:
        """fsync what was appended since the last sync."""
        if self.file is not None and self.dirty:
            try:
                self.file.flush()
                os.fsync(self.file.fileno())
            except OSError as e:
                raise RelayLogError(f"cannot sync the relay log in {self.dir}: {e}") from None
            self.dirty = False

    def purge(self, applied_ts: int) -> None:
        """Remove the files whose transactions are all at or below ``applied_ts`` (never the newest)."""
        for path, ts in list(self.last_ts.items()):
            if path != self.current and ts <= applied_ts:
                path.unlink(missing_ok=True)
                del self.last_ts[path]

    def close(self) -> None:
        """Sync and close the current file."""
        self.sync()
        if self.file is not None:
            self.file.close()
            self.file = None
