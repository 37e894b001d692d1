"""The Kafka sink against a real broker (Apache Kafka in KRaft mode, ``kafka_server``): TiDB Binlog's
messages read back by binlake's decoder and by TiDB's own consumer library (``tidb-binlog/driver/reader``,
the Go peer ``.peers/kafkareader``, from an offset and seeking a commit ts as arbiter does on a restart),
equal to the upstream in commit order; a drain killed at every stage of producing and run again leaves
each transaction in the topic exactly once, for every consumer; a broker stopped during a run fails it
clearly and the next run completes."""
from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

import pytest

from binlake.drain_config import DrainerConfig
from ingest.config import ConfigError
from schemas import secondary_binlog_pb2 as sb
from sink.kafka.sink import KafkaSinkError, KafkaStateError
from sink.mysql.target import MySQLTarget
from sink.mysql.upstream_reader import read_snapshot
from tests.drain.conftest import Env
from tests.drain.crashing_cli import CRASH_STATUS
from tests.drain.test_drain_cli import ROOT, binlake, cli_args
from tests.servers import KafkaServer
from transform import failpoints

pytestmark = pytest.mark.integration

READER = ROOT / ".peers" / "kafkareader"
_COLUMN_FIELDS = ("int64_value", "uint64_value", "double_value", "bytes_value", "string_value")


def kafka_options(env: Env, server: KafkaServer, topic: str, **to: Any) -> DrainerConfig:
    o = env.options.model_copy(deep=True)
    o.syncer.db_type = "kafka"
    o.syncer.to.kafka_addrs = server.bootstrap
    o.syncer.to.topic_name = topic
    for k, v in to.items():
        setattr(o.syncer.to, k, v)
    return o


def read_topic(server: KafkaServer, topic: str, isolation: str = "read_committed") -> list[sb.Binlog]:
    """Every message of partition 0 a consumer at ``isolation`` reads, as secondary binlogs."""
    return [sb.Binlog.FromString(v) for v in server.messages(topic, isolation)]


def _value(col: dict[str, Any] | sb.Column) -> Any:
    """A column's value, from the Go reader's JSON or from binlake's decoding."""
    if isinstance(col, sb.Column):
        if col.is_null:
            return None
        return next((getattr(col, f) for f in _COLUMN_FIELDS if col.HasField(f)), None)
    if col.get("is_null"):
        return None
    for f in _COLUMN_FIELDS:
        if f in col:
            return base64.b64decode(col[f]) if f == "bytes_value" else col[f]
    return None


def normal(binlog: sb.Binlog) -> tuple[Any, ...]:
    """What a consumer reads in a message, comparable across readers."""
    if binlog.type == sb.DDL:
        d = binlog.ddl_data
        return binlog.commit_ts, "DDL", d.schema_name, d.table_name, d.ddl_query.decode()
    return binlog.commit_ts, "DML", tuple(
        (t.schema_name, t.table_name, tuple(c.name for c in t.column_info),
         tuple((m.type, tuple(_value(c) for c in m.row.columns),
                tuple(_value(c) for c in m.change_row.columns) if m.HasField("change_row") else None)
               for m in t.mutations))
        for t in binlog.dml_data.tables)


def normal_go(doc: dict[str, Any]) -> tuple[Any, ...]:
    """:func:`normal` of a message as TiDB's reader parsed it (the Go peer's JSON)."""
    b = doc["binlog"]
    if b.get("type", 0) == sb.DDL:
        d = b["ddl_data"]
        return (b["commit_ts"], "DDL", d.get("schema_name", ""), d.get("table_name", ""),
                base64.b64decode(d.get("ddl_query", "")).decode())
    return b["commit_ts"], "DML", tuple(
        (t["schema_name"], t["table_name"], tuple(c["name"] for c in t["column_info"]),
         tuple((m.get("type", 0), tuple(_value(c) for c in m["row"]["columns"]),
                tuple(_value(c) for c in m["change_row"]["columns"]) if m.get("change_row") else None)
               for m in t["mutations"]))
        for t in b["dml_data"]["tables"])


def go_read(server: KafkaServer, topic: str, count: int, commit_ts: int = 0) -> list[tuple[Any, ...]]:
    """``count`` messages as TiDB's reader hands them over: the topic's first ones, or those committed
    after ``commit_ts`` (the reader seeks that ts's offset first)."""
    r = subprocess.run([str(READER), "-addrs", server.bootstrap, "-topic", topic, "-count", str(count),
                        "-commit-ts", str(commit_ts), "-timeout", "60s"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return [normal_go(json.loads(line)) for line in r.stdout.splitlines() if line.startswith("{")]  # not its log


def replay(binlogs: list[sb.Binlog]) -> dict[str, dict[Any, dict[str, Any]]]:
    """The tables' rows after the messages, keyed by their first column (every test table's key):
    TRUNCATE empties a table, RENAME TABLE moves it."""
    state: dict[str, dict[Any, dict[str, Any]]] = {}
    for b in binlogs:
        if b.type == sb.DDL:
            q = b.ddl_data.ddl_query.decode().lower()
            name = f"{b.ddl_data.schema_name}.{b.ddl_data.table_name}"
            if q.startswith("truncate"):
                state[name] = {}
            elif q.startswith("rename table"):
                old = q.split()[2].replace("`", "")
                state[name] = state.pop(f"{b.ddl_data.schema_name}.{old}", {})
            continue
        for t in b.dml_data.tables:
            rows = state.setdefault(f"{t.schema_name}.{t.table_name}", {})
            names = [c.name for c in t.column_info]
            for m in t.mutations:
                new = dict(zip(names, (_value(c) for c in m.row.columns)))
                if m.type == sb.Update:
                    rows.pop(_value(m.change_row.columns[0]))
                if m.type == sb.Delete:
                    rows.pop(new[names[0]])
                else:
                    rows[new[names[0]]] = new
    return state


def upstream(env: Env, ts: int) -> dict[str, dict[Any, dict[str, Any]]]:
    tables = read_snapshot(MySQLTarget.from_dsn(env.options.upstream.dsn), ts)
    return {name: {next(iter(r.values())): r for r in rows} for name, rows in tables.items() if rows}


def workload(env: Env, step: int) -> None:
    """Rows on two servers, then (``step`` 0) ADD/DROP COLUMN, RENAME and TRUNCATE, each followed by an
    update of every row (so every row is read back in the table's last shape)."""
    if step == 0:
        env.sql("create table k (id int primary key, v varchar(20), n int)")
        env.sql("create table g (id int primary key, note varchar(10))")
        env.sql("insert into g values (1, 'gone'), (2, 'gone')")
    base = step * 100
    for i in range(6):
        if step == 0:
            env.sql(f"insert into k values ({base + i * 2}, 'v{i}', {i}), ({base + i * 2 + 1}, 'w{i}', {i})",
                    server=i % 2)
        else:                                                     # v was dropped, extra added
            env.sql(f"insert into k (id, n) values ({base + i * 2}, {i}), ({base + i * 2 + 1}, {i})", server=i % 2)
        env.sql(f"update k set n = n + 10 where id = {base + i * 2}", server=(i + 1) % 2)
        env.sql(f"delete from k where id = {base + i * 2 + 1}")
    if step == 0:
        env.sql("alter table k add column extra varchar(8) default 'x'")
        env.sql("update k set n = n + 1")
        env.sql("alter table k drop column v")
        env.sql("update k set n = n + 1")
        env.sql("rename table g to g2")
        env.sql("insert into g2 values (3, 'kept')")
        env.sql("truncate table g2")
        env.sql("insert into g2 values (4, 'after')")


def test_a_drain_into_kafka_is_read_back_by_tidbs_reader_and_binlakes_decoder_equal_to_the_upstream(
        env: Env, kafka_server: KafkaServer) -> None:
    topic = f"t{env.cluster.cluster_id}_obinlog"
    o = kafka_options(env, kafka_server, topic)
    workload(env, 0)
    first = env.drain(o)
    workload(env, 1)
    second = env.drain(o)
    assert second["from_ts"] == first["to_ts"]
    messages = read_topic(kafka_server, topic)
    ts = [b.commit_ts for b in messages]
    assert ts == sorted(set(ts)) and ts[-1] <= second["to_ts"]        # commit order, each transaction once
    ddl = [b.ddl_data.ddl_query.decode().lower() for b in messages if b.type == sb.DDL]
    assert [q.split()[0] for q in ddl] == ["create", "create", "alter", "alter", "rename", "truncate"]
    assert "add column extra" in ddl[2] and "drop column v" in ddl[3]   # TiDB's own queries
    expected = upstream(env, second["to_ts"])
    assert set(expected) == {"test.k", "test.g2"} and list(expected["test.g2"]) == [4]
    assert replay(messages) == expected
    assert go_read(kafka_server, topic, len(messages)) == [normal(b) for b in messages]
    middle = messages[len(messages) // 2].commit_ts
    assert go_read(kafka_server, topic, len(messages) - len(messages) // 2 - 1, middle) == [
        normal(b) for b in messages if b.commit_ts > middle]
    assert go_read(kafka_server, topic, 0, messages[-1].commit_ts) == []    # a caught-up arbiter restarting
    k = next(t for b in messages if b.type == sb.DML for t in b.dml_data.tables if t.table_name == "k")
    assert [(c.name, c.mysql_type, c.is_primary_key) for c in k.column_info] == [
        ("id", "int", True), ("v", "varchar", False), ("n", "int", False)]
    assert [(u.name, list(u.column_names)) for u in k.unique_keys] == [("PRIMARY", ["id"])]
    third = env.drain(o)                                                # nothing new: nothing produced
    assert len(read_topic(kafka_server, topic)) == len(messages) and third["to_ts"] >= second["to_ts"]


def test_a_drain_killed_while_producing_and_run_again_leaves_each_transaction_once(
        env: Env, kafka_server: KafkaServer) -> None:
    """Killed before its first message, amid its messages, and with every message acknowledged but the
    checkpoint not recorded (more writes arriving between the runs): the next run
    continues after the topic's last message. No message is ever aborted, so a consumer reading
    uncommitted messages (TiDB's reader) sees the same."""
    topic = f"kill-{env.cluster.cluster_id}"
    conf = env.root / "drainer.toml"
    conf.write_text(f'[syncer]\ndb-type = "kafka"\n[syncer.to]\nkafka-addrs = "{kafka_server.bootstrap}"\n'
                    f'topic-name = "{topic}"\n')
    args = ["--config", str(conf), *cli_args(env.options), "--spark-master", "local[2]"]
    workload(env, 0)
    for step, failpoint in enumerate(["kafka-produce=1", "kafka-produce=7", "kafka-acked=1"], start=1):
        workload(env, step)
        env.settle()
        r = binlake("drain", *args, failpoints=(failpoint,), cwd=env.root)
        assert r.returncode == CRASH_STATUS, failpoint + r.stdout[-1000:] + r.stderr[-2000:]
    rerun = binlake("drain", *args, cwd=env.root)
    assert rerun.returncode == 0, rerun.stdout[-1000:] + rerun.stderr[-2000:]
    messages = read_topic(kafka_server, topic)
    ts = [b.commit_ts for b in messages]
    assert ts == sorted(set(ts)), "a transaction appears twice or out of commit order"
    assert replay(messages) == upstream(env, env.cluster.ts())
    assert [normal(b) for b in read_topic(kafka_server, topic, "read_uncommitted")] == [normal(b) for b in messages]


def test_a_broker_stopped_during_a_run_fails_it_clearly_and_the_next_run_completes(
        env: Env, kafka_server: KafkaServer) -> None:
    topic = f"stop-{env.cluster.cluster_id}"
    o = kafka_options(env, kafka_server, topic)
    workload(env, 0)
    env.drain(o)
    workload(env, 1)
    env.settle()
    stopped: list[int] = []

    def stop_broker(n: int) -> None:          # amid the run's produce: the third message finds no broker
        if n == 3:
            kafka_server.stop()
            stopped.append(n)

    failpoints.enable("kafka-produce", stop_broker)
    try:
        with pytest.raises(KafkaSinkError, match="not acknowledged within 30 s by the brokers at 127.0.0.1:"):
            env.drain(o)
        assert stopped
    finally:
        failpoints.disable("kafka-produce")
        kafka_server.start()
    env.drain(o)
    messages = read_topic(kafka_server, topic)
    ts = [b.commit_ts for b in messages]
    assert ts == sorted(set(ts))
    assert replay(messages) == upstream(env, env.cluster.ts())


def test_zookeeper_discovery_and_a_transaction_over_the_message_size_are_refused_with_the_reason(
        env: Env, kafka_server: KafkaServer) -> None:
    o = kafka_options(env, kafka_server, "zk", zookeeper_addrs="127.0.0.1:2181")
    with pytest.raises(ConfigError, match="ZooKeeper"):
        env.drain(o)
    env.sql("create table big (id int primary key, v varchar(200))")
    env.sql("insert into big values " + ", ".join(f"({i}, '{'x' * 150}')" for i in range(8)))
    topic = f"big-{env.cluster.cluster_id}"
    with pytest.raises(KafkaStateError, match=r"the transaction committed at \d+ is a message of \d+ bytes, over "
                                              r"kafka-max-message-size \(1000\)"):
        env.drain(kafka_options(env, kafka_server, topic, kafka_max_message_size=1000))
    assert [b.type for b in read_topic(kafka_server, topic)] == [sb.DDL]     # the CREATE TABLE before it
