"""A rewritten column's values converted as TiDB's MODIFY COLUMN backfill converts them
(``table.CastValue`` → ``types.Datum.ConvertTo``), and the values binlake refuses instead of guessing."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from tests.codec.tables import col
from transform.codec import mysqltypes as mt
from transform.codec.convert import ConversionError, convert_array, convert_value, unsupported
from transform.codec.model import ColumnInfo

UNSIGNED = mt.UNSIGNED_FLAG


def c(tp: int, **kw: Any) -> ColumnInfo:
    return ColumnInfo.from_json(col(1, "a", tp, **kw))


INT, BIGINT, TINYINT = c(mt.TYPE_LONG), c(mt.TYPE_LONGLONG), c(mt.TYPE_TINY)
UBIGINT = c(mt.TYPE_LONGLONG, flag=UNSIGNED)
VARCHAR = c(mt.TYPE_VARCHAR, flen=20)
DEC = c(mt.TYPE_NEWDECIMAL, flen=10, decimal=2)


@pytest.mark.parametrize(("old", "value", "text"), [
    (INT, 10, "10"), (INT, -20, "-20"), (BIGINT, -(2 ** 63), "-9223372036854775808"),
    (UBIGINT, Decimal(2 ** 64 - 1), "18446744073709551615"),
    (DEC, Decimal("1.50"), "1.50"), (DEC, Decimal("-0.05"), "-0.05"), (DEC, Decimal("0"), "0.00"),
    (c(mt.TYPE_NEWDECIMAL, flen=65, decimal=30), "1" * 35 + "." + "0" * 30, "1" * 35 + "." + "0" * 30),
    (c(mt.TYPE_DOUBLE), 0.1, "0.1"), (c(mt.TYPE_DOUBLE), 1e21, "1000000000000000000000"),
    (c(mt.TYPE_DOUBLE), 1.0, "1"), (c(mt.TYPE_DOUBLE), -2.5e-7, "-0.00000025"),
    (c(mt.TYPE_FLOAT), float(pa.array([0.1], pa.float32())[0].as_py()), "0.1"),
    (c(mt.TYPE_DATE), dt.date(2024, 2, 29), "2024-02-29"),
    (c(mt.TYPE_DATETIME), dt.datetime(2024, 1, 2, 3, 4, 5), "2024-01-02 03:04:05"),
    (c(mt.TYPE_DATETIME, decimal=3), dt.datetime(2024, 1, 2, 3, 4, 5, 120000), "2024-01-02 03:04:05.120"),
    (c(mt.TYPE_YEAR), 2024, "2024"), (c(mt.TYPE_DURATION), "-838:59:59", "-838:59:59"),
    (c(mt.TYPE_ENUM, elems=["x", "y"]), "y", "y"),
])
def test_to_text_is_the_text_tidb_gives(old: ColumnInfo, value: Any, text: str) -> None:
    assert convert_value(value, old, VARCHAR if len(text) <= 20 else c(mt.TYPE_BLOB, charset="utf8mb4")) == text


def test_to_binary_strings_and_lengths() -> None:
    assert convert_value(10, INT, c(mt.TYPE_VARCHAR, flen=8, charset="binary")) == b"10"
    assert convert_value(10, INT, c(mt.TYPE_STRING, flen=4, charset="binary")) == b"10\0\0"   # BINARY(4) pads
    assert convert_value(b"ab", c(mt.TYPE_VARCHAR, flen=4, charset="binary"), VARCHAR) == "ab"
    with pytest.raises(ConversionError, match="does not fit varchar"):
        convert_value(123456, INT, c(mt.TYPE_VARCHAR, flen=3))
    with pytest.raises(ConversionError, match="not UTF-8"):
        convert_value(b"\xff", c(mt.TYPE_BLOB, charset="binary"), VARCHAR)


def test_to_numbers() -> None:
    assert convert_value("42", VARCHAR, INT) == 42 and convert_value(" -7 ", VARCHAR, BIGINT) == -7
    assert convert_value(5, INT, DEC) == Decimal("5.00")
    assert convert_value(Decimal("2.345"), c(mt.TYPE_NEWDECIMAL, flen=10, decimal=3), DEC) == Decimal("2.35")
    assert convert_value(Decimal("-2.345"), c(mt.TYPE_NEWDECIMAL, flen=10, decimal=3), DEC) == Decimal("-2.35")
    assert convert_value(Decimal("2.5"), DEC, INT) == 3 and convert_value(Decimal("-2.5"), DEC, INT) == -3
    assert convert_value(0.1, c(mt.TYPE_DOUBLE), DEC) == Decimal("0.10")
    assert convert_value("1.5", VARCHAR, c(mt.TYPE_DOUBLE)) == 1.5
    assert convert_value(2 ** 40, BIGINT, c(mt.TYPE_DOUBLE)) == float(2 ** 40)
    assert convert_value(None, VARCHAR, INT) is None
    for value, old, new, why in [("x", VARCHAR, INT, "not an integer"), ("1.5", VARCHAR, INT, "not an integer"),
                                 (300, INT, TINYINT, "out of range"), (-1, INT, UBIGINT, "out of range"),
                                 (Decimal("123456789.00"), c(mt.TYPE_NEWDECIMAL, flen=12, decimal=2), DEC,
                                  r"does not fit decimal\(10,2\)"), ("1e", VARCHAR, DEC, "not a number")]:
        with pytest.raises(ConversionError, match=why):
            convert_value(value, old, new)


def test_to_dates() -> None:
    date, datetime = c(mt.TYPE_DATE), c(mt.TYPE_DATETIME)
    assert convert_value("2024-02-29", VARCHAR, date) == dt.date(2024, 2, 29)
    assert convert_value(dt.date(2024, 2, 29), date, datetime) == dt.datetime(2024, 2, 29)
    with pytest.raises(ConversionError, match="not a valid date"):
        convert_value("2023-02-29", VARCHAR, date)


def test_pairs_binlake_does_not_convert_are_named_before_any_value() -> None:
    ts = c(mt.TYPE_TIMESTAMP)
    assert unsupported(INT, VARCHAR) is None
    assert unsupported(ts, VARCHAR) == "binlake does not convert timestamp values to varchar as TiDB does"
    assert unsupported(VARCHAR, c(mt.TYPE_JSON)) is not None
    with pytest.raises(ConversionError, match="timestamp"):
        convert_value(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), ts, VARCHAR)


def test_arrays_keep_nulls_and_take_the_new_arrow_type() -> None:
    out = convert_array(pa.chunked_array([pa.array([10, None, -3], pa.int32())]), INT, VARCHAR)
    assert out.type == pa.string() and out.to_pylist() == ["10", None, "-3"]
    out = convert_array(pa.array(["1", None], pa.string()), VARCHAR, UBIGINT)
    assert out.type == pa.decimal128(20, 0) and out.to_pylist() == [Decimal(1), None]
