"""The table filters match as TiDB Binlog's drainer matches them: each pattern's answer on each name
is checked against the same rule run by Go's regexp engine (``.peers/gocheck filter``), and the rules
combine as TiDB Binlog's do (do-rules first, then ignore-rules)."""
from __future__ import annotations

import subprocess

import pytest

from binlake.drain_config import DrainerConfig
from ingest.config import ConfigError, load_config
from tests.realtidb.peers import peer
from transform.filters import TableFilter

# (pattern, name, TiDB Binlog's answer); the answers follow from its rule and Go's regexp also gives them
CASES = [
    ("~log", "syslog", True),                 # ~re is found anywhere, not only at the start
    ("~log", "Logs", True),                   # case-insensitive
    ("~^log", "syslog", False),
    ("~^wl_", "wl_orders", True),
    ("~_tmp$", "orders_tmp", True),
    ("~_tmp$", "orders_tmp2", False),
    ("orders", "ORDERS", True),               # a plain name: the whole name, any case
    ("orders", "orders2", False),
    ("orders", "my_orders", False),
    ("a.b", "axb", True),                     # a plain name is a regex too: '.' is any character
    ("a.b", "a.b", True),
    ("t_1|t_2", "t_1x", True),                # ^t_1|t_2$: the anchors bind to the alternatives
    ("t_1|t_2", "xt_2", True),
    ("t_1|t_2", "xt_1", False),
    ("(t_1|t_2)", "xt_2", False),
    ("shop[0-9]+", "shop42", True),
    ("shop[0-9]+", "shop", False),
    ("~(?:a|b)c", "zbcz", True),
    ("~\\d{3}", "t123", True),
    ("~[[:digit:]]", "t1", True),             # Go's ASCII classes, which Python's re lacks
    ("~^[[:alpha:]_]+$", "t_x", True),
    ("~^[[:alpha:]_]+$", "t_1", False),
    ("~t\\z", "at", True),                    # Go's end of text
    ("~t\\z", "ta", False),
    ("~^\\D+$", "abc", True),                 # a non-digit name (but see the do-rules below)
    ("", "", True),                           # an empty pattern matches only the empty name
    ("", "t", False),
]


def _go(pairs: list[tuple[str, str]]) -> list[bool]:
    """Go's answer for each (pattern, name) under the rule of one pattern."""
    text = "".join(f"{p}\t{n}\n" for p, n in pairs)
    out = subprocess.run([str(peer("gocheck")), "filter"], input=text, capture_output=True, text=True,
                         check=True).stdout
    assert "error" not in out, out
    return [line == "1" for line in out.splitlines()]


def test_each_pattern_answers_as_tidb_binlogs_rule_and_gos_regexp() -> None:
    assert _go([(p, n) for p, n, _ in CASES]) == [want for _, _, want in CASES]


@pytest.mark.parametrize("rule", ["do_db", "do_table", "ignore_schema", "ignore_table"])
def test_every_rule_matches_as_the_go_drainer(rule: str) -> None:
    """The do-rules' patterns are lower-cased at load (``~^\\D+$`` becomes ``~^\\d+$``), the ignore-rules' not."""
    lowered = rule.startswith("do_")
    go = _go([(p.lower() if lowered else p, n) for p, n, _ in CASES])
    for (pattern, name, _), want in zip(CASES, go):
        match rule:
            case "do_db":
                got = TableFilter(do_dbs=(pattern,)).allows(name, "t")
            case "do_table":
                got = TableFilter(do_tables=(("~.", pattern),)).allows("db", name) if name else want
            case "ignore_schema":
                got = not TableFilter(ignore_schemas=(pattern,)).allows(name, "t")
            case _:
                got = not TableFilter(ignore_tables=(("db", pattern),)).allows("db", name)
        assert got == want, f"{rule}: pattern {pattern!r} on {name!r}: binlake {got}, Go {want}"
    if lowered:
        assert not TableFilter(do_dbs=("~^\\D+$",)).allows("abc", "t")


def test_rules_combine_as_tidb_binlogs() -> None:
    f = TableFilter(do_dbs=("shop",), do_tables=(("test", "~^keep_"),), ignore_schemas=("~^tmp",),
                    ignore_tables=(("shop", "secret"), ("~", "~_bak$")))
    assert f.allows("SHOP", "Orders") and f.allows("test", "keep_me") and f.allows("test", "KEEP_me")
    assert not f.allows("test", "other")            # not in a do-rule
    assert not f.allows("shop", "secret")           # do-db, then ignore-table
    assert not f.allows("shop", "orders_bak")       # an ignore-table pattern on every schema
    assert not f.allows("elsewhere", "x")
    assert TableFilter(ignore_schemas=("~^tmp",)).allows("shop", "t")
    assert not TableFilter(ignore_schemas=("~^tmp",)).allows("tmp_1", "t")
    assert TableFilter().allows("test", "t") and not TableFilter().allows("MySQL", "user")


def test_a_pattern_that_is_not_a_regex_is_refused_when_the_config_loads() -> None:
    with pytest.raises(ConfigError, match=r"filter pattern '~\(unclosed' is not a valid regular expression"):
        load_config(DrainerConfig, None, {"syncer.replicate-do-db": ["~(unclosed"]})
    assert subprocess.run([str(peer("gocheck")), "filter"], input="~(unclosed\tx\n", capture_output=True, text=True,
                          check=True).stdout.startswith("error:")
