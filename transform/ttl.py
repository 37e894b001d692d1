"""A TTL table's expired rows, as TiDB's TTL job judges them.

TiDB's TTL job deletes the rows whose TTL column plus the table's interval is past the job's current
time, through TiDB's internal SQL, which writes no binlog: no binlog consumer sees those deletes
(TiDB Binlog's drainer turns TTL off on its downstream for that reason). A copy of the table then
holds rows TiDB no longer has; :func:`expired_at` tells which of them TiDB's TTL could have taken by
a ts, so that ``binlake verify`` sets them aside instead of counting them as differences.

The TTL column's value is read as TiDB's TTL reads it: a TIMESTAMP as an instant, a DATE or DATETIME
in UTC (TiDB's default time zone is the system's; the test tier's and a typical server's is UTC).
"""
from __future__ import annotations

import calendar
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from transform.codec.model import TableInfo
from transform.codec.values import naive_utc

# TiDB's ``ast.TimeUnitType`` codes a TTL interval may use (``ttl_info.interval_time_unit``)
_MICROSECOND, _SECOND, _MINUTE, _HOUR, _DAY, _WEEK, _MONTH, _QUARTER, _YEAR = 1, 2, 3, 4, 5, 6, 7, 8, 9
_FIXED = {_MICROSECOND: dt.timedelta(microseconds=1), _SECOND: dt.timedelta(seconds=1),
          _MINUTE: dt.timedelta(minutes=1), _HOUR: dt.timedelta(hours=1), _DAY: dt.timedelta(days=1),
          _WEEK: dt.timedelta(weeks=1)}
_MONTHS = {_MONTH: 1, _QUARTER: 3, _YEAR: 12}


def expired_at(table: TableInfo, ts: int) -> Callable[[Mapping[str, Any]], bool] | None:
    """For a table with TTL, whether a row (column name → value: a date, a datetime or their text)
    had expired at ``ts`` (a TSO; its physical time is the job's clock); None for a table without
    TTL, or one whose interval binlake does not read."""
    info = table.extra.get("ttl_info")
    if not isinstance(info, dict):
        return None
    column = info.get("column")
    name = str(column.get("O", "")) if isinstance(column, dict) else ""
    unit = info.get("interval_time_unit")
    try:
        amount = int(str(info.get("interval_expr", "")).strip().strip("'"))
    except ValueError:
        return None
    if not name or (unit not in _FIXED and unit not in _MONTHS):
        return None
    now = dt.datetime.fromtimestamp((ts >> 18) / 1000, dt.UTC).replace(tzinfo=None)

    def expired(row: Mapping[str, Any]) -> bool:
        at = naive_utc(row.get(name))
        return at is not None and _plus(at, amount, unit) < now
    return expired


def _plus(at: dt.datetime, amount: int, unit: int) -> dt.datetime:
    """``at + INTERVAL amount unit`` (months clamp the day, as MySQL's DATE_ADD does)."""
    if unit in _FIXED:
        return at + _FIXED[unit] * amount
    months = at.year * 12 + at.month - 1 + amount * _MONTHS[unit]
    year, month = divmod(months, 12)
    day = min(at.day, calendar.monthrange(year, month + 1)[1])
    return at.replace(year=year, month=month + 1, day=day)
