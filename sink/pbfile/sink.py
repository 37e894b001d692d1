"""TiDB Binlog's protobuf files (db-type ``file``/``pb``), exactly once.

Every upstream transaction after the checkpoint becomes one record (:mod:`sink.binlogfile` framing,
payload :mod:`sink.pb_binlog`) appended in commit order to ``binlog-<index>-<datetime>`` files in the
directory, a new file past 512 MiB, as TiDB Binlog's drainer writes them; reparo (TiDB Binlog's or
``binlake reparo``) replays them. Files whose last change is older than ``retention-time`` days are
removed after a run (never the newest), as TiDB Binlog's hourly GC does.

The files are their own checkpoint: a run starts after the commit ts of the last whole record (a torn
record a crash left at the end is cut off first), so a run killed at any point and run again writes
each transaction once. ``binlake.checkpoint`` in the directory (a name TiDB Binlog's tools skip) records
the cluster and the ts a run completed, for ranges without transactions.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from ingest.atomic import replace_file
from schemas import pb_binlog_pb2 as pbb
from sink.base import Sink, TableReport
from sink.binlogfile import BinlogFiles
from sink.errors import SinkError
from sink.pb_binlog import encode_ddl, encode_dml
from sink.pbfile.config import SEGMENT_SIZE
from sink.per_txn import DDLFilters, floor_of, transactions
from transform import changes as ch
from transform import failpoints
from transform.event_filter import EventFilter
from transform.filters import TableFilter

log = logging.getLogger(__name__)

CHECKPOINT = "binlake.checkpoint"
DAY = 24 * 3600


class FileSinkError(SinkError):
    """The directory holds another cluster's files or a checkpoint binlake cannot read."""


class FileSink(Sink):
    """One cluster's transactions into ``directory`` (see the module doc)."""

    def __init__(self, directory: Path, cluster_id: int, retention_days: int = 0,
                 table_filter: TableFilter | None = None, event_filter: EventFilter | None = None,
                 sync_ddl: bool = True, dry_run: bool = False) -> None:
        self.dir = directory
        self.cluster_id = cluster_id
        self.retention_days = retention_days
        self.filters = DDLFilters(table_filter or TableFilter(), event_filter or EventFilter(), sync_ddl)
        self.files = BinlogFiles(directory, SEGMENT_SIZE)
        self.loaded = self._read_checkpoint()
        if not dry_run:
            tail = self.files.recover_tail()
            if tail is not None:
                ts = pbb.Binlog.FromString(tail).commit_ts
                self.loaded = max(self.loaded or 0, ts)
        else:
            last = None
            for payload in self.files.payloads():
                last = payload
            if last is not None:
                self.loaded = max(self.loaded or 0, pbb.Binlog.FromString(last).commit_ts)

    def _read_checkpoint(self) -> int | None:
        path = self.dir / CHECKPOINT
        if not path.exists():
            return None
        try:
            doc = json.loads(path.read_text())
            ts, cluster = int(doc["commit_ts"]), int(doc["cluster_id"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise FileSinkError(f"{path} is not binlake's checkpoint ({e})") from None
        if cluster != self.cluster_id:
            raise FileSinkError(f"{self.dir} holds the files of cluster {cluster}, not {self.cluster_id}")
        return ts

    def checkpoint(self) -> int | None:
        return self.loaded

    def write(self, run: ch.RunBatch) -> list[TableReport]:
        """Append every transaction and DDL of ``run`` after the checkpoint, in commit order, then sync."""
        floor = floor_of(run, self.loaded, "the files")
        if floor is None:
            return []
        reports: dict[str, TableReport] = {}
        appended = 0
        for txn in transactions(run, floor, self.filters, reports):
            began = time.perf_counter()
            binlog = (encode_dml(txn.commit_ts, txn.pieces) if txn.pieces is not None
                      else encode_ddl(txn.commit_ts, txn.ddl[0], txn.ddl[2]) if txn.ddl else None)
            if binlog is not None:
                appended += 1
                failpoints.inject("file-append", appended)
                self.files.append(binlog)
            self.observer.executed(time.perf_counter() - began)
        self.files.sync()
        return [reports[k] for k in sorted(reports)]

    def save_checkpoint(self, run: ch.RunBatch) -> None:
        """Record ``run.to_ts`` in ``binlake.checkpoint`` (the files are synced), then apply the retention."""
        replace_file(self.dir / CHECKPOINT, (json.dumps({"commit_ts": run.to_ts, "cluster_id": self.cluster_id,
                                                         "format": 1}) + "\n").encode())
        self.loaded = run.to_ts
        if self.retention_days > 0:
            for path in self.files.remove_older_than(self.retention_days * DAY):
                log.info("removed %s: older than retention-time (%d days)", path, self.retention_days)

    def close(self) -> None:
        self.files.close()
