"""The MySQL sink's relay log (TiDB Binlog's ``[syncer.relay]``).

Every transaction and DDL is written here before the loader gets it, as one record of TiDB's
binlogfile framing — ``magic u32 LE (471532804) | length u64 LE | payload | CRC-32C(payload) u32 LE``
— whose payload is a secondary binlog (``schemas/secondary_binlog.proto``: one ``Binlog`` per
transaction, new values in ``row``, old values of an update in ``change_row``). Files are
``binlog-<16-digit index>-<YYYYMMDDhhmmss>`` in ``log-dir``, a new one once the current one reaches
``max-file-size``. Unlike TiDB, binlake fsyncs the file before anything written to it is applied.
A file is removed once every transaction in it is applied and the checkpoint passed it (the newest
file stays).

Records are encoded by :mod:`sink.secondary`; DDL records carry the statement binlake runs downstream.
"""
from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c

from schemas import secondary_binlog_pb2 as sb
from sink.errors import SinkError
from sink.mysql.config import DEFAULT_MAX_FILE_SIZE
from sink.mysql.statements import DML, TargetTable
from sink.secondary import LETTERS, column_value

MAGIC = 471532804
_HEAD = struct.Struct("<IQ")
_CRC = struct.Struct("<I")


class RelayLogError(SinkError):
    """A relay-log file is corrupt (not a torn tail) or cannot be written."""


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
            values = [column_value(c, j) for c, j in zip(m.row.columns, json)]
            old = [column_value(c, j) for c, j in zip(m.change_row.columns, json)] if m.HasField("change_row") else None
            yield DML.of(target, LETTERS[m.type], values, old, binlog.commit_ts)


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
