"""Row changes and DDL read back from TiDB Binlog's protobuf files (``binlake reparo``) applied to
MySQL/TiDB by the MySQL sink's loader.

The files carry no table definitions: as TiDB Binlog's loader does, each table's columns and unique
keys (the primary key first) are read from the downstream's ``information_schema`` when its first row
change comes, and again after any DDL. A row change's columns the downstream table lacks are left out
(a range replayed again in safe mode crosses a DROP COLUMN already applied), and so are its generated
columns, as TiDB Binlog's loader leaves them out. A TIMESTAMP, which the files hold in the drainer's zone,
is read in this process's (:func:`sink.secondary.drainer_zone`: run reparo in the drainer's zone, as
TiDB Binlog's reparo needs a downstream session in it).
"""
from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pymysql

from sink.mysql.ddl import IGNORED_ERRORS
from sink.mysql.loader import ApplyError, Loader
from sink.mysql.statements import DML, TargetTable, quote
from sink.mysql.target import MySQLTarget
from sink.pb_binlog import Event, Value
from sink.secondary import drainer_zone, utc_text
from transform.codec import mysqltypes as mt

log = logging.getLogger(__name__)

_KEYS = ("SELECT index_name, column_name FROM information_schema.statistics WHERE table_schema = %s "
         "AND table_name = %s AND non_unique = 0 ORDER BY index_name = 'PRIMARY' DESC, index_name, seq_in_index")
_COLUMNS = ("SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
            "AND extra NOT LIKE '%%GENERATED%%'")


class Replayer:
    """Applies binlogs in file order: DML through a :class:`Loader`, a DDL once everything before it is
    applied."""

    def __init__(self, target: MySQLTarget, worker_count: int, txn_batch: int, safe_mode: bool) -> None:
        self.conn: Any = target.connect()
        self.loader = Loader(target.connect, worker_count, txn_batch, safe_mode)
        # (db, table) → the downstream's column names (lower case) and unique keys
        self.shapes: dict[tuple[str, str], tuple[frozenset[str], list[tuple[str, list[str]]]]] = {}
        self.zone: dt.tzinfo | None = drainer_zone()

    def _shape(self, db: str, table: str) -> tuple[frozenset[str], list[tuple[str, list[str]]]]:
        found = self.shapes.get((db, table))
        if found is None:
            with self.conn.cursor() as cur:
                cur.execute(_COLUMNS, (db, table))
                columns = frozenset(str(c).lower() for (c,) in cur.fetchall())
                cur.execute(_KEYS, (db, table))
                named: dict[str, list[str]] = {}
                for index, column in cur.fetchall():
                    named.setdefault(str(index), []).append(str(column))
            self.conn.commit()
            found = self.shapes[(db, table)] = (columns, list(named.items()))
        return found

    def dml(self, commit_ts: int, events: list[Event]) -> None:
        """One transaction's row changes."""
        for e in events:
            columns, keys = self._shape(e.schema, e.table)
            kept = [self._in_utc(c) for c in e.columns if not columns or c.name.lower() in columns]
            pos = {c.name.lower(): i for i, c in enumerate(kept)}
            target = TargetTable(e.schema, e.table, tuple(c.name for c in kept),
                                 tuple((name, tuple(pos[c.lower()] for c in cols)) for name, cols in keys
                                       if all(c.lower() in pos for c in cols)))
            values = [c.changed if e.op == "U" else c.value for c in kept]
            old = [c.value for c in kept] if e.op == "U" else None
            self.loader.add(DML.of(target, e.op, values, old, commit_ts))
        self.loader.end_txn(commit_ts)
        if self.loader.ready:
            self.loader.flush(wait=False)

    def _in_utc(self, c: Value) -> Value:
        """``c`` with a TIMESTAMP in the files' zone given in UTC (the target's sessions are UTC)."""
        if self.zone is None or c.tp != mt.TYPE_TIMESTAMP:
            return c
        return Value(c.name, c.tp, c.mysql_type, *(utc_text(v, self.zone) if isinstance(v, str) else v
                                                   for v in (c.value, c.changed)))

    def ddl(self, commit_ts: int, schema: str, statement: str) -> None:
        """Run one DDL on ``schema`` after every row change before it is applied."""
        self.loader.flush()
        self.shapes.clear()
        self.conn.autocommit(True)
        try:
            with self.conn.cursor() as cur:
                if schema:
                    try:
                        cur.execute(f"USE {quote(schema)}")
                    except pymysql.Error:
                        pass   # a CREATE DATABASE's own schema, or a database a later DDL creates
                cur.execute(statement)
        except pymysql.Error as e:
            code = e.args[0] if e.args and isinstance(e.args[0], int) else None
            if code not in IGNORED_ERRORS:
                raise ApplyError(f"DDL committed at {commit_ts} failed: {e}; statement: {statement[:300]}") from None
            log.info("DDL at %d already applied (%s): %s", commit_ts, e, statement)
        finally:
            self.conn.autocommit(False)

    def finish(self) -> None:
        """Apply what is pending."""
        self.loader.flush()

    def close(self) -> None:
        self.loader.close()
        self.conn.close()
