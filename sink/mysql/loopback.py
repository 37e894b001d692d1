"""TiDB Binlog's loopback control for two-way replication (``[syncer] loopback-control`` with
``channel-id``): every downstream transaction the MySQL sink applies first bumps a row of the mark
table ``retl._drainer_repl_mark`` with this channel's id, so the transaction carries the mark into the
downstream's own binlog; the drainer replicating that cluster back, configured with the same
``channel-id``, leaves every transaction carrying the mark out (``transform.loopback``), and the
change does not come back. Both drainers of a two-way pair use one channel id, as in TiDB Binlog.

The table, its columns and the statements' effects are TiDB Binlog's: ``id`` (the applier's number,
one row per worker so that parallel workers do not wait on one row lock), ``channel_id``, ``val``
(bumped by each transaction), ``channel_info``. DDL carries no mark: run it on one side only, or set
``sync-ddl = false`` on one of the two drainers."""
from __future__ import annotations

from typing import Any

from transform.loopback import MARK_DB, MARK_TABLE

QUALIFIED = f"{MARK_DB}.{MARK_TABLE}"


def ensure_marks(conn: Any, channel_id: int, rows: int) -> None:
    """Create the mark table when missing and this channel's ``rows`` rows, one per worker, where they
    are missing (in a transaction of their own, which carries the mark too). TiDB Binlog rewrites them
    when its drainer starts and deletes them when it stops; a batch drainer starts every run, so the
    rows are kept and their ``val`` counts every transaction applied."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {MARK_DB}")
        cur.execute(f"CREATE TABLE IF NOT EXISTS {QUALIFIED} (id BIGINT NOT NULL, channel_id BIGINT NOT NULL "
                    f"DEFAULT 0, val BIGINT DEFAULT 0, channel_info VARCHAR(64), PRIMARY KEY (id, channel_id))")
        values = ", ".join(f"({i}, {int(channel_id)}, 1, '')" for i in range(rows))
        cur.execute(f"INSERT IGNORE INTO {QUALIFIED} (id, channel_id, val, channel_info) VALUES {values}")
    conn.commit()


def mark_statement(worker: int, channel_id: int) -> str:
    """The statement that opens each of worker ``worker``'s downstream transactions."""
    return (f"UPDATE {QUALIFIED} SET val = val + 1 WHERE id = {int(worker)} AND channel_id = {int(channel_id)} "
            f"LIMIT 1")
