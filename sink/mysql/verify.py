"""``binlake verify --against mysql://…``, the MySQL side: every replicated table on a MySQL downstream
compared with the upstream's snapshot at the downstream's checkpoint, key by key (``sink.compare``;
the primary key, else the first unique key, else the whole row — then as multisets: equal rows must
repeat as often on both sides).

Both sides are brought to the upstream snapshot's rendering (``transform.codec.values.json_value``)
and then made comparable where MySQL hands back a value in another form (:class:`_DownstreamValues`):
BIT comes back as bytes (compared as its number), TIME as a timedelta (compared as
``[-]HH:MM:SS[.ffffff]``), FLOAT at float32 precision, JSON documents as parsed values (in a JSON
column also scalars: TiDB prints a double ``1e+21``, MySQL ``1e21``). A zero or invalid date upstream
that the downstream holds as NULL (the decoder cannot carry it) is counted as *nulled*, not as a
difference.
Virtual generated columns are compared on neither side: the upstream's snapshot leaves them out (TiDB
never writes them to a binlog), and so does the downstream's read (its CREATE TABLE computes them from
the compared columns); a unique key on one is not used to match rows.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from sink.compare import DEFAULT_MAX_EXAMPLES, Expired, Key, Row, ValueRules, compare_rows, compare_tables
from sink.mysql.statements import quote
from sink.mysql.upstream_reader import mysql_value
from sink.verify_report import TableResult, VerifyReport
from transform.changes import ROWID
from transform.filters import TableFilter

_JSON = 245   # MySQL's type code of a JSON column


def _same(up: Any, down: Any, json_column: bool = False) -> bool:
    """True when an upstream and a downstream value are the same value. A JSON column's documents
    are compared parsed (TiDB and MySQL print doubles differently: ``1e+21`` / ``1e21``)."""
    if up == down:
        return True
    if json_column and isinstance(up, str) and isinstance(down, str):
        try:
            return _json_equal(json.loads(up), json.loads(down))
        except ValueError:
            return False
    if isinstance(up, str) and isinstance(down, str) and up[:1] in "[{" and down[:1] in "[{":
        try:
            return bool(json.loads(up) == json.loads(down))
        except ValueError:
            return False
    if isinstance(up, (int, float)) and isinstance(down, (int, float)):
        return math.isclose(float(up), float(down), rel_tol=1e-6)
    if isinstance(up, str) and isinstance(down, str):   # a TIME/DATETIME with trailing zero fraction
        return _no_zero_fraction(up) == _no_zero_fraction(down)
    return False


def _json_equal(a: Any, b: Any) -> bool:
    """Parsed JSON documents are equal: numbers by value (``1`` = ``1.0``), booleans only to booleans."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(v, b[k]) for k, v in a.items())
    return type(a) is type(b) and bool(a == b)


def _no_zero_fraction(text: str) -> str:
    """``12:00:00.500`` → ``12:00:00.5``, ``12:00:00.000`` → ``12:00:00`` (only a fraction's zeros go)."""
    head, dot, frac = text.partition(".")
    frac = frac.rstrip("0")
    return f"{head}.{frac}" if dot and frac else head


def _nulled(up: Any, down: Any) -> bool:
    return down is None and isinstance(up, str) and (up.startswith("0000-00-00") or "-00" in up[:10])


class _DownstreamValues(ValueRules):
    """Keys as JSON text (either side's values as they are); values by :func:`_same` (documents in the
    JSON columns), zero dates held as NULL by :func:`_nulled`."""

    def __init__(self, json_columns: set[str]) -> None:
        self.json_columns = json_columns

    def upstream_key(self, row: Row, keys: Sequence[str]) -> Key:
        return tuple(json.dumps(row.get(k), sort_keys=True, default=str) for k in keys)

    def same(self, column: str, upstream: Any, copy: Any) -> bool:
        return _same(upstream, copy, column in self.json_columns)

    def nulled(self, column: str, upstream: Any, copy: Any) -> bool:
        return _nulled(upstream, copy)


def _read(conn: Any, db: str, table: str) -> tuple[list[str], list[dict[str, Any]], list[str], set[str]] | None:
    """Columns, rows, key columns and JSON columns of ``db.table`` on the downstream; None when it
    does not exist."""
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                    (db, table))
        if cur.fetchone()[0] == 0:
            return None
        cur.execute("SELECT index_name, column_name FROM information_schema.statistics WHERE table_schema = %s "
                    "AND table_name = %s AND non_unique = 0 ORDER BY index_name = 'PRIMARY' DESC, index_name, "
                    "seq_in_index", (db, table))
        indexes: dict[str, list[str]] = {}
        for name, col in cur.fetchall():
            indexes.setdefault(name, []).append(col)
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                    "AND table_name = %s AND extra LIKE '%%VIRTUAL GENERATED%%'", (db, table))
        virtual = {str(c).lower() for c, in cur.fetchall()}
        cur.execute(f"SELECT * FROM {quote(db)}.{quote(table)}")
        kept = [(i, d[0], d[1]) for i, d in enumerate(cur.description) if d[0].lower() not in virtual]
        rows = [{n: mysql_value(row[i], c) for i, n, c in kept} for row in cur.fetchall()]
    conn.commit()
    names = [n for _, n, _ in kept]
    keys = next((cols for cols in indexes.values() if not any(c.lower() in virtual for c in cols)), names)
    return names, rows, keys, {n for _, n, c in kept if c == _JSON}


def verify_table(conn: Any, name: str, upstream: Sequence[Mapping[str, Any]], ts: int,
                 max_examples: int = DEFAULT_MAX_EXAMPLES, expired: Expired | None = None) -> TableResult:
    """Compare one upstream table's rendered rows with ``name`` on the downstream (``expired``: the rows
    the upstream's TTL had expired, set aside)."""
    db, _, table = name.partition(".")
    result = TableResult(name, to_ts=ts, upstream_rows=len(upstream))
    found = _read(conn, db, table)
    if found is None:
        if upstream:
            result.missing = len(upstream)
            result.problems.append("no such table downstream")
        return result
    names, rows, keys, json_columns = found
    result.mirror_rows = len(rows)
    up_rows = [{k: v for k, v in r.items() if k != ROWID} for r in upstream]
    if up_rows and set(up_rows[0]) != set(names):
        result.problems.append(f"columns differ: upstream {sorted(up_rows[0])}, downstream {sorted(names)}")
        return result
    whole_row = list(keys) == list(names)     # a keyless table: equal rows may repeat, as many times each side
    compare_rows(result, keys, names, up_rows, rows, _DownstreamValues(json_columns), max_examples, whole_row,
                 expired)
    return result


def verify_downstream(conn: Any, upstream_snapshot: dict[str, list[dict[str, Any]]], ts: int,
                      table_filter: TableFilter | None = None,
                      expired: Mapping[str, Expired] | None = None) -> VerifyReport:
    """Every table of ``upstream_snapshot`` the filter allows, compared with the downstream."""
    return compare_tables(upstream_snapshot, ts,
                          lambda name, rows: verify_table(conn, name, rows, ts, expired=(expired or {}).get(name)),
                          (table_filter or TableFilter()).allows)
