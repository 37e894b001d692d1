"""CRC32C of many value-log records at once: every record's own checksum, verified with one
C-level CRC pass over a copy of the span that holds them instead of one call per record.

CRC32C is affine over GF(2): for a message M of length L, ``crc(M) = lin(M) ^ K(L)`` where ``lin``
is linear in the bits of M and ``K(L) = crc(L zero bytes)``. Leading zero bytes add nothing to
``lin``, and ``t`` trailing zero bytes multiply it by ``x^(8t)`` modulo the CRC polynomial. Take
the span F of records i (header H_i, payload P_i, stored checksum c_i) and build G, a copy of F with
every header, every byte between frames and every long payload (checked on its own) zeroed, and
the last 4 bytes of each other payload XORed with a patch w_i chosen so that
``lin4(w_i) = c_i ^ K(len(P_i))``. By linearity (the sum runs over the short payloads)

    lin(G) = XOR over i of (crc(P_i) ^ c_i) · x^(8 · bytes after P_i)   (mod the polynomial)

All terms vanish when every record matches its checksum. When one record does not, its term is
non-zero (x is invertible modulo the polynomial), so ``lin(G) != 0``: a single damaged record is
always caught, and damage in several records goes unnoticed only if their terms cancel exactly
(about 2^-32, the odds of a damaged record passing its own CRC). ``lin(G)`` is one CRC call seeded
so that the register starts at zero. On a non-zero result the records are checked one by one, so
the caller learns exactly which ones are bad.
"""
from __future__ import annotations

import threading

import crc32c
import numpy as np

HEADER_LEN = 16
MAX_BULK_LEN = 1 << 16       # longer payloads are checked one by one (their call overhead is small)
MAX_KEPT_BUFFER = 16 << 20   # a scratch buffer up to this size is kept for the next call
_V16 = np.dtype("V16")
_ZERO16 = np.zeros(1, dtype=_V16)
_LIN_SEED = 0xFFFFFFFF       # crc32c(data, _LIN_SEED) starts its register at zero: ~lin(data)
_lock = threading.Lock()
_tables: tuple[np.ndarray, np.ndarray] | None = None
_spare: list[bytearray] = []


def _build_tables() -> tuple[np.ndarray, np.ndarray]:
    """``K[L]`` for L < MAX_BULK_LEN, and ``INV[k][b]``: the 4-byte patch (as a little-endian u32)
    whose ``lin4`` is byte b placed at byte k of a u32."""
    zero = np.zeros(MAX_BULK_LEN, dtype=np.uint32)
    c = 0
    for n in range(1, MAX_BULK_LEN):
        c = crc32c.crc32c(b"\0", c)
        zero[n] = c
    k4 = crc32c.crc32c(b"\0" * 4)

    def lin4(u: int) -> int:
        return crc32c.crc32c(u.to_bytes(4, "little")) ^ k4

    # Gauss-Jordan over GF(2): for every output bit b, the input whose lin4 is exactly 1 << b.
    rows: dict[int, tuple[int, int]] = {}
    for j in range(32):
        value, source = lin4(1 << j), 1 << j
        for b in range(31, -1, -1):
            if value >> b & 1:
                if b not in rows:
                    rows[b] = (value, source)
                    break
                rv, rs = rows[b]
                value, source = value ^ rv, source ^ rs
    if len(rows) != 32:
        raise AssertionError("CRC32C over 4 bytes is not invertible")
    inverse = [0] * 32
    for b in sorted(rows):
        value, source = rows[b]
        for low in range(b - 1, -1, -1):
            if value >> low & 1:
                rv, rs = rows[low]
                value, source = value ^ rv, source ^ rs
        rows[b] = (value, source)
        inverse[b] = source
    inv = np.zeros((4, 256), dtype=np.uint32)
    for k in range(4):
        for byte in range(256):
            acc = 0
            for bit in range(8):
                if byte >> bit & 1:
                    acc ^= inverse[8 * k + bit]
            inv[k, byte] = acc
    return zero, inv


def _get_tables() -> tuple[np.ndarray, np.ndarray]:
    global _tables
    if _tables is None:
        with _lock:
            if _tables is None:
                _tables = _build_tables()
    return _tables


def one_by_one(buf: bytes | memoryview, pos: np.ndarray, end: np.ndarray, crc: np.ndarray) -> np.ndarray:
    """Indices of the records whose payload ``buf[pos:end]`` does not match ``crc`` (one call each)."""
    view = memoryview(buf)
    got = np.fromiter(map(crc32c.crc32c, map(view.__getitem__, map(slice, pos.tolist(), end.tolist()))),
                      dtype=np.uint32, count=len(pos))
    return np.flatnonzero(got != crc)


def bad_records(buf: bytes, frame: np.ndarray, pos: np.ndarray, end: np.ndarray, crc: np.ndarray) -> np.ndarray:
    """Indices of the records whose payload ``buf[pos[i]:end[i]]`` does not match the stored CRC32C
    ``crc[i]``; ``frame[i] = pos[i] - 16`` is where its header starts. Records must not overlap."""
    n = len(pos)
    if n < 64:
        return one_by_one(buf, pos, end, crc)
    order = None
    if bool((frame[1:] < frame[:-1]).any()):
        order = np.argsort(frame, kind="stable")
        frame, pos, end, crc = frame[order], pos[order], end[order], crc[order]
    gaps = np.flatnonzero(frame[1:] != end[:-1])
    lengths = end - pos
    long = np.flatnonzero(lengths >= MAX_BULK_LEN)
    if (len(gaps) + len(long)) * 8 > n or bool((frame[1:] < end[:-1]).any()) or bool((pos - frame != HEADER_LEN).any()):
        bad = one_by_one(buf, pos, end, crc)
        return np.sort(order[bad]) if order is not None else bad
    zero, inv = _get_tables()
    lo, hi = int(frame[0]), int(end[-1])
    size = hi - lo
    try:
        scratch = _spare.pop()
    except IndexError:
        scratch = bytearray(0)
    if len(scratch) < size:
        scratch = bytearray(size)
    # G: the span with headers, bytes between frames and long payloads (checked one by one below)
    # zeroed, and each short payload's last 4 bytes XORed with its patch.
    g = memoryview(scratch)[:size]
    # numpy copies without holding the GIL (a memoryview assignment holds it)
    np.copyto(np.frombuffer(g, dtype=np.uint8), np.frombuffer(buf, dtype=np.uint8, count=size, offset=lo))
    heads = np.ndarray((size - HEADER_LEN + 1,), dtype=_V16, buffer=scratch, strides=(1,))
    heads[frame - lo] = _ZERO16
    for k in gaps.tolist():
        a, b = int(end[k]) - lo, int(frame[k + 1]) - lo
        g[a:b] = bytes(b - a)
    for k in long.tolist():
        a, b = int(pos[k]) - lo, int(end[k]) - lo
        g[a:b] = bytes(b - a)
    short = lengths < MAX_BULK_LEN
    target = crc[short] ^ zero[lengths[short]]
    patch = inv[0][target & 0xFF] ^ inv[1][(target >> 8) & 0xFF] ^ inv[2][(target >> 16) & 0xFF] ^ inv[3][target >> 24]
    words = np.ndarray((size - 3,), dtype="<u4", buffer=scratch, strides=(1,))
    words[end[short] - lo - 4] ^= patch
    same = crc32c.crc32c(g, _LIN_SEED) == _LIN_SEED
    del heads, words
    g.release()
    if len(scratch) <= MAX_KEPT_BUFFER and len(_spare) < 2:
        _spare.append(scratch)
    if same:
        bad = long[one_by_one(buf, pos[long], end[long], crc[long])] if len(long) else long
    else:
        bad = one_by_one(buf, pos, end, crc)
    return np.sort(order[bad]) if order is not None else bad
