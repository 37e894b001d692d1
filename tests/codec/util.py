"""Small helpers shared by the transform tests."""
from __future__ import annotations

import re


def h(text: str) -> bytes:
    """Bytes from the reference's hex notation: ``"08 02 | 00×3"`` (``×n`` repeats a byte, ``|`` is ignored)."""
    out = bytearray()
    for tok in text.replace("|", " ").split():
        m = re.fullmatch(r"([0-9A-Fa-f]{2})(?:[×x](\d+))?", tok)
        if not m:
            raise ValueError(f"bad hex token {tok!r}")
        out += bytes([int(m.group(1), 16)]) * int(m.group(2) or 1)
    return bytes(out)
