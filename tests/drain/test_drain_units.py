"""Unit tests of the Drainer's pure parts: config, filters, range splitting, history, the net change."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from binlake.drain_config import DrainerConfig, parse_tables
from ingest.config import ConfigError, load_config
from sink.redact import redact_uri
from transform.filters import TableFilter
from transform.history import HistoryError, SchemaHistory
from transform.plan import PlanError, make_plan
from transform.pull import split_range
from transform.reduce import net_change

CONF = Path(__file__).resolve().parents[2] / "conf" / "drainer.toml"


def test_the_example_config_loads_and_flags_override_it() -> None:
    o = load_config(DrainerConfig, CONF, {"iceberg.warehouse": "/tmp/wh", "tables": "test.a,test.b"})
    assert o.upstream.status_url == "http://127.0.0.1:10080" and o.syncer.db_type == "iceberg"
    assert o.iceberg.warehouse == "/tmp/wh" and o.tables == [("test", "a"), ("test", "b")]
    assert o.syncer.ignore_schemas == ["INFORMATION_SCHEMA", "PERFORMANCE_SCHEMA", "mysql"]


@pytest.mark.parametrize("text, message", [
    ("bogus = 1", "unknown configuration key 'bogus'"),
    ("[syncer]\ndb-type = 'sqlite'", "not one of iceberg, parquet"),
    ("[syncer]\ndb-type = 'oracle'", "binlake does not write to Oracle"),
    ("[syncer]\nreplicate-do-table = [{db-name = 'a', table = 'b'}]", "db-name and tbl-name"),
    ("initial-commit-ts = -2", "initial-commit-ts: Input should be greater than or equal to -1"),
])
def test_bad_config_is_refused_with_the_key_named(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "drainer.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(DrainerConfig, f, {})


def test_tables_flag_must_name_db_and_table() -> None:
    assert parse_tables("a.b, c.d") == [("a", "b"), ("c", "d")]
    with pytest.raises(ValueError, match="'nodot' is not db.table"):
        parse_tables("a.b,nodot")
    with pytest.raises(ConfigError, match="tables: --tables entry 'nodot' is not db.table"):
        load_config(DrainerConfig, None, {"tables": "a.b,nodot"})


def test_filters_follow_tidb_binlog_rules() -> None:
    default = TableFilter()
    assert default.allows("test", "t") and not default.allows("MySQL", "user")
    f = TableFilter(do_dbs=("shop",), do_tables=(("test", "~^keep_"),), ignore_tables=(("shop", "secret"),))
    assert f.allows("shop", "orders") and f.allows("SHOP", "Orders")
    assert f.allows("test", "keep_me") and not f.allows("test", "other")
    assert not f.allows("shop", "secret") and not f.allows("elsewhere", "x")
    only = TableFilter(only=(("test", "a"),))
    assert only.allows("test", "A") and not only.allows("test", "b")


def test_split_range_covers_the_range_exactly() -> None:
    parts = split_range(100, 1000, 4)
    assert parts[0][0] == 100 and parts[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:])) and len(parts) == 4
    assert split_range(5, 7, 10) == [(5, 6), (6, 7)]


def test_a_plan_needs_a_registered_pump(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="no pump that is not offline"):
        make_plan(f"file://{tmp_path / 'registry.json'}", 1, 0)


def _job(jid: int, tp: int, version: int, table: dict | None, table_id: int = 0, state: int = 6) -> dict:
    return {"id": jid, "type": tp, "schema_id": 1, "table_id": table_id or (table or {}).get("id", 0),
            "schema_name": "test", "table_name": "", "state": state,
            "binlog": {"SchemaVersion": version, "DBInfo": None, "TableInfo": table, "FinishedTS": 0}}


def _table(tid: int, name: str, cols: list[tuple[int, str]]) -> dict:
    return {"id": tid, "name": {"O": name, "L": name}, "pk_is_handle": False,
            "cols": [{"id": cid, "name": {"O": n, "L": n}, "offset": i, "state": 5,
                      "type": {"Tp": 3, "Flag": 0, "Flen": 11, "Decimal": 0}} for i, (cid, n) in enumerate(cols)]}


def test_history_gives_the_table_in_force_at_each_schema_version() -> None:
    h = SchemaHistory.from_json([
        _job(1, 3, 10, _table(50, "t", [(1, "a")])),
        _job(2, 5, 12, _table(50, "t", [(1, "a"), (2, "b")])),
        _job(3, 5, 13, _table(50, "t", [(1, "a"), (2, "b"), (3, "c")]), state=5),   # cancelled: ignored
        _job(4, 11, 15, _table(51, "t", [(1, "a"), (2, "b")]), table_id=50),        # truncate: new id 51
    ])
    assert [c.name for c in h.table_at(50, 10).columns] == ["a"]
    assert [c.name for c in h.table_at(50, 14).columns] == ["a", "b"]
    assert h.table_at(51, 15).id == 51
    with pytest.raises(HistoryError, match="table id 50 was dropped at schema version 15"):
        h.table_at(50, 15)
    with pytest.raises(HistoryError, match="table id 50 is unknown at schema version 9"):
        h.table_at(50, 9)
    with pytest.raises(HistoryError, match="DDL job 3 is not in"):
        h.job(3)


def test_net_change_keeps_the_last_change_per_key_and_moves_changed_keys() -> None:
    before = pa.struct([("id", pa.int64()), ("v", pa.string())])
    rows = pa.table({
        "_tidb_op": ["I", "I", "U", "D", "I", "U", "D"],
        "id": [1, 2, 20, 1, 1, 3, 3],
        "v": ["a", "b", "b2", "a", "a2", "x", "x"],
        "_tidb_before": pa.array([None, None, {"id": 2, "v": "b"}, None, None, {"id": 9, "v": "old"}, None], before),
    })
    net = net_change(rows, ["id"])
    assert sorted(k["id"] for k in net.touched_keys.to_pylist()) == [1, 2, 3, 9, 20]
    assert sorted((r["id"], r["v"]) for r in net.upserts.select(["id", "v"]).to_pylist()) == [(1, "a2"), (20, "b2")]


def test_spark_defaults_apply_to_local_masters_only_and_settings_win() -> None:
    from transform.spark import LOCAL_DEFAULTS, STACK_SETTINGS, session_settings

    local = session_settings("local[2]", {"spark.sql.shuffle.partitions": "7"})
    assert local["spark.sql.shuffle.partitions"] == "7" and local["spark.driver.memory"] == LOCAL_DEFAULTS[
        "spark.driver.memory"]
    cluster = session_settings("spark://10.0.0.1:7077", {"spark.executor.memory": "2g"})
    assert not set(LOCAL_DEFAULTS) & set(cluster)
    assert cluster == {**STACK_SETTINGS, "spark.executor.memory": "2g"}


def test_failpoints_are_inert_until_a_test_enables_them() -> None:
    from transform import failpoints

    hits: list[tuple[object, ...]] = []
    failpoints.inject("sink-commit", 1)                       # nothing enabled: nothing happens
    with pytest.raises(KeyError, match="unknown failpoint 'sink-comit'"):
        failpoints.enable("sink-comit", lambda *a: None)
    failpoints.enable("sink-commit", lambda *a: hits.append(a))
    try:
        failpoints.inject("sink-commit", 2)
    finally:
        failpoints.disable("sink-commit")
    failpoints.inject("sink-commit", 3)
    assert hits == [(2,)]


def test_spark_conf_in_the_file_and_on_the_command_line(tmp_path: Path) -> None:
    f = tmp_path / "drainer.toml"
    f.write_text('[spark.conf]\n"spark.sql.shuffle.partitions" = 5\n"spark.eventLog.enabled" = true\n')
    o = load_config(DrainerConfig, f, {"spark.conf": {"spark.sql.shuffle.partitions": "7"}})
    assert o.spark.conf == {"spark.sql.shuffle.partitions": "7", "spark.eventLog.enabled": "true"}
    f.write_text('[spark.conf]\n"executor.memory" = "2g"\n')
    with pytest.raises(ConfigError, match="spark.conf: 'executor.memory' is not a Spark setting"):
        load_config(DrainerConfig, f)


def test_catalog_properties_in_the_file_and_on_the_command_line(tmp_path: Path) -> None:
    f = tmp_path / "drainer.toml"
    # unquoted dotted keys are nested tables to TOML: they are joined back
    f.write_text('[iceberg.properties]\ns3.endpoint = "http://127.0.0.1:9000"\n"s3.region" = "eu-west-1"\n'
                 's3.force-virtual-addressing = false\n')
    o = load_config(DrainerConfig, f, {"iceberg.properties": {"s3.region": "us-east-1"}})
    assert o.iceberg.properties == {"s3.endpoint": "http://127.0.0.1:9000", "s3.region": "us-east-1",
                                    "s3.force-virtual-addressing": "false"}
    f.write_text('[iceberg.properties]\n"s3.endpoint" = ["a", "b"]\n')
    with pytest.raises(ConfigError, match="s3.endpoint: expected a string, number or boolean"):
        load_config(DrainerConfig, f)


def test_catalog_uris_are_shown_without_their_password() -> None:
    assert redact_uri("postgresql+psycopg2://u:s3cr%2Ft@db.example:5432/cat") == \
        "postgresql+psycopg2://u:***@db.example:5432/cat"
    assert redact_uri("sqlite:////tmp/catalog.db") == "sqlite:////tmp/catalog.db"
    assert redact_uri("https://user@rest.example/v1") == "https://user@rest.example/v1"


def test_a_mysql_sink_run_cannot_be_restricted_to_some_tables() -> None:
    from binlake.drain import run_drain_command

    o = load_config(DrainerConfig, None, {"syncer.db-type": "mysql", "syncer.to.dsn": "mysql://u:pw@h:3306",
                                          "tables": "test.a"})
    with pytest.raises(ConfigError, match="--tables cannot restrict a mysql sink run"):
        run_drain_command(o)


def test_the_downstream_password_comes_from_a_file_and_stays_out_of_reprs(tmp_path: Path) -> None:
    from sink.mysql.plugin import SPEC as MYSQL
    from sink.mysql.plugin import target_of

    secret = "pw-from-file-7f3a"
    (tmp_path / "pw").write_text(secret + "\n")
    f = tmp_path / "drainer.toml"
    f.write_text(f'[syncer]\ndb-type = "mysql"\n[syncer.to]\nhost = "db"\npassword-file = "{tmp_path / "pw"}"\n')
    o = load_config(DrainerConfig, f)
    target = target_of(MYSQL.settings(o))
    assert target.password == secret
    assert secret not in repr(o) + repr(target) + target.describe()
    f.write_text(f'[syncer.to]\npassword = "x"\npassword-file = "{tmp_path / "pw"}"\n')
    with pytest.raises(ConfigError, match="password-file and password/encrypted_password are both set"):
        load_config(DrainerConfig, f)
    f.write_text(f'[syncer.to]\npassword-file = "{tmp_path / "missing"}"\n')
    with pytest.raises(ConfigError, match=r"\[syncer.to\] password-file: cannot read it"):
        target_of(MYSQL.settings(load_config(DrainerConfig, f)))


def test_the_spark_flags_of_drain_and_restore_reach_the_options() -> None:
    """``--splits-per-pump`` and ``--in-process-below`` were parsed and then dropped: every flag whose
    dest is a config key reaches the options."""
    from binlake.cli import _drainer_options, build_parser

    args = build_parser("drain").parse_args(["drain", "--splits-per-pump", "3", "--in-process-below", "5",
                                             "--spark-master", "local[1]"])
    o = _drainer_options(args)
    assert (o.spark.splits_per_pump, o.spark.in_process_below, o.spark.master) == (3, 5, "local[1]")
    args = build_parser("restore").parse_args(["restore", "--ts", "1", "--into", "mysql://u@h:3306",
                                               "--in-process-below", "0"])
    assert _drainer_options(args).spark.in_process_below == 0
