"""The binlog event filter decides as TiDB Binlog's drainer does: every case below runs through
tidb-tools' ``pkg/binlog-filter`` (v6.6.0, the version TiDB Binlog v8.3.0 pins) and TiDB's parser in
the Go checker (``.peers/gocheck eventfilter``, which builds the rules from the two drainer.toml keys
as ``drainer/util.go`` does) and through :mod:`transform.event_filter`, and both must give the same
answer: the rules accepted or refused, each event ignored or not, each DDL's event type. A few cases
also state the answer, written from the rules."""
from __future__ import annotations

import json
import pickle
import subprocess
from typing import Any

import pytest

from tests.realtidb.peers import peer
from transform.codec.model import HistoryInfo, Job, TableInfo
from transform.errors import FilterRuleError
from transform.event_filter import DML_EVENTS, EventFilter, ddl_event
from transform.history import JOB_SYNCED, SchemaHistory

Config = dict[str, Any]
Event = dict[str, str]


def _config(rules: dict[str, tuple[list[str], list[str]]], attached: list[tuple[str, str, list[str]]],
            case_sensitive: bool = False) -> Config:
    return {"case-sensitive": case_sensitive,
            "binlog-filter-rule": {n: {"ignore-event": e, "ignore-sql": s} for n, (e, s) in rules.items()},
            "table-migrate-rule": [{"schema": s, "table": t, "binlog-filter-rule": n} for s, t, n in attached]}


def _go(cfg: Config, events: list[Event]) -> tuple[bool, list[str]]:
    """Go's answer: whether the rules load, then per event "1"/"0" (a DDL's with a tab and its type)."""
    text = json.dumps(cfg) + "\n" + "".join(json.dumps(e) + "\n" for e in events)
    out = subprocess.run([str(peer("gocheck")), "eventfilter"], input=text, capture_output=True, text=True,
                         check=True).stdout.split("\n")[:-1]
    return out[0] == "ok", out[1:]


def _binlake(cfg: Config, events: list[Event]) -> tuple[bool, list[str]]:
    """binlake's answer, in the Go checker's form."""
    rules = {n: (r["ignore-event"], r["ignore-sql"]) for n, r in cfg["binlog-filter-rule"].items()}
    attached = [(m["schema"], m["table"], m["binlog-filter-rule"]) for m in cfg["table-migrate-rule"]]
    try:
        f = EventFilter.from_config(rules, attached, cfg["case-sensitive"])
    except FilterRuleError:
        return False, []
    out = []
    for e in events:
        if "query" in e:
            event = ddl_event(e["query"])
            out.append(f"{int(f.rule_for(e['schema'], e['table'], event, e['query']) is not None)}\t{event}")
        else:
            out.append(str(int(f.rule_for(e["schema"], e["table"], e["event"]) is not None)))
    return True, out


def _same_as_go(cfg: Config, events: list[Event], types: bool = True) -> None:
    """Both accept or refuse the rules and decide each event alike (and give each DDL the same event
    type, unless not ``types``: queries that are not SQL)."""
    go, ours = _go(cfg, events), _binlake(cfg, events)
    assert ours[0] == go[0], f"rules {cfg}: Go {'accepts' if go[0] else 'refuses'} them, binlake does not"
    for e, want, got in zip(events if go[0] else [], go[1], ours[1], strict=True):
        if not types:
            want, got = want.split("\t")[0], got.split("\t")[0]
        assert got == want, f"rules {cfg}, event {e}: Go {want!r}, binlake {got!r}"


# -- table patterns ---------------------------------------------------------------------------------

SCHEMA_PATTERNS = ["db", "db*", "d?", "d[a-c]", "d[!a-c]", "[!]x", "[]x", "d[b", "*", "?*", "??", "d[a-]", "D*",
                   "é*", "?", "d[!]", "[ab]?*", "[é]", "[z-a]", "d[-]", "d[a-c-e]"]
TABLE_PATTERNS = ["", "t", "t*", "*", "?", "t?", "[!t]*", "ta", "T", "é", "??", "?é"]
SCHEMAS = ["db", "d", "da", "dd", "db1", "DB", "Db", "dé", "é", "éx", "!x", "]x", "x", "d[b", "d-", "da-", "dab",
           "d!", "中", "中文"]
TABLES = ["", "t", "T", "ta", "tab", "é", "éé", "a", "中", "t1"]


@pytest.mark.parametrize("case_sensitive", [False, True])
def test_schema_and_table_patterns_select_tables_as_tidb_tools_selector(case_sensitive: bool) -> None:
    """``*`` (last only), ``?``, ``[…]``/``[!…]`` on the names' bytes; a schema rule (no table pattern)
    covers the schema's own DDL (table ""), and so does the table pattern ``*``."""
    for schema in SCHEMA_PATTERNS:
        for tbl in TABLE_PATTERNS:
            cfg = _config({"r": (["all"], [])}, [(schema, tbl, ["r"])], case_sensitive)
            _same_as_go(cfg, [{"schema": s, "table": t, "event": "insert"} for s in SCHEMAS for t in TABLES])


def test_patterns_stated() -> None:
    def ignored(schema: str, tbl: str, name: str, table: str = "t") -> bool:
        f = EventFilter.from_config({"r": (["all"], [])}, [(schema, tbl, ["r"])])
        return f.rule_for(name, table, "insert") is not None

    assert ignored("d?", "", "db") and not ignored("d?", "", "dbx") and not ignored("d?", "", "d")
    assert ignored("db*", "", "db") and ignored("db*", "", "DB_1")              # case-insensitive by default
    assert ignored("d[!a-c]", "", "dx") and not ignored("d[!a-c]", "", "db")
    assert ignored("db", "*", "db", "") and not ignored("db", "t*", "db", "")   # a schema-level DDL
    assert ignored("??", "", "é") and not ignored("?", "", "é")                 # Go steps é's two bytes
    assert not ignored("é*", "", "éx")                                          # … and the pattern's too
    with pytest.raises(FilterRuleError, match="pattern 'd\\*b' is not valid"):
        EventFilter.from_config({"r": (["all"], [])}, [("d*b", "", ["r"])])


# -- event types ------------------------------------------------------------------------------------

EVENT_LISTS = [["all"], ["all dml"], ["all ddl"], ["none"], ["none", "insert"], ["insert", "none"],
               ["none dml", "insert", "create table"], ["none ddl", "insert", "create table"], ["INSERT", "Delete"],
               ["create schema"], ["drop schema"], ["alter schema"], ["add table partition"], [""], ["", "update"],
               ["truncate table", "rename table"], ["all ddl", "none"],
               ["create view", "drop view", "create index", "drop index", "alter database", "drop table"]]
# DDL as TiDB writes it into a job's query (each one TiDB's parser reads)
QUERIES = [
    "create table t (a int)", "CREATE TEMPORARY TABLE t (a int)", "create table t like s", "create table t select 1",
    "create global temporary table t (a int) on commit delete rows", "CREATE DATABASE d",
    "create schema if not exists d", "drop database d", "DROP SCHEMA d", "alter database d charset utf8mb4",
    "ALTER SCHEMA d COLLATE utf8mb4_bin", "drop table t", "drop table if exists a, b", "DROP TABLES a",
    "drop temporary table t", "truncate table t", "truncate t", "rename table a to b", "rename table a to b, c to d",
    "create index i on t (a)", "create unique index i on t (a)", "CREATE FULLTEXT INDEX i ON t (a)",
    "create spatial index i on t (g)", "CREATE INDEX IF NOT EXISTS i ON t (a)", "drop index i on t",
    "create view v as select 1", "create or replace view v as select 1",
    "create algorithm=merge definer='root'@'%' sql security definer view v as select 1",
    "create definer=current_user() view v as select 1", "create definer = root@localhost view v as select 1",
    "CREATE ALGORITHM = UNDEFINED DEFINER = `root`@`%` SQL SECURITY INVOKER VIEW `v` (`a`) AS SELECT 1",
    "drop view v", "drop view if exists v, w", "alter table t add column c int",
    "ALTER TABLE t ADD PARTITION (PARTITION p2 VALUES LESS THAN (30))", "alter table t drop partition p1",
    "alter table t truncate partition p1", "alter ignore table t add c int", "alter table t rename to u",
    "alter table d.t add index i(a)", "alter table t exchange partition p with table u", "alter table t cache",
    "alter table t set tiflash replica 1", "ALTER DATABASE d SET TIFLASH REPLICA 1",
    "alter table t analyze partition p1", "alter table d.t compact", "create sequence s", "drop sequence s",
    "flashback table t", "recover table t", "create placement policy p followers=1", "drop placement policy p",
    "alter placement policy p followers=2", "create resource group rg ru_per_sec=100",
    "create table t (a int) partition by range (a) (partition p0 values less than (10))",
    "/* c */ create table t(a int)", "-- c\ncreate table t(a int)", "# c\ndrop table t",
    "/*!40101 create table t(a int) */", "  \n CREATE\tTABLE t(a int);", "create table `x y`(a int)",
    "/*!50001 CREATE ALGORITHM=UNDEFINED */ /*!50013 DEFINER=`root`@`%` SQL SECURITY DEFINER */ "
    "/*!50001 VIEW v AS select 1 */",
    "create table t (a bigint /*T![auto_rand] AUTO_RANDOM(5) */ primary key)",
]


@pytest.mark.parametrize("events", EVENT_LISTS, ids=lambda e: ",".join(e) or "empty")
def test_event_lists_decide_row_changes_and_ddl_as_tidb_tools(events: list[str]) -> None:
    """Each list against every row-change type and every DDL; the DDL's event type is the one TiDB's
    parser gives its query (partition DDL is "alter table"; CREATE SEQUENCE and such have none)."""
    cfg = _config({"r": (events, [])}, [("db", "", ["r"])])
    _same_as_go(cfg, [{"schema": "db", "table": "t", "event": e} for e in DML_EVENTS]
                + [{"schema": "db", "table": "t", "query": q} for q in QUERIES])


def test_event_lists_stated() -> None:
    def ignores(events: list[str], event: str) -> bool:
        return EventFilter.from_config({"r": (events, [])}, [("db", "", ["r"])]).rule_for("db", "t", event) is not None

    assert ignores(["all dml"], "update") and not ignores(["all dml"], "drop table")
    assert ignores(["insert", "none"], "insert") and not ignores(["none", "insert"], "insert")   # order matters
    assert ignores(["Drop Schema"], "drop database")
    assert ddl_event("ALTER TABLE t ADD PARTITION (PARTITION p2 VALUES LESS THAN (30))") == "alter table"
    assert ddl_event("create sequence s") == "" and ddl_event("TRUNCATE t") == "truncate table"
    with pytest.raises(FilterRuleError, match="binlog-filter-rule r on schema 'db', table '': event type 'insrt'"):
        EventFilter.from_config({"r": (["insrt"], [])}, [("db", "", ["r"])])


def test_the_rules_that_can_leave_out_ddl_are_known() -> None:
    """What a lake sink refuses (its tables follow the DDL history): a DDL event type, ``all``, ``all
    ddl``, an SQL pattern; not row-change types, nor the partition types no DDL has."""
    def ddl(events: list[str], sql: tuple[str, ...] = ()) -> bool:
        return bool(EventFilter.from_config({"r": (events, sql)}, [("db", "", ["r"])]).ddl_rules())

    assert ddl(["all"]) and ddl(["all ddl"]) and ddl(["truncate table"]) and ddl([], ("^drop",))
    assert not ddl(["all dml", "insert"]) and not ddl(["add table partition"]) and not ddl(["none", "all ddl"])


# -- ignore-sql: Go's regexp --------------------------------------------------------------------------

SQL_PATTERNS = [
    ["^alter table .* add column aaa int"], ["drop"], ["^DROP\\s+TABLE"], ["table$"], ["(?m)table$"],
    ["(?s)create.*partition"], ["create.*partition"], ["\\btable\\b"], ["\\d+"], ["[[:digit:]]{3}"],
    ["[[:^alpha:]]x"], ["\\x{41}"], ["\\x41b"], ["\\101"], ["\\0"], ["\\Qa.b\\E"], ["a{2}"], ["a{,2}"], ["a{01}"],
    ["a{1001}"], ["a**"], ["a*+"], ["(?=a)"], ["(a)\\1"], ["\\Z"], ["\\z"], ["a{2}{3}"], ["(?i)A"], ["(?-i)A"],
    ["(?-i:A)b"], ["(?U)a+"], ["x|(?-i)y", "Z"], ["(?P<n>a)"], ["(?P<1a>a)"], ["(?P<>a)"], ["(?<n>a)"], ["[\\d-z]"],
    ["[a-\\d]"], ["[z-a]"], ["[]a]"], ["[^]a]"], ["[a"], ["a)"], ["(a"], ["\\C"], ["\\8"], ["\\_"], ["\\é"], ["é"],
    ["(?i)é"], ["\\W+"], ["(?i)\\W"], ["[\\W]"], ["^*a"], ["(?i)*"], ["a(?i)*"], ["(?)a"], ["(?i-)a"], ["(?-)a"],
    ["((a{10}){10}){10}"], ["((a{10}){10}){11}"], ["(a{500})*{2}"], ["(a{500}){0}{3}"], ["\\x{110000}"], ["\\x{}"],
    ["[[:foo:]]"], ["k"], ["(?i)k"], ["s"], ["[k]"], ["[^k]"], ["(?i)[^k]"], ["a.b"], ["(?s)a.b"], ["^b"],
    ["(?m)^b"], ["\\Aa"], [""], ["a|"], ["\\."], ["[.]"], ["\\n"], ["\\t"], ["[\\n]"], ["[\\b]"], ["\\b"], ["x{"],
    ["x{a}"], ["x{2,1}"], ["x{1,}"], ["}"], ["]"], ["(?m:^c)"], ["a$", "(?m)b$"], ["[\\x{61}-\\x{63}]"], ["\\v"],
    ["[[:space:]]"], ["\\s"], ["\\p{Greek}"], ["\\PL"], ["[\\p{Lu}]"], ["[\\C]"], ["[(?<n>a)]"], ["(?<=a)"], ["(?<!a)"],
    ["\\\\C"]]
SQL_QUERIES = [
    "ALTER TABLE t ADD COLUMN aaa int", "alter table t add column bbb int", "DROP TABLE t", "drop  table t\n",
    "create table\n", "create table t (a int)\npartition by hash(a)", "a.b", "axb", "Aa", "aa", "aaa", "a{,2}",
    "a{01}", "A", "a", "b", "y", "Y", "z", "123", "x1x", "é", "É", "k", "K", "\u212a", "s", "S", "\u017f", "1-z",
    "-", "]", "^", "x{", "x{a}", "}", "\n", "\t", "a\nb", "x\nb", "c\nb", "table", "table\n", "mytable x",
    "tablex", "a\x00", "\x0b", " ", "x", "ab", "αβ", "\\C", "C", "<n>"]


@pytest.mark.parametrize("patterns", SQL_PATTERNS, ids=repr)
def test_ignore_sql_is_gos_regexp_found_anywhere_in_the_query(patterns: list[str]) -> None:
    """Go's syntax and meaning (``$`` only at the end, ASCII ``\\d``/``\\w``/``\\b``, flags to the end of
    their group, ``{`` a literal unless a repeat), and Go's refusals (look-arounds, backreferences,
    ``\\Z``, stacked repetitions, counts over 1000)."""
    cfg = _config({"r": ([], patterns)}, [("db", "", ["r"])])
    _same_as_go(cfg, [{"schema": "db", "table": "t", "query": q} for q in SQL_QUERIES], types=False)


# -- the rules as a whole -------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [
    _config({"r": (["insert"], [])}, [("d*b", "", ["r"])]),                           # '*' not last
    _config({"r": (["insert"], [])}, [("db", "*t", ["r"])]),
    _config({"r": (["insert"], [])}, [("", "t", ["r"])]),                              # no schema pattern
    _config({"r": (["insert"], [])}, [("db", "", ["x"])]),                             # no such rule
    _config({"r": (["insert"], [])}, [("DB", "", ["r"]), ("db", "", ["r"])]),          # alike once lower-cased
    _config({"r": (["insert"], [])}, [("DB", "", ["r"]), ("db", "", ["r"])], True),
    _config({"r": (["insert"], [])}, [("d[ab]", "t", ["r"]), ("d[ba]", "t", ["r"])]),  # the same set
    _config({"r": (["insert"], [])}, [("db", "", ["r"]), ("db", "t", ["r"])]),         # schema and table level
    _config({"r": (["INSERT"], []), "bad": (["nope"], [])}, [("db", "", ["r"])]),      # unused: never checked
    _config({"r": (["none"], []), "s": (["insert"], [])}, [("db", "", ["r", "s"])]),   # one rule: none first
    _config({"r": (["insert"], []), "s": (["delete"], [])}, [("db", "t*", ["r"]), ("db", "t*", ["s"])]),
    _config({"r": (["insert"], [])}, [("db", "", [])]),
])
def test_rules_load_and_combine_as_tidb_binlogs(cfg: Config) -> None:
    _same_as_go(cfg, [{"schema": s, "table": "t1", "event": e} for s in ("db", "DB", "da") for e in DML_EVENTS])


def test_the_filter_travels_to_spark_tasks() -> None:
    f = EventFilter.from_config({"r": (["delete"], ["^drop"])}, [("shop*", "order?", ["r"])], case_sensitive=True)
    g = pickle.loads(pickle.dumps(f))
    assert g == f and g.rule_for("shop1", "orders", "delete") is not None
    assert g.rule_for("Shop1", "orders", "delete") is None                  # case-sensitive
    assert g.rule_for("shop1", "orders", "drop table", "DROP TABLE orders") is not None
    assert not EventFilter() and EventFilter().rule_for("db", "t", "delete") is None


def test_a_ddl_is_filtered_by_the_names_tidb_binlog_gives_it() -> None:
    """As created, not lower-cased as in the job: the schema's; the table's after the job; the dropped
    table's for a drop; "" for a job on the schema (``case-sensitive`` tells them apart)."""
    orders = TableInfo.from_json({"id": 20, "name": {"O": "Orders", "L": "orders"}, "cols": []})
    create_db = Job(1, 1, 10, 0, "shop", state=JOB_SYNCED, query="CREATE DATABASE Shop",
                    binlog=HistoryInfo(1, db_info={"id": 10, "db_name": {"O": "Shop", "L": "shop"}}))
    create = Job(2, 3, 10, 20, "shop", "orders", JOB_SYNCED, "CREATE TABLE Orders (i INT)",
                 HistoryInfo(2, None, orders))
    drop = Job(3, 4, 10, 20, "shop", "orders", JOB_SYNCED, "DROP TABLE Orders", HistoryInfo(3))
    history = SchemaHistory([create_db, create, drop])
    assert [history.names_of(j) for j in (create_db, create, drop)] == [("Shop", ""), ("Shop", "Orders"),
                                                                         ("Shop", "Orders")]
