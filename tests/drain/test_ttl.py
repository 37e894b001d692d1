"""``transform.ttl``: which rows a TTL table's job had expired by a ts (verify sets them aside; TiDB's
TTL job deletes without binlogs: ``tests/realtidb/test_real_tidb_ttl.py``)."""
from __future__ import annotations

import datetime as dt

from transform.codec.model import TableInfo
from transform.ttl import expired_at


def _ts(at: dt.datetime) -> int:
    return int(at.replace(tzinfo=dt.UTC).timestamp() * 1000) << 18


def _table(ttl: dict[str, object] | None) -> TableInfo:
    return TableInfo.from_json({"id": 1, "name": {"O": "t", "L": "t"}, "cols": [], "ttl_info": ttl})


def test_rows_past_their_interval_at_the_ts_are_expired_months_clamping_the_day() -> None:
    month = expired_at(_table({"column": {"O": "at", "L": "at"}, "interval_expr": "1", "interval_time_unit": 7}),
                       _ts(dt.datetime(2024, 2, 29, 12)))
    assert month is not None
    assert month({"at": dt.datetime(2024, 1, 28)}) and month({"at": "2024-01-28 23:59:59"})
    assert not month({"at": dt.datetime(2024, 1, 31, 12, 0, 1)})   # + 1 month clamps to 2024-02-29 12:00:01
    assert not month({"at": None}) and not month({"at": "not a time"})
    hours = expired_at(_table({"column": {"O": "at", "L": "at"}, "interval_expr": "90", "interval_time_unit": 3}),
                       _ts(dt.datetime(2024, 1, 1, 2, 0)))
    assert hours is not None and hours({"at": dt.date(2024, 1, 1)}) and not hours({"at": "2024-01-01 00:31:00"})
    aware = dt.datetime(2024, 1, 1, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))   # 23:00 UTC the day before
    assert hours({"at": aware})


def test_a_table_without_ttl_or_with_an_interval_binlake_does_not_read_has_none() -> None:
    assert expired_at(_table(None), 1 << 40) is None
    assert expired_at(_table({"column": {"O": "at"}, "interval_expr": "NOW()", "interval_time_unit": 5}), 1) is None
    assert expired_at(_table({"column": {"O": "at"}, "interval_expr": "1", "interval_time_unit": 21}), 1) is None
