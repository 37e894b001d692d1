"""Range scans as columns: index values → record headers → payload batches, vectorized per chunk.

Per chunk of index entries (key-ts order), the entries of one value-log file are decoded with numpy,
the file span they cover is read with one ``pread``, and their 16-byte headers are gathered at
once. Per record only two C-level calls remain (a payload view, its CRC32C); the columns stay numpy
arrays, and a batch is encoded as ``binlake.v1.RecordBatch`` wire bytes with vectorized varints and
one copy of the payloads. Entries spread over several files or too far apart fall back to reading
record by record.
"""
from __future__ import annotations

import io
import logging
from itertools import islice
from typing import Callable, Iterable, Iterator

import crc32c
import numpy as np

from ingest.errors import CorruptRecord
from ingest.pump.storage.index import PREWRITE
from ingest.pump.storage.vlog import HEADER_LEN, RECORD_MAGIC, ValueLog, file_name

log = logging.getLogger(__name__)

VALUE_DTYPE = np.dtype([("fid", "<u4"), ("off", "<u8"), ("tp", "u1"), ("start", "<i8"), ("commit", "<i8")])
HEADER_DTYPE = np.dtype([("magic", "<u4"), ("len", "<u8"), ("crc", "<u4")])
CHUNK = 4096                # index entries decoded together
MAX_SPAN = 32 << 20         # a chunk whose records lie further apart is read record by record
_HEADER_COLS = np.arange(HEADER_LEN, dtype=np.int64)
_SHIFTS = np.arange(0, 70, 7, dtype=np.uint64)      # the ten 7-bit groups of a 64-bit varint
_GROUPS = np.arange(10, dtype=np.int64)
_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)  # smallest 2-, 3-, … 10-byte
_EMPTY_I64 = np.zeros(0, dtype=np.int64)


def _varint(value: int) -> bytes:
    """One unsigned varint."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varints(values: np.ndarray) -> bytes:
    """Protobuf varints of integer ``values`` (negative ones as 10-byte two's complement, like
    int64/int32 fields), concatenated; vectorized over as many 7-bit groups as the largest needs."""
    v = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    if not len(v):
        return b""
    extra = np.searchsorted(_LIMITS, v, side="right")  # groups after the first, per value
    width = int(extra.max()) + 1
    groups = ((v[:, None] >> _SHIFTS[:width]) & np.uint64(0x7F)).astype(np.uint8)
    if width == 1:
        return groups.tobytes()
    if int(extra.min()) + 1 == width:  # all the same size: no gaps to squeeze out
        groups[:, :-1] |= 0x80
        return groups.tobytes()
    cols = _GROUPS[:width]
    groups |= (cols < extra[:, None]).view(np.uint8) << 7
    return groups[cols <= extra[:, None]].tobytes()


def _packed(field: int, values: np.ndarray) -> list[bytes]:
    if not len(values):
        return []
    data = varints(values)
    return [bytes([field << 3 | 2]), _varint(len(data)), data]


class ScanColumns:
    """One batch of scanned records as columns: numpy arrays, and the payloads in record order as a
    few contiguous buffers (joined once, when encoded)."""

    __slots__ = ("key_ts", "tp", "start_ts", "commit_ts", "lengths", "parts")

    def __init__(self, key_ts: np.ndarray, tp: np.ndarray, start_ts: np.ndarray, commit_ts: np.ndarray,
                 lengths: np.ndarray, parts: list[bytes | memoryview]) -> None:
        self.key_ts = key_ts
        self.tp = tp
        self.start_ts = start_ts
        self.commit_ts = commit_ts
        self.lengths = lengths
        self.parts = parts

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def size(self) -> int:
        """Payload bytes."""
        return sum(map(len, self.parts))

    @property
    def payloads(self) -> bytes:
        """The payloads joined, in record order."""
        return self.parts[0] if len(self.parts) == 1 and isinstance(self.parts[0], bytes) else b"".join(self.parts)

    def encode(self, scanned_to: int) -> bytes:
        """The ``binlake.v1.RecordBatch`` wire bytes (fields in number order, as protobuf writes them)."""
        out = _packed(1, self.key_ts) + _packed(2, self.tp) + _packed(3, self.start_ts) \
            + _packed(4, self.commit_ts) + _packed(5, self.lengths)
        size = self.size
        if size:
            out += [b"\x32", _varint(size), *self.parts]
        if scanned_to:
            out += [b"\x38", _varint(scanned_to & 0xFFFFFFFFFFFFFFFF)]
        return b"".join(out)

    @staticmethod
    def concat(pieces: list["ScanColumns"]) -> "ScanColumns":
        """One batch of several, in order."""
        if len(pieces) == 1:
            return pieces[0]
        if not pieces:
            return ScanColumns(_EMPTY_I64, _EMPTY_I64, _EMPTY_I64, _EMPTY_I64, _EMPTY_I64, [])
        parts: list[bytes | memoryview] = []
        for p in pieces:
            parts += p.parts
        return ScanColumns(*(np.concatenate([getattr(p, name) for p in pieces])
                             for name in ("key_ts", "tp", "start_ts", "commit_ts", "lengths")), parts)

    def slice(self, i: int, j: int, start: int, end: int) -> "ScanColumns":
        """Records ``[i, j)``, whose payloads are bytes ``[start, end)`` of this batch's (one part)."""
        assert len(self.parts) == 1
        return ScanColumns(self.key_ts[i:j], self.tp[i:j], self.start_ts[i:j], self.commit_ts[i:j],
                           self.lengths[i:j], [memoryview(self.parts[0])[start:end]])


def _columns(tps: np.ndarray, starts: np.ndarray, commits: np.ndarray, payloads: bytes,
             lengths: np.ndarray) -> ScanColumns:
    tps = tps.astype(np.int64)
    key_ts = np.where(tps == PREWRITE, starts, commits)
    return ScanColumns(key_ts, tps, starts, commits, lengths, [payloads])


def _record_by_record(vlog: ValueLog, arr: np.ndarray, on_corrupt: Callable[[str], None]) -> ScanColumns:
    read = vlog.reader().read
    keep: list[int] = []
    parts: list[memoryview | bytes] = []
    for i, (fid, off) in enumerate(zip(arr["fid"].tolist(), arr["off"].tolist())):
        try:
            parts.append(read(fid, off))
        except CorruptRecord as exc:
            on_corrupt(str(exc))
            continue
        keep.append(i)
    sel = arr[keep]
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    return _columns(sel["tp"], sel["start"].astype(np.int64), sel["commit"].astype(np.int64),
                    b"".join(parts), lengths)


def _chunk(vlog: ValueLog, values: list[bytes], on_corrupt: Callable[[str], None]) -> ScanColumns:
    """Columns of the valid records behind ``values`` (raw index values), in the same order."""
    arr = np.frombuffer(b"".join(values), dtype=VALUE_DTYPE)
    fids = arr["fid"]
    fid = int(fids[0])
    f = vlog.files.get(fid)
    offs = arr["off"].astype(np.int64)
    lo, hi = int(offs.min()), int(offs.max()) + HEADER_LEN
    if f is None or (fids != fid).any() or hi - lo > MAX_SPAN:
        return _record_by_record(vlog, arr, on_corrupt)
    span = f.read_span(lo, hi)
    if len(span) < hi - lo:
        return _record_by_record(vlog, arr, on_corrupt)
    rel = offs - lo
    headers = np.frombuffer(span, dtype=np.uint8)[rel[:, None] + _HEADER_COLS].view(HEADER_DTYPE).ravel()
    lengths = headers["len"].astype(np.int64)
    begins = rel + HEADER_LEN
    ends = begins + lengths
    need = int(ends.max())
    if need > len(span):
        span = f.read_span(lo, lo + need)
        if len(span) < need or (headers["magic"] != RECORD_MAGIC).any():
            return _record_by_record(vlog, arr, on_corrupt)
    elif (headers["magic"] != RECORD_MAGIC).any():
        return _record_by_record(vlog, arr, on_corrupt)
    # Views into the span, each dropped right after use: thousands of live views per chunk would
    # feed the cyclic GC, whose full collections then scan the whole heap of the server.
    view = memoryview(span)
    b_list, e_list = begins.tolist(), ends.tolist()
    crcs = np.fromiter(map(crc32c.crc32c, map(view.__getitem__, map(slice, b_list, e_list))),
                       dtype=np.uint32, count=len(b_list))
    bad = np.flatnonzero(crcs != headers["crc"])
    tps, starts, commits = arr["tp"], arr["start"].astype(np.int64), arr["commit"].astype(np.int64)
    if len(bad):
        for i in bad.tolist():
            on_corrupt(f"{file_name(fid)}: checksum mismatch at offset {int(offs[i])}")
        good = np.ones(len(b_list), dtype=bool)
        good[bad] = False
        b_list, e_list = begins[good].tolist(), ends[good].tolist()
        tps, starts, commits, lengths = tps[good], starts[good], commits[good], lengths[good]
    out = io.BytesIO()
    out.writelines(map(view.__getitem__, map(slice, b_list, e_list)))
    payloads = out.getvalue()
    return _columns(tps, starts, commits, payloads, lengths)


def scan_columns(values: Iterable[bytes], vlog: ValueLog, limit: int,
                 on_corrupt: Callable[[str], None]) -> Iterator[ScanColumns]:
    """Batches of columns for the records behind raw index ``values``; each batch holds at most
    ``limit`` payload bytes, or one record when a single record is larger; the last batch may be
    empty. Corrupt records are reported and skipped."""
    it = iter(values)
    pending: list[ScanColumns] = []
    size = 0
    while True:
        chunk = list(islice(it, CHUNK))
        if not chunk:
            break
        cols = _chunk(vlog, chunk, on_corrupt)
        cum = np.cumsum(cols.lengths)
        n, i, base = len(cols), 0, 0
        while i < n:
            j = int(np.searchsorted(cum, base + limit - size, side="right"))
            if j <= i:
                if pending:
                    yield ScanColumns.concat(pending)
                    pending, size = [], 0
                    continue
                j = i + 1
            end = int(cum[j - 1])
            pending.append(cols.slice(i, j, base, end) if (i, j) != (0, n) else cols)
            size += end - base
            base, i = end, j
            if size >= limit:
                yield ScanColumns.concat(pending)
                pending, size = [], 0
    yield ScanColumns.concat(pending)
