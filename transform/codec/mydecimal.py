"""TiDB's MyDecimal binary format (``WriteBin`` / ``FromBin``), to and from ``decimal.Decimal``.

The binary form stores a decimal at a fixed (precision, frac) in 9-digit groups of 4 bytes,
with shorter leading/trailing groups (``DIG2BYTES``), inverted for negatives and with the top
bit of the first byte flipped. Decoding never rounds: the result has exactly ``frac``
fractional digits.
"""
from __future__ import annotations

from decimal import Context, Decimal

from transform.codec.errors import DecimalError, TruncatedError

DIGITS_PER_WORD = 9
WORD_MAX = 999_999_999
MAX_WORD_BUF_LEN = 9
MAX_BIN_PRECISION = DIGITS_PER_WORD * MAX_WORD_BUF_LEN  # 81
MAX_DECIMAL_WIDTH = 65
MAX_DECIMAL_SCALE = 30
DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
# A context wide enough that no MyDecimal value (at most 81 digits) is ever rounded.
EXACT = Context(prec=200, Emax=999_999, Emin=-999_999)
_POW10 = tuple(10 ** i for i in range(10))
_WORD = 10 ** 9


def bin_size(prec: int, frac: int) -> int:
    """``DecimalBinSize``: the byte length of a MyDecimal binary at (prec, frac)."""
    if prec < 0 or frac < 0 or frac > prec or prec > MAX_BIN_PRECISION:
        raise DecimalError(f"invalid decimal precision/frac ({prec},{frac})")
    intg = prec - frac
    return (intg // 9) * 4 + DIG2BYTES[intg % 9] + (frac // 9) * 4 + DIG2BYTES[frac % 9]


def split_digits(value: Decimal) -> tuple[bool, str, str]:
    """Split a finite Decimal into (negative, integer digits, fraction digits), exactly."""
    if not value.is_finite():
        raise DecimalError(f"decimal value is not finite: {value}")
    text = format(value.copy_abs(), "f")  # copy_abs: exact, no context rounding
    if "." in text:
        ip, fp = text.split(".")
    else:
        ip, fp = text, ""
    ip = ip.lstrip("0")
    return value.is_signed(), ip, fp


def precision_and_frac(value: Decimal) -> tuple[int, int]:
    """TiDB's ``PrecisionAndFrac``: natural (precision, frac) of a value; precision ≥ 1."""
    _, ip, fp = split_digits(value)
    prec = len(ip) + len(fp)
    return (prec or 1), len(fp)


def encode_bin(value: Decimal, prec: int, frac: int, strict: bool = True) -> bytes:
    """``WriteBin(prec, frac)`` of ``value``.

    With ``strict`` (the default) a value that does not fit (integer overflow) or that would lose
    fraction digits raises :class:`DecimalError`. With ``strict=False`` the bytes TiDB writes in
    those cases are returned (high integer digits dropped, extra fraction digits truncated).
    """
    if prec > MAX_BIN_PRECISION or prec < 0 or frac > MAX_DECIMAL_SCALE or frac < 0 or frac > prec:
        raise DecimalError(f"invalid decimal precision/frac ({prec},{frac})")
    if strict:
        return _encode_bin_exact(value, prec, frac)
    negative, ip, fp = split_digits(value)
    intg = prec - frac
    if len(ip) > intg:
        if strict:
            raise DecimalError(f"decimal {value} overflows DECIMAL({prec},{frac})")
        ip = ip[len(ip) - intg:]
    if len(fp) > frac:
        if strict and fp[frac:].strip("0"):
            raise DecimalError(f"decimal {value} has more than {frac} fraction digits")
        fp = fp[:frac]
    ip = ip.rjust(intg, "0")
    fp = fp.ljust(frac, "0")
    if not (ip + fp).strip("0"):
        negative = False
    out = bytearray()
    lead = intg % 9
    if lead:
        out += int(ip[:lead]).to_bytes(DIG2BYTES[lead], "big")
    for i in range(lead, intg, 9):
        out += int(ip[i:i + 9]).to_bytes(4, "big")
    full = frac - frac % 9
    for i in range(0, full, 9):
        out += int(fp[i:i + 9]).to_bytes(4, "big")
    trail = frac % 9
    if trail:
        out += int(fp[full:]).to_bytes(DIG2BYTES[trail], "big")
    if negative:
        for i in range(len(out)):
            out[i] ^= 0xFF
    if out:
        out[0] ^= 0x80
    return bytes(out)


def _encode_bin_exact(value: Decimal, prec: int, frac: int) -> bytes:
    """``encode_bin(strict=True)`` by integer arithmetic: the value scaled to ``frac`` digits is
    split into the digit groups, packed into one integer and written with one ``to_bytes``."""
    if not value.is_finite():
        raise DecimalError(f"decimal value is not finite: {value}")
    num, den = value.as_integer_ratio()
    negative = num < 0
    num = -num if negative else num
    intg = prec - frac
    if num >= den * 10 ** intg:
        raise DecimalError(f"decimal {value} overflows DECIMAL({prec},{frac})")
    scaled, rest = divmod(num * 10 ** frac, den)
    if rest:
        raise DecimalError(f"decimal {value} has more than {frac} fraction digits")
    ip, fp = divmod(scaled, 10 ** frac)
    acc = 0
    nbytes = 0
    lead = intg % 9
    full = intg // 9
    if full:
        top, low = divmod(ip, _WORD ** full)
        if lead:
            acc, nbytes = top, DIG2BYTES[lead]
        for k in range(full - 1, -1, -1):
            acc = (acc << 32) | (low // _WORD ** k) % _WORD
        nbytes += 4 * full
    elif lead:
        acc, nbytes = ip, DIG2BYTES[lead]
    trail = frac % 9
    full_frac = frac // 9
    if full_frac:
        words, tail = divmod(fp, 10 ** trail)
        for k in range(full_frac - 1, -1, -1):
            acc = (acc << 32) | (words // _WORD ** k) % _WORD
        nbytes += 4 * full_frac
    else:
        tail = fp
    if trail:
        acc = (acc << (8 * DIG2BYTES[trail])) | tail
        nbytes += DIG2BYTES[trail]
    if not nbytes:
        return b""
    if negative:
        acc ^= (1 << (8 * nbytes)) - 1
    return (acc ^ (0x80 << (8 * (nbytes - 1)))).to_bytes(nbytes, "big")


def decode_bin(buf: bytes, off: int, prec: int, frac: int) -> tuple[Decimal, int]:
    """``FromBin``: read a MyDecimal binary at (prec, frac) from ``buf[off:]``.

    Returns (Decimal with exactly ``frac`` fraction digits, next offset). Raises
    :class:`DecimalError` on invalid precision or out-of-range digit groups and
    :class:`TruncatedError` when the buffer is short.
    """
    size = bin_size(prec, frac)
    end = off + size
    if end > len(buf):
        raise TruncatedError(f"truncated decimal: need {size} bytes", off)
    if size == 0:
        return Decimal(0), off
    raw = bytearray(buf[off:end])
    negative = (raw[0] & 0x80) == 0
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    intg = prec - frac
    pos = 0
    parts: list[str] = []
    lead = intg % 9
    if lead:
        n = DIG2BYTES[lead]
        v = int.from_bytes(raw[pos:pos + n], "big")
        if v >= _POW10[lead]:
            raise DecimalError("decimal leading digits overflow the precision", off + pos)
        parts.append(str(v).rjust(lead, "0"))
        pos += n
    for _ in range(intg // 9):
        v = int.from_bytes(raw[pos:pos + 4], "big")
        if v > WORD_MAX:
            raise DecimalError("decimal word above 999999999", off + pos)
        parts.append(f"{v:09d}")
        pos += 4
    int_digits = "".join(parts)
    parts = []
    for _ in range(frac // 9):
        v = int.from_bytes(raw[pos:pos + 4], "big")
        if v > WORD_MAX:
            raise DecimalError("decimal word above 999999999", off + pos)
        parts.append(f"{v:09d}")
        pos += 4
    trail = frac % 9
    if trail:
        n = DIG2BYTES[trail]
        v = int.from_bytes(raw[pos:pos + n], "big")
        if v >= _POW10[trail]:
            raise DecimalError("decimal trailing digits overflow the frac", off + pos)
        parts.append(str(v).rjust(trail, "0"))
    digits = (int_digits + "".join(parts)).lstrip("0")
    sign = 1 if negative and digits else 0
    value = Decimal((sign, tuple(int(c) for c in digits) or (0,), -frac))
    return value, end


def read_word(data: bytes) -> int:
    """TiDB's ``readWord``: a 1-4 byte signed big-endian integer."""
    if not 1 <= len(data) <= 4:
        raise DecimalError(f"readWord size {len(data)} not in 1..4")
    return int.from_bytes(data, "big", signed=True)
