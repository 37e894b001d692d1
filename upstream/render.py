"""JSON-friendly column values for ``/binlake/snapshot`` (and for tests comparing against decoded binlogs).

=======================  ===============================================================
Python value             JSON
=======================  ===============================================================
None / int / str         null / number / string (ENUM, SET, TIME, JSON text, zero dates)
float                    number (``"NaN"``/``"Infinity"`` as strings)
Decimal                  string, exact, with the column's scale (``"12.30"``)
date                     ``"YYYY-MM-DD"``
datetime (DATETIME)      ``"YYYY-MM-DD HH:MM:SS[.ffffff]"``
datetime (TIMESTAMP)     the same text, in UTC (no zone suffix)
bytes (binary strings)   standard base64 with padding (like Go's ``[]byte``)
=======================  ===============================================================
"""
from __future__ import annotations

import base64
import datetime as dt
import math
from decimal import Decimal
from typing import Any


def render(v: Any) -> Any:
    """The JSON-friendly form of one column value."""
    if v is None or isinstance(v, (bool, int, str)):
        return int(v) if isinstance(v, bool) else v
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        return v
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.UTC).replace(tzinfo=None)
        text = v.strftime("%Y-%m-%d %H:%M:%S")
        return text + (f".{v.microsecond:06d}" if v.microsecond else "")
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode()
    return str(v)


def render_rows(snapshot: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """A whole snapshot with every value rendered."""
    return {t: [{k: render(v) for k, v in row.items()} for row in rows] for t, rows in snapshot.items()}
