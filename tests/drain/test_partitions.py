"""``transform.partitions`` without a TiDB: the week arithmetic against MySQL's documented values,
and the rows and expressions it refuses to place (the real-TiDB tier checks placements against
TiDB's own, ``tests/realtidb/test_real_tidb_partitions.py``)."""
from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from transform.codec.model import TableInfo
from transform.partitions import PartitionError, Partitioning, locate

INT, VARCHAR, DATE = 3, 15, 10


def _table(cols: list[tuple[str, int, str]], partition: dict[str, Any]) -> TableInfo:
    return TableInfo.from_json({
        "id": 1, "name": {"O": "t", "L": "t"},
        "cols": [{"id": i + 1, "name": {"O": n, "L": n}, "offset": i, "state": 5,
                  "type": {"Tp": tp, "Flen": 20, "Collate": coll, "Charset": "utf8mb4" if coll else "binary"}}
                 for i, (n, tp, coll) in enumerate(cols)],
        "partition": {"enable": True, "num": len(partition["definitions"]), **partition}})


def _defs(*bounds: str) -> list[dict[str, Any]]:
    return [{"id": 100 + i, "name": {"O": f"p{i}", "L": f"p{i}"}, "less_than": [b]} for i, b in enumerate(bounds)]


@pytest.mark.parametrize(("day", "yearweek"), [("1987-01-01", 198652), ("2008-02-20", 200807),
                                               ("2024-01-01", 202353), ("2021-01-03", 202101),
                                               ("2000-01-01", 199952), ("2027-01-03", 202701)])
def test_yearweek_is_mysqls(day: str, yearweek: int) -> None:
    table = _table([("d", DATE, "")], {"type": 1, "expr": "YEARWEEK(`d`)", "definitions": _defs("MAXVALUE")})
    rows = pa.table({"d": pa.array([dt.date.fromisoformat(day)], pa.date32())})
    bounds = _table([("d", DATE, "")], {"type": 1, "expr": "YEARWEEK(`d`)",
                                        "definitions": _defs(str(yearweek), str(yearweek + 1), "MAXVALUE")})
    assert locate(table, rows).to_pylist() == [100]
    assert locate(bounds, rows).to_pylist() == [101]   # not below its own week, below the next


def test_range_null_goes_first_and_a_value_above_every_bound_is_refused() -> None:
    table = _table([("a", INT, "")], {"type": 1, "expr": "(`a` DIV 10)", "definitions": _defs("0", "5")})
    assert locate(table, pa.table({"a": [None, -11, -1, 49]})).to_pylist() == [100, 100, 101, 101]   # DIV truncates
    with pytest.raises(PartitionError, match="no partition takes the value 5"):
        locate(table, pa.table({"a": [50]}))


def test_what_binlake_does_not_evaluate_is_refused_by_name() -> None:
    with pytest.raises(PartitionError, match="partition function FROM_DAYS"):
        locate(_table([("d", DATE, "")], {"type": 1, "expr": "FROM_DAYS(`d`)", "definitions": _defs("MAXVALUE")}),
               pa.table({"d": pa.array([dt.date(2024, 1, 1)], pa.date32())}))
    ci = _table([("s", VARCHAR, "utf8mb4_general_ci")],
                {"type": 1, "columns": [{"O": "s", "L": "s"}], "definitions": _defs("'m'", "MAXVALUE")})
    assert locate(ci, pa.table({"s": ["A", "z"]})).to_pylist() == [100, 101]   # ASCII: case-folded
    with pytest.raises(PartitionError, match="collation utf8mb4_general_ci"):
        locate(ci, pa.table({"s": ["ß"]}))
    assert Partitioning.of(_table([("a", INT, "")], {"type": 2, "expr": "`a`", "definitions": _defs("", ""),
                                                     "enable": False})) is None
