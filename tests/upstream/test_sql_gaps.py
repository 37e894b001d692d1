"""SQL beyond the first subset: unique indexes, BETWEEN / LIKE, multi-spec ALTER TABLE, ADD/DROP
PRIMARY KEY on non-clustered tables, and the sqlglot-free fast path for common DML shapes."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from upstream import ddl, fastsql
from upstream import sql as S
from upstream.cluster import Cluster
from upstream.errors import SQLError, UnsupportedSQL


@pytest.fixture
def c() -> Iterator[Cluster]:
    cluster = Cluster(registry=None, tso_addr=None, status_addr=None)
    yield cluster
    cluster.close()


def rows(c: Cluster, table: str) -> list[dict[str, Any]]:
    return c.snapshot()[f"test.{table}"]


# ---- unique indexes -----------------------------------------------------------------------------

def test_unique_index_refuses_duplicates_like_tidb(c: Cluster) -> None:
    c.execute("create table u (id int primary key, e varchar(20), n int, unique key ue (e), unique key un (n, e))")
    c.execute("insert into u values (1, 'a', 1), (2, NULL, 1), (3, NULL, 1)")  # NULLs never conflict
    with pytest.raises(SQLError, match=r"\[kv:1062\]Duplicate entry 'a' for key 'u.ue'"):
        c.execute("insert into u values (4, 'a', 2)")
    with pytest.raises(SQLError, match="1062"):
        c.execute("update u set e = 'a' where id = 2")
    with pytest.raises(SQLError, match="1062"):
        c.execute("insert into u values (5, 'b', 1), (6, 'b', 2)")
    assert [r["id"] for r in rows(c, "u")] == [1, 2, 3]   # the failed statements wrote nothing
    c.execute("update u set e = 'a', n = 7 where id = 1")  # the row's own entry is no conflict


def test_unique_index_case_insensitive_collation(c: Cluster) -> None:
    c.execute("create table ci (id int primary key, e varchar(20) collate utf8mb4_general_ci, unique key ue (e))")
    c.execute("insert into ci values (1, 'Abc')")
    with pytest.raises(SQLError, match="1062"):
        c.execute("insert into ci values (2, 'aBC')")


def test_replace_deletes_every_conflicting_row(c: Cluster) -> None:
    c.execute("create table r (id int primary key, e varchar(20), unique key ue (e))")
    c.execute("insert into r values (1, 'a'), (2, 'b')")
    res = c.execute("replace into r values (1, 'b')")
    assert res[0].affected_rows == 3                     # two deletes + the insert
    assert rows(c, "r") == [{"id": 1, "e": "b"}]


# ---- BETWEEN and LIKE ---------------------------------------------------------------------------

def test_between_and_like_in_where(c: Cluster) -> None:
    c.execute("create table w (id int primary key, name varchar(20), d date)")
    c.execute("insert into w values (1, 'apple', '2024-01-01'), (2, 'banana', '2024-02-01'), "
              "(3, 'cherry', '2024-03-01'), (4, 'a_b', NULL), (5, NULL, '2024-05-01')")
    assert c.execute("delete from w where id between 2 and 3 and name like 'b%'")[0].affected_rows == 1
    assert c.execute("delete from w where name not like '%e%' and id not between 1 and 1")[0].affected_rows == 1
    assert [r["id"] for r in rows(c, "w")] == [1, 3, 5]   # 4 ('a_b') deleted; NULL name never matches
    assert c.execute("update w set name = 'x' where d between '2024-02-15' and '2024-06-01'")[0].affected_rows == 2
    c.execute("insert into w values (6, 'a_c', NULL), (7, 'abc', NULL)")
    assert c.execute(r"delete from w where name like 'a\_c'")[0].affected_rows == 1   # escaped _
    with pytest.raises(UnsupportedSQL, match="ESCAPE"):
        c.execute("delete from w where name like 'a!_c' escape '!'")


# ---- ALTER TABLE: several specs, primary keys ----------------------------------------------------

def test_multi_schema_change_applies_specs_in_order(c: Cluster) -> None:
    c.execute("create table m (a int, b varchar(10), c int)")
    c.execute("insert into m values (1, 'x', 1)")
    c.execute("alter table m add column d int default 4, drop column c, add index id (d), modify column b varchar(20)")
    t = c.table("test", "m")
    assert [col.name for col in t.columns] == ["a", "b", "d"]
    assert [ix.name for ix in t.indices] == ["id"]
    assert t.columns[1].type.flen == 20
    assert rows(c, "m") == [{"a": 1, "b": "x", "d": 4, "_tidb_rowid": 1}]
    with pytest.raises(UnsupportedSQL, match="RENAME TO together"):
        c.execute("alter table m add column e int, rename to m2")
    with pytest.raises(SQLError):                        # one bad spec: nothing changes
        c.execute("alter table m add column f int, drop column nope")
    assert [col.name for col in c.table("test", "m").columns] == ["a", "b", "d"]


def test_add_and_drop_nonclustered_primary_key(c: Cluster) -> None:
    c.execute("create table p (a int, b varchar(10), c int)")
    c.execute("insert into p values (1, 'x', 1)")
    c.execute("alter table p add primary key (a, b)")
    t = c.table("test", "p")
    assert t.has_extra_handle and t.primary_index is not None
    assert [ic.name for ic in t.primary_index.columns] == ["a", "b"]
    assert not t.columns[0].nullable
    with pytest.raises(SQLError, match=r"Duplicate entry '1-x' for key 'p.PRIMARY'"):
        c.execute("insert into p values (1, 'x', 2)")
    with pytest.raises(SQLError, match="1068"):
        c.execute("alter table p add primary key (c)")
    c.execute("alter table p drop primary key")
    assert c.table("test", "p").primary_index is None
    c.execute("insert into p values (1, 'x', 2)")
    with pytest.raises(SQLError, match="1091"):
        c.execute("alter table p drop primary key")
    c.execute("create table q (id int primary key)")
    with pytest.raises(UnsupportedSQL, match="clustered primary key"):
        c.execute("alter table q drop primary key")
    with pytest.raises(UnsupportedSQL, match="CLUSTERED"):
        c.execute("alter table p add primary key (a) clustered")


def test_new_unique_keys_check_the_rows_already_there(c: Cluster) -> None:
    c.execute("create table k (a int, b varchar(10) collate utf8mb4_general_ci, c int, d int)")
    c.execute("insert into k values (1, 'x', NULL, 1), (1, 'X', NULL, 2), (2, NULL, 5, 3)")
    version = c.catalog.current().version
    with pytest.raises(SQLError, match=r"\[kv:1062\]Duplicate entry '1-X' for key 'k.ub'"):
        c.execute("alter table k add unique key ub (a, b)")        # 'x' = 'X' under _ci
    with pytest.raises(SQLError, match=r"Duplicate entry '1' for key 'k.PRIMARY'"):
        c.execute("alter table k add primary key (a)")
    with pytest.raises(SQLError, match=r"\[ddl:1138\]Invalid use of NULL value"):
        c.execute("alter table k add primary key (c)")
    assert c.catalog.current().version == version                  # no refused job took effect
    assert c.table("test", "k").indices == ()
    c.execute("alter table k add unique key uc (c)")                # NULLs never conflict
    c.execute("update k set a = 3 where d = 2")
    c.execute("alter table k add unique key ub (a, b)")
    assert [ix.name for ix in c.table("test", "k").indices] == ["uc", "ub"]


def test_modify_column_to_not_null_checks_the_rows_already_there(c: Cluster) -> None:
    c.execute("create table nn (id int primary key, a int, b varchar(5))")
    c.execute("insert into nn values (1, 1, 'x'), (2, NULL, 'y')")
    version = c.catalog.current().version
    with pytest.raises(SQLError, match=r"\[ddl:1138\]Invalid use of NULL value"):
        c.execute("alter table nn modify column a int not null")
    assert c.catalog.current().version == version                  # the refused job took no effect
    assert c.table("test", "nn").columns[1].nullable
    c.execute("alter table nn modify column b varchar(9) not null")   # no NULL in b
    c.execute("update nn set a = 0 where id = 2")
    c.execute("alter table nn modify column a int not null")
    t = c.table("test", "nn")
    assert [col.nullable for col in t.columns] == [False, False, False]
    assert [j.type for j in c.catalog.jobs()][-2:] == [12, 12]
    with pytest.raises(SQLError, match="1048"):
        c.execute("insert into nn values (3, NULL, 'z')")
    assert rows(c, "nn") == [{"id": 1, "a": 1, "b": "x"}, {"id": 2, "a": 0, "b": "y"}]


def test_job_types_of_new_alters(c: Cluster) -> None:
    c.execute("create table j (a int, b int)")
    types = []
    for q in ("alter table j add primary key (a)", "alter table j drop primary key",
              "alter table j add column c int, add column d int"):
        job_id = c.execute(q)[0].ddl_job_id
        types.append(next(j.type for j in c.catalog.jobs() if j.id == job_id))
    assert types == [ddl.ADD_PRIMARY_KEY, ddl.DROP_PRIMARY_KEY, ddl.MULTI_SCHEMA_CHANGE]


# ---- the fast path -------------------------------------------------------------------------------

FAST = [
    "insert into bench values (1, 'name-1', 12.50, '2024-05-01 12:00:00', 5, '{\"k\": 1}'), "
    "(2, 'n''2', -13.50, 'x', -6, NULL)",
    "INSERT INTO test.t (id, name) VALUES (1, 'a'), (2, DEFAULT)",
    "replace into t values (1, 2.5e3, -0.0, TRUE, FALSE, .5)",
    "update t set d = 5, a = 'zz' where id = 3",
    "update `db`.`t` set d = NULL where id = 3 and v <> 'x' and w >= -2 and k is not null",
    "delete from t where id in (1, 2, 3)",
    "delete from t where id not in (1, 2) and name like 'a%' and x not like '_b' and y between 1 and 5 "
    "and z not between 'a' and 'b'",
    "delete from t",
    "update t set a = 1",
]
SLOW = ["insert into t values (0x41)", "insert ignore into t values (1)",
        "insert into t values (1) on duplicate key update a=1", "update t set a = a + 1 where id = 1",
        "delete from t where id = 1 or id = 2", "insert into t values ('a\\nb')", "delete from t where id = 1 limit 1",
        "insert into t select * from u", "update t set a=1 where t.id = 1", "insert into t values (now())",
        'insert into t values ("dq")']


@pytest.mark.parametrize("text", FAST)
def test_fast_path_gives_what_sqlglot_gives(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = fastsql.parse(text)
    assert fast is not None
    monkeypatch.setattr(S.fastsql, "parse", lambda _: None)
    slow = S.parse(text)
    assert fast == slow
    for a, b in zip(getattr(fast, "rows", []), getattr(slow, "rows", [])):
        assert [type(v) for v in a] == [type(v) for v in b]


@pytest.mark.parametrize("text", SLOW)
def test_fast_path_leaves_other_shapes_to_sqlglot(text: str) -> None:
    assert fastsql.parse(text) is None
