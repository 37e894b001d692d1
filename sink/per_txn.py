"""What the sinks writing one record per upstream transaction (Kafka, protobuf files) share: the run's
transactions after a checkpoint in commit order, each a DML's pieces (:func:`sink.secondary.python_rows`
per table) or a DDL the filters keep, with the run report's counts."""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from sink.base import TableReport
from sink.errors import SinkError
from sink.secondary import Row, Table, drainer_zone, python_rows
from transform import changes as ch
from transform.event_filter import EventFilter, ddl_event
from transform.filters import TableFilter
from transform.ordered import PerBundle, ordered_transactions

log = logging.getLogger(__name__)


def floor_of(run: ch.RunBatch, checkpoint: int | None, holder: str) -> int | None:
    """Where ``run`` starts writing after ``checkpoint`` (None: the run adds nothing); a run that does
    not continue the checkpoint is refused (``holder`` names what holds it)."""
    if checkpoint is not None and run.from_ts > checkpoint:
        raise SinkError(f"the run ({run.from_ts}, {run.to_ts}] does not continue {holder}'s checkpoint {checkpoint}: "
                        f"transactions in ({checkpoint}, {run.from_ts}] would be missing")
    floor = checkpoint if checkpoint is not None else run.from_ts
    return None if run.to_ts <= floor else floor


@dataclass(frozen=True)
class DDLFilters:
    """What leaves a DDL out of the output: the table filter, a binlog-filter-rule, ``sync-ddl = false``."""

    table_filter: TableFilter
    event_filter: EventFilter
    sync_ddl: bool = True

    def kept(self, ddl: ch.DDLJob) -> tuple[str, str] | None:
        """The (schema, table) TiDB Binlog names the job by, or None when the job is left out."""
        job = ddl.job
        db, table = ddl.names or (job.schema_name, job.table_name)
        allowed = self.table_filter.allows(db, table) if table else self.table_filter.allows_schema(db)
        rule = self.event_filter.rule_for(db, table, ddl_event(job.query), job.query) if self.event_filter else None
        if self.sync_ddl and allowed and rule is None:
            return db, table
        why = "sync-ddl = false" if not self.sync_ddl else rule.label if rule else "the table filter"
        log.info("DDL at %d left out (%s): %s", ddl.commit_ts, why, job.query)
        return None


@dataclass
class Txn:
    """One upstream transaction: ``pieces`` of a DML, or the ``ddl`` kept as (schema, table, the
    query of TiDB's DDL binlog); neither when a filter left a DDL out."""

    commit_ts: int
    pieces: list[tuple[Table, list[Row]]] | None = None
    ddl: tuple[str, str, str] | None = None


def transactions(run: ch.RunBatch, floor: int, filters: DDLFilters,
                 reports: dict[str, TableReport]) -> Iterator[Txn]:
    """The transactions of ``run`` committed after ``floor``, in commit order, each table as TiDB
    Binlog's outputs carry it (:meth:`Table.as_tidb_binlog`, TIMESTAMP in this process's zone), counted
    in ``reports`` (row changes per table and op, DDL queries)."""
    zone = drainer_zone()
    targets = {(tid, s.schema_version): Table.as_tidb_binlog(s.db or tc.db, s.table, zone)
               for tid, tc in run.tables.items() for s in tc.segments}
    rows_of = PerBundle(lambda tid, v, rows: python_rows(targets[(tid, v)], rows))

    def report(name: str) -> TableReport:
        return reports.get(name) or reports.setdefault(name, TableReport(table=name))

    for txn in ordered_transactions(run):
        if txn.commit_ts <= floor:
            continue
        if txn.ddl is None:
            pieces = [(targets[(p.table_id, p.schema_version)], rows_of(p)) for p in txn.tables]
            for target, rows in pieces:
                counts = report(f"{target.db}.{target.name}").rows
                for op, n in Counter(r[0] for r in rows).items():
                    counts[op] = counts.get(op, 0) + n
            yield Txn(txn.commit_ts, pieces=pieces)
            continue
        names = filters.kept(txn.ddl)
        if names is None:
            yield Txn(txn.commit_ts)
            continue
        db, table = names
        report(f"{db}.{table}" if table else db).ddl.append(txn.ddl.binlog_query)
        yield Txn(txn.commit_ts, ddl=(db, table, txn.ddl.binlog_query))
