"""``binlake reparo``: TiDB Binlog's reparo. Replays the protobuf files of db-type ``file`` (TiDB
Binlog's or binlake's) from ``data-dir`` into MySQL/TiDB through the MySQL sink's loader, or prints them
as reparo prints them; it takes reparo.toml unchanged.

Records are read in file order and kept when ``start-tso <= commit_ts <= stop-tso`` (``stop-tso`` 0:
no end; ``start-datetime``/``stop-datetime`` are local times converted to a TSO, over the tso keys, as
reparo does). The table filters are reparo's (``replicate-do-db``, ``replicate-do-table``,
``replicate-ignore-db``, ``replicate-ignore-table``), the DDL's table read from its statement.
Into MySQL, a DDL runs after everything before it is applied, on the database of its ``use``; row changes
are applied by the loader (``worker-count`` workers, ``txn-batch`` DMLs per downstream transaction,
``safe-mode`` as the drainer's), each table's keys read from the downstream as TiDB Binlog's loader reads
them. Like reparo, binlake keeps no checkpoint: run a range again with ``safe-mode = true``.
"""
from __future__ import annotations

import datetime as dt
import logging
import math
import re
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

from pydantic import Field

from ingest.config import Bool, ConfigError, Int, Str, TomlModel, load_config, noted, print_warnings
from schemas import pb_binlog_pb2 as pbb
from sink.binlogfile import BinlogFiles, read_records
from sink.pb_binlog import Event, decode_events
from transform.codec import mysqltypes as mt
from transform.filters import TableFilter

log = logging.getLogger(__name__)

PHYSICAL_SHIFT = 18
_DATETIME = "%Y-%m-%d %H:%M:%S"


class TableName(TomlModel):
    """``[[replicate-do-table]]`` / ``[[replicate-ignore-table]]``."""

    db_name: Str = Field(default="", alias="db-name")
    tbl_name: Str = Field(default="", alias="tbl-name")


class DestDB(TomlModel):
    """``[dest-db]``: the MySQL/TiDB reparo writes into."""

    host: Str = "127.0.0.1"
    port: Int = Field(default=3306, ge=1, le=65535)
    user: Str = "root"
    password: Str = Field(default="", repr=False)


class ReparoConfig(TomlModel):
    """reparo.toml, TiDB Binlog's keys and defaults."""

    data_dir: Str = Field(default="", alias="data-dir")
    start_datetime: Str = Field(default="", alias="start-datetime")
    stop_datetime: Str = Field(default="", alias="stop-datetime")
    start_tso: Int = Field(default=0, alias="start-tso")
    stop_tso: Int = Field(default=0, alias="stop-tso")
    txn_batch: Int = Field(default=20, alias="txn-batch", ge=1)
    worker_count: Int = Field(default=16, alias="worker-count", ge=1)
    dest_type: Str = Field(default="print", alias="dest-type")
    dest_db: DestDB | None = Field(default=None, alias="dest-db")
    replicate_do_table: list[TableName] = Field(default_factory=list, alias="replicate-do-table")
    replicate_do_db: list[str] = Field(default_factory=list, alias="replicate-do-db")
    replicate_ignore_table: list[TableName] = Field(default_factory=list, alias="replicate-ignore-table")
    replicate_ignore_db: list[str] = Field(default_factory=list, alias="replicate-ignore-db")
    log_file: Str = noted("log-file", "binlake logs to stderr", default="", matches="")
    log_level: Str = Field(default="info", alias="log-level")
    safe_mode: Bool = Field(default=False, alias="safe-mode")

    def validate_config(self) -> None:
        if not self.data_dir:
            raise ValueError("data-dir is empty")
        if self.dest_type not in ("mysql", "print"):
            raise ValueError(f"dest-type {self.dest_type!r} is not supported (\"mysql\" or \"print\")")
        if self.dest_type == "mysql" and self.dest_db is None:
            raise ValueError("dest-type = \"mysql\" needs [dest-db]")

    def tso_range(self) -> tuple[int, int]:
        """(start, stop): the datetimes, when set, over the tso keys (stop 0: no end)."""
        return (_tso(self.start_datetime, "start-datetime") if self.start_datetime else self.start_tso,
                _tso(self.stop_datetime, "stop-datetime") if self.stop_datetime else self.stop_tso)

    def table_filter(self) -> TableFilter:
        """reparo's table filter (no schema is ignored unless ``replicate-ignore-db`` names it)."""
        return TableFilter(do_dbs=tuple(self.replicate_do_db),
                           do_tables=tuple((t.db_name, t.tbl_name) for t in self.replicate_do_table),
                           ignore_schemas=tuple(self.replicate_ignore_db),
                           ignore_tables=tuple((t.db_name, t.tbl_name) for t in self.replicate_ignore_table))


def _tso(text: str, key: str) -> int:
    """A local datetime as the TSO of its first millisecond (reparo's ``dateTimeToTSO``)."""
    try:
        seconds = time.mktime(time.strptime(text, _DATETIME))
    except ValueError:
        raise ConfigError(f"{key} = {text!r}: expected a local time like \"2018-02-28 12:12:12\"") from None
    return int(seconds) * 1000 << PHYSICAL_SHIFT


# ---------------------------------------------------------------------------------------------
# reading

def read_binlogs(data_dir: Path, start: int, stop: int) -> Iterator[pbb.Binlog]:
    """The records of the files in ``data_dir``, in order, with ``start <= commit_ts <= stop`` (stop 0:
    no end). A torn record at the end of the newest file ends it."""
    files = BinlogFiles(data_dir, 1).files()
    if not files:
        raise ConfigError(f"data-dir {data_dir}: no binlog files (binlog-<index>-<datetime>) in it")
    for i, path in enumerate(files):
        for payload in read_records(path, last=i == len(files) - 1):
            binlog = pbb.Binlog.FromString(payload)
            if binlog.commit_ts >= start and (stop == 0 or binlog.commit_ts <= stop):
                yield binlog


_USE = re.compile(r"\s*use\s+(`(?:[^`]|``)+`|\S+?)\s*;", re.IGNORECASE)
_NAME = r"(?:`(?:[^`]|``)+`|[^\s`.(,;]+)"
_QUALIFIED = rf"({_NAME})(?:\s*\.\s*({_NAME}))?"
_TABLE_OF = [re.compile(p, re.IGNORECASE | re.DOTALL) for p in (
    rf"\s*create\s+(?:database|schema)\s+(?:if\s+not\s+exists\s+)?({_NAME})",
    rf"\s*drop\s+(?:database|schema)\s+(?:if\s+exists\s+)?({_NAME})",
    rf"\s*rename\s+tables?\s+{_QUALIFIED}\s+to\s+{_QUALIFIED}",
    rf"\s*create\s+(?:or\s+replace\s+)?(?:algorithm\s*=\s*\w+\s+)?(?:definer\s*=\s*\S+\s+)?"
    rf"(?:sql\s+security\s+\w+\s+)?view\s+{_QUALIFIED}",
    rf"\s*(?:create|drop)\s+(?:unique\s+|fulltext\s+|spatial\s+)?index\s+.*?\s+on\s+{_QUALIFIED}",
    rf"\s*(?:create\s+(?:temporary\s+)?table|alter\s+table|drop\s+(?:temporary\s+)?table|truncate(?:\s+table)?)\s+"
    rf"(?:if\s+(?:not\s+)?exists\s+)?{_QUALIFIED}",
)]


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def ddl_names(query: str) -> tuple[str, str, str]:
    """(schema, table, statement) of a file's DDL, as reparo parses them: the schema of its ``use`` unless
    the statement names one; a database statement's table is empty."""
    schema = ""
    m = _USE.match(query)
    if m:
        schema, query = _unquote(m.group(1)), query[m.end():]
    stmt = query.strip().rstrip(";").strip()
    for i, pattern in enumerate(_TABLE_OF):
        found = pattern.match(stmt)
        if not found:
            continue
        if i < 2:
            return _unquote(found.group(1)), "", stmt
        groups = found.groups()[-2:] if i == 2 else found.groups()[:2]   # RENAME: the new name
        first, second = groups
        return (_unquote(first), _unquote(second), stmt) if second else (schema, _unquote(first), stmt)
    raise ConfigError(f"cannot tell the table of DDL {query!r} (reparo refuses it too)")


# ---------------------------------------------------------------------------------------------
# print

_TEXT = frozenset((mt.TYPE_DATE, mt.TYPE_DATETIME, mt.TYPE_NEWDATE, mt.TYPE_TIMESTAMP, mt.TYPE_DURATION,
                   mt.TYPE_NEWDECIMAL, mt.TYPE_VARCHAR, mt.TYPE_STRING, mt.TYPE_JSON))


def go_float(f: float) -> str:
    """``fmt.Sprintf("%v", f)`` of a float64 (shortest digits; an exponent below 1e-4 and from 1e6)."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "-0" if math.copysign(1, f) < 0 else "0"
    sign, digits, exponent = Decimal(repr(f)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    x = len(text) + exponent - 1
    minus = "-" if sign else ""
    if x < -4 or x >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{minus}{mantissa}e{'+' if x >= 0 else '-'}{abs(x):02d}"
    if exponent >= 0:
        return minus + text + "0" * exponent
    point = len(text) + exponent
    return minus + ("0." + "0" * -point + text if point <= 0 else text[:point] + "." + text[point:])


def go_value(value: Any, tp: int) -> str:
    """reparo's ``formatValueToString`` of a decoded value."""
    if value is None:
        return "<nil>"
    if tp in _TEXT and isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return "[" + " ".join(str(b) for b in value) + "]"
    if isinstance(value, float):
        return go_float(value)
    return str(value)


_EVENT_NAMES = {"I": "Insert", "U": "Update", "D": "Delete"}


def print_binlog(binlog: pbb.Binlog, events: list[Event], out: TextIO) -> None:
    """What reparo's print syncer prints for one binlog."""
    if binlog.tp == pbb.DDL:
        out.write(f"DDL query: {binlog.ddl_query.decode('utf-8', 'surrogateescape')}\n")
        return
    for e in events:
        out.write(f"schema: {e.schema}; table: {e.table}; type: {_EVENT_NAMES[e.op]}\n")
        for c in e.columns:
            if e.op == "U":
                out.write(f"{c.name}({c.mysql_type}): {go_value(c.value, c.tp)} => {go_value(c.changed, c.tp)}\n")
            else:
                out.write(f"{c.name}({c.mysql_type}): {go_value(c.value, c.tp)}\n")


# ---------------------------------------------------------------------------------------------
# the command

def run_reparo(config: ReparoConfig, out: TextIO | None = None) -> int:
    """Replay or print the files; returns the number of binlogs replayed or printed."""
    out = out or sys.stdout
    start, stop = config.tso_range()
    rules = config.table_filter()
    applier = None
    if config.dest_type == "mysql":
        from sink.mysql.replay import Replayer
        from sink.mysql.target import MySQLTarget

        assert config.dest_db is not None
        d = config.dest_db
        applier = Replayer(MySQLTarget(d.host, d.port, d.user, d.password), config.worker_count, config.txn_batch,
                           config.safe_mode)
    count = 0
    try:
        for binlog in read_binlogs(Path(config.data_dir), start, stop):
            if binlog.tp == pbb.DDL:
                query = binlog.ddl_query.decode("utf-8", "surrogateescape")
                schema, table, stmt = ddl_names(query)
                if not rules.allows(schema, table):
                    continue
                if applier is not None:
                    applier.ddl(binlog.commit_ts, schema, stmt)
                else:
                    print_binlog(binlog, [], out)
            else:
                events = [e for e in decode_events(binlog) if rules.allows(e.schema, e.table)]
                if not events:
                    continue
                if applier is not None:
                    applier.dml(binlog.commit_ts, events)
                else:
                    print_binlog(binlog, events, out)
            count += 1
            log.debug("sync binlog success: ts %d (%s)", binlog.commit_ts,
                      dt.datetime.fromtimestamp((binlog.commit_ts >> PHYSICAL_SHIFT) / 1000))
        if applier is not None:
            applier.finish()
    finally:
        if applier is not None:
            applier.close()
    return count


def run_reparo_command(config_path: str | None, overrides: dict[str, Any], out: TextIO | None = None) -> int:
    """``binlake reparo``: load reparo.toml (flags over it), print its warnings, run; exit status 0."""
    config = load_config(ReparoConfig, config_path, overrides)
    print_warnings(config, config_path)
    count = run_reparo(config, out)
    print(f"reparo: {count} binlogs {'replayed' if config.dest_type == 'mysql' else 'printed'}", file=sys.stderr)
    return 0
