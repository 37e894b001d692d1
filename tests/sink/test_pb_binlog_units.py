"""Unit tests of TiDB Binlog's file and Kafka formats' pure parts: the protobuf-file binlog's values and
DDL, what reparo reads back and prints, the DDL names it filters on; the kafka keys' defaults."""
from __future__ import annotations

import pyarrow as pa
import pytest

from binlake.reparo import ddl_names, go_float, go_value
from ingest.config import ConfigError
from schemas import pb_binlog_pb2 as pbb
from sink.kafka.config import KafkaOptions
from sink.pb_binlog import decode_events, encode_ddl, encode_dml
from sink.secondary import Table, python_rows
from sink.syncer_to import ToSection
from tests.codec.tables import PK, col, table
from transform import changes as ch
from transform.codec import mysqltypes as mt
from transform.codec.datums import decode_one


def test_values_are_tidb_binlogs_formatted_datums_and_read_back_as_reparo_reads_them() -> None:
    info = table(9, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "e", mt.TYPE_ENUM, elems=["a", "b"]),
                          col(3, "b", mt.TYPE_BIT, flen=12), col(4, "d", mt.TYPE_NEWDECIMAL, flen=6, decimal=2),
                          col(5, "s", mt.TYPE_VARCHAR)], pk_is_handle=True)
    target = Table.of("db", info)
    rows = pa.table({ch.OP: ["I", "U"], "id": pa.array([1, 1], pa.int32()), "e": ["b", "a"], "b": [5, 5],
                     "d": pa.array([1, 2], pa.decimal128(6, 2)), "s": ["x", None],
                     ch.BEFORE: pa.array([None, {"id": 1, "e": "b", "b": 5, "d": 1, "s": "x"}],
                                         pa.struct([("id", pa.int32()), ("e", pa.string()), ("b", pa.int64()),
                                                    ("d", pa.decimal128(6, 2)), ("s", pa.string())]))})
    binlog = pbb.Binlog.FromString(encode_dml(7, [(target, python_rows(target, rows))]).SerializeToString())
    assert binlog.tp == pbb.DML and binlog.commit_ts == 7
    insert = pbb.column.FromString(binlog.dml_data.events[0].row[1])
    assert (insert.name, insert.tp, insert.mysql_type) == ("e", bytes((mt.TYPE_ENUM,)), "enum")
    assert insert.value == b"\x09\x02"                              # ENUM as its index, a uvarint datum
    assert decode_one(pbb.column.FromString(binlog.dml_data.events[0].row[3]).value, 0)[0] == b"1.00"
    events = list(decode_events(binlog))
    assert [(e.schema, e.table, e.op) for e in events] == [("db", "t", "I"), ("db", "t", "U")]
    assert [c.value for c in events[0].columns] == [1, 2, 5, "1.00", "x"]      # BIT an integer, DECIMAL text
    assert [(c.value, c.changed) for c in events[1].columns] == [(1, 1), (2, 1), (5, 5), ("1.00", "2.00"),
                                                                 ("x", None)]


def test_ddl_is_used_on_its_schema_and_read_back_by_statement() -> None:
    assert encode_ddl(1, "d`b", "alter table t add c int").ddl_query == b"use `d``b`; alter table t add c int;"
    assert encode_ddl(1, "db", "CREATE DATABASE db").ddl_query == b"CREATE DATABASE db;"
    assert ddl_names("use `d``b`; alter table t add c int;") == ("d`b", "t", "alter table t add c int")
    assert ddl_names("use `a`; rename table t to other.t2;")[:2] == ("other", "t2")
    assert ddl_names("use `a`; create unique index i on t (c);")[:2] == ("a", "t")
    assert ddl_names("use `a`; truncate table `x`.`y`;")[:2] == ("x", "y")
    assert ddl_names("CREATE DATABASE IF NOT EXISTS `n`;")[:2] == ("n", "")
    with pytest.raises(ConfigError, match="cannot tell the table"):
        ddl_names("use `a`; flashback cluster to timestamp '2024-01-01';")


def test_values_print_as_gos_fmt_prints_them() -> None:
    assert [go_float(f) for f in (1e6, 123456.0, 1234567.0, 1e-4, 1e-5, -2.5e-7, 0.1, 1e21, -0.0)] == [
        "1e+06", "123456", "1.234567e+06", "0.0001", "1e-05", "-2.5e-07", "0.1", "1e+21", "-0"]
    assert go_value(b"hi", mt.TYPE_BLOB) == "[104 105]" and go_value("hi", mt.TYPE_VARCHAR) == "hi"
    assert go_value(None, mt.TYPE_LONG) == "<nil>" and go_value(18446744073709551615, mt.TYPE_LONGLONG) \
        == "18446744073709551615"


def test_kafka_keys_take_tidb_binlogs_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_ADDRS", raising=False)
    o = KafkaOptions.of(ToSection(), 42)
    assert (o.addrs, o.topic, o.max_messages, o.max_message_size) == (
        "127.0.0.1:9092", "42_obinlog", 1024, 1_000_000_000)
    monkeypatch.setenv("KAFKA_ADDRS", "k1:9092,k2:9092")
    assert KafkaOptions.of(ToSection(), 42).addrs == "k1:9092,k2:9092"
    assert KafkaOptions.of(ToSection.model_validate({"kafka-addrs": "k:1", "topic-name": "t"}), 42).topic == "t"
    with pytest.raises(ConfigError, match="ZooKeeper"):
        KafkaOptions.of(ToSection.model_validate({"zookeeper-addrs": "z:2181"}), 42)
    assert ToSection.model_validate({"kafka-version": "0.8.2.0"}).warnings() == [
        "kafka-version = '0.8.2.0': binlake's Kafka client asks the brokers which protocol versions they speak "
        "(Kafka 0.10 and later; the idempotent producer needs 0.11); not used"]
