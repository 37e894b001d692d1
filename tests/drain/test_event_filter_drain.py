"""TiDB Binlog's ``[syncer.binlog-filter-rule]`` in a real drain into Iceberg: the row changes a rule
ignores on the tables its ``[[syncer.table-migrate-rule]]`` names never reach the changelog or the
mirror, and the run report counts them as left out, not as written (the MySQL sink's DDL and DML:
``tests/drain/test_mysql_sink.py``)."""
from __future__ import annotations

import pytest

from tests.drain.conftest import Env, read_table

pytestmark = pytest.mark.integration


def test_the_lake_leaves_out_the_inserts_and_deletes_a_rule_ignores(env: Env) -> None:
    o = env.options.model_copy(deep=True)
    o.syncer.binlog_filter_rule = {"keep-deleted": {"ignore-event": ["delete"]},
                                   "drop-all-rows": {"ignore-event": ["all dml"]}}
    o.syncer.table_migrate_rule = [
        {"source": {"schema": "test", "table": "hist*"}, "binlog-filter-rule": ["keep-deleted"]},
        {"source": {"schema": "test", "table": "scratch"}, "binlog-filter-rule": ["drop-all-rows"]}]
    for t in ("hist", "plain", "scratch"):
        env.sql(f"create table {t} (id int primary key, v varchar(8))")
        env.sql(f"insert into {t} values (1, 'a'), (2, 'b'), (3, 'c')")
        env.sql(f"delete from {t} where id = 2")
        env.sql(f"update {t} set v = 'z' where id = 3")
    env.sql("insert into hist values (4, 'd'); delete from hist where id = 4")
    report = env.drain(o)

    rows = {t["table"]: t["rows"] for t in report["tables"]}
    assert rows["test.hist"] == {"I": 4, "U": 1, "D": 0}          # the deletes were not written
    assert rows["test.plain"] == {"I": 3, "U": 1, "D": 1}
    assert rows["test.scratch"] == {"I": 0, "U": 0, "D": 0}       # created, and none of its rows
    assert report["counts"]["ignored_row_changes"] == 2 + 5
    cat = env.catalog()
    mirror = {t: sorted((r["id"], r["v"]) for r in read_table(cat, f"test.{t}").to_pylist())
              for t in ("hist", "plain", "scratch")}
    assert mirror == {"hist": [(1, "a"), (2, "b"), (3, "z"), (4, "d")], "plain": [(1, "a"), (3, "z")], "scratch": []}
    assert "D" not in read_table(cat, "test.hist__changelog").column("_tidb_op").to_pylist()
    assert read_table(cat, "test.scratch__changelog").num_rows == 0
