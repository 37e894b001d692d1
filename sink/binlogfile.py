"""TiDB's binlogfile framing and a directory of such files (the MySQL sink's relay log, the protobuf
files of db-type ``file``).

A record is ``magic u32 LE (471532804) | length u64 LE | payload | CRC-32C(payload) u32 LE``; files
are ``binlog-<16-digit index>-<YYYYMMDDhhmmss>``, a new one once the current one reaches its maximum
size. binlake fsyncs a file before anything written to it counts.
"""
from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c

from sink.errors import SinkError

MAGIC = 471532804
_HEAD = struct.Struct("<IQ")
_CRC = struct.Struct("<I")


class BinlogFileError(SinkError):
    """A binlog file is corrupt (not a torn tail) or cannot be written."""


def _frame(payload: bytes) -> bytes:
    return _HEAD.pack(MAGIC, len(payload)) + payload + _CRC.pack(crc32c.crc32c(payload))


def read_records(path: Path, last: bool) -> Iterator[bytes]:
    """The payloads of one file. A torn record at the end of the ``last`` file ends it (the
    write it belonged to was never synced, so nothing of it was applied); anything else that does
    not check raises :class:`BinlogFileError`."""
    data = path.read_bytes()
    off = 0
    while off < len(data):
        torn = f"torn record at offset {off} of {path}"
        if off + _HEAD.size > len(data):
            if last:
                return
            raise BinlogFileError(torn)
        magic, length = _HEAD.unpack_from(data, off)
        if magic != MAGIC:
            raise BinlogFileError(f"bad magic {magic:#x} at offset {off} of {path}")
        end = off + _HEAD.size + length + _CRC.size
        if end > len(data):
            if last:
                return
            raise BinlogFileError(torn)
        payload = data[off + _HEAD.size:end - _CRC.size]
        if _CRC.unpack_from(data, end - _CRC.size)[0] != crc32c.crc32c(payload):
            if last and end == len(data):
                return
            raise BinlogFileError(f"checksum mismatch at offset {off} of {path}")
        yield payload
        off = end


class BinlogFiles:
    """The binlog files under ``directory`` (``binlog-<16-digit index>-<YYYYMMDDhhmmss>``): appended and
    synced by a run, read back after it."""

    def __init__(self, directory: str | Path, max_file_size: int) -> None:
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

    def payloads(self) -> Iterator[bytes]:
        """Every record's payload in every file, oldest first."""
        files = self.files()
        for i, path in enumerate(files):
            yield from read_records(path, last=i == len(files) - 1)

    def recover_tail(self) -> bytes | None:
        """The payload of the last whole record (None: no record), after cutting a torn record off the
        end of the newest file; appends then continue that file (a new one once it is full)."""
        files = self.files()
        last: bytes | None = None
        for i, path in enumerate(files):
            if i < len(files) - 1:
                for payload in read_records(path, last=False):
                    last = payload
                continue
            end = 0
            for payload in read_records(path, last=True):
                end += _HEAD.size + len(payload) + _CRC.size
                last = payload
            if path.stat().st_size > end:
                with open(path, "r+b") as f:
                    f.truncate(end)
                    os.fsync(f.fileno())
            self.index, self.current = int(path.name.split("-")[1]), path
            self.file = open(path, "ab")
        return last

    def remove_older_than(self, seconds: float) -> list[Path]:
        """Remove the files (never the newest) last modified more than ``seconds`` ago; returns them."""
        removed = []
        for path in self.files()[:-1]:
            if path != self.current and time.time() - path.stat().st_mtime > seconds:
                path.unlink(missing_ok=True)
                removed.append(path)
        return removed

    def reset(self) -> None:
        """Remove every relay file (a run that pulls from the pumps does not need older ones)."""
        self.close()
        for path in self.files():
            path.unlink()
        self.index = -1

    def append(self, binlog: Any) -> None:
        """Write one record (to a new file when the current one is full); :meth:`sync` makes it durable."""
        try:
            if self.file is None or self.file.tell() >= self.max_file_size:
                self._rotate()
            self.file.write(_frame(binlog.SerializeToString()))
        except OSError as e:
            raise BinlogFileError(f"cannot write the binlog files in {self.dir}: {e}") from None
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
                raise BinlogFileError(f"cannot sync the binlog files in {self.dir}: {e}") from None
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
