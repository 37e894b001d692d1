"""``coerce``'s shortcuts for common (column type, value type) pairs give exactly the general code's
result or error."""
from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any

import pytest

from upstream import coltypes
from upstream.cluster import Cluster
from upstream.errors import SQLError

TABLE = ("create table t (i tinyint, u int unsigned, b bigint, s varchar(5), c char(3), d decimal(10,2), "
         "du decimal(6,3) unsigned, w decimal(65,30), dt datetime, dt3 datetime(3), j json)")


def outcome(col: Any, v: Any) -> tuple[str, Any]:
    try:
        out = coltypes.coerce(col, v)
    except SQLError as e:
        return "error", str(e)
    return "value", (type(out).__name__, out)


def values(rng: random.Random) -> list[Any]:
    out: list[Any] = [0, -1, 127, 128, -129, 255, 2 ** 31, 2 ** 63 - 1, 2 ** 63, -2 ** 63 - 1, True,
                      "", "abc", "abcdef", "ünï", "12", Decimal("1.005"), Decimal("-0.00"),
                      Decimal("99999999.995"), Decimal("1e40"), Decimal("NaN"), Decimal("-12.3456"),
                      dt.datetime(2024, 5, 1, 12, 0, 0, 999_999), dt.datetime(9999, 12, 31, 23, 59, 59, 999_999),
                      dt.datetime(2020, 1, 1, tzinfo=dt.UTC), 1.5, '{"b": 1, "a": [1, 2.5]}']
    for _ in range(300):
        out.append(rng.choice([rng.randrange(-2 ** 64, 2 ** 64), rng.randrange(-300, 300),
                               Decimal(rng.randrange(-10 ** 12, 10 ** 12)).scaleb(-rng.randrange(0, 8)),
                               "x" * rng.randrange(0, 8),
                               dt.datetime(2000, 1, 1) + dt.timedelta(microseconds=rng.randrange(10 ** 15))]))
    return out


def test_shortcuts_agree_with_the_general_code(monkeypatch: pytest.MonkeyPatch) -> None:
    with Cluster(servers=1) as cluster:
        cluster.execute(TABLE)
        cols = cluster.table("test", "t").columns
    samples = values(random.Random(7))
    fast = {(c.name, i): outcome(c, v) for c in cols for i, v in enumerate(samples)}
    assert any(c.__dict__.get("_binlake_coerce") for c in cols)      # the shortcuts were in use
    monkeypatch.setattr(coltypes, "_fast_coercer", lambda col: None)
    for c in cols:
        c.__dict__.pop("_binlake_coerce", None)
    slow = {(c.name, i): outcome(c, v) for c in cols for i, v in enumerate(samples)}
    differ = {k: (fast[k], slow[k]) for k in fast if fast[k] != slow[k]}
    assert not differ
    assert {kind for kind, _ in slow.values()} == {"error", "value"}


@pytest.mark.parametrize("text", ['{"b": 1, "a": [1, 2.5, null, true]}', '"x"', "1.0", "18446744073709551616",
                                  '{"k": {"nested": [{"z": -3}]}}', "[]"])
def test_json_values_carry_the_binary_their_text_decodes_from(text: str) -> None:
    from transform.codec.datums import JSON_FLAG, decode_one
    with Cluster(servers=1) as cluster:
        cluster.execute("create table j (id int primary key, j json)")
        col = cluster.table("test", "j").columns[1]
    value = coltypes.coerce(col, text)
    assert decode_one(bytes((JSON_FLAG,)) + value.payload, 0)[0] == value
    with pytest.raises(SQLError, match="Invalid JSON text"):
        coltypes.coerce(col, text + "}")
