"""A client session on one emulated TiDB server: autocommit unless BEGIN … COMMIT, USE, a few SET
variables, DDL with implicit commit, and TiDB's automatic retry of autocommit statements that hit a
write conflict or a schema change."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from upstream import sql
from upstream.dml import run_dml
from upstream.errors import SchemaChanged, SQLError, UnsupportedSQL, WriteConflict
from upstream.txn import Transaction

if TYPE_CHECKING:
    from upstream.server import TiDBServer

AUTOCOMMIT_RETRY_LIMIT = 10   # TiDB's tidb_retry_limit


@dataclass
class Result:
    """The outcome of one statement."""

    statement: str
    kind: str                  # dml / ddl / begin / commit / rollback / use / set / noop
    affected_rows: int = 0
    start_ts: int = 0
    commit_ts: int = 0         # set when this statement committed a transaction
    ddl_job_id: int = 0

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return asdict(self)


class Session:
    """One connection's state."""

    def __init__(self, server: TiDBServer, db: str | None = "test", clustered_default: bool | None = None) -> None:
        self.server = server
        self.db = db
        self.txn: Transaction | None = None
        self.clustered_default = server.cluster.clustered_default if clustered_default is None else clustered_default

    def execute(self, script: str) -> list[Result]:
        """Run every statement of ``script`` in order; stop at (and raise) the first error."""
        return [self.run(sql.parse(s)) for s in sql.split(script)]

    def run(self, stmt: sql.Statement) -> Result:
        """Run one parsed statement (or one built by a workload)."""
        text = stmt.text
        if isinstance(stmt, sql.Begin):
            commit_ts = self._commit() if self.txn is not None else 0
            self.txn = self.server.begin()
            return Result(text, "begin", start_ts=self.txn.start_ts, commit_ts=commit_ts or 0)
        if isinstance(stmt, sql.Commit):
            if self.txn is None:
                return Result(text, "commit")
            start = self.txn.start_ts
            return Result(text, "commit", start_ts=start, commit_ts=self._commit() or 0)
        if isinstance(stmt, sql.Rollback):
            start = self.txn.start_ts if self.txn else 0
            self.txn = None     # nothing was prewritten: TiDB writes no binlog for it
            return Result(text, "rollback", start_ts=start)
        if isinstance(stmt, sql.Use):
            self.server.cluster.catalog.current().db(stmt.db)
            self.db = stmt.db
            return Result(text, "use")
        if isinstance(stmt, sql.SetVar):
            return self._set(stmt)
        if isinstance(stmt, sql.DDL):
            commit_ts = self._commit() if self.txn is not None else 0
            out = self.server.cluster.run_ddl(self.server, stmt, self.db, self.clustered_default)
            if out is None:
                return Result(text, "noop", commit_ts=commit_ts or 0)
            job_id, start_ts, cts = out
            return Result(text, "ddl", start_ts=start_ts, commit_ts=cts, ddl_job_id=job_id)
        if isinstance(stmt, (sql.Insert, sql.Update, sql.Delete)):
            if self.txn is not None:
                n = run_dml(self.txn, stmt, self.db, self.server.cluster.catalog)
                return Result(text, "dml", affected_rows=n, start_ts=self.txn.start_ts)
            return self._autocommit(stmt)
        raise UnsupportedSQL(type(stmt).__name__, text)

    def _autocommit(self, stmt: sql.Insert | sql.Update | sql.Delete) -> Result:
        for attempt in range(AUTOCOMMIT_RETRY_LIMIT + 1):
            txn = self.server.begin()
            n = run_dml(txn, stmt, self.db, self.server.cluster.catalog)
            try:
                cts = self.server.committer.commit_dml(txn)
            except (WriteConflict, SchemaChanged):
                if attempt == AUTOCOMMIT_RETRY_LIMIT:
                    raise
                continue
            return Result(stmt.text, "dml", affected_rows=n, start_ts=txn.start_ts, commit_ts=cts or 0)
        raise AssertionError("unreachable")

    def _commit(self) -> int | None:
        txn, self.txn = self.txn, None
        if txn is None:
            return None
        return self.server.committer.commit_dml(txn)

    def commit_async(self) -> Future[int | None]:
        """COMMIT the open transaction without waiting for it (as a pipelining client would): the
        session is free for its next transaction at once, and the Future gives this one's commit ts
        (None when it wrote nothing or none was open) or raises its commit error. Transactions in
        flight together that write the same key conflict: the later one fails with WriteConflict.
        The Future's done-callbacks run where the pump's answer arrives (``Committer.commit_dml_async``):
        they must not block, commit, or wait for another commit."""
        txn, self.txn = self.txn, None
        if txn is None:
            done: Future[int | None] = Future()
            done.set_result(None)
            return done
        return self.server.committer.commit_dml_async(txn)

    def close(self) -> int | None:
        """End the session: an open transaction is rolled back (nothing was prewritten)."""
        self.txn = None
        return None

    def _set(self, stmt: sql.SetVar) -> Result:
        if stmt.name in ("tidb_enable_clustered_index",):
            v = str(stmt.value).upper()
            if v in ("ON", "1", "TRUE"):
                self.clustered_default = True
            elif v in ("OFF", "0", "FALSE", "INT_ONLY"):
                self.clustered_default = False
            else:
                raise SQLError(f"Variable 'tidb_enable_clustered_index' can't be set to the value of '{stmt.value}'")
            return Result(stmt.text, "set")
        if stmt.name in ("autocommit",):
            if str(stmt.value).upper() not in ("1", "ON", "TRUE"):
                raise UnsupportedSQL("SET autocommit = 0 (use BEGIN … COMMIT)", stmt.text)
            return Result(stmt.text, "set")
        if stmt.name in ("names", "time_zone", "sql_mode", "character_set_client"):
            return Result(stmt.text, "set")
        raise UnsupportedSQL(f"SET {stmt.name}", stmt.text)
