"""Range scans as columns: index values → record headers → payload batches, vectorized per chunk.

Per chunk of index entries (key-ts order), the entries of one value-log file are decoded with numpy,
the file span they cover is read with one ``pread``, and their 16-byte headers are gathered at
once; only slicing payloads and their CRC32C check remain per record. Entries spread over several
files or too far apart fall back to reading record by record.
"""
from __future__ import annotations

import logging
from bisect import bisect_right
from itertools import accumulate, islice
from typing import Callable, Iterable, Iterator

import crc32c
import numpy as np

from ingest.errors import CorruptRecord
from ingest.pump.storage.index import PREWRITE
from ingest.pump.storage.vlog import HEADER_LEN, RECORD_MAGIC, ValueLog, file_name

log = logging.getLogger(__name__)

VALUE_DTYPE = np.dtype([("fid", "<u4"), ("off", "<u8"), ("tp", "u1"), ("start", "<i8"), ("commit", "<i8")])
HEADER_DTYPE = np.dtype([("magic", "<u4"), ("len", "<u8"), ("crc", "<u4")])
CHUNK = 2048                # index entries decoded together
MAX_SPAN = 32 << 20         # a chunk whose records lie further apart is read record by record
_HEADER_COLS = np.arange(HEADER_LEN, dtype=np.int64)

Columns = tuple[list[int], list[int], list[int], list[int], list[int], list[memoryview]]
ScanColumns = tuple[list[int], list[int], list[int], list[int], list[int], bytes]


def _record_by_record(vlog: ValueLog, arr: np.ndarray, on_corrupt: Callable[[str], None]) -> Columns:
    read = vlog.reader().read
    out: Columns = ([], [], [], [], [], [])
    for fid, off, tp, start, commit in arr.tolist():
        try:
            payload = read(fid, off)
        except CorruptRecord as exc:
            on_corrupt(str(exc))
            continue
        _append(out, tp, start, commit, payload)
    return out


def _append(out: Columns, tp: int, start: int, commit: int, payload: memoryview) -> None:
    out[0].append(start if tp == PREWRITE else commit)
    out[1].append(tp)
    out[2].append(start)
    out[3].append(commit)
    out[4].append(len(payload))
    out[5].append(payload)


def _chunk(vlog: ValueLog, values: list[bytes], on_corrupt: Callable[[str], None]) -> Columns:
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
    ends = rel + HEADER_LEN + lengths
    need = int(ends.max())
    if need > len(span):
        span = f.read_span(lo, lo + need)
        if len(span) < need or (headers["magic"] != RECORD_MAGIC).any():
            return _record_by_record(vlog, arr, on_corrupt)
    elif (headers["magic"] != RECORD_MAGIC).any():
        return _record_by_record(vlog, arr, on_corrupt)
    view = memoryview(span)
    tps, starts, commits = arr["tp"], arr["start"], arr["commit"]
    key_ts = np.where(tps == PREWRITE, starts, commits).tolist()
    lens = lengths.tolist()
    parts = [view[a:a + n] for a, n in zip((rel + HEADER_LEN).tolist(), lens)]
    crc = crc32c.crc32c
    bad = [i for i, (p, c) in enumerate(zip(parts, headers["crc"].tolist())) if crc(p) != c]
    out: Columns = (key_ts, tps.tolist(), starts.tolist(), commits.tolist(), lens, parts)
    if bad:
        for i in reversed(bad):
            on_corrupt(f"{file_name(fid)}: checksum mismatch at offset {int(offs[i])}")
            for column in out:
                del column[i]
    return out


def scan_columns(values: Iterable[bytes], vlog: ValueLog, limit: int,
                 on_corrupt: Callable[[str], None]) -> Iterator[ScanColumns]:
    """Batches of columns (key_ts, tp, start_ts, commit_ts, lengths, joined payloads) for the
    records behind raw index ``values``; each batch holds at most ``limit`` payload bytes, or one
    record when a single record is larger. Corrupt records are reported and skipped."""
    it = iter(values)
    pending: Columns = ([], [], [], [], [], [])
    size = 0
    while True:
        chunk = list(islice(it, CHUNK))
        if not chunk:
            break
        cols = _chunk(vlog, chunk, on_corrupt)
        cum = list(accumulate(cols[4]))
        n, i, base = len(cum), 0, 0
        while i < n:
            j = bisect_right(cum, base + limit - size, i, n)
            if j == i:
                if pending[0]:
                    yield _flush(pending)
                    pending, size = ([], [], [], [], [], []), 0
                    continue
                j = i + 1
            for column, source in zip(pending, cols):
                column.extend(source[i:j])
            size += cum[j - 1] - base
            base, i = cum[j - 1], j
            if size >= limit:
                yield _flush(pending)
                pending, size = ([], [], [], [], [], []), 0
    yield _flush(pending)


def _flush(cols: Columns) -> ScanColumns:
    return cols[0], cols[1], cols[2], cols[3], cols[4], b"".join(cols[5])
