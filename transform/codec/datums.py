"""Datums: TiDB's ``codec.EncodeValue`` / ``EncodeKey`` / ``DecodeOne`` for every flag.

Python values and the flag each one is written with (``encode_datums``):

=====================================  ==========================================
value                                  flag and payload
=====================================  ==========================================
``None``                               ``0x00`` NilFlag
``int`` (plain)                        ``0x08`` varint (value form of Int64)
``Uint(v)``                            ``0x09`` uvarint (value form of Uint64)
``KeyInt(v)``                          ``0x03`` comparable int64 (key form)
``KeyUint(v)``                         ``0x04`` 8-byte big-endian uint64 (key form)
``float``                              ``0x05`` comparable float64
``bytes`` / ``bytearray`` / ``str``    ``0x02`` compact bytes (``str`` as UTF-8)
``KeyBytes(b)``                        ``0x01`` memcomparable bytes (key form)
``decimal.Decimal``                    ``0x06`` at its natural (precision, frac)
``DecimalDatum(v, prec, frac)``        ``0x06`` at the given (precision, frac)
``Duration(ns)``                       ``0x07`` comparable int64 nanoseconds
``Json(text)``                         ``0x0A`` type code + TiDB JSON binary of ``text``
``MAX_VALUE``                          ``0xFA`` maxFlag (key ranges only)
=====================================  ==========================================

``decode_datums`` returns the same types, so ``encode_datums(decode_datums(b)) == b`` for
every canonical encoding: flags 0x08/0x02/0x05 come back as plain ``int``/``bytes``/``float``
and the others as the wrapper types above (which are subclasses of int/bytes/str/Decimal, so
they compare equal to plain values).
"""
from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from transform.codec import jsonbinary, mydecimal
from transform.codec.errors import CodecError, DecimalError, TruncatedError, UnknownFlagError
from transform.codec.varint import (
    decode_cmp_float,
    decode_cmp_int,
    decode_memcmp_bytes,
    decode_u64,
    decode_uvarint,
    decode_varint,
    encode_cmp_float,
    encode_cmp_int,
    encode_memcmp_bytes,
    encode_u64,
    encode_uvarint,
    encode_varint,
)

NIL_FLAG = 0x00
BYTES_FLAG = 0x01
COMPACT_BYTES_FLAG = 0x02
INT_FLAG = 0x03
UINT_FLAG = 0x04
FLOAT_FLAG = 0x05
DECIMAL_FLAG = 0x06
DURATION_FLAG = 0x07
VARINT_FLAG = 0x08
UVARINT_FLAG = 0x09
JSON_FLAG = 0x0A
MAX_FLAG = 0xFA


class Uint(int):
    """An unsigned 64-bit datum: encoded with the uvarint flag (0x09)."""


class KeyInt(int):
    """A signed datum in key form: comparable int64 flag (0x03)."""


class KeyUint(int):
    """An unsigned datum in key form: 8-byte big-endian flag (0x04)."""


class Duration(int):
    """A TIME datum in nanoseconds: comparable int64 under the duration flag (0x07)."""


class KeyBytes(bytes):
    """A bytes datum in key form: memcomparable flag (0x01)."""


class Json(str):
    """JSON text to be written (or read) under the json flag (0x0A) as TiDB's JSON binary."""


class EncodedJson(str):
    """TiDB's canonical text of a JSON value that also carries its json-flag payload (type code +
    JSON binary), so a row writer can reuse the encoding instead of parsing the text again."""

    payload: bytes

    @classmethod
    def of(cls, doc: Any) -> EncodedJson:
        """The canonical text and payload of a parsed JSON value (``CodecError`` if TiDB can't store it)."""
        typecode, binary = jsonbinary.from_object(doc)
        self = cls(jsonbinary.to_text(typecode, binary))
        self.payload = bytes((typecode,)) + binary
        return self


class DecimalDatum(Decimal):
    """A Decimal with the (precision, frac) its MyDecimal binary is written at."""

    prec: int
    frac: int

    def __new__(cls, value: Any, prec: int | None = None, frac: int | None = None) -> DecimalDatum:
        self = super().__new__(cls, value)
        nat_prec, nat_frac = mydecimal.precision_and_frac(self)
        self.frac = nat_frac if frac is None else frac
        self.prec = max(nat_prec, 1) if prec is None else prec
        return self

    def __repr__(self) -> str:
        return f"DecimalDatum('{self}', {self.prec}, {self.frac})"


class _MaxValue:
    """The MaxValue sentinel (maxFlag 0xFA), used only in key ranges."""

    _instance: _MaxValue | None = None

    def __new__(cls) -> _MaxValue:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MAX_VALUE"


MAX_VALUE = _MaxValue()


def encode_compact_bytes(data: bytes) -> bytes:
    """Compact bytes payload: signed zigzag varint length, then the bytes."""
    return encode_varint(len(data)) + data


def encode_decimal_payload(value: Decimal, prec: int | None = None, frac: int | None = None) -> bytes:
    """Decimal flag payload: precision byte, frac byte, MyDecimal binary (strict: no rounding)."""
    if prec is None or prec == 0 or frac is None:
        nat_prec, nat_frac = mydecimal.precision_and_frac(value)
        if prec is None or prec == 0:
            prec, frac = nat_prec, nat_frac if frac is None else frac
        if frac is None:
            frac = nat_frac
    if prec > mydecimal.MAX_DECIMAL_WIDTH or frac > mydecimal.MAX_DECIMAL_SCALE or frac > prec:
        raise DecimalError(f"decimal precision/frac ({prec},{frac}) out of range")
    return bytes((prec, frac)) + mydecimal.encode_bin(value, prec, frac)


def encode_json_payload(text: str) -> bytes:
    """Json flag payload: type code byte + JSON binary of ``text``."""
    tc, raw = jsonbinary.from_text(text)
    return bytes((tc,)) + raw


def encode_datum(v: Any) -> bytes:
    """Encode one datum (flag byte + payload); see the module table for the flag chosen."""
    if v is None:
        return b"\x00"
    t = type(v)
    if t is int:
        return b"\x08" + encode_varint(v)
    if t is bytes:
        return b"\x02" + encode_compact_bytes(v)
    if t is float:
        return b"\x05" + encode_cmp_float(v)
    if t is Uint:
        return b"\x09" + encode_uvarint(v)
    if t is Json:
        return b"\x0a" + encode_json_payload(v)
    if t is str:
        return b"\x02" + encode_compact_bytes(v.encode("utf-8"))
    if t is DecimalDatum:
        return b"\x06" + encode_decimal_payload(v, v.prec, v.frac)
    if t is KeyInt:
        return b"\x03" + encode_cmp_int(v)
    if t is KeyUint:
        return b"\x04" + encode_u64(v)
    if t is Duration:
        return b"\x07" + encode_cmp_int(v)
    if t is KeyBytes:
        return b"\x01" + encode_memcmp_bytes(bytes(v))
    if v is MAX_VALUE:
        return bytes((MAX_FLAG,))
    if isinstance(v, bool):
        return b"\x08" + encode_varint(int(v))
    if isinstance(v, Decimal):
        return b"\x06" + encode_decimal_payload(v)
    if isinstance(v, (bytearray, memoryview)):
        return b"\x02" + encode_compact_bytes(bytes(v))
    raise CodecError(f"cannot encode {t.__name__} as a datum")


def encode_datums(values: Iterable[Any]) -> bytes:
    """``codec.EncodeValue`` of a sequence of datums: the concatenation of each datum's bytes."""
    return b"".join([encode_datum(v) for v in values])


def decode_one(buf: bytes, off: int) -> tuple[Any, int]:
    """``DecodeOne``: decode the datum at ``off``; returns (value, next offset).

    Raises :class:`TruncatedError`, :class:`UnknownFlagError` or another ``CodecError``
    subclass, with the absolute offset of the problem.
    """
    if off >= len(buf):
        raise TruncatedError("truncated datum: missing flag byte", off)
    flag = buf[off]
    p = off + 1
    if flag == VARINT_FLAG:
        return decode_varint(buf, p)
    if flag == COMPACT_BYTES_FLAG:
        n, p = decode_varint(buf, p)
        if n < 0:
            raise CodecError(f"negative compact bytes length {n}", off + 1)
        end = p + n
        if end > len(buf):
            raise TruncatedError(f"truncated compact bytes: need {n} bytes", p)
        return bytes(buf[p:end]), end
    if flag == UVARINT_FLAG:
        v, p = decode_uvarint(buf, p)
        return Uint(v), p
    if flag == NIL_FLAG:
        return None, p
    if flag == FLOAT_FLAG:
        return decode_cmp_float(buf, p)
    if flag == DECIMAL_FLAG:
        return decode_decimal_payload(buf, p)
    if flag == JSON_FLAG:
        end = jsonbinary.peek_end(buf, p)
        text = jsonbinary.to_text(buf[p], buf, p + 1, end)
        return Json(text), end
    if flag == INT_FLAG:
        v, p = decode_cmp_int(buf, p)
        return KeyInt(v), p
    if flag == UINT_FLAG:
        v, p = decode_u64(buf, p)
        return KeyUint(v), p
    if flag == DURATION_FLAG:
        v, p = decode_cmp_int(buf, p)
        return Duration(v), p
    if flag == BYTES_FLAG:
        raw, p = decode_memcmp_bytes(buf, p)
        return KeyBytes(raw), p
    if flag == MAX_FLAG:
        return MAX_VALUE, p
    raise UnknownFlagError(f"unknown datum flag 0x{flag:02X}", off)


def skip_one(buf: bytes, off: int) -> int:
    """``CutOne``: the offset just past the datum at ``off``, checking only its framing (the way
    TiDB skips the values of columns it does not want). Raises ``CodecError`` subclasses."""
    if off >= len(buf):
        raise TruncatedError("truncated datum: missing flag byte", off)
    flag = buf[off]
    p = off + 1
    if flag == VARINT_FLAG or flag == UVARINT_FLAG:
        return decode_uvarint(buf, p)[1]
    if flag == COMPACT_BYTES_FLAG:
        n, q = decode_varint(buf, p)
        if n < 0:
            raise CodecError(f"negative compact bytes length {n}", p)
        if q + n > len(buf):
            raise TruncatedError(f"truncated compact bytes: need {n} bytes", q)
        return q + n
    if flag == NIL_FLAG or flag == MAX_FLAG:
        return p
    if flag in (INT_FLAG, UINT_FLAG, FLOAT_FLAG, DURATION_FLAG):
        if p + 8 > len(buf):
            raise TruncatedError("truncated 8-byte datum", p)
        return p + 8
    if flag == DECIMAL_FLAG:
        if p + 2 > len(buf):
            raise TruncatedError("truncated decimal header", p)
        prec, frac = buf[p], buf[p + 1]
        if prec == 0 or prec > mydecimal.MAX_DECIMAL_WIDTH or frac > mydecimal.MAX_DECIMAL_SCALE or frac > prec:
            raise DecimalError(f"decimal precision/frac ({prec},{frac}) out of range", p)
        end = p + 2 + mydecimal.bin_size(prec, frac)
        if end > len(buf):
            raise TruncatedError("truncated decimal", p + 2)
        return end
    if flag == JSON_FLAG:
        return jsonbinary.peek_end(buf, p)
    if flag == BYTES_FLAG:
        return decode_memcmp_bytes(buf, p)[1]
    raise UnknownFlagError(f"unknown datum flag 0x{flag:02X}", off)


def decode_decimal_payload(buf: bytes, p: int) -> tuple[DecimalDatum, int]:
    """Decode a decimal flag payload (prec, frac, bin) at ``p``; checks the precision limits."""
    if p + 2 > len(buf):
        raise TruncatedError("truncated decimal header", p)
    prec, frac = buf[p], buf[p + 1]
    if prec == 0 or prec > mydecimal.MAX_DECIMAL_WIDTH or frac > mydecimal.MAX_DECIMAL_SCALE or frac > prec:
        raise DecimalError(f"decimal precision/frac ({prec},{frac}) out of range", p)
    v, end = mydecimal.decode_bin(buf, p + 2, prec, frac)
    return DecimalDatum(v, prec, frac), end


def decode_datums(data: bytes) -> list[Any]:
    """Decode a whole run of datums (``codec.Decode``); raises ``CodecError`` on any bad byte."""
    out = []
    off = 0
    n = len(data)
    while off < n:
        v, off = decode_one(data, off)
        out.append(v)
    return out


def record_key(table_id: int, handle: int) -> bytes:
    """``tablecodec.EncodeRowKeyWithHandle`` for an int handle: ``t{id}_r{handle}`` with
    comparable ints (the key a Pump resolves through ``/mvcc/hex``)."""
    return b"t" + encode_cmp_int(table_id) + b"_r" + encode_cmp_int(handle)
