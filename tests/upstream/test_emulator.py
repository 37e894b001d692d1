"""The emulator without pumps: SQL subset, DDL metadata, status API shapes, row encoding."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from transform.codec.model import Job, TableInfo
from transform.codec.rows import decode_row
from upstream.cluster import Cluster
from upstream.errors import SQLError, UnsupportedSQL
from upstream.sql import split
from upstream.txn import Transaction


@pytest.fixture
def c() -> Iterator[Cluster]:
    cluster = Cluster(registry=None, tso_addr=None)
    yield cluster
    cluster.close()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_split_respects_quotes_and_comments() -> None:
    assert split("insert into t values ('a;b'); -- x;y\n update t set a = \"c;\" ;;") == [
        "insert into t values ('a;b')", 'update t set a = "c;"']


@pytest.mark.parametrize("sql,construct", [
    ("select 1", "SELECT statement"),
    ("insert into t select * from u", "INSERT … SELECT"),
    ("alter table t add column (a int, b int)", "ALTER TABLE T ADD"),
    ("update t set a = 1 order by a limit 1", "UPDATE with ORDER"),
    ("create table p (id int) partition by hash(id) partitions 2", "CREATE TABLE P"),
    ("rename table a to b, c to d", "RENAME TABLE of several tables"),
    ("alter table test.x add primary key (a) clustered", "ADD PRIMARY KEY … CLUSTERED"),
    ("update x set a = 1 where b like 'a!%' escape '!'", "LIKE … ESCAPE"),
    ("alter table x add column c int, rename to y", "RENAME TO together"),
])
def test_unsupported_sql_names_the_construct(c: Cluster, sql: str, construct: str) -> None:
    c.execute("create table x (a int, b int)")
    with pytest.raises(UnsupportedSQL) as info:
        c.execute(sql)
    assert construct in str(info.value)


def test_table_metadata_ids_and_versions(c: Cluster) -> None:
    c.execute("create table a (id int primary key, v varchar(10) default 'z', key iv (v))")
    c.execute("create table b (k varchar(8), n int unsigned not null, primary key (k, n) clustered)")
    c.execute("create table h (x int, y int, primary key (x, y))")
    c.execute("set tidb_enable_clustered_index = on; create table d (s varchar(4) primary key)")
    jobs = c.catalog.jobs()
    versions = [j.binlog.schema_version for j in jobs]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    a, b, h = c.table("test", "a"), c.table("test", "b"), c.table("test", "h")
    assert a.pk_is_handle and not a.is_common_handle and [i.name for i in a.indices] == ["iv"]
    assert a.columns[0].type.flag == 4099 and a.columns[1].default == "z"
    assert b.is_common_handle and b.common_handle_version == 1 and b.primary_index is not None
    assert h.has_extra_handle and h.primary_index is not None
    assert c.table("test", "d").is_common_handle         # the session flag made it clustered
    ids = [j.id for j in jobs] + [a.id, b.id, h.id]
    assert len(set(ids)) == len(ids)                     # one global allocator
    job = next(j for j in jobs if j.table_id == a.id)
    assert job.id > a.id and job.binlog.table_info == a  # table id allocated before the job id


def test_alter_table_keeps_column_ids(c: Cluster) -> None:
    c.execute("create table t (id int primary key, a int, b varchar(5))")
    c.execute("alter table t add column c int not null after id")
    t = c.table("test", "t")
    assert [(x.name, x.id) for x in t.columns] == [("id", 1), ("c", 4), ("a", 2), ("b", 3)]
    assert t.columns[1].origin_default == "0"
    c.execute("alter table t modify column a bigint; alter table t change b bb varchar(9); "
              "alter table t rename column c to cc; alter table t drop column a; alter table t add index ib (bb)")
    t = c.table("test", "t")
    assert [(x.name, x.id, x.offset) for x in t.columns] == [("id", 1, 0), ("cc", 4, 1), ("bb", 3, 2)]
    assert t.max_col_id == 4 and t.indices[0].columns[0].offset == 2
    with pytest.raises(UnsupportedSQL, match="needs data reorganization"):
        c.execute("alter table t modify column bb int")
    actions = [j.type for j in c.catalog.jobs()][-6:]
    assert actions == [5, 12, 12, 12, 6, 7]


def test_dml_semantics_and_binlog_rows(c: Cluster) -> None:
    c.execute("create table t (id int primary key auto_increment, v int, s set('a','b'), e enum('x','y'))")
    c.execute("insert into t (v, s) values (1, 'b,a'), (2, '')")
    with pytest.raises(SQLError, match="Duplicate entry '1'"):
        c.execute("insert into t values (1, 9, '', 'y')")
    c.execute("replace into t values (1, 5, 'a', 'y'); update t set id = 10 where id = 2")
    snap = c.snapshot()["test.t"]
    assert snap == [{"id": 1, "v": 5, "s": "a", "e": "y"}, {"id": 10, "v": 2, "s": "", "e": None}]
    # rows of a clustered and a _tidb_rowid table round-trip through the codec
    c.execute("create table k (a varchar(5), b int, c decimal(6,2), primary key (a, b) clustered)")
    c.execute("create table r (a int, b datetime(3))")
    srv = c.server(0)
    txn: Transaction = srv.begin()
    from upstream.dml import run_dml
    from upstream.sql import parse
    run_dml(txn, parse("insert into k values ('p ', 1, 1.5), ('q', 2, null)"), "test", c.catalog)
    run_dml(txn, parse("insert into r values (3, '2024-02-29 10:11:12.3456')"), "test", c.catalog)
    run_dml(txn, parse("delete from k where a = 'q'"), "test", c.catalog)
    pv = txn.prewrite_value()
    k, r = c.table("test", "k"), c.table("test", "r")
    assert [m.table_id for m in pv.mutations] == [k.id, r.id]
    assert list(pv.mutations[0].sequence) == [0, 0, 4]
    row = decode_row(k, "insert", pv.mutations[0].inserted_rows[0])
    assert row.after == {"a": "p ", "b": 1, "c": __import__("decimal").Decimal("1.50")}
    assert decode_row(r, "insert", pv.mutations[1].inserted_rows[0]).after["b"].microsecond == 346000
    assert txn.primary is not None and txn.primary.startswith(b"t")


def test_status_api_shapes(c: Cluster) -> None:
    c.execute("create table t1 (id int primary key, v varchar(16))")
    status, body = get(f"{c.status_url}/ddl/history")
    text = body.decode()
    assert status == 200 and text.startswith("[\n {\n  \"id\": ") and not text.endswith("\n")
    jobs = json.loads(text)
    assert list(jobs[-1])[:8] == ["id", "type", "schema_id", "table_id", "schema_name", "table_name", "state",
                                  "warning"]
    assert jobs[-1]["state"] == 6 and jobs[-1]["binlog"]["TableInfo"]["cols"][0]["type"]["Flag"] == 4099
    job = Job.from_json(jobs[-1])
    assert job.binlog.table_info is not None and job.binlog.finished_ts > job.start_ts
    assert [j["id"] for j in json.loads(get(f"{c.status_url}/ddl/history?limit=1")[1])] == [jobs[-1]["id"]]
    assert get(f"{c.status_url}/ddl/history?limit=0") == (400, b"ddl history limit must be greater than 0")
    tid = jobs[-1]["table_id"]
    s1, b1 = get(f"{c.status_url}/schema?table_id={tid}")
    s2, b2 = get(f"{c.status_url}/schema/test/t1")
    assert s1 == s2 == 200 and b1 == b2 and TableInfo.from_json(json.loads(b1)).id == tid
    assert get(f"{c.status_url}/schema/test/nope") == (400, b"[schema:1146]Table 'test.nope' doesn't exist")
    assert get(f"{c.status_url}/schema?table_id=999") == (400, b"[schema:1146]Table which ID = 999 does not exist.")
    assert get(f"{c.status_url}/schema/nodb")[0] == 400
    assert get(f"{c.status_url}/mvcc/hex/zz")[0] == 400
    req = urllib.request.Request(f"{c.status_url}/binlake/sql", method="POST",
                                 data=b"begin; insert into t1 values (1, 'a'); insert into t1 values (2, 'b'); commit;"
                                      b"insert into t1 values (1, 'dup')")
    try:
        urllib.request.urlopen(req)
        raise AssertionError("expected HTTP 400")
    except urllib.error.HTTPError as e:
        doc: dict[str, Any] = json.loads(e.read())
    assert len(doc["transactions"]) == 1 and doc["error"]["type"] == "SQLError" and doc["error"]["statement"] == 4
    assert json.loads(get(f"{c.status_url}/binlake/snapshot?ts={doc['transactions'][0]['commit_ts']}")[1]) == {
        "test.t1": [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]}
