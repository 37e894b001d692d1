"""Primitive encodings of TiDB's ``util/codec``: Go-exact varints, comparable ints and floats,
and memcomparable bytes.

All decoders take ``(buf, offset)`` and return ``(value, next_offset)``; they raise
:class:`~transform.errors.CodecError` subclasses whose offset is absolute in ``buf``.
"""
from __future__ import annotations

import struct

from transform.codec.errors import CodecError, TruncatedError, VarintOverflowError

SIGN_MASK = 0x8000000000000000
U64_MASK = 0xFFFFFFFFFFFFFFFF
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
MAX_VARINT_LEN = 10

_U64 = struct.Struct(">Q")
_D64 = struct.Struct(">d")
_Q_FROM_D = struct.Struct(">Q")


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def encode_uvarint(v: int) -> bytes:
    """Go's ``binary.PutUvarint`` of ``v`` (0 ≤ v < 2**64)."""
    if 0 <= v < 0x80:
        return _ONE_BYTE[v]
    if v < 0 or v > UINT64_MAX:
        raise CodecError(f"uvarint out of range: {v}")
    if v < 0x4000:
        return bytes(((v & 0x7F) | 0x80, v >> 7))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def encode_varint(v: int) -> bytes:
    """Go's ``binary.PutVarint`` (zigzag then LEB128) of a signed 64-bit ``v``."""
    if v < INT64_MIN or v > INT64_MAX:
        raise CodecError(f"varint out of range: {v}")
    ux = (v << 1) & U64_MASK
    if v < 0:
        ux ^= U64_MASK
    return encode_uvarint(ux)


def decode_uvarint(buf: bytes, off: int) -> tuple[int, int]:
    """Go's ``binary.Uvarint``: returns (value, next offset); rejects truncation and overflow."""
    x = 0
    s = 0
    n = len(buf)
    start = off
    for i in range(MAX_VARINT_LEN):
        if off >= n:
            raise TruncatedError("truncated varint", start)
        b = buf[off]
        off += 1
        if b < 0x80:
            if i == MAX_VARINT_LEN - 1 and b > 1:
                raise VarintOverflowError("varint overflows 64 bits", start)
            return x | (b << s), off
        x |= (b & 0x7F) << s
        s += 7
    raise VarintOverflowError("varint longer than 10 bytes", start)


def decode_varint(buf: bytes, off: int) -> tuple[int, int]:
    """Go's ``binary.Varint``: returns (signed value, next offset)."""
    ux, off = decode_uvarint(buf, off)
    x = ux >> 1
    if ux & 1:
        x = ~x
    return x, off


def encode_cmp_int(v: int) -> bytes:
    """Comparable int64: sign bit flipped, 8 bytes big-endian (``EncodeInt``)."""
    if v < INT64_MIN or v > INT64_MAX:
        raise CodecError(f"int64 out of range: {v}")
    return _U64.pack((v & U64_MASK) ^ SIGN_MASK)


def decode_cmp_int(buf: bytes, off: int) -> tuple[int, int]:
    """Inverse of :func:`encode_cmp_int`."""
    if off + 8 > len(buf):
        raise TruncatedError("truncated 8-byte int", off)
    u = _U64.unpack_from(buf, off)[0] ^ SIGN_MASK
    return (u - (1 << 64) if u & SIGN_MASK else u), off + 8


def encode_u64(v: int) -> bytes:
    """Unsigned 64-bit big-endian (``EncodeUint``)."""
    if v < 0 or v > UINT64_MAX:
        raise CodecError(f"uint64 out of range: {v}")
    return _U64.pack(v)


def decode_u64(buf: bytes, off: int) -> tuple[int, int]:
    """Inverse of :func:`encode_u64`."""
    if off + 8 > len(buf):
        raise TruncatedError("truncated 8-byte uint", off)
    return _U64.unpack_from(buf, off)[0], off + 8


def encode_cmp_float(v: float) -> bytes:
    """Comparable float64 (``EncodeFloat``): positive → set sign bit, negative → invert all bits."""
    u = _Q_FROM_D.unpack(_D64.pack(v))[0]
    if u & SIGN_MASK:
        u ^= U64_MASK
    else:
        u |= SIGN_MASK
    return _U64.pack(u)


def decode_cmp_float(buf: bytes, off: int) -> tuple[float, int]:
    """Inverse of :func:`encode_cmp_float`."""
    if off + 8 > len(buf):
        raise TruncatedError("truncated 8-byte float", off)
    u = _U64.unpack_from(buf, off)[0]
    if u & SIGN_MASK:
        u &= ~SIGN_MASK
    else:
        u ^= U64_MASK
    return _D64.unpack(_U64.pack(u))[0], off + 8


_GROUP = 8
_MARKER = 0xFF
_PAD = b"\x00" * 8


def encode_memcmp_bytes(data: bytes) -> bytes:
    """Memcomparable bytes (``EncodeBytes``, ascending): 8-byte groups, each with a marker byte."""
    out = bytearray()
    n = len(data)
    for i in range(0, n + 1, _GROUP):
        chunk = data[i:i + _GROUP]
        pad = _GROUP - len(chunk)
        out += chunk
        out += _PAD[:pad]
        out.append(_MARKER - pad)
    return bytes(out)


def decode_memcmp_bytes(buf: bytes, off: int) -> tuple[bytes, int]:
    """Inverse of :func:`encode_memcmp_bytes`; checks pad bytes and markers like TiDB."""
    out = bytearray()
    n = len(buf)
    while True:
        if off + _GROUP + 1 > n:
            raise TruncatedError("truncated memcomparable bytes group", off)
        group = buf[off:off + _GROUP]
        marker = buf[off + _GROUP]
        pad = _MARKER - marker
        if pad == 0:
            out += group
            off += _GROUP + 1
            continue
        if pad > _GROUP:
            raise CodecError(f"invalid memcomparable marker 0x{marker:02X}", off + _GROUP)
        real = _GROUP - pad
        if any(group[real:]):
            raise CodecError("invalid memcomparable padding bytes", off + real)
        out += group[:real]
        return bytes(out), off + _GROUP + 1


def encode_memcmp_bytes_desc(data: bytes) -> bytes:
    """Descending memcomparable bytes (``EncodeBytesDesc``): the ascending form, every byte inverted."""
    return bytes(b ^ 0xFF for b in encode_memcmp_bytes(data))


def decode_memcmp_bytes_desc(buf: bytes, off: int) -> tuple[bytes, int]:
    """Inverse of :func:`encode_memcmp_bytes_desc`."""
    n = len(buf)
    end = off
    while True:
        if end + _GROUP + 1 > n:
            raise TruncatedError("truncated memcomparable bytes group", end)
        if buf[end + _GROUP] ^ 0xFF != _MARKER:
            break
        end += _GROUP + 1
    inverted = bytes(b ^ 0xFF for b in buf[off:end + _GROUP + 1])
    try:
        value, _ = decode_memcmp_bytes(inverted, 0)
    except CodecError as e:
        raise e.at(None, off) from None
    return value, end + _GROUP + 1
