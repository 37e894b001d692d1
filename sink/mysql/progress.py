"""How far each table's unkeyed DMLs got downstream, so that a safe-mode replay applies each once.

Safe mode makes a replay idempotent by key (REPLACE, DELETE by key); a DML without a non-NULL unique
key (:attr:`DML.unkeyed`) is matched by all its columns instead, and applying it twice inserts or
deletes a second row. TiDB Binlog has that hole; binlake closes it: every downstream transaction that
applies unkeyed DMLs also writes, for each of their tables, the ``(commitTS, seq)`` of the last one
into ``<schema>.<checkpoint table>_unkeyed`` — in the same transaction, so the record and the rows
commit together. A table's unkeyed DMLs apply in commit order on one worker (their causality key is
the table), so everything up to the recorded position is applied and nothing after it; a replay skips
up to it. TiDB Binlog's drainer ignores the extra table.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pymysql

from sink.mysql.statements import DML, literal, quote
from sink.mysql.target import MySQLTargetError

Position = tuple[int, int]   # (commit_ts, seq)


@dataclass(frozen=True)
class UnkeyedProgress:
    """One cluster's rows of the progress table ``schema``.``table``."""

    cluster_id: int
    schema: str = "tidb_binlog"
    table: str = "checkpoint_unkeyed"

    @property
    def name(self) -> str:
        """`` `schema`.`table` ``."""
        return f"{quote(self.schema)}.{quote(self.table)}"

    def ensure(self, conn: Any) -> None:
        """Create the table when missing (``conn``'s transaction is committed)."""
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(self.schema)}")
                cur.execute(f"CREATE TABLE IF NOT EXISTS {self.name} (clusterID bigint unsigned NOT NULL, "
                            "tableName varchar(191) CHARACTER SET utf8mb4 NOT NULL, commitTS bigint unsigned "
                            "NOT NULL, seq int unsigned NOT NULL, PRIMARY KEY (clusterID, tableName))")
            conn.commit()
        except pymysql.Error as e:
            raise MySQLTargetError(f"cannot create the progress table {self.name}: {e}") from None

    def load(self, conn: Any) -> dict[str, Position]:
        """Each table's last applied unkeyed DML (the table as `` `db`.`name` ``)."""
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT tableName, commitTS, seq FROM {self.name} WHERE clusterID = %s",
                            (self.cluster_id,))
                rows = cur.fetchall()
            conn.commit()
        except pymysql.Error as e:
            raise MySQLTargetError(f"cannot read the progress table {self.name}: {e}") from e
        return {str(t): (int(ts), int(seq)) for t, ts, seq in rows}

    def record(self, dmls: Sequence[DML]) -> list[tuple[str, DML]]:
        """The statements that record the last unkeyed DML of each table in ``dmls`` (none when
        there is no unkeyed DML); run them in the transaction that applies ``dmls``."""
        last: dict[str, DML] = {}
        for d in dmls:
            if d.seq:
                last[d.table.qualified] = d
        return [(f"REPLACE INTO {self.name} (clusterID, tableName, commitTS, seq) VALUES "
                 f"({self.cluster_id}, {literal(table)}, {d.commit_ts}, {d.seq})", d) for table, d in last.items()]


def not_applied(dmls: Iterable[DML], applied: dict[str, Position]) -> list[DML]:
    """``dmls`` without the unkeyed ones at or before their table's recorded position."""
    return [d for d in dmls
            if not d.seq or (d.commit_ts, d.seq) > applied.get(d.table.qualified, (0, 0))]
