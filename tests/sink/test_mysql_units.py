"""Unit tests of the MySQL sink's pure parts: statements and keys, causality, DDL rewriting, the
checkpoint JSON, DSNs, and the ordered stream's bundles."""
from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from schemas import secondary_binlog_pb2 as sb
from sink.binlogfile import BinlogFileError
from sink.mysql.checkpoint import Checkpoint, CheckpointFormatError
from sink.mysql.ddl import for_mysql, plan_ddl, split_statements, with_charset, without_ignored
from sink.mysql.early import Reshape
from sink.mysql.loader import Causality
from sink.mysql.progress import UnkeyedProgress, not_applied
from sink.mysql.relay import RelayLog, decode_dml
from sink.mysql.statements import DML, TargetTable, batched, merged, number_unkeyed, row_changes, statements
from sink.mysql.target import MySQLTarget, MySQLTargetError
from sink.mysql.verify import _same
from sink.secondary import encode_ddl, encode_dml, python_rows
from tests.codec.tables import PK, col, table
from transform import changes as ch
from transform import ordered
from transform.codec import mysqltypes as mt
from transform.codec.model import HistoryInfo, Job, TableInfo
from transform.ddl import UnreplicableDDLError
from transform.event_filter import EventFilter
from transform.filters import TableFilter


def _target(pk: bool = True) -> TargetTable:
    cols = [col(1, "id", mt.TYPE_LONG, flag=PK if pk else 0), col(2, "v", mt.TYPE_VARCHAR),
            col(3, "b", mt.TYPE_BIT, flen=64), col(4, "g", mt.TYPE_LONG, generated="id + 1")]
    return TargetTable.of("d", table(7, "t", cols, pk_is_handle=pk))


def test_statements_use_the_key_and_safe_mode_makes_them_idempotent() -> None:
    t = _target()
    assert t.columns == ("id", "v", "b")            # the generated column is not written
    ins = DML.of(t, "I", (1, "a", 5), None, 10)
    assert statements(ins, False) == ["INSERT INTO `d`.`t` (`id`, `v`, `b`) VALUES (1, 'a', 5)"]
    assert statements(ins, True)[0].startswith("REPLACE INTO `d`.`t`")
    upd = DML.of(t, "U", (2, "b", 5), (1, "a", 5), 11)
    assert statements(upd, False) == ["UPDATE `d`.`t` SET `id` = 2, `v` = 'b', `b` = 5 WHERE `id` = 1 LIMIT 1"]
    assert statements(upd, True) == ["DELETE FROM `d`.`t` WHERE `id` = 1 LIMIT 1",
                                     "REPLACE INTO `d`.`t` (`id`, `v`, `b`) VALUES (2, 'b', 5)"]
    keyless = DML.of(_target(pk=False), "D", (1, None, 5), None, 12)
    assert statements(keyless, False) == ["DELETE FROM `d`.`t` WHERE `id` = 1 AND `v` IS NULL AND `b` = 5 LIMIT 1"]


def test_row_changes_render_rows_keys_and_updates_with_arrow() -> None:
    t = TargetTable.of("d", table(7, "t", [
        col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "v", mt.TYPE_VARCHAR), col(3, "b", mt.TYPE_BIT, flen=64),
        col(4, "raw", mt.TYPE_VARCHAR, charset="binary"), col(5, "f", mt.TYPE_FLOAT),
        col(6, "at", mt.TYPE_DATETIME, decimal=6)], pk_is_handle=True))
    at = pa.array([dt.datetime(2024, 1, 2, 3, 4, 5), dt.datetime(2024, 1, 2, 3, 4, 5, 60), None], pa.timestamp("us"))
    before = pa.struct([("id", pa.int32()), ("v", pa.string()), ("b", pa.int64()), ("raw", pa.binary()),
                        ("f", pa.float32()), ("at", pa.timestamp("us"))])
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int32()), "v": ["it's", "a\\b\0", None],
                     "b": pa.array([-1, 5, None], pa.int64()), "raw": pa.array([b"\x00\xff'", b"", None], pa.binary()),
                     "f": pa.array([0.1, None, -2.5], pa.float32()), "at": at, ch.OP: ["I", "U", "D"],
                     ch.COMMIT_TS: [5, 6, 6],
                     ch.BEFORE: pa.array([None, {"id": 9, "v": "x", "b": 0, "raw": b"", "f": 0.0, "at": None}, None],
                                         before)})
    ins, upd, dele = row_changes(t, rows)
    assert ins.row == ("(1, 'it\\'s', 18446744073709551615, X'00FF27', 0.10000000149011612, "
                       "'2024-01-02 03:04:05.000000')")     # BIT(64) unwrapped, FLOAT as the double it is
    assert (ins.values, ins.old, ins.sets, ins.commit_ts) == (("1",), None, "", 5)
    assert upd.row == "(2, 'a\\\\b\\0', 5, X'', NULL, '2024-01-02 03:04:05.000060')"
    assert (upd.values, upd.old) == (("2",), ("9",))
    assert upd.sets == ("`id` = 2, `v` = 'a\\\\b\\0', `b` = 5, `raw` = X'', `f` = NULL, "
                        "`at` = '2024-01-02 03:04:05.000060'")
    assert statements(upd, False) == [f"UPDATE `d`.`t` SET {upd.sets} WHERE `id` = 9 LIMIT 1"]
    assert dele.row == "(3, NULL, NULL, NULL, -2.5, NULL)" and statements(dele, False) == [
        "DELETE FROM `d`.`t` WHERE `id` = 3 LIMIT 1"]
    assert upd.causality_keys() == ["PRIMARY(2)`d`.`t`", "PRIMARY(9)`d`.`t`"]


def test_causality_keys_conflicts_and_groups() -> None:
    t = _target()
    a, b = DML.of(t, "I", (1, "a", 0), None, 1), DML.of(t, "I", (2, "b", 0), None, 1)
    move = DML.of(t, "U", (2, "x", 0), (1, "a", 0), 2)                       # touches both keys
    assert len(move.causality_keys()) == 2
    c = Causality()
    ga, gb = c.add(a.causality_keys()), c.add(b.causality_keys())
    assert ga != gb and c.conflicts(move.causality_keys())
    c.reset()
    assert not c.conflicts(move.causality_keys())
    assert c.add(move.causality_keys()) == c.add(a.causality_keys())      # same group after the update
    keyless = DML.of(_target(pk=False), "I", (1, "a", 0), None, 1)
    other_row = DML.of(_target(pk=False), "D", (2, None, 7), None, 1)
    assert keyless.causality_keys() == other_row.causality_keys() == ["table`d`.`t`"]   # one worker per table


def test_unkeyed_dmls_are_numbered_per_table_recorded_and_skipped_up_to_their_position() -> None:
    keyed, keyless = _target(), _target(pk=False)
    other = TargetTable("d", "u", keyless.columns, ())
    nullable = TargetTable("d", "n", ("id", "v"), (("uk", (1,)),))          # unique key on a NULL-able column
    txn = number_unkeyed([DML.of(keyless, "I", (1, "a", 0), None, 5), DML.of(keyed, "I", (1, "a", 0), None, 5),
                          DML.of(other, "I", (1, "a", 0), None, 5), DML.of(keyless, "D", (1, "a", 0), None, 5),
                          DML.of(nullable, "I", (1, "x"), None, 5), DML.of(nullable, "I", (2, None), None, 5),
                          DML.of(nullable, "U", (3, None), (3, "y"), 5)])
    assert [d.seq for d in txn] == [1, 0, 1, 2, 0, 1, 2]                  # a NULL key makes a row unkeyed
    assert "table`d`.`n`" in txn[6].causality_keys() and "table`d`.`n`" not in txn[4].causality_keys()
    rec = UnkeyedProgress(9).record(txn[:4])
    assert [sql.split(" VALUES ")[1] for sql, _ in rec] == ["(9, '`d`.`t`', 5, 2)", "(9, '`d`.`u`', 5, 1)"]
    assert rec[0][0].startswith("REPLACE INTO `tidb_binlog`.`checkpoint_unkeyed`")   # the last per table
    assert UnkeyedProgress(9).record([txn[1]]) == []
    kept = not_applied(txn, {"`d`.`t`": (5, 1), "`d`.`u`": (4, 9), "`d`.`n`": (6, 1)})
    assert [(d.table.name, d.seq) for d in kept] == [("t", 0), ("u", 1), ("t", 2), ("n", 0)]


def test_ddl_loses_tidb_only_syntax_and_gains_the_upstream_charset() -> None:
    q = ("CREATE TABLE t (id bigint AUTO_RANDOM(5) /*T![auto_rand] AUTO_RANDOM(5) */, "
         "s varchar(5) DEFAULT 'CLUSTERED', PRIMARY KEY (id) CLUSTERED) SHARD_ROW_ID_BITS=4")
    out = for_mysql(q)
    assert "AUTO_RANDOM(5) */" in out and "'CLUSTERED'" in out           # comments and literals untouched
    assert "bigint  /*T!" in out and "PRIMARY KEY (id) )" in out and "SHARD_ROW_ID_BITS" not in out
    assert with_charset("CREATE TABLE t (a int)", "utf8mb4", "utf8mb4_bin") == \
        "CREATE TABLE t (a int) DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    stated = "CREATE TABLE t (a int) CHARSET=latin1"
    assert with_charset(stated, "utf8mb4", "") == stated
    failed = Job(id=1, type=3, schema_id=1, table_id=7, schema_name="d", table_name="t", query="create table t (a int)")
    assert plan_ddl(failed, TableFilter(), False).skip.startswith("failed DDL job")
    ok = Job(id=2, type=3, schema_id=1, table_id=7, schema_name="d", table_name="t", query="create table t (a int)",
             binlog=HistoryInfo(schema_version=3))
    assert plan_ddl(ok, TableFilter(ignore_tables=(("d", "t"),)), False).skip == "d.t is filtered out"
    stmt = plan_ddl(ok, TableFilter(), True)
    assert (stmt.use, stmt.sql, stmt.create_db, stmt.skip) == ("d", "create table t (a int)", "d", "")
    db = Job(id=3, type=1, schema_id=2, table_id=0, schema_name="mysql", query="create database mysql",
             binlog=HistoryInfo(schema_version=4))
    assert "filtered out" in plan_ddl(db, TableFilter(), False).skip
    # TiDB v8's bootstrap view in its sys schema: not replayed into MySQL (whose sys is its own), into TiDB as is
    view = Job(id=4, type=21, schema_id=3, table_id=9, schema_name="sys", table_name="schema_unused_indexes",
               query="CREATE OR REPLACE VIEW sys.schema_unused_indexes AS SELECT 1",
               binlog=HistoryInfo(schema_version=5))
    assert plan_ddl(view, TableFilter(), False).skip.startswith("sys is TiDB's system schema")
    assert plan_ddl(view, TableFilter(), True).skip == ""


def test_checkpoint_json_is_tidb_binlogs_and_bad_rows_are_named() -> None:
    cp = Checkpoint(42, False, schema_version=3)
    assert json.loads(cp.to_json()) == {"consistent": False, "commitTS": 42, "ts-map": {}, "schema-version": 3}
    assert Checkpoint.parse('{"commitTS": 7, "consistent": true}') == Checkpoint(7, True)
    ahead = Checkpoint(9, True, schema_version=4, ddl_ahead=(31, 35))   # jobs applied before their DDL binlog
    assert json.loads(ahead.to_json())["binlake-ddl-ahead"] == [31, 35] and Checkpoint.parse(ahead.to_json()) == ahead
    assert Checkpoint.parse(cp.to_json()) == cp
    for bad in ("not json", "[1]", '{"commitTS": "7"}', '{"commitTS": 1, "consistent": "yes"}'):
        with pytest.raises(CheckpointFormatError, match="not TiDB Binlog's JSON"):
            Checkpoint.parse(bad)


def test_dsn_parsing_keeps_the_password_out_of_errors() -> None:
    t = MySQLTarget.from_dsn("mysql://u%40x:p%2Fw@db.example:3307?sql_mode=ANSI")
    assert (t.host, t.port, t.user, t.password, t.params) == ("db.example", 3307, "u@x", "p/w", {"sql_mode": "ANSI"})
    assert "p/w" not in repr(t) and t.describe() == "u@x@db.example:3307"
    with pytest.raises(MySQLTargetError) as e:
        MySQLTarget.from_dsn("postgres://u:secret@h:1")
    assert "secret" not in str(e.value) and "***" in str(e.value)


def test_a_segment_is_cut_into_its_transactions() -> None:
    assert ch.transaction_runs(np.array([5, 5, 9, 12, 12, 12])) == [(0, 2), (2, 3), (3, 6)]
    assert ch.transaction_runs(np.array([7])) == [(0, 1)] and ch.transaction_runs(np.array([], np.int64)) == []


def test_bundles_join_sorted_pieces_and_cut_back_into_transactions_in_commit_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def pieces(tid: int, commits: list[int]) -> list[dict[str, Any]]:
        """Per-transaction frame records of a table whose rows are ``tid * 100 + i``."""
        n = len(commits)
        rows = pa.table({ch.OP: ["I"] * n, ch.COMMIT_TS: commits, ch.SEQ: pa.array(range(n), pa.int32()),
                         "id": [tid * 100 + i for i in range(n)]})
        return [{"table_id": tid, "schema_version": 1, "commit_ts": commits[a], "rows": b - a,
                 "data": ch.write_segment(rows.slice(a, b - a))} for a, b in ch.transaction_runs(np.array(commits))]

    records = sorted(pieces(3, [5, 5, 7, 9]) + pieces(2, [5, 7, 7, 8]), key=lambda r: (r["commit_ts"], r["table_id"]))
    frame = pa.Table.from_pylist(records)
    monkeypatch.setattr(ordered, "BUNDLE_ROWS", 4)                   # bundles cut inside transactions 5 and 7
    bundles = pa.Table.from_batches(list(ordered.bundle_pieces(frame.to_batches(max_chunksize=2))))
    numbers = bundles.column("bundle").to_pylist()
    assert numbers == sorted(numbers) and len(set(numbers)) == 2
    txns: list[tuple[int, list[tuple[int, list[int]]]]] = []
    for n in sorted(set(numbers)):
        recs = [(r["table_id"], r["schema_version"], r["data"]) for r in bundles.to_pylist() if r["bundle"] == n]
        for t in ordered._unbundle(recs):
            got = [(p.table_id, p.rows.column("id").to_pylist()) for p in t.tables]
            if txns and txns[-1][0] == t.commit_ts:                   # a transaction cut by the bundle's edge
                txns[-1][1].extend(got)
            else:
                txns.append((t.commit_ts, got))
    assert txns == [(5, [(2, [200]), (3, [300, 301])]), (7, [(2, [201, 202]), (3, [302])]), (8, [(2, [203])]),
                    (9, [(3, [303])])]


def test_a_bundle_is_converted_once_for_all_its_pieces() -> None:
    calls: list[int] = []

    def convert(tid: int, version: int, rows: pa.Table) -> list[int]:
        calls.append(rows.num_rows)
        return [tid * 100 + v for v in rows.column("v").to_pylist()]

    of = ordered.PerBundle(convert)
    bundle = pa.table({"v": list(range(6))})
    pieces = [ordered.TableRows(3, 1, bundle.slice(a, n), bundle, a) for a, n in ((0, 2), (2, 3), (5, 1))]
    assert [of(p) for p in pieces] == [[300, 301], [302, 303, 304], [305]] and calls == [6]
    assert of(ordered.TableRows(3, 1, bundle.slice(1, 2))) == [301, 302] and calls == [6, 2]   # a joined piece
    other = pa.table({"v": [7]})
    assert of(ordered.TableRows(3, 1, other, other, 0)) == [307] and calls == [6, 2, 1]        # the next bundle


def test_relay_records_round_trip_rotate_and_purge(tmp_path: Path) -> None:
    t = TargetTable.of("d", table(7, "t", [
        col(1, "id", mt.TYPE_LONGLONG, flag=PK | mt.UNSIGNED_FLAG), col(2, "e", mt.TYPE_ENUM, elems=["a", "b"]),
        col(3, "s", mt.TYPE_SET, elems=["x", "y", "z"]), col(4, "b", mt.TYPE_BIT, flen=12),
        col(5, "j", mt.TYPE_JSON), col(6, "f", mt.TYPE_DOUBLE), col(7, "dt", mt.TYPE_DATETIME),
        col(8, "dec", mt.TYPE_NEWDECIMAL, flen=10, decimal=2)], pk_is_handle=True))
    before = pa.struct([(n, pa.int64()) for n in t.columns])   # types of the old row: only its shape matters here
    rows = pa.table({
        "id": pa.array([Decimal(18446744073709551615), Decimal(1)], pa.decimal128(20, 0)),
        "e": ["b", None], "s": ["x,z", ""], "b": pa.array([5, 0], pa.int64()), "j": ['{"k": 1}', None],
        "f": [1.5, None], "dt": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5), None], pa.timestamp("us")),
        "dec": pa.array([Decimal("1.20"), None], pa.decimal128(10, 2)),
        ch.OP: ["I", "U"], ch.COMMIT_TS: [9, 9],
        ch.BEFORE: pa.array([None, {n: 1 for n in t.columns}], before)})
    binlog = encode_dml(9, [(t, python_rows(t, rows))])
    table_msg = binlog.dml_data.tables[0]
    assert [c.mysql_type for c in table_msg.column_info] == ["bigint", "enum", "set", "bit", "json", "double",
                                                             "datetime", "decimal"]
    assert [(k.name, list(k.column_names)) for k in table_msg.unique_keys] == [("PRIMARY", ["id"])]
    assert list(table_msg.mutations[0].row.columns[1:4]) == [sb.Column(uint64_value=2), sb.Column(uint64_value=5),
                                                             sb.Column(bytes_value=b"\x00\x05")]
    back = list(decode_dml(sb.Binlog.FromString(binlog.SerializeToString())))
    assert back[0].row == ("""(18446744073709551615, 2, 5, X'0005', '{"k": 1}', 1.5, '2024-01-02 03:04:05', """
                           """'1.20')""")                   # JSON back as text, for MySQL's JSON type
    assert back[0].values == ("18446744073709551615",)      # a table with a primary key: only its key one by one
    assert back[1].op == "U" and back[1].old == ("1",) and back[1].row.startswith("(1, NULL, 0, X'0000', NULL")
    assert back[1].sets.startswith("`id` = 1, `e` = NULL, `s` = 0, `b` = X'0000'")  # SET as its bitmask
    assert back[0].causality_keys() == ["PRIMARY(18446744073709551615)`d`.`t`"]

    relay = RelayLog(tmp_path / "relay", max_file_size=16)           # one record per file
    for ts in (10, 11, 12):
        relay.append(encode_ddl(ts, "d", "t", f"alter table t comment '{ts}'"))
    relay.sync()
    files = relay.files()
    assert len(files) == 3 and [b.commit_ts for b in relay.read()] == [10, 11, 12]
    relay.purge(11)
    assert relay.files() == files[2:]                                # applied files go, the newest stays
    relay.close()
    with open(files[2], "ab") as f:                                  # a torn tail of the newest file: ignored
        f.write(b"\x04\x05\x1b\x1c\x09")
    assert [b.commit_ts for b in RelayLog(tmp_path / "relay").read()] == [12]
    data = bytearray(files[2].read_bytes())
    data[20] ^= 0xFF                                                 # a flipped payload byte in a full record
    files[2].write_bytes(bytes(data[:-5]) + b"")
    older = tmp_path / "relay" / "binlog-0000000000000000-20260101000000"
    older.write_bytes(bytes(data[:-5]))
    with pytest.raises(BinlogFileError, match="checksum mismatch"):
        list(RelayLog(tmp_path / "relay").read())


def test_downstream_comparison_drops_only_a_fractions_zeros() -> None:
    assert _same("12:00:00", "12:00:00.000000")            # TIME(0) upstream, MariaDB's timedelta text
    assert _same("12:00:00.500", "12:00:00.500000")
    assert not _same("12:00:00.5", "12:00:00.05")
    assert not _same("120", "12") and not _same("abc0", "abc")


def test_downstream_json_is_compared_as_documents() -> None:
    """Upstream JSON is TiDB's text; a MySQL downstream prints the same document its own way."""
    assert _same("1e+21", "1e21", True) and _same("1e-7", "1e-07", True)
    assert _same("10000000000", "10000000000.0", True) and _same("-2", "-2.0", True)
    assert _same('{"a": [1e-7, "2024-01-02 03:04:05.000000"]}', '{"a": [1e-07, "2024-01-02 03:04:05.000000"]}', True)
    assert not _same("1", "true", True) and not _same("[0]", "[false]", True) and not _same("null", "0", True)
    assert not _same('"1"', "1", True) and not _same("1e-7", "not json", True)
    assert not _same("1e+21", "1e21")                       # not a JSON column: text


def test_runs_of_inserts_and_deletes_by_key_are_combined_in_order() -> None:
    t, keyless = _target(), _target(pk=False)
    dmls = [DML.of(t, "I", (1, "a", 0), None, 1), DML.of(t, "I", (2, "b", 0), None, 1),
            DML.of(t, "U", (2, "c", 0), (2, "b", 0), 2),
            DML.of(t, "D", (1, "a", 0), None, 3), DML.of(t, "D", (2, "c", 0), None, 3),
            DML.of(keyless, "D", (5, None, 1), None, 4), DML.of(keyless, "D", (6, "x", 1), None, 4),
            DML.of(t, "I", (3, "d", 0), None, 5)]
    out = list(batched(dmls, False))
    assert [sql for sql, _ in out] == [
        "INSERT INTO `d`.`t` (`id`, `v`, `b`) VALUES (1, 'a', 0), (2, 'b', 0)",
        "UPDATE `d`.`t` SET `id` = 2, `v` = 'c', `b` = 0 WHERE `id` = 2 LIMIT 1",
        "DELETE FROM `d`.`t` WHERE `id` IN (1, 2)",
        "DELETE FROM `d`.`t` WHERE `id` = 5 AND `v` IS NULL AND `b` = 1 LIMIT 1",   # keyless: one by one
        "DELETE FROM `d`.`t` WHERE `id` = 6 AND `v` = 'x' AND `b` = 1 LIMIT 1",
        "INSERT INTO `d`.`t` (`id`, `v`, `b`) VALUES (3, 'd', 0)"]
    assert [d.commit_ts for _, d in out] == [1, 2, 3, 4, 4, 5]        # each names its last DML
    assert list(batched(dmls[:2], True))[0][0].startswith("REPLACE INTO `d`.`t`")


def test_merge_mode_applies_the_net_change_per_primary_key() -> None:
    t, keyless = _target(), _target(pk=False)
    dmls = [DML.of(t, "I", (1, "a", 0), None, 1), DML.of(t, "U", (1, "b", 0), (1, "a", 0), 2),   # I+U → final b
            DML.of(t, "I", (2, "x", 0), None, 2), DML.of(t, "D", (2, "x", 0), None, 3),          # I+D → deleted
            DML.of(t, "U", (4, "m", 0), (3, "m", 0), 3),                                      # moved 3 → 4
            DML.of(keyless, "D", (9, "k", 0), None, 3),
            DML.of(t, "D", (5, "q", 0), None, 4), DML.of(t, "I", (5, "r", 0), None, 5)]          # D+I → final r
    statements_, rest = merged(dmls, rows_per_statement=2)
    assert [sql for sql, _ in statements_] == [
        "DELETE FROM `d`.`t` WHERE `id` IN (2, 3)",
        "REPLACE INTO `d`.`t` (`id`, `v`, `b`) VALUES (1, 'b', 0), (4, 'm', 0)",
        "REPLACE INTO `d`.`t` (`id`, `v`, `b`) VALUES (5, 'r', 0)"]
    assert rest == [dmls[5]]                        # no primary key: applied one by one, in order
    swap = [DML.of(t, "U", (8, "p", 0), (7, "p", 0), 1), DML.of(t, "U", (7, "s", 0), (8, "p", 0), 2)]  # 7→8, 8→7
    assert [sql for sql, _ in merged(swap, 10)[0]] == [
        "DELETE FROM `d`.`t` WHERE `id` IN (8)",
        "REPLACE INTO `d`.`t` (`id`, `v`, `b`) VALUES (7, 's', 0)"]


def test_a_merged_replace_stops_adding_rows_at_the_statement_byte_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    import sink.mysql.statements as st

    monkeypatch.setattr(st, "MAX_STATEMENT_BYTES", 1_000)
    t = _target()
    dmls = [DML.of(t, "I", (i, "x" * 400, 0), None, i) for i in range(1, 6)]    # ~412 bytes a row
    sizes = [sql.count("), (") + 1 for sql, _ in merged(dmls, rows_per_statement=100)[0]]
    assert sizes == [2, 2, 1]                        # 2 rows fit in 1,000 bytes, 3 do not
    huge = [DML.of(t, "I", (1, "x" * 5_000, 0), None, 1), DML.of(t, "I", (2, "y", 0), None, 1)]
    assert [sql.count("), (") + 1 for sql, _ in merged(huge, 100)[0]] == [1, 1]   # a row over the budget goes alone


class _FakeConnection:
    """A downstream connection that logs the statements it commits (a unit-test stand-in); while
    ``hold`` is clear, commits wait for it."""

    def __init__(self, log: list[str], hold: Any, rows: Sequence[tuple[Any, ...]] = ()) -> None:
        self.log, self.hold, self.open, self.rows = log, hold, [], list(rows)   # rows: what a SELECT reads

    def cursor(self) -> Any:
        conn = self

        class Cursor:
            def __enter__(self) -> Cursor:
                return self

            def __exit__(self, *exc: object) -> None:
                return None

            def execute(self, sql: str, args: Any = None) -> None:
                if not sql.startswith("SELECT"):
                    conn.open.append(sql)

            def fetchall(self) -> list[tuple[Any, ...]]:
                return list(conn.rows)
        return Cursor()

    def commit(self) -> None:
        assert self.hold.wait(10), "the test never released the downstream"
        self.log.extend(self.open)
        self.open = []

    def rollback(self) -> None:
        self.open = []

    def close(self) -> None:
        return None


def test_the_loader_builds_the_next_batch_while_one_applies_and_never_lets_a_conflict_overtake() -> None:
    import threading

    from sink.mysql.loader import Loader

    log: list[str] = []
    hold = threading.Event()
    loader = Loader(lambda: _FakeConnection(log, hold), worker_count=4, txn_batch=2)
    t = _target()
    try:
        loader.add(DML.of(t, "I", (1, "a", 0), None, 10))
        loader.add(DML.of(t, "I", (2, "b", 0), None, 10))
        loader.end_txn(10)
        loader.flush(wait=False)                       # returns while the downstream holds the batch
        assert loader.applied_ts == 0 and log == []
        loader.add(DML.of(t, "U", (1, "z", 0), (1, "a", 0), 20))   # the same key: next batch, not this one
        loader.end_txn(20)
        assert loader.applied_ts == 0 and log == []
        for i in range(7):                             # a transaction per worker is pending (8 DMLs) ...
            loader.add(DML.of(t, "I", (100 + i, "c", 0), None, 30))
        loader.end_txn(30)
        assert not loader.ready                        # ... but the workers are busy: keep building
        hold.set()
        for _ in range(100):                           # once they are idle, what is pending goes
            if loader.ready:
                break
            time.sleep(0.05)
        assert loader.ready
        loader.flush()                                 # waits for the first batch, then applies the second
        assert loader.applied_ts == 30 and loader.flushes == 2
        keys = [[int(row.split(",")[0]) for row in sql.split(" VALUES (")[1][:-1].split("), (")]
                if sql.startswith("INSERT") else [] for sql in log]
        assert sorted(k for ks in keys for k in ks) == [1, 2, *range(100, 107)]
        update = [i for i, sql in enumerate(log) if sql.startswith("UPDATE")]
        first = [i for i, ks in enumerate(keys) if {1, 2} & set(ks)]
        assert len(update) == 1 and update[0] > max(first)   # the update of key 1 after its insert
    finally:
        hold.set()
        loader.close()


class _CutOffCommit(_FakeConnection):
    """A downstream whose first COMMIT (over every connection sharing ``cut``) commits, then loses the
    connection before the client hears so (a server killed right after committing); ``applied`` the
    transactions committed, ``progress`` what the unkeyed-progress table answers."""

    def __init__(self, applied: list[list[str]], progress: list[tuple[str, int, int]], cut: list[bool]) -> None:
        super().__init__([], None, progress)
        self.applied, self.cut = applied, cut

    def commit(self) -> None:
        import pymysql

        if self.open:
            self.applied.append(self.open)
        self.open = []
        if not self.cut:
            self.cut.append(True)
            raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")


def test_a_transaction_whose_commit_was_cut_off_is_applied_again_only_in_ways_safe_to_repeat(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The COMMIT committed but the client lost the connection: the retry runs in safe mode (an INSERT
    becomes a REPLACE, not a duplicate key), and leaves out the unkeyed DMLs the progress table says
    committed."""
    from sink.mysql.loader import Worker
    from sink.mysql.progress import UnkeyedProgress
    from sink.mysql.statements import number_unkeyed

    monkeypatch.setattr(time, "sleep", lambda s: None)
    keyed, keyless = _target(), _target(pk=False)
    applied: list[list[str]] = []
    cut: list[bool] = []
    worker = Worker(lambda: _CutOffCommit(applied, [], cut), txn_batch=10, retries=3, backoff=0.1)
    worker.execute([DML.of(keyed, "I", (1, "a", 0), None, 10), DML.of(keyed, "I", (2, "b", 0), None, 10)], False)
    assert [sql.split(" INTO")[0] for sql in applied[0]] == ["INSERT"]       # the first try, committed
    assert [sql.split(" INTO")[0] for sql in applied[1]] == ["REPLACE"]      # the retry: safe to repeat
    # unkeyed DMLs: the retry asks the progress table and leaves out what it records as applied
    applied.clear()
    progress = UnkeyedProgress(1)
    dmls = number_unkeyed([DML.of(keyless, "I", (5, "x", 0), None, 20), DML.of(keyless, "I", (5, "x", 0), None, 20)])
    recorded = [(keyless.qualified, 20, 2)]   # what the cut-off transaction committed
    once: list[bool] = []
    worker = Worker(lambda: _CutOffCommit(applied, recorded, once), txn_batch=10, retries=3, backoff=0.1,
                    progress=progress)
    worker.execute(dmls, False)
    assert len(applied) == 1 and applied[0][0].startswith("INSERT INTO `d`.`t`")   # applied once: no retry rows


def _job(tp: int, query: str, table: str = "t", **binlog: Any) -> Job:
    return Job(id=9, type=tp, schema_id=1, table_id=7, schema_name="d", table_name=table, query=query,
               binlog=HistoryInfo(schema_version=5, **binlog))


def test_a_create_tables_batch_is_each_of_its_statements() -> None:
    """TiDB 8's merged CREATE TABLES job: every statement runs, each with the upstream's charset, the
    filtered-out ones left out; a ``;`` inside a literal or comment does not split."""
    query = ("CREATE TABLE a (s VARCHAR(3) DEFAULT ';'); CREATE TABLE `b` (i INT) /* ; */; "
             "CREATE TABLE IF NOT EXISTS d.c (i INT);")
    assert split_statements(query) == ["CREATE TABLE a (s VARCHAR(3) DEFAULT ';')", "CREATE TABLE `b` (i INT) /* ; */",
                                       "CREATE TABLE IF NOT EXISTS d.c (i INT)"]
    infos = tuple(TableInfo.from_json({"id": i, "name": {"O": n, "L": n}, "charset": "utf8mb4",
                                       "collate": "utf8mb4_bin", "cols": []})
                  for i, n in ((1, "a"), (2, "b"), (3, "c")))
    job = _job(60, query, table="", multiple_table_infos=infos)
    stmt = plan_ddl(job, TableFilter(ignore_tables=(("d", "b"),)), False)
    assert split_statements(stmt.sql) == [
        "CREATE TABLE a (s VARCHAR(3) DEFAULT ';') DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        "CREATE TABLE IF NOT EXISTS d.c (i INT) DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"]
    assert (stmt.use, stmt.create_db, stmt.skip) == ("d", "d", "")
    assert plan_ddl(job, TableFilter(ignore_schemas=("d",)), True).skip


def test_a_ddl_a_binlog_filter_rule_ignores_is_skipped_and_a_batch_loses_the_tables_it_ignores() -> None:
    """By the names TiDB Binlog gives the job, its query's event type and its query; a CREATE TABLES
    batch statement by statement."""
    events = EventFilter.from_config({"r": (["truncate table", "create table"], ["add column aaa"])},
                                     [("d", "B*", ["r"])], case_sensitive=True)

    def skip(tp: int, query: str, names: tuple[str, str], **binlog: Any) -> str:
        ddl = ch.DDLJob(5, _job(tp, query, table=names[1].lower(), **binlog), names)
        return without_ignored(plan_ddl(ddl.job, TableFilter(), False), ddl, events).skip

    assert skip(11, "TRUNCATE TABLE B1", ("d", "B1")) == "binlog-filter-rule r on schema 'd', table 'B*' ignores it"
    assert not skip(11, "TRUNCATE TABLE b1", ("d", "b1"))               # case-sensitive: TiDB's names as created
    assert skip(5, "ALTER TABLE B1 ADD COLUMN aaa INT", ("d", "B1"))    # by its query
    assert not skip(5, "ALTER TABLE B1 ADD COLUMN bbb INT", ("d", "B1"))
    query = "CREATE TABLE a (i INT); CREATE TABLE B2 (i INT)"
    infos = tuple(TableInfo.from_json({"id": i, "name": {"O": n, "L": n.lower()}, "cols": []})
                  for i, n in ((1, "a"), (2, "B2")))
    batch = ch.DDLJob(5, _job(60, query, table="", multiple_table_infos=infos), ("d", ""))
    stmt = without_ignored(plan_ddl(batch.job, TableFilter(), True), batch, events)
    assert split_statements(stmt.sql) == ["CREATE TABLE a (i INT)"] and not stmt.skip
    only = ch.DDLJob(5, _job(60, "CREATE TABLE B2 (i INT)", table="", multiple_table_infos=infos[1:]), ("d", ""))
    assert without_ignored(plan_ddl(only.job, TableFilter(), True), only, events).skip


def test_ddl_that_changes_nothing_downstream_is_skipped_and_recovered_rows_are_refused() -> None:
    assert "TiDB Binlog skips it" in plan_ddl(_job(57, "ALTER TABLE t CACHE"), TableFilter(), True).skip
    assert "TiDB Binlog skips it" in plan_ddl(_job(68, "CREATE RESOURCE GROUP g RU_PER_SEC=1", ""),
                                              TableFilter(), False).skip
    ttl = _job(67, "ALTER TABLE t REMOVE TTL")
    assert plan_ddl(ttl, TableFilter(), False).skip and not plan_ddl(ttl, TableFilter(), True).skip
    recover = _job(25, "RECOVER TABLE t")
    assert plan_ddl(recover, TableFilter(), True).sql == "RECOVER TABLE t"
    with pytest.raises(UnreplicableDDLError, match=r"DDL job 9 \(recover table, committed at ts 77\): "
                                                   r"`RECOVER TABLE t`.*MySQL downstream cannot"):
        plan_ddl(recover, TableFilter(), False, 77)
    with pytest.raises(UnreplicableDDLError, match="flashback cluster"):
        plan_ddl(_job(62, "FLASHBACK CLUSTER TO TIMESTAMP '2024-01-01 00:00:00'", ""), TableFilter(), True, 78)
    partition = plan_ddl(_job(23, "ALTER TABLE t TRUNCATE PARTITION p0"), TableFilter(), False)
    assert partition.sql == "ALTER TABLE t TRUNCATE PARTITION p0" and not partition.skip


def test_rows_of_an_older_shape_go_to_the_table_a_ddl_applied_ahead_made() -> None:
    """By column id: a renamed column under its new name, a dropped one left out (the before-image's
    too), a column MODIFY rewrote under a new id by its name; a column the DDL added is not written."""
    old = table(1, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "r", mt.TYPE_LONG), col(3, "d", mt.TYPE_LONG),
                         col(4, "s", mt.TYPE_VARCHAR)], pk_is_handle=True)
    new = table(1, "t", [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "r2", mt.TYPE_LONG),
                         col(7, "s", mt.TYPE_LONG), col(8, "c", mt.TYPE_LONG)], pk_is_handle=True)
    shape = Reshape.of("db", old, new)
    assert shape.target.columns == ("id", "r2", "s") and shape.target.keys == (("PRIMARY", (0,)),)
    before = pa.array([None, {"id": 1, "r": 5, "d": 6, "s": "7"}],
                      pa.struct([("id", pa.int32()), ("r", pa.int32()), ("d", pa.int32()), ("s", pa.string())]))
    rows = pa.table({ch.OP: ["I", "U"], ch.COMMIT_TS: [1, 2], "id": [1, 1], "r": [2, 3], "d": [4, 4], "s": ["5", "6"],
                     ch.BEFORE: before})
    out = shape.rows(rows)
    assert out.column_names == [ch.OP, ch.COMMIT_TS, "id", "r2", "s", ch.BEFORE]
    assert out.column(ch.BEFORE).to_pylist() == [None, {"id": 1, "r2": 5, "s": "7"}]
    dmls = list(row_changes(shape.target, out))
    assert dmls[1].sets == "`id` = 1, `r2` = 3, `s` = '6'"
