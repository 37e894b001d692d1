"""The emulator's MySQL protocol port (TiDB's 4000), served with ``mysql-mimic``.

Any MySQL client (Debian's ``mysql``, PyMySQL) can drive the emulator through it:

- writes (INSERT/UPDATE/DELETE/REPLACE, DDL, BEGIN/COMMIT/ROLLBACK) run on one emulated TiDB server
  through an ``upstream.session.Session`` per connection, exactly as ``/binlake/sql`` runs them (binlogs
  and all); the statement text reaches the emulator verbatim, so TiDB-only syntax keeps working;
- ``SELECT`` reads the MVCC store at the session's read ts: ``@@tidb_snapshot`` (a TSO, or a
  ``YYYY-MM-DD HH:MM:SS`` in the session time zone) as TiDB, else a fresh ts. It is evaluated by
  sqlglot's executor over the referenced tables, so it is meant for verification-size tables;
  ``_tidb_rowid`` can be selected from tables that have it (and only from those: error 1054);
- ``SHOW``/``DESCRIBE``/``information_schema``/``SET``/``USE`` are mysql-mimic's, over the schema in
  force at the read ts.

Result columns carry the table column's MySQL type (BIT as bytes, TIME as text, binary strings with
the binary charset), so a client decodes them as it decodes TiDB's.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import re
import struct
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from mysql_mimic import MysqlServer, ResultColumn, Session
from mysql_mimic.charset import CharacterSet
from mysql_mimic.errors import ErrorCode, MysqlError
from mysql_mimic.schema import Column
from mysql_mimic.schema import InfoSchema as InfoSchema_
from mysql_mimic.session import Query
from mysql_mimic.types import ColumnType
from mysql_mimic.variables import SYSTEM_VARIABLES, GlobalVariables, SessionVariables
from sqlglot import expressions as exp
from sqlglot.errors import ExecuteError, OptimizeError, SqlglotError
from sqlglot.executor import execute

from transform.codec import mysqltypes as mt
from upstream import sql
from upstream.catalog import InfoSchema, TableEntry
from upstream.errors import UpstreamError
from upstream.session import Session as EmulatorSession
from upstream.status_api import VERSION

if TYPE_CHECKING:
    from upstream.cluster import Cluster

log = logging.getLogger(__name__)
ROWID = mt.EXTRA_HANDLE_NAME
_F32 = struct.Struct("<f")
# Statements mysql-mimic answers (reads, session state); every other statement goes to the emulator.
_READ_WORDS = frozenset({"SELECT", "SHOW", "SET", "USE", "DESC", "DESCRIBE", "EXPLAIN", "KILL", "WITH"})
# Session variables the emulator's session also keeps (``upstream.session.Session._set``).
_FORWARDED = frozenset({"tidb_enable_clustered_index"})
_DML_WORDS = frozenset({"INSERT", "REPLACE", "UPDATE", "DELETE"})
_CODE = re.compile(r"^\[[\w:]*?(\d{4})\]")
_LEADING_COMMENT = re.compile(r"^\s*(?:(?:/\*(?!!).*?\*/|--[^\n]*\n|#[^\n]*\n)\s*)*", re.S)

_VARIABLES = {
    **SYSTEM_VARIABLES,
    "version": (str, VERSION, False),
    "version_comment": (str, "binlake TiDB emulator", False),
    "tidb_snapshot": (str, "", True),
    "tidb_current_ts": (str, "0", False),   # the open transaction's start ts, 0 outside one (as TiDB's)
    "tidb_enable_clustered_index": (str, "INT_ONLY", True),
    "sql_mode": (str, "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
                      "ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION", True),
}

# The executor only needs a type class per column (star expansion, comparisons).
_EXEC_TYPES = {mt.Family.INT: "BIGINT", mt.Family.YEAR: "BIGINT", mt.Family.BIT: "BIGINT",
               mt.Family.FLOAT: "DOUBLE", mt.Family.DOUBLE: "DOUBLE", mt.Family.DECIMAL: "DECIMAL"}
_RESULT_TYPES = {mt.Family.INT: ColumnType.LONGLONG, mt.Family.YEAR: ColumnType.YEAR, mt.Family.BIT: ColumnType.BIT,
                 mt.Family.FLOAT: ColumnType.FLOAT, mt.Family.DOUBLE: ColumnType.DOUBLE,
                 mt.Family.DECIMAL: ColumnType.NEWDECIMAL, mt.Family.DATE: ColumnType.DATE,
                 mt.Family.DATETIME: ColumnType.DATETIME, mt.Family.TIMESTAMP: ColumnType.TIMESTAMP,
                 mt.Family.DURATION: ColumnType.TIME, mt.Family.JSON: ColumnType.JSON}
_PY_TYPES: list[tuple[type, ColumnType]] = [
    (bool, ColumnType.TINY), (int, ColumnType.LONGLONG), (float, ColumnType.DOUBLE),
    (Decimal, ColumnType.NEWDECIMAL), (dt.datetime, ColumnType.DATETIME), (dt.date, ColumnType.DATE),
    (bytes, ColumnType.BLOB)]


class _ClientErrors(logging.Filter):
    """mysql-mimic logs every error it answers a client with at ERROR; they are the client's (an unknown
    table, a bad statement), so they go to this module's debug log instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, MysqlError):
            log.debug("answered a client with %s", record.msg)
            return False
        return True


logging.getLogger("mysql_mimic.connection").addFilter(_ClientErrors())


def mysql_error(exc: Exception) -> MysqlError:
    """An emulator error as the MySQL error a client sees (TiDB's ``[class:code]`` gives the code)."""
    text = str(exc)
    m = _CODE.match(text)
    code = int(m.group(1)) if m else int(ErrorCode.UNKNOWN_ERROR)
    return MysqlError(text, code=cast(ErrorCode, code))


def _first_word(text: str) -> str:
    body = _LEADING_COMMENT.sub("", text, count=1).lstrip("(")
    return body.split(None, 1)[0].upper() if body.strip() else ""


def _column_type(entry_col: Any) -> tuple[ColumnType, CharacterSet]:
    """The wire type and charset of a table column."""
    ft = entry_col.type
    family = mt.family_of(ft.tp)
    binary = ft.charset == mt.BINARY_CHARSET
    if family in _RESULT_TYPES:
        return _RESULT_TYPES[family], CharacterSet.binary if family is mt.Family.BIT else CharacterSet.utf8mb4
    if ft.tp in mt.BLOB_TYPES:
        return ColumnType.BLOB, CharacterSet.binary if binary else CharacterSet.utf8mb4
    return ColumnType.VAR_STRING, CharacterSet.binary if binary else CharacterSet.utf8mb4


def _wire_value(v: Any, ctype: ColumnType, flen: int, tz: dt.tzinfo) -> Any:
    """A column value in the form mysql-mimic's text encoder sends as MySQL would."""
    if v is None:
        return None
    if ctype is ColumnType.BIT and isinstance(v, int):
        return v.to_bytes(max(1, (flen + 7) // 8), "big")
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(tz).replace(tzinfo=None)
    if isinstance(v, float) and ctype is ColumnType.FLOAT:
        return _float32_text(v)
    return v


def _float32_text(v: float) -> str:
    """The shortest text that reads back as the same float32 (how TiDB prints a FLOAT)."""
    if math.isnan(v) or math.isinf(v):
        return repr(v)
    want = _F32.pack(v)
    for digits in range(1, 10):
        text = f"{v:.{digits}g}"
        if _F32.pack(float(text)) == want:
            return text
    return repr(v)


def parse_snapshot(value: str, tz: dt.tzinfo) -> int | None:
    """``@@tidb_snapshot`` as a ts: empty = none, digits = a TSO, else a datetime in the session zone."""
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return int(value)
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        raise MysqlError(f"[variable:1231]Variable 'tidb_snapshot' can't be set to the value of '{value}'",
                         code=cast(ErrorCode, 1231)) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=tz)
    return int(when.timestamp() * 1000) << 18


class EmulatorMySQLSession(Session):
    """One client connection to the emulator's MySQL port."""

    def __init__(self, cluster: Cluster, server: int = 0) -> None:
        super().__init__(SessionVariables(GlobalVariables(dict(_VARIABLES))))
        self.cluster = cluster
        self.emulator = EmulatorSession(cluster.server(server), db=None)
        self.middlewares: list[Any] = [self._snapshot_guard, *self.middlewares]
        self.middlewares.remove(self._begin_middleware)
        self.middlewares.remove(self._commit_middleware)
        self.middlewares.remove(self._rollback_middleware)

    # ---- routing ------------------------------------------------------------------------------

    async def handle_query(self, sql_text: str, attrs: dict[str, str]) -> Any:
        """Run each statement of ``sql_text``: reads through mysql-mimic, the rest on the emulator."""
        self.timestamp = dt.datetime.now(tz=self.timezone())
        result: Any = None
        for text in sql.split(sql_text):
            if not text.strip():
                continue
            if _first_word(text) not in _READ_WORDS:
                result = await self._emulate(text)
                txn = self.emulator.txn
                self.variables.set("tidb_current_ts", str(txn.start_ts if txn is not None else 0), force=True)
                continue
            try:
                expressions = [e for e in self._parse(text) if e]
            except SqlglotError as e:
                raise MysqlError(f"You have an error in your SQL syntax: {e}", code=ErrorCode.PARSE_ERROR) from None
            for expression in expressions:
                q = Query(expression=expression, sql=text, attrs=attrs, _middlewares=self.middlewares,
                          _query=self.query)
                result = await q.start()
                if isinstance(expression, exp.Set):
                    await self._forward_set(expression, text)
        return result

    async def _emulate(self, text: str) -> Any:
        if self.read_ts() is not None:
            raise MysqlError("[variable:1105]can not execute write statement when 'tidb_snapshot' is set")
        if _first_word(text) in _DML_WORDS and self.emulator.txn is None and not self.variables.get("autocommit"):
            raise MysqlError("the emulator writes with autocommit = 1 or inside BEGIN … COMMIT only",
                             code=ErrorCode.NOT_SUPPORTED_YET)
        self.emulator.db = self.database
        try:
            await asyncio.to_thread(self.emulator.execute, text)
        except UpstreamError as e:
            raise mysql_error(e) from None
        return [], []

    async def _forward_set(self, expression: exp.Set, text: str) -> None:
        names = {item.this.left.name.lower() for item in expression.expressions
                 if isinstance(item, exp.SetItem) and isinstance(item.this, exp.EQ)}
        if names & _FORWARDED:
            await self._emulate(text)

    async def _snapshot_guard(self, q: Query) -> Any:
        """Refuse a read inside an explicit transaction (the emulator has no read-your-writes)."""
        if self.emulator.txn is not None and isinstance(q.expression, exp.Query) and q.expression.find(exp.Table):
            raise MysqlError("the emulator does not read tables inside an explicit transaction: COMMIT first",
                             code=ErrorCode.NOT_SUPPORTED_YET)
        return await q.next()

    async def use(self, database: str) -> None:
        """``USE db``: the database must exist (at the read ts)."""
        try:
            self._schema().db(database)
        except UpstreamError as e:
            raise mysql_error(e) from None
        self.database = database

    # ---- reads --------------------------------------------------------------------------------

    def read_ts(self) -> int | None:
        """The ts ``@@tidb_snapshot`` pins reads to, or None."""
        return parse_snapshot(str(self.variables.get("tidb_snapshot") or ""), self.timezone())

    def _schema(self) -> InfoSchema:
        ts = self.read_ts()
        return self.cluster.catalog.current() if ts is None else self.cluster.catalog.at(ts)

    async def schema(self) -> InfoSchema_:
        """The tables and columns at the read ts, for SHOW and information_schema."""
        schema = self._schema()
        columns = [Column(c.name, mt.type_to_str(c.type.tp, c.type.charset), e.info.name,
                          is_nullable=not c.type.flag & mt.NOT_NULL_FLAG, schema=e.db.name)
                   for e in schema.tables.values() for c in e.info.columns]
        return InfoSchema_.from_columns(columns)

    async def query(self, expression: exp.Expression, sql_text: str, attrs: dict[str, str]) -> Any:
        """A SELECT over the MVCC store at the read ts."""
        if not isinstance(expression, exp.Query):
            raise MysqlError(f"unsupported statement for the emulator: {sql_text[:120]}",
                             code=ErrorCode.NOT_SUPPORTED_YET)
        ts = self.read_ts()
        return await asyncio.to_thread(self._select, expression, ts)

    def _tables(self, expression: exp.Expression, schema: InfoSchema) -> dict[tuple[str, str], TableEntry]:
        ctes = {c.alias_or_name.lower() for c in expression.find_all(exp.CTE)}
        found: dict[tuple[str, str], TableEntry] = {}
        for t in expression.find_all(exp.Table):
            if not t.db and t.name.lower() in ctes:
                continue
            db = t.db or self.database
            if not db:
                raise MysqlError("No database selected", code=ErrorCode.NO_DB_ERROR)
            entry = schema.find(db, t.name)
            if entry is None:
                raise MysqlError(f"Table '{db}.{t.name}' doesn't exist", code=cast(ErrorCode, 1146))
            found[(db.lower(), t.name.lower())] = entry
        return found

    def _select(self, expression: exp.Expression, ts: int | None) -> tuple[list[tuple[Any, ...]], list[ResultColumn]]:
        read_ts = self.cluster.ts() if ts is None else ts
        schema = self.cluster.catalog.at(read_ts)
        entries = self._tables(expression, schema)
        wants_rowid = any(c.name.lower() == ROWID for c in expression.find_all(exp.Column))
        if wants_rowid:
            _expand_stars(expression, entries)
        tables: dict[str, dict[str, list[dict[str, Any]]]] = {}
        types: dict[str, dict[str, dict[str, str]]] = {}
        columns: dict[str, Any] = {}
        for (db, name), e in entries.items():
            with_rowid = wants_rowid and e.info.has_extra_handle
            tables.setdefault(db, {})[name] = self.cluster.table_rows(e, read_ts, with_handle=with_rowid)
            col_types = {c.name: _EXEC_TYPES.get(mt.family_of(c.type.tp), "TEXT")  # type: ignore[arg-type]
                         for c in e.info.columns}
            if with_rowid:
                col_types[ROWID] = "BIGINT"
            types.setdefault(db, {})[name] = col_types
            columns.update({c.name.lower(): c for c in e.info.columns})
        try:
            result = execute(expression, schema=types, tables=tables, dialect="mysql")
        except (ExecuteError, OptimizeError) as e:
            text = str(e)
            if ROWID in text or "Unknown column" in text or "could not be resolved" in text:
                raise MysqlError(f"Unknown column in 'field list': {text}", code=cast(ErrorCode, 1054)) from None
            raise MysqlError(f"the emulator could not evaluate this SELECT: {text}",
                             code=ErrorCode.NOT_SUPPORTED_YET) from None
        return _result(result.columns, result.rows, columns, self.timezone())


def _expand_stars(expression: exp.Expression, entries: dict[tuple[str, str], TableEntry]) -> None:
    """Replace ``*`` by the visible columns so a selected ``_tidb_rowid`` is not listed twice."""
    if not isinstance(expression, exp.Select) or len(entries) != 1:
        return
    entry = next(iter(entries.values()))
    out: list[exp.Expression] = []
    for e in expression.expressions:
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            out.extend(exp.column(c.name) for c in entry.info.columns)
        else:
            out.append(e)
    expression.set("expressions", out)


def _result(names: Iterable[str], rows: list[tuple[Any, ...]], columns: dict[str, Any],
            tz: dt.tzinfo) -> tuple[list[tuple[Any, ...]], list[ResultColumn]]:
    """Result columns typed like the table columns they come from (else by their values)."""
    names = list(names)
    out_cols: list[ResultColumn] = []
    flens: list[int] = []
    for i, name in enumerate(names):
        col = columns.get(name.lower())
        if col is not None:
            ctype, charset = _column_type(col)
            flens.append(col.type.flen)
        else:
            sample = next((r[i] for r in rows if r[i] is not None), None)
            ctype = next((t for py, t in _PY_TYPES if isinstance(sample, py)), ColumnType.VAR_STRING)
            charset = CharacterSet.binary if isinstance(sample, bytes) else CharacterSet.utf8mb4
            flens.append(0)
        out_cols.append(ResultColumn(name, ctype, character_set=charset))
    wire = [tuple(_wire_value(v, c.type, f, tz) for v, c, f in zip(row, out_cols, flens)) for row in rows]
    return wire, out_cols


class MySQLPort:
    """A MySQL protocol listener for the emulator on its own event-loop thread."""

    def __init__(self, cluster: Cluster, addr: str, server: int = 0) -> None:
        host, _, port = addr.rpartition(":")
        self.host = host or "127.0.0.1"
        self._loop = asyncio.new_event_loop()
        self._server = MysqlServer(session_factory=lambda: EmulatorMySQLSession(cluster, server))
        started: Future[int] = Future()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._server.start_server(host=self.host, port=int(port)))
            except BaseException as e:  # noqa: BLE001 - reported to the starting thread
                started.set_exception(e)
                return
            started.set_result(self._server.sockets()[0].getsockname()[1])
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="emulator-mysql", daemon=True)
        self._thread.start()
        self.port = started.result(timeout=30)

    @property
    def dsn(self) -> str:
        """``mysql://root@HOST:PORT`` for this port."""
        return f"mysql://root@{self.host}:{self.port}"

    def stop(self) -> None:
        """Stop listening, drop the open connections and end the loop thread."""
        async def close() -> None:
            asyncio.get_running_loop().set_exception_handler(lambda _loop, _context: None)
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop.stop()
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(close(), self._loop)
            self._thread.join(10)
