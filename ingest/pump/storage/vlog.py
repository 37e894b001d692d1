"""Value log: append-only files of framed binlog records, as TiDB Binlog's ``pump/storage/log.go``.

A record is ``magic u32 | length u64 | crc32c u32 | payload`` (little-endian, 16-byte header); a
finalized file ends with the footer ``max_ts i64 | end-magic u32``. Files are ``NNNNNN.vlog`` by fid.
A pointer to a record is ``fid u32 | offset u64`` (12 bytes, little-endian).
"""
from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import crc32c

from ingest.errors import CorruptRecord

log = logging.getLogger(__name__)

RECORD_MAGIC = 0x823A56E8
FILE_END_MAGIC = 0x123AB922
HEADER = struct.Struct("<IQI")
FOOTER = struct.Struct("<qI")
HEADER_LEN = HEADER.size  # 16
FOOTER_LEN = FOOTER.size  # 12
_MAGIC_BYTES = struct.pack("<I", RECORD_MAGIC)
_unpack_header = HEADER.unpack_from
_crc = crc32c.crc32c
DEFAULT_FILE_SIZE = 500 * (1 << 20)
FINALIZE_AT_CLOSE = 50 * (1 << 10)
SCAN_CHUNK = 4 << 20
READ_AHEAD = 1 << 20


@dataclass(frozen=True, order=True)
class Pointer:
    """Position of a record header: file id and byte offset."""

    fid: int
    offset: int

    _STRUCT = struct.Struct("<IQ")

    def pack(self) -> bytes:
        """Return the 12-byte little-endian form TiDB stores in its index."""
        return self._STRUCT.pack(self.fid, self.offset)

    @classmethod
    def unpack(cls, data: bytes) -> Pointer:
        """Parse the first 12 bytes of ``data``."""
        fid, offset = cls._STRUCT.unpack_from(data)
        return cls(fid, offset)


ZERO = Pointer(0, 0)


def encode_record(payload: bytes) -> bytes:
    """Frame one payload: header with magic, length and CRC32C, then the payload."""
    return HEADER.pack(RECORD_MAGIC, len(payload), crc32c.crc32c(payload)) + payload


def file_name(fid: int) -> str:
    """Return the file name of value-log file ``fid`` (``%06d.vlog``)."""
    return f"{fid:06d}.vlog"


class LogFile:
    """One value-log file. Appends go through ``append``; reads use ``pread`` on a separate fd.

    With ``dsync`` the file is opened ``O_DSYNC``: every ``pwrite`` returns only once its data is
    durable (as ``pwrite`` + ``fdatasync``), so a synced append is one system call, and for the
    writer thread one GIL release instead of two.
    """

    def __init__(self, directory: Path, fid: int, create: bool = False, dsync: bool = False) -> None:
        self.fid = fid
        self.path = directory / file_name(fid)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0) | (os.O_DSYNC if dsync else 0)
        self.dsync = dsync
        self._fd = os.open(self.path, flags, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.max_ts = 0
        self.ended = False
        if self.size >= FOOTER_LEN:
            max_ts, magic = FOOTER.unpack(os.pread(self._fd, FOOTER_LEN, self.size - FOOTER_LEN))
            if magic == FILE_END_MAGIC:
                self.ended, self.max_ts = True, max_ts

    @property
    def data_end(self) -> int:
        """Offset where record data ends (before the footer of an ended file)."""
        return self.size - FOOTER_LEN if self.ended else self.size

    def append(self, data: bytes, sync: bool) -> int:
        """Append ``data`` at the end; durable on return when ``sync`` (fdatasync unless the file
        is ``O_DSYNC``). Return the offset it was written at."""
        offset = self.size
        written = os.pwrite(self._fd, data, offset)
        if written < len(data):
            view = memoryview(data)
            while written < len(data):
                written += os.pwrite(self._fd, view[written:], offset + written)
        if sync and not self.dsync:
            os.fdatasync(self._fd)
        self.size += len(data)
        return offset

    def truncate(self, size: int) -> None:
        """Cut the file at ``size`` (dropping a torn tail) and make that durable."""
        os.ftruncate(self._fd, size)
        os.fsync(self._fd)
        self.size = size

    def finalize(self) -> None:
        """Write the footer with ``max_ts`` and fdatasync; the file is never appended to again."""
        self.append(FOOTER.pack(self.max_ts, FILE_END_MAGIC), sync=True)
        self.ended = True

    def read(self, offset: int) -> bytes:
        """Return the payload of the record at ``offset``; raise ``CorruptRecord`` on a bad frame."""
        header = os.pread(self._fd, HEADER_LEN, offset)
        if len(header) < HEADER_LEN:
            raise CorruptRecord(f"{self.path}: record header at offset {offset} is truncated")
        magic, length, crc = HEADER.unpack(header)
        if magic != RECORD_MAGIC:
            raise CorruptRecord(f"{self.path}: wrong magic {magic:#x} at offset {offset}")
        payload = os.pread(self._fd, length, offset + HEADER_LEN)
        if len(payload) != length or crc32c.crc32c(payload) != crc:
            raise CorruptRecord(f"{self.path}: checksum mismatch at offset {offset}")
        return payload

    def read_span(self, start: int, end: int) -> bytes:
        """Return the raw bytes ``[start, end)``."""
        return os.pread(self._fd, end - start, start)

    def scan(self, start: int = 0, end: int | None = None,
             on_corrupt: Callable[[int, int], None] | None = None) -> Iterator[tuple[int, bytes]]:
        """Yield ``(offset, payload)`` of every valid record in ``[start, end)``.

        A bad record (wrong magic, CRC mismatch, truncated) is skipped by searching forward for the
        next magic; ``on_corrupt(offset, skipped_bytes)`` is called for each skipped region. A
        truncated record at the very end (a torn tail) is reported the same way.
        """
        end = self.data_end if end is None else end
        buf = b""
        buf_start = start
        pos = start
        bad_from = -1
        while pos < end:
            rel = pos - buf_start
            if len(buf) - rel < HEADER_LEN:
                buf = self.read_span(pos, min(end, pos + SCAN_CHUNK))
                buf_start, rel = pos, 0
                if len(buf) < HEADER_LEN:  # a few trailing bytes: a torn header
                    bad_from = pos if bad_from < 0 else bad_from
                    break
            magic, length, crc = HEADER.unpack_from(buf, rel)
            if magic == RECORD_MAGIC and pos + HEADER_LEN + length <= end:
                body_start = rel + HEADER_LEN
                if body_start + length > len(buf):
                    buf = self.read_span(pos, min(end, pos + max(SCAN_CHUNK, HEADER_LEN + length)))
                    buf_start, body_start = pos, HEADER_LEN
                payload = buf[body_start:body_start + length]
                if crc32c.crc32c(payload) == crc:
                    if bad_from >= 0:
                        _report(on_corrupt, self.path, bad_from, pos - bad_from)
                        bad_from = -1
                    yield pos, payload
                    pos += HEADER_LEN + length
                    continue
            if bad_from < 0:
                bad_from = pos
            nxt = buf.find(_MAGIC_BYTES, rel + 1)
            if nxt >= 0:
                pos = buf_start + nxt
            elif buf_start + len(buf) >= end:
                pos = end
            else:  # keep the last 3 bytes: a magic may straddle the chunk boundary
                pos = max(pos + 1, buf_start + len(buf) - 3)
                buf = b""
        if bad_from >= 0:
            _report(on_corrupt, self.path, bad_from, end - bad_from)

    def close(self) -> None:
        """Close the file descriptor."""
        os.close(self._fd)


def _report(on_corrupt: Callable[[int, int], None] | None, path: Path, offset: int, skipped: int) -> None:
    log.warning("value log %s: skipped %d corrupt bytes at offset %d", path, skipped, offset)
    if on_corrupt is not None:
        on_corrupt(offset, skipped)


class ValueLog:
    """The set of value-log files of one pump: appends to the newest, reads any, deletes old ones.

    ``append_batch`` is called by one writer thread at a time; reads and ``files_before`` may run
    concurrently from other threads.
    """

    def __init__(self, directory: Path, file_size: int = DEFAULT_FILE_SIZE, sync: bool = True,
                 ts_of: Callable[[bytes], int] | None = None,
                 on_corrupt: Callable[[int, int], None] | None = None) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.file_size = file_size
        self.sync = sync
        self._ts_of = ts_of
        self._on_corrupt = on_corrupt
        self._lock = threading.Lock()
        self.truncated_at: Pointer | None = None  # where a torn tail was cut at open, if any
        self.files: dict[int, LogFile] = {}
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".vlog") and name[:-5].isdigit():
                fid = int(name[:-5])
                self.files[fid] = LogFile(self.dir, fid, dsync=sync)
        if not self.files:
            self._create(0)
        current = self.files[max(self.files)]
        if current.ended:
            self._create(current.fid + 1)
        else:
            self._recover_tail(current)

    @property
    def current(self) -> LogFile:
        """The file appends go to."""
        return self.files[max(self.files)]

    def end(self) -> Pointer:
        """Pointer just past the last durable record."""
        cur = self.current
        return Pointer(cur.fid, cur.size)

    def _create(self, fid: int) -> LogFile:
        f = LogFile(self.dir, fid, create=True, dsync=self.sync)
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        with self._lock:
            self.files[fid] = f
        return f

    def _recover_tail(self, f: LogFile) -> None:
        """Recompute ``max_ts`` of an open-ended file and cut a torn tail after its last valid record."""
        valid_end = 0
        for offset, payload in f.scan(0, f.size, self._on_corrupt):
            valid_end = offset + HEADER_LEN + len(payload)
            if self._ts_of is not None:
                f.max_ts = max(f.max_ts, self._ts_of(payload))
        if valid_end < f.size:
            log.warning("value log %s: dropping %d bytes of torn tail after offset %d",
                        f.path, f.size - valid_end, valid_end)
            f.truncate(valid_end)
            self.truncated_at = Pointer(f.fid, valid_end)

    def append_batch(self, payloads: list[bytes], max_ts: int) -> list[Pointer]:
        """Write all ``payloads`` with one write and at most one fdatasync; rotate when full.

        Returns a pointer per payload. Nothing is acknowledged before this returns.
        """
        fid, offsets = self.append_payloads(payloads, max_ts)
        return [Pointer(fid, offset) for offset in offsets]

    def append_payloads(self, payloads: list[bytes], max_ts: int) -> tuple[int, list[int]]:
        """``append_batch`` without pointer objects: the file id and the offset of each record."""
        parts: list[bytes] = []
        offsets: list[int] = []
        pos = 0
        pack, magic, crc, add, mark = HEADER.pack, RECORD_MAGIC, _crc, parts.append, offsets.append
        for p in payloads:
            n = len(p)
            add(pack(magic, n, crc(p)))
            add(p)
            mark(pos)
            pos += HEADER_LEN + n
        data = b"".join(parts)
        cur = self.current
        if cur.size > 0 and cur.size + len(data) > self.file_size:
            cur = self._rotate(cur)
        base = cur.append(data, self.sync)
        if max_ts > cur.max_ts:
            cur.max_ts = max_ts
        if cur.size > self.file_size:
            self._rotate(cur)
        return cur.fid, [base + o for o in offsets] if base else offsets

    def _rotate(self, cur: LogFile) -> LogFile:
        cur.finalize()
        return self._create(cur.fid + 1)

    def read(self, ptr: Pointer) -> bytes:
        """Return the payload at ``ptr``; raise ``CorruptRecord`` if it is missing or damaged."""
        f = self.files.get(ptr.fid)
        if f is None:
            raise CorruptRecord(f"value log file {file_name(ptr.fid)} does not exist (purged by GC?)")
        return f.read(ptr.offset)

    def reader(self, chunk: int = READ_AHEAD) -> ReadAhead:
        """A reader for many records in roughly file order (one pread per ``chunk`` bytes)."""
        return ReadAhead(self, chunk)

    def scan(self, start: Pointer, end: Pointer) -> Iterator[tuple[Pointer, bytes]]:
        """Yield ``(pointer, payload)`` of every valid record from ``start`` up to ``end``."""
        for fid in sorted(self.files):
            if fid < start.fid or fid > end.fid:
                continue
            f = self.files[fid]
            lo = start.offset if fid == start.fid else 0
            hi = end.offset if fid == end.fid else f.data_end
            for offset, payload in f.scan(lo, hi, self._on_corrupt):
                yield Pointer(fid, offset), payload

    def purge_before(self, ts: int) -> list[int]:
        """Delete every ended file (not the current one) whose ``max_ts`` is at or below ``ts``."""
        current = max(self.files)
        deleted = []
        for fid, f in sorted(self.files.items()):
            if fid != current and f.ended and f.max_ts <= ts:
                with self._lock:
                    del self.files[fid]
                f.close()
                f.path.unlink()
                deleted.append(fid)
        return deleted

    def close(self) -> None:
        """Finalize the current file if it is large enough (TiDB: ≥ 50 KiB) and close all files."""
        cur = self.current
        if cur.size >= FINALIZE_AT_CLOSE and not cur.ended:
            cur.finalize()
        for f in self.files.values():
            f.close()


class ReadAhead:
    """Reads records by pointer through a window of the file: sequential pointers cost one
    ``pread`` per window instead of two per record. Checks magic, length and CRC32C like ``read``."""

    def __init__(self, vlog: ValueLog, chunk: int) -> None:
        self._vlog = vlog
        self._chunk = chunk
        self._fid = -1
        self._start = 0
        self._buf = memoryview(b"")

    def read(self, fid: int, offset: int) -> memoryview:
        """The payload of the record at (fid, offset), as a view into the window."""
        buf = self._buf
        rel = offset - self._start
        if fid != self._fid or rel < 0 or rel + HEADER_LEN > len(buf):
            rel = self._fill(fid, offset, HEADER_LEN)
            buf = self._buf
        magic, length, crc = _unpack_header(buf, rel)
        end = rel + HEADER_LEN + length
        if magic != RECORD_MAGIC:
            raise CorruptRecord(f"{file_name(fid)}: wrong magic {magic:#x} at offset {offset}")
        if end > len(buf):
            rel = self._fill(fid, offset, HEADER_LEN + length)
            buf = self._buf
            end = rel + HEADER_LEN + length
            if end > len(buf):
                raise CorruptRecord(f"{file_name(fid)}: record at offset {offset} is truncated")
        payload = buf[rel + HEADER_LEN:end]
        if _crc(payload) != crc:
            raise CorruptRecord(f"{file_name(fid)}: checksum mismatch at offset {offset}")
        return payload

    def _fill(self, fid: int, offset: int, need: int) -> int:
        f = self._vlog.files.get(fid)
        if f is None:
            raise CorruptRecord(f"value log file {file_name(fid)} does not exist (purged by GC?)")
        self._fid, self._start = fid, offset
        self._buf = memoryview(f.read_span(offset, min(f.size, offset + max(self._chunk, need))))
        return 0
