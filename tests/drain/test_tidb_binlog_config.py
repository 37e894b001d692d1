"""TiDB Binlog's drainer.toml and pump.toml load as they are (every key of the v4.0 to v8.3 example
files and config structs, written here from the key lists): each key is honoured, accepted with one
warning line saying what binlake does instead, or refused with the reason when binlake would get its
meaning wrong."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

from binlake.drain import INITIAL_TS_FILE, initial_ts
from binlake.drain_config import DrainerConfig
from ingest.config import ConfigError, load_config, print_warnings
from ingest.pump.config import PumpConfig
from sink.mysql.plugin import checkpoint_target_of, target_of
from sink.registry import names, spec_for
from upstream.local import LocalTSO

# every drainer key TiDB Binlog v4.0-v8.3 reads, at the values its example sets (or a typical one)
DRAINER_TOML = """
addr = "127.0.0.1:8249"
advertise-addr = ""
detect-interval = 10
data-dir = "{data}"
pd-urls = "http://127.0.0.1:2379"
compressor = ""
log-level = "info"
log-file = ""
node-id = "drainer-1"
initial-commit-ts = 0
synced-check-time = 5

[security]
ssl-ca = ""
ssl-cert = ""
ssl-key = ""
cert-allowed-cn = []

[syncer]
sql-mode = "STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION"
txn-batch = 20
sync-ddl = true
loopback-control = false
channel-id = 1
worker-count = 16
enable-dispatch = true
disable-dispatch = false
enable-detect = true
disable-detect = false
safe-mode = false
db-type = "{db_type}"
ignore-txn-commit-ts = []
ignore-schemas = "INFORMATION_SCHEMA,PERFORMANCE_SCHEMA,mysql"
replicate-do-db = ["~^b.*", "s1"]
load-schema-snapshot = false
load-table-infos = false
case-sensitive = false

[syncer.relay]
log-dir = ""
max-file-size = 10485760

[[syncer.replicate-do-table]]
db-name = "test"
tbl-name = "log"

[[syncer.replicate-do-table]]
db-name = "test"
tbl-name = "~^a.*"

[[syncer.ignore-table]]
db-name = "test"
tbl-name = "log"

[[syncer.table-migrate-rule]]
binlog-filter-rule = ["keep-deleted"]
source = {{ schema = "shop*", table = "order?" }}

[syncer.binlog-filter-rule]

[syncer.binlog-filter-rule.keep-deleted]
ignore-event = ["delete"]
ignore-sql = []

[syncer.to]
host = "127.0.0.1"
user = "root"
password = ""
encrypted_password = ""
port = 3306
read-timeout = "1m"
sync-mode = 1
merge = false
dir = "data.drainer"
retention-time = 7
zookeeper-addrs = "127.0.0.1:2181"
kafka-addrs = "127.0.0.1:9092"
kafka-version = "0.8.2.0"
kafka-max-messages = 1024
kafka-max-message-size = 1073741824
kafka-client-id = "tidb_binlog"
topic-name = ""
oracle-service-name = ""
oracle-connect-string = ""

[syncer.to.params]
time_zone = "+00:00"

[syncer.to.checkpoint]
type = "mysql"
schema = "tidb_binlog"
table = "checkpoint"
"""

# what a drain prints for that file: the keys binlake accepts without doing what TiDB Binlog does
FILE = ["syncer.to.dir", "syncer.to.retention-time"]
KAFKA = ["syncer.to.zookeeper-addrs", "syncer.to.kafka-addrs", "syncer.to.kafka-version",
         "syncer.to.kafka-max-messages", "syncer.to.kafka-max-message-size", "syncer.to.kafka-client-id",
         "syncer.to.topic-name"]


def _drainer(tmp_path: Path, db_type: str, extra: str = "") -> Path:
    f = tmp_path / f"drainer-{db_type}.toml"
    f.write_text(DRAINER_TOML.format(data=tmp_path / "data", db_type=db_type) + extra)
    return f


@pytest.mark.parametrize("db_type", names())
def test_every_drainer_key_loads_for_every_db_type(tmp_path: Path, db_type: str) -> None:
    path = _drainer(tmp_path, db_type)
    o = load_config(DrainerConfig, path, {})
    assert o.syncer.db_type == db_type and o.syncer.channel_id == 1
    assert o.syncer.to.read_timeout == 60.0                      # TiDB's "1m"
    assert o.syncer.to.params == {"time_zone": "+00:00"}
    out = io.StringIO()
    print_warnings(o, path, out)
    lines = out.getvalue().splitlines()
    assert all(line.startswith(f"binlake: warning: {path}: ") for line in lines)
    # type = "mysql": a MySQL/TiDB sink's checkpoint in that database (TiDB Binlog's), a lake's stays in the lake
    lake = [] if db_type in ("mysql", "tidb") else ["syncer.to.checkpoint.type"]
    kafka = ["syncer.to.kafka-version"] if db_type == "kafka" else KAFKA   # the kafka keys, unused by another
    # db-type; kafka-version by none (the client asks the brokers their versions)
    files = [] if spec_for(db_type).names[0] == "file" else FILE
    assert sorted(line.removeprefix(f"binlake: warning: {path}: ").split(" = ")[0] for line in lines) \
        == sorted(files + lake + kafka)
    assert o.detect_interval == 10 and o.synced_check_time == 5     # --follow's (tests/drain/test_follow.py)
    events = o.event_filter()   # row changes only: every db-type takes it (transform.event_filter)
    assert events.rule_for("shop1", "orders", "delete") is not None
    assert events.rule_for("shop1", "orders", "insert") is None
    assert events.rule_for("shop1", "ordered", "delete") is None


# the rules of TiDB Binlog's own binlog-filter integration test (tests/binlogfilter/drainer.toml), which
# leave out DDL (by event type and by SQL pattern) and row changes
DDL_RULES = """
[[syncer.table-migrate-rule]]
binlog-filter-rule = ["truncate-table-filter", "add-column-aaa-filter", "delete-filter"]
source = { schema = "do_not_truncate_database*", table = "do_not_truncate_table*" }

[[syncer.table-migrate-rule]]
binlog-filter-rule = ["add-column-aaa-filter"]
source = { schema = "do_not_add_col_database*", table = "do_not_add_col_table*" }

[[syncer.table-migrate-rule]]
binlog-filter-rule = ["delete-filter"]
source = { schema = "do_not_delete_database*", table = "do_not_delete_table*" }

[syncer.binlog-filter-rule]

[syncer.binlog-filter-rule.truncate-table-filter]
ignore-event = ["truncate table"]
ignore-sql = []

[syncer.binlog-filter-rule.add-column-aaa-filter]
ignore-event = []
ignore-sql = ["alter table .* add column aaa int"]

[syncer.binlog-filter-rule.delete-filter]
ignore-event = ["delete"]
ignore-sql = []
"""


@pytest.mark.parametrize("db_type", names())
def test_rules_leaving_out_ddl_are_for_the_sinks_passing_ddl_on(tmp_path: Path, db_type: str) -> None:
    f = tmp_path / "drainer.toml"
    f.write_text(f"[syncer]\ndb-type = '{db_type}'\n{DDL_RULES}")
    if not spec_for(db_type).capabilities.replays_ddl:
        with pytest.raises(ConfigError, match=f"truncate-table-filter, add-column-aaa-filter, delete-filter on schema "
                                              f"'do_not_truncate_database\\*', .* can leave out DDL .*: that is for "
                                              f"db-type mysql, tidb, kafka and file; a {db_type} sink's tables "
                                              f"follow the upstream's DDL history"):
            load_config(DrainerConfig, f, {})
        return
    events = load_config(DrainerConfig, f, {}).event_filter()
    truncate = "TRUNCATE TABLE do_not_truncate_table1"
    assert events.rule_for("do_not_truncate_database1", "do_not_truncate_table1", "truncate table", truncate)
    assert not events.rule_for("do_not_add_col_database1", "do_not_add_col_table1", "truncate table", truncate)
    add = "ALTER TABLE do_not_add_col_table1 ADD COLUMN aaa int"
    assert events.rule_for("do_not_add_col_database1", "do_not_add_col_table1", "alter table", add)
    other = "ALTER TABLE do_not_add_col_table1 ADD COLUMN bbb int"
    assert not events.rule_for("do_not_add_col_database1", "do_not_add_col_table1", "alter table", other)
    assert events.rule_for("do_not_delete_database1", "do_not_delete_table1", "delete")
    assert not events.rule_for("do_not_delete_database1", "do_not_delete_table1", "update")


@pytest.mark.parametrize("extra, message", [
    ("[syncer]\nsync-ddl = false", "sync-ddl = false is for db-type mysql, tidb, kafka and file: a iceberg sink's "
                                   "tables"),
    ("[syncer]\ntable-migrate-rule = [{source = {schema = 'a'}, target = {schema = 'b'}}]",
     "target = .* is not supported: routing tables"),
    ("[syncer]\ntable-migrate-rule = [{source = {schema = 'a'}, binlog-filter-rule = ['r1']}]\n"
     "[syncer.binlog-filter-rule.r1]\nignore-event = ['insrt']",
     "binlog-filter-rule r1 on schema 'a', table '': event type 'insrt' is not one of"),
    ("[syncer]\ntable-migrate-rule = [{source = {schema = 'a'}, binlog-filter-rule = ['r1']}]\n"
     "[syncer.binlog-filter-rule.r1]\nignore-sql = ['(?=drop)']",
     "binlog-filter-rule r1 .*: ignore-sql \\['\\(\\?=drop\\)'\\] is not a valid regular expression"),
    ("[syncer]\ntable-migrate-rule = [{source = {schema = 'a*b'}, binlog-filter-rule = ['r1']}]\n"
     "[syncer.binlog-filter-rule.r1]\nignore-event = ['insert']",
     "pattern 'a\\*b' is not valid: '\\*' may only be its last character"),
    ("[syncer]\ntable-migrate-rule = [{source = {schema = 'a'}, binlog-filter-rule = ['r2']}]\n"
     "[syncer.binlog-filter-rule.r1]\nignore-event = ['insert']",
     "names binlog-filter-rule 'r2', which is not defined \\(defined: r1\\)"),
    ("[syncer.binlog-filter-rule.r1]\nevents = ['insert']",
     "unknown configuration key 'syncer.binlog-filter-rule.r1.events'"),
    ("[syncer.to]\nsync-mode = 2", "sync-mode = 2 is not supported: only 1 \\(SyncFullColumn\\)"),
    ("[syncer]\ndb-type = 'mysql'\n[syncer.to.checkpoint]\ntype = 'oracle'",
     "type = 'oracle' is not supported: the checkpoint is on the downstream"),
    ("[syncer]\nreplicate-do-db = ['~(']", "filter pattern '~\\(' is not a valid regular expression"),
    ("initial-commit-ts = -2", "greater than or equal to -1"),
])
def test_keys_binlake_would_get_wrong_are_refused_with_the_reason(tmp_path: Path, extra: str, message: str) -> None:
    f = tmp_path / "drainer.toml"
    f.write_text(extra)
    with pytest.raises(ConfigError, match=message):
        load_config(DrainerConfig, f, {})


def test_sql_mode_is_the_downstream_sessions_unless_params_set_one() -> None:
    o = load_config(DrainerConfig, None, {"syncer.db-type": "mysql", "syncer.sql-mode": "ANSI_QUOTES"})
    assert target_of(o.syncer).params["sql_mode"] == "ANSI_QUOTES"
    o = load_config(DrainerConfig, None, {"syncer.db-type": "mysql", "syncer.sql-mode": "ANSI_QUOTES",
                                          "syncer.to.params": {"SQL_MODE": ""}})
    assert target_of(o.syncer).params == {"SQL_MODE": ""}


def test_initial_commit_ts_minus_one_starts_at_pds_ts_and_keeps_it(tmp_path: Path) -> None:
    tso = LocalTSO()
    try:
        o = load_config(DrainerConfig, None, {"initial-commit-ts": -1, "pd-urls": tso.url,
                                              "data-dir": str(tmp_path / "d")})
        assert initial_ts(o, tso.cluster_id, keep=False) > 0
        assert not (tmp_path / "d" / INITIAL_TS_FILE).exists()          # a dry run keeps nothing
        first = initial_ts(o, tso.cluster_id)
        assert first > 0 and initial_ts(o, tso.cluster_id) == first        # every run until a checkpoint
        assert (tmp_path / "d" / INITIAL_TS_FILE).read_text().strip() == str(first)
    finally:
        tso.stop()
    assert initial_ts(load_config(DrainerConfig, None, {"initial-commit-ts": 7}), 1) == 7


# every pump key TiDB Binlog v4.0-v8.3 reads
PUMP_TOML = """
addr = "127.0.0.1:8250"
advertise-addr = "127.0.0.1:8250"
socket = ""
gc = 7
data-dir = "data.pump"
heartbeat-interval = 2
pd-urls = "http://127.0.0.1:2379"
log-level = "info"
log-file = ""
node-id = "pump-1"
gen-binlog-interval = 3

[security]
ssl-ca = ""
ssl-cert = ""
ssl-key = ""
cert-allowed-cn = ["binlog"]

[storage]
sync-log = true
stop-write-at-available-space = "10 gib"
kv_chan_cap = 1048576
slow_write_threshold = 1.0

[storage.kv]
block-cache-capacity = 8388608
block-restart-interval = 16
block-size = 4096
compaction-L0-trigger = 8
compaction-table-size = 67108864
compaction-total-size = 536870912
compaction-total-size-multiplier = 8.0
write-buffer = 67108864
write-L0-pause-trigger = 24
write-L0-slowdown-trigger = 17
"""


def test_every_pump_key_loads_and_the_leveldb_tunables_warn(tmp_path: Path) -> None:
    f = tmp_path / "pump.toml"
    f.write_text(PUMP_TOML)
    o = load_config(PumpConfig, f, {})
    assert o.gc_retention == 7 * 86400 and o.storage.stop_write_at_available_space == 10 << 30
    warned = o.warnings()
    assert len(warned) == 10 and all(w.startswith("storage.kv.") for w in warned)
    assert any(w.startswith("storage.kv.compaction-L0-trigger = 8: binlake's pump stores in LevelDB") for w in warned)


def test_checkpoint_database_keys_without_a_type_are_reported_unused() -> None:
    o = load_config(DrainerConfig, None, {"syncer.db-type": "mysql", "syncer.to.checkpoint.host": "cp-db",
                                          "syncer.to.checkpoint.port": 4000})
    assert checkpoint_target_of(o.syncer) is None
    assert [w.split(": ", 1)[0] for w in o.warnings()] == ["syncer.to.checkpoint.host = 'cp-db'",
                                                           "syncer.to.checkpoint.port = 4000"]
    o = load_config(DrainerConfig, None, {"syncer.db-type": "tidb", "syncer.to.checkpoint.type": "tidb",
                                          "syncer.to.checkpoint.port": 4000})
    target = checkpoint_target_of(o.syncer)
    assert target is not None and (target.host, target.port, target.user) == ("127.0.0.1", 4000, "root")
    assert o.warnings() == []


def test_without_initial_commit_ts_mysql_and_tidb_start_at_pds_ts_and_the_lake_at_0(tmp_path: Path) -> None:
    """TiDB Binlog's default (-1) for the sinks that replay statements (a fresh downstream does not replay
    every DDL since TiDB's bootstrap); the lake wants the history."""
    tso = LocalTSO()
    try:
        for db_type, starts_now in (("mysql", True), ("tidb", True), ("iceberg", False), ("parquet", False),
                                    ("kafka", False), ("file", False)):
            o = load_config(DrainerConfig, None, {"syncer.db-type": db_type, "pd-urls": tso.url,
                                                  "data-dir": str(tmp_path / db_type)})
            assert o.initial_commit_ts is None and o.first_ts() == (-1 if starts_now else 0), db_type
            first = initial_ts(o, tso.cluster_id, keep=False)
            assert (first > 0) == starts_now, (db_type, first)
        given = load_config(DrainerConfig, None, {"syncer.db-type": "mysql", "initial-commit-ts": 0})
        assert initial_ts(given, tso.cluster_id) == 0
    finally:
        tso.stop()
