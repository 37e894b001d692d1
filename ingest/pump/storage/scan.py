"""Range scans as value-log spans: index values → record headers → batches that ship stored bytes.

Per chunk of index entries (key-ts order), the entries of one value-log file are decoded with numpy,
the file span they cover is read with one ``pread``, and their 16-byte headers are gathered and
checked (magic, length) at once. Every record's own CRC32C is verified before it can be served,
for the whole chunk in one C-level pass over a copy of the span (``crcspan``); a record that fails
is reported and left out. A batch does not copy payloads: it
ships the runs of contiguous frames its own records occupy in the span (payloads with their frame
headers, as stored — never bytes of a record outside the batch) and, per record, where its payload
starts in them. Key-ts order follows file order closely (a prewrite is appended before its commit,
both in ts order up to the concurrency of writers), so a batch is one or a few runs. Columns stay
numpy arrays; a batch is encoded as ``binlake.v1.RecordBatch`` wire bytes (fixed-width columns).
Entries spread over several files or too far apart fall back to reading record by record (payloads
copied back to back).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from ingest.errors import CorruptRecord
from ingest.pump.storage.crcspan import bad_records
from ingest.pump.storage.index import CHUNK, PREWRITE
from ingest.pump.storage.vlog import HEADER_LEN, RECORD_MAGIC, ValueLog, file_name

log = logging.getLogger(__name__)

HEADER_DTYPE = np.dtype([("magic", "<u4"), ("len", "<u8"), ("crc", "<u4")])
MAX_SPAN = 32 << 20         # a chunk whose records lie further apart is read record by record
SLACK = 64 << 10            # read this far past a chunk's last header
_EMPTY = np.zeros(0, dtype=np.int64)
# RecordBatch fields (binlake.proto): (field number, attribute, wire dtype), in field-number order.
_COLUMNS = ((8, "key_ts", "<i8"), (9, "tp", "<i4"), (10, "start_ts", "<i8"), (11, "commit_ts", "<i8"),
            (12, "offsets", "<u4"), (13, "lengths", "<u4"))
_DATA_TAG = bytes([14 << 3 | 2])
_SCANNED_TO_TAG = bytes([7 << 3])


def _varint(value: int) -> bytes:
    """One unsigned varint."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class ScanColumns:
    """One batch of scanned records: numpy columns, and ``parts``, the buffers whose concatenation
    is the batch's ``data``; record i's payload is ``data[offsets[i]:offsets[i] + lengths[i]]``.
    Payload ranges do not overlap; ``data`` may hold frame headers of the batch's records between
    them."""

    __slots__ = ("key_ts", "tp", "start_ts", "commit_ts", "offsets", "lengths", "parts", "size")

    def __init__(self, key_ts: np.ndarray, tp: np.ndarray, start_ts: np.ndarray, commit_ts: np.ndarray,
                 offsets: np.ndarray, lengths: np.ndarray, parts: list[bytes | memoryview],
                 size: int | None = None) -> None:
        self.key_ts = key_ts
        self.tp = tp
        self.start_ts = start_ts
        self.commit_ts = commit_ts
        self.offsets = offsets
        self.lengths = lengths
        self.parts = parts
        self.size = sum(map(len, parts)) if size is None else size  # bytes of ``data``

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def data(self) -> bytes:
        """The parts joined."""
        return self.parts[0] if len(self.parts) == 1 and isinstance(self.parts[0], bytes) else b"".join(self.parts)

    def payloads(self) -> list[bytes]:
        """Each record's payload, in record order."""
        data = self.data
        return [data[o:o + n] for o, n in zip(self.offsets.tolist(), self.lengths.tolist())]

    def encode(self, scanned_to: int) -> bytes:
        """The ``binlake.v1.RecordBatch`` wire bytes (fields in number order, as protobuf writes them)."""
        out: list[bytes | memoryview] = []
        if scanned_to:
            out += [_SCANNED_TO_TAG, _varint(scanned_to & 0xFFFFFFFFFFFFFFFF)]
        if len(self):
            for field, name, dtype in _COLUMNS:
                col = getattr(self, name).astype(dtype, copy=False).tobytes()
                out += [bytes([field << 3 | 2]), _varint(len(col)), col]
        if self.size:
            out += [_DATA_TAG, _varint(self.size), *self.parts]
        return b"".join(out)

    @staticmethod
    def concat(pieces: list[ScanColumns]) -> ScanColumns:
        """One batch of several, in order (their data back to back)."""
        if len(pieces) == 1:
            return pieces[0]
        if not pieces:
            return ScanColumns(_EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY, [], 0)
        parts: list[bytes | memoryview] = []
        offsets = []
        base = 0
        for p in pieces:
            parts += p.parts
            offsets.append(p.offsets + base)
            base += p.size
        return ScanColumns(np.concatenate([p.key_ts for p in pieces]), np.concatenate([p.tp for p in pieces]),
                           np.concatenate([p.start_ts for p in pieces]), np.concatenate([p.commit_ts for p in pieces]),
                           np.concatenate(offsets), np.concatenate([p.lengths for p in pieces]), parts, base)


class _Chunk:
    """The valid records of one chunk of index entries, in key-ts order, over one buffer: record i's
    payload is ``buf[pos[i]:end[i]]`` and its stored frame (header and payload) ``buf[frame[i]:end[i]]``."""

    __slots__ = ("buf", "key_ts", "tp", "start_ts", "commit_ts", "frame", "pos", "end")

    def __init__(self, buf: bytes, tp: np.ndarray, start_ts: np.ndarray, commit_ts: np.ndarray,
                 frame: np.ndarray, pos: np.ndarray, end: np.ndarray) -> None:
        self.buf = buf
        self.tp = tp.astype(np.int64)
        self.start_ts = start_ts.astype(np.int64)
        self.commit_ts = commit_ts.astype(np.int64)
        self.key_ts = np.where(self.tp == PREWRITE, self.start_ts, self.commit_ts)
        self.frame = frame
        self.pos = pos
        self.end = end

    def __len__(self) -> int:
        return len(self.pos)

    def take(self, i: int, j: int) -> ScanColumns:
        """Records ``[i, j)`` as a batch whose data are the runs of contiguous frames they occupy."""
        fs, fe, pos = self.frame[i:j], self.end[i:j], self.pos[i:j]
        n = j - i
        order = None
        if n > 1 and bool((fs[1:] < fs[:-1]).any()):
            order = np.argsort(fs, kind="stable")
            fs, fe, pos = fs[order], fe[order], pos[order]
        # A run ends where the next frame does not start right at this one's end (a record of
        # another batch, a corrupt one left out, a gap; also two entries sharing bytes).
        starts = np.flatnonzero(fs[1:] != fe[:-1]) + 1
        run_lo = fs[np.concatenate(([0], starts))]
        run_hi = fe[np.concatenate((starts - 1, [n - 1]))]
        lengths = run_hi - run_lo
        base = np.cumsum(lengths) - lengths
        run = np.zeros(n, dtype=np.int64)
        run[starts] = 1
        np.cumsum(run, out=run)
        offsets = pos - run_lo[run] + base[run]
        if order is not None:
            unsorted = np.empty_like(offsets)
            unsorted[order] = offsets
            offsets = unsorted
            fe, pos = self.end[i:j], self.pos[i:j]
        size = int(lengths.sum())
        if len(run_lo) == 1 and size == len(self.buf):
            parts: list[bytes | memoryview] = [self.buf]
        else:
            view = memoryview(self.buf)
            parts = [view[a:b] for a, b in zip(run_lo.tolist(), run_hi.tolist())]
        return ScanColumns(self.key_ts[i:j], self.tp[i:j], self.start_ts[i:j], self.commit_ts[i:j],
                           offsets, fe - pos, parts, size)


def _record_by_record(vlog: ValueLog, arr: np.ndarray, on_corrupt: Callable[[str], None]) -> _Chunk:
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
    end = np.cumsum(lengths)
    pos = end - lengths
    return _Chunk(b"".join(parts), sel["tp"], sel["start"], sel["commit"], pos, pos, end)


def _chunk(vlog: ValueLog, arr: np.ndarray, on_corrupt: Callable[[str], None]) -> _Chunk:
    """The valid records behind ``arr`` (raw index values, ``VALUE_DTYPE``), in the same order."""
    fids = arr["fid"]
    fid = int(fids[0])
    f = vlog.files.get(fid)
    offs = arr["off"].astype(np.int64)
    lo, hi = int(offs.min()), int(offs.max()) + HEADER_LEN
    if f is None or (fids != fid).any() or hi - lo > MAX_SPAN:
        return _record_by_record(vlog, arr, on_corrupt)
    # Read a little past the last header: its payload usually ends there (no second read).
    span = f.read_span(lo, min(hi + SLACK, f.size))
    if len(span) < hi - lo:
        return _record_by_record(vlog, arr, on_corrupt)
    frame = offs - lo
    # Element k of ``windows`` is the 16 bytes at offset k: one gather fetches every header.
    windows = np.ndarray((len(span) - HEADER_LEN + 1,), dtype=HEADER_DTYPE, buffer=span, strides=(1,))
    headers = windows[frame]
    if (headers["magic"] != RECORD_MAGIC).any() or int(headers["len"].max()) > f.size:
        return _record_by_record(vlog, arr, on_corrupt)
    pos = frame + HEADER_LEN
    end = pos + headers["len"].astype(np.int64)
    need = int(end.max())
    if need > len(span):
        span = f.read_span(lo, lo + need)
        if len(span) < need:
            return _record_by_record(vlog, arr, on_corrupt)
    bad = bad_records(span, frame, pos, end, headers["crc"])
    if len(bad):
        for i in bad.tolist():
            on_corrupt(f"{file_name(fid)}: checksum mismatch at offset {int(offs[i])}")
        good = np.ones(len(pos), dtype=bool)
        good[bad] = False
        arr, frame, pos, end = arr[good], frame[good], pos[good], end[good]
    return _Chunk(span, arr["tp"], arr["start"], arr["commit"], frame, pos, end)


def array_chunks(values: np.ndarray) -> Iterator[np.ndarray]:
    """An array of raw index values in pieces of up to CHUNK entries."""
    for i in range(0, len(values), CHUNK):
        yield values[i:i + CHUNK]


def scan_columns(chunks: Iterable[np.ndarray], vlog: ValueLog, limit: int,
                 on_corrupt: Callable[[str], None]) -> Iterator[ScanColumns]:
    """Batches for the records behind the raw index values of ``chunks`` (``VALUE_DTYPE`` arrays),
    in their order; each batch's data holds at most ``limit`` bytes (its records' frames), or one
    record when a single frame is larger; the last batch may be empty. Corrupt records are reported
    and skipped."""
    pending: list[ScanColumns] = []
    size = 0
    for values in chunks:
        if not len(values):
            continue
        ch = _chunk(vlog, values, on_corrupt)
        cum = np.cumsum(ch.end - ch.frame)
        n, i, base = len(ch), 0, 0
        while i < n:
            j = int(np.searchsorted(cum, base + limit - size, side="right"))
            if j <= i:
                if pending:
                    yield ScanColumns.concat(pending)
                    pending, size = [], 0
                    continue
                j = i + 1
            end = int(cum[j - 1])
            pending.append(ch.take(i, j))
            size += end - base
            base, i = end, j
            if size >= limit:
                yield ScanColumns.concat(pending)
                pending, size = [], 0
    yield ScanColumns.concat(pending)
