"""Whether a read of the upstream at ``ts`` shows the tables its DDL history has at ``ts``.

``verify`` reads TiDB with ``@@tidb_snapshot = ts``: TiDB takes the rows at ``ts`` and the schema from
its schema cache (``domain.GetSnapshotInfoSchema``). A read whose schema is not the one in force at
``ts`` (a table renamed, truncated or altered later shown as such) compares rows under the wrong
names, ids or columns, so the read must be refused, never compared. This module checks it: every
table the read shows (name, TiDB's table id where the server gives it, its columns) must be the one
the history has at ``ts`` (:meth:`SchemaHistory.tables_at`), and every table the history has there
must be in the read. While a DDL job ran at ``ts`` (started at or before it, and finished after it
or less than :data:`SETTLING` before it), a table may also be as it was before the job began or after
it finished. The read then
shows a state between two versions, or the job's schema change on the other side of ``FinishedTS``
than the history places it: TiDB publishes the change a few milliseconds before ``FinishedTS``, and
its DDL binlog commits a few milliseconds after.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from transform.codec.model import Job
from transform.history import SchemaHistory

SETTLING = 100 << 18   # 100 ms of TSO: how long after its FinishedTS a job's schema change may still be settling


@dataclass(frozen=True)
class ReadTable:
    """One table as a read showed it: TiDB's table id (None when the server does not give it) and its
    column names, in order."""

    table_id: int | None
    columns: tuple[str, ...]


def tables_at(history: SchemaHistory, ts: int,
              allows: Callable[[str, str], bool]) -> dict[tuple[str, str], tuple[str, ReadTable]]:
    """The tables the history has at ``ts`` that ``allows`` lets through: (db, name) in lower case →
    (``db.name``, what a read shows of it)."""
    out: dict[tuple[str, str], tuple[str, ReadTable]] = {}
    for version, _ in history.tables_at(ts):
        table = version.table
        if table is not None and allows(version.db, table.name):
            out[(version.db.lower(), table.name.lower())] = (
                f"{version.db}.{table.name}", ReadTable(table.id, tuple(c.name.lower() for c in table.columns)))
    return out


def _same(got: ReadTable | None, want: ReadTable | None) -> bool:
    if got is None or want is None:
        return got is want
    return (got.table_id is None or got.table_id == want.table_id) and \
        tuple(c.lower() for c in got.columns) == want.columns


def differences(history: SchemaHistory, ts: int, read: Mapping[tuple[str, str], ReadTable],
                allows: Callable[[str, str], bool]) -> list[str]:
    """How the tables of a read at ``ts`` (``(db, table)`` → what it showed) differ from the
    history's tables at ``ts`` that ``allows`` lets through; empty when they agree. A table may also
    be as it was before, or after, a DDL job that ran at ``ts`` (:func:`running_at`)."""
    expected = tables_at(history, ts, allows)
    states = [expected]
    for job in running_at(history, ts):
        states += [tables_at(history, (job.start_ts or job.real_start_ts) - 1, allows),
                   tables_at(history, history.placed_ts(job), allows)]
    shown = {(db.lower(), name.lower()): (f"{db}.{name}", t) for (db, name), t in read.items() if allows(db, name)}
    found: list[str] = []
    for key in sorted(shown.keys() | expected.keys()):
        got = shown[key][1] if key in shown else None
        if any(_same(got, state[key][1] if key in state else None) for state in states):
            continue
        if key not in expected:
            found.append(f"{shown[key][0]} is in the read; the DDL history has no such table at ts {ts}")
            continue
        name, want = expected[key]
        if got is None:
            found.append(f"{name} is not in the read; the DDL history has it at ts {ts} (table id {want.table_id})")
        elif got.table_id is not None and got.table_id != want.table_id:
            found.append(f"{name} is table id {got.table_id} in the read, {want.table_id} in the DDL history at "
                         f"ts {ts}")
        else:
            found.append(f"{name} has columns ({', '.join(got.columns)}) in the read, ({', '.join(want.columns)}) "
                         f"in the DDL history at ts {ts}")
    return found


def running_at(history: SchemaHistory, ts: int) -> list[Job]:
    """The DDL jobs that ran at ``ts``: started at or before it, and finished after it or less than
    :data:`SETTLING` before it."""
    return [job for job in history.jobs.values()
            if 0 < (job.start_ts or job.real_start_ts) <= ts < history.placed_ts(job) + SETTLING]
