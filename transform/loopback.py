"""Which transactions a loopback-controlled drainer leaves out (TiDB Binlog's ``loopback-control``):
those that write a row of the mark table ``retl._drainer_repl_mark`` whose ``channel_id`` is the
drainer's ``channel-id``. The drainer replicating the other way writes that row in every transaction
it applies (``sink.mysql.loopback``), so a change applied by one direction is not sent back by the
other."""
from __future__ import annotations

from collections.abc import Sequence

from transform.codec.batch import decode_batch
from transform.codec.model import TableInfo

MARK_DB = "retl"
MARK_TABLE = "_drainer_repl_mark"
CHANNEL_COLUMN = "channel_id"


def is_mark_table(db: str, table: str) -> bool:
    """True for ``retl._drainer_repl_mark`` (names compared case-insensitively, as TiDB Binlog does)."""
    return db.lower() == MARK_DB and table.lower() == MARK_TABLE.lower()


def carries_mark(table: TableInfo, kinds: Sequence[str], payloads: Sequence[bytes], channel_id: int) -> bool:
    """True when one of these row changes of the mark table has ``channel_id`` (an update's new
    value, a delete's old one)."""
    if not payloads or not any(c.name.lower() == CHANNEL_COLUMN for c in table.columns):
        return False
    decoded = decode_batch(table, kinds, payloads)
    name = next(c.name for c in table.columns if c.name.lower() == CHANNEL_COLUMN)
    return channel_id in decoded.column(decoded.schema.get_field_index(name)).to_pylist()
