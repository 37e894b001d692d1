"""The MySQL sink's relay log (TiDB Binlog's ``[syncer.relay]``).

Every transaction and DDL is written here before the loader gets it, as one record of TiDB's
binlogfile framing (:mod:`sink.binlogfile`) whose payload is a secondary binlog
(``schemas/secondary_binlog.proto``: one ``Binlog`` per transaction, new values in ``row``, old values
of an update in ``change_row``). Files are
``binlog-<16-digit index>-<YYYYMMDDhhmmss>`` in ``log-dir``, a new one once the current one reaches
``max-file-size``. Unlike TiDB, binlake fsyncs the file before anything written to it is applied.
A file is removed once every transaction in it is applied and the checkpoint passed it (the newest
file stays).

Records are encoded by :mod:`sink.secondary`; DDL records carry the statement binlake runs downstream.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from schemas import secondary_binlog_pb2 as sb
from sink.binlogfile import BinlogFiles
from sink.mysql.config import DEFAULT_MAX_FILE_SIZE
from sink.mysql.statements import DML, TargetTable
from sink.secondary import LETTERS, column_value


def decode_dml(binlog: sb.Binlog) -> Iterator[DML]:
    """The DMLs of a secondary DML binlog, in order (values as the relay holds them; JSON as text,
    which a MySQL JSON column takes, where a binary string is refused)."""
    for table in binlog.dml_data.tables:
        names = tuple(c.name for c in table.column_info)
        json = [c.mysql_type == "json" for c in table.column_info]
        pos = {n: i for i, n in enumerate(names)}
        keys = tuple((k.name, tuple(pos[c] for c in k.column_names)) for k in table.unique_keys
                     if all(c in pos for c in k.column_names))
        target = TargetTable(table.schema_name, table.table_name, names, keys)
        for m in table.mutations:
            values = [column_value(c, j) for c, j in zip(m.row.columns, json)]
            old = [column_value(c, j) for c, j in zip(m.change_row.columns, json)] if m.HasField("change_row") else None
            yield DML.of(target, LETTERS[m.type], values, old, binlog.commit_ts)


class RelayLog(BinlogFiles):
    """The relay files under ``directory``: appended and synced by a run, read back by a recovery."""

    def __init__(self, directory: str | Path, max_file_size: int = DEFAULT_MAX_FILE_SIZE) -> None:
        super().__init__(directory, max_file_size)

    def read(self) -> Iterator[sb.Binlog]:
        """Every record of every file, oldest first."""
        for payload in self.payloads():
            yield sb.Binlog.FromString(payload)
