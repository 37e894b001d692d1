"""The upstream's rows at a ts, read over the MySQL protocol as TiDB's sync-diff-inspector reads them:
``SET @@tidb_snapshot = TS``, then ``SELECT *`` of every base table (with ``_tidb_rowid`` where the
table is keyed by it) in a UTC session.

A read at ``TS`` is final only once the upstream's clock has passed it: a snapshot ts the upstream
has not reached yet reads its current state, and commits still to come may fall at or below it. So
before it reads, the reader proves the upstream's clock is past ``TS`` (a new transaction's start ts,
``@@tidb_current_ts``, is above it), waiting up to :data:`CLOCK_WAIT` seconds, and fails with
:class:`UpstreamSnapshotError` when it cannot; after reading it proves the session still reads at
``TS`` (``@@tidb_snapshot`` unchanged on the same connection) and, given a ``prove`` function, that the
tables it read are the ones the upstream's DDL history has at ``TS`` (:mod:`transform.snapshot_proof`:
TiDB takes a snapshot's schema from its schema cache, not from the rows). Virtual generated columns
(``information_schema.columns`` ``EXTRA`` says ``VIRTUAL GENERATED``) are left out: TiDB computes them
on read and never writes them to a row or a binlog, so the lake does not hold them.

Values come back in the rendering ``verify`` compares (``transform.codec.values.json_value``, the
same as the decoder's): TIME keeps the server's text, BIT becomes its number, binary strings
base64, DECIMAL its exact text, DATETIME/TIMESTAMP ``YYYY-MM-DD HH:MM:SS[.ffffff]``; zero and invalid
dates stay the server's text.
"""
from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

from sink.errors import SinkError
from sink.mysql.statements import quote
from sink.mysql.target import MySQLTarget
from transform.codec.values import json_value
from transform.snapshot_proof import ReadTable

ROWID = "_tidb_rowid"
SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "metrics_schema", "sys"})
_BIT, _TIME = 16, 11
CLOCK_WAIT = 10.0   # seconds the reader waits for the upstream's clock to pass the ts
_BAD_FIELD = 1054
_UNKNOWN_VARIABLE = 1193
TABLES = "SELECT table_schema, table_name{id} FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
VIRTUAL_COLUMNS = ("SELECT table_schema, table_name, column_name FROM information_schema.columns "
                   "WHERE extra LIKE '%VIRTUAL GENERATED%'")


class UpstreamSnapshotError(SinkError):
    """The upstream could not be read at the ts (unreachable, ts out of its GC window, a read failed).
    Transient: mostly the upstream not answering."""

    transient = True


def time_text(v: dt.timedelta) -> str:
    """A TIME value as MySQL prints it: ``[-]HH:MM:SS[.ffffff]``."""
    sign = "-" if v < dt.timedelta(0) else ""
    v = abs(v)
    secs = v.days * 86400 + v.seconds
    text = f"{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    return f"{text}.{v.microseconds:06d}" if v.microseconds else text


def mysql_value(v: Any, type_code: int) -> Any:
    """A value as PyMySQL returns it, in the rendering of ``json_value`` (BIT as its number)."""
    if v is None:
        return None
    if type_code == _BIT and isinstance(v, bytes):
        return int.from_bytes(v, "big")
    if isinstance(v, dt.timedelta):
        return time_text(v)
    return json_value(v)


def _conversions() -> dict[Any, Any]:
    """PyMySQL's decoders, except TIME, which keeps the server's text (its fractional digits)."""
    from pymysql.constants import FIELD_TYPE
    from pymysql.converters import conversions

    conv = dict(conversions)
    conv[FIELD_TYPE.TIME] = str
    return conv


def _select(cur: Any, db: str, table: str) -> tuple[list[str], list[Any]]:
    """``SELECT *, _tidb_rowid`` where the table has that handle, else ``SELECT *``."""
    import pymysql

    name = f"{quote(db)}.{quote(table)}"
    try:
        cur.execute(f"SELECT *, {ROWID} FROM {name}")
    except pymysql.err.OperationalError as e:
        if e.args[0] != _BAD_FIELD:
            raise
        cur.execute(f"SELECT * FROM {name}")
    return [d[0] for d in cur.description], [d[1] for d in cur.description]


def upstream_clock(cur: Any) -> int:
    """The upstream's clock: the start ts of a new transaction (above every commit before it)."""
    cur.execute("BEGIN")
    cur.execute("SELECT @@tidb_current_ts")
    (row,) = cur.fetchall()
    cur.execute("ROLLBACK")
    return int(str(row[0]))


def wait_past(cur: Any, ts: int, describe: str, wait: float = CLOCK_WAIT) -> int:
    """The upstream's clock once it is past ``ts`` (polled for up to ``wait`` seconds); else
    :class:`UpstreamSnapshotError` saying how far behind it is, or that the server is not TiDB."""
    import pymysql

    deadline = time.monotonic() + wait
    while True:
        try:
            now = upstream_clock(cur)
        except pymysql.err.OperationalError as e:
            if e.args[0] != _UNKNOWN_VARIABLE:
                raise
            raise UpstreamSnapshotError(f"reading the upstream {describe} at ts {ts}: it is not TiDB (it knows "
                                        f"neither @@tidb_current_ts nor @@tidb_snapshot, so it cannot be read at "
                                        f"a ts)") from None
        if now > ts:
            return now
        if time.monotonic() >= deadline:
            behind = ((ts >> 18) - (now >> 18)) / 1000 if now else None
            raise UpstreamSnapshotError(
                f"reading the upstream {describe} at ts {ts}: its clock is at {now}, "
                + (f"{behind:g} s behind the ts" if behind is not None else "not a TiDB clock")
                + f" after {wait:g} s: a read at that ts would not be final (commits still to come may fall at or "
                  f"below it), so nothing is compared; verify at a ts the upstream has reached")
        time.sleep(0.05)


def _tables(cur: Any) -> dict[tuple[str, str], int | None]:
    """The base tables the session sees (system schemas left out), with TiDB's table id
    (``TIDB_TABLE_ID``; None where the server has no such column: MySQL, the emulator)."""
    import pymysql

    try:
        cur.execute(TABLES.format(id=", tidb_table_id"))
    except pymysql.err.MySQLError:   # MySQL's 1054 (unknown column); the emulator's own error
        cur.execute(TABLES.format(id=""))
    return {(str(row[0]), str(row[1])): (int(row[2]) if len(row) > 2 and row[2] is not None else None)
            for row in cur.fetchall() if str(row[0]).lower() not in SYSTEM_SCHEMAS}


Prove = Callable[[dict[tuple[str, str], ReadTable]], list[str]]


def read_snapshot(target: MySQLTarget, ts: int, allows: Callable[[str, str], bool] | None = None,
                  prove: Prove | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every base table's rows at ``ts`` (``{"db.table": [{column: value}]}``, virtual generated
    columns left out) that ``allows(db, table)`` lets through; system schemas are never read.
    ``prove(tables read)`` lists how they differ from the tables at ``ts``: any difference refuses
    the read (:class:`UpstreamSnapshotError`)."""
    import pymysql

    conn = target.connect()
    conn.decoders = _conversions()
    out: dict[str, list[dict[str, Any]]] = {}
    shapes: dict[tuple[str, str], ReadTable] = {}
    try:
        with conn.cursor() as cur:
            wait_past(cur, ts, target.describe(), CLOCK_WAIT)
            cur.execute("SET @@tidb_snapshot = %s", (str(ts),))
            ids = _tables(cur)
            names = sorted(ids)
            cur.execute(VIRTUAL_COLUMNS)
            virtual: dict[tuple[str, str], set[str]] = {}
            for d, t, c in cur.fetchall():
                virtual.setdefault((str(d).lower(), str(t).lower()), set()).add(str(c).lower())
            for db, table in names:
                if allows is not None and not allows(db, table):
                    continue
                columns, codes = _select(cur, db, table)
                skip = virtual.get((db.lower(), table.lower()), set())
                kept = [(i, c, code) for i, (c, code) in enumerate(zip(columns, codes)) if c.lower() not in skip]
                out[f"{db}.{table}"] = [{c: mysql_value(row[i], code) for i, c, code in kept}
                                        for row in cur.fetchall()]
                shapes[(db, table)] = ReadTable(ids[(db, table)], tuple(c for _, c, _ in kept if c != ROWID))
            cur.execute("SELECT @@tidb_snapshot")
            (held,) = cur.fetchall()
            if str(held[0]) != str(ts):
                raise UpstreamSnapshotError(f"reading the upstream {target.describe()} at ts {ts}: the session "
                                            f"reads at {held[0]!r} instead, so nothing is compared")
            found = prove(shapes) if prove is not None else []
            if found:
                raise UpstreamSnapshotError(
                    f"reading the upstream {target.describe()} at ts {ts}: the tables it showed are not those of "
                    f"its DDL history at that ts, so the read is not at ts {ts} and nothing is compared: "
                    + "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else ""))
    except pymysql.Error as e:
        raise UpstreamSnapshotError(f"reading the upstream {target.describe()} at ts {ts}: {e}") from None
    finally:
        conn.close()
    return out
