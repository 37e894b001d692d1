"""An in-process Drainer harness: the emulator's binlogs kept in memory, decoded and assembled as
``run_drain`` does (with the DDL jobs' commit positions the pair stage finds), and
written by the real sinks on the session's local Spark (no pumps, no pull).

The emulator (``upstream.cluster.Cluster``) writes its binlogs to an in-memory recorder instead of
pumps; a run pairs them by start_ts, keeps the commits in ``(from_ts, to_ts]``, sorts by commit_ts
and then goes through the real decode stage (``transform.rowchanges.decode_transactions``) and the
real assembly (``transform.drain.assemble``); its segments go into a Spark frame as the decode
stage leaves them, for the real :class:`sink.iceberg.writer.IcebergSink` on a SQLite catalog.
"""
from __future__ import annotations

import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pyarrow as pa

from schemas import binlog_pb2
from sink.iceberg.catalog import open_catalog
from sink.iceberg.verify import verify_mirrors
from sink.iceberg.writer import IcebergSink
from sink.mysql.target import MySQLTarget
from sink.mysql.upstream_reader import read_snapshot
from transform import changes as ch
from transform.codec.mysqltypes import STATE_DELETE_ONLY
from transform.drain import assemble
from transform.filters import TableFilter
from transform.history import CommitOrder, SchemaHistory
from transform.rowchanges import OUT_SCHEMA, DecodeContext, decode_transactions
from upstream.cluster import Cluster
from upstream.status_api import render_rows


class _Done:
    def result(self, timeout: float | None = None) -> None:
        return None


class _Recorder:
    """Stands in for the PumpsClient: keeps every prewrite payload and commit ts by start_ts."""

    def __init__(self) -> None:
        self.prewrites: dict[int, bytes] = {}
        self.commits: dict[int, int] = {}
        self.ddl_commits: dict[int, int] = {}    # DDL job id → commit ts (delete-only states left out)

    def _store(self, b: binlog_pb2.Binlog) -> None:
        if b.tp == binlog_pb2.Prewrite:
            self.prewrites[b.start_ts] = b.SerializeToString()
        elif b.tp == binlog_pb2.Commit:
            self.commits[b.start_ts] = b.commit_ts
            if b.ddl_job_id and b.ddl_schema_state != STATE_DELETE_ONLY:
                self.ddl_commits[b.ddl_job_id] = b.commit_ts

    def write_binlog(self, b: binlog_pb2.Binlog) -> None:
        self._store(b)

    def start_prewrite(self, b: binlog_pb2.Binlog) -> _Done:
        self._store(b)
        return _Done()

    def write_commit_async(self, b: binlog_pb2.Binlog) -> Future:
        self._store(b)
        f: Future = Future()
        f.set_result(None)
        return f

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self) -> None:
        pass


class Local:
    """An emulated cluster whose binlogs are drained in-process into an Iceberg warehouse."""

    def __init__(self, root: Path, spark: Any) -> None:
        self.root = root
        self.spark = spark
        self.cluster = Cluster(tso_addr=None, status_addr=None, mysql_addr="127.0.0.1:0")
        self.rec = _Recorder()
        for s in self.cluster.servers:
            s.binlog.registry = "memory://"
            s.binlog._factory = lambda: self.rec
        self.catalog = open_catalog(str(root / "warehouse"))
        self.checkpoint = 0

    def sql(self, script: str) -> list[Any]:
        return self.cluster.execute(script)

    def batch(self, from_ts: int, to_ts: int, table_filter: TableFilter | None = None) -> ch.RunBatch:
        """What the Spark stages of ``run_drain`` give for ``(from_ts, to_ts]``."""
        filt = table_filter or TableFilter()
        history = SchemaHistory(self.cluster.catalog.jobs())
        txns = sorted((c, s) for s, c in self.rec.commits.items() if from_ts < c <= to_ts)
        rb = pa.record_batch({"start_ts": pa.array([s for _, s in txns], pa.int64()),
                              "commit_ts": pa.array([c for c, _ in txns], pa.int64()),
                              "payload": pa.array([self.rec.prewrites[s] for _, s in txns], pa.binary())})
        order = CommitOrder(from_ts, {j: c for j, c in self.rec.ddl_commits.items() if from_ts < c <= to_ts})
        decoded = pa.Table.from_batches(list(decode_transactions(DecodeContext(history, filt, order=order), [rb])),
                                        schema=OUT_SCHEMA)
        batch = ch.RunBatch(self.cluster.cluster_id, from_ts, to_ts, uuid.uuid4().hex[:16])
        assemble(batch, decoded.drop_columns(["data"]), history, filt)
        rows = decoded.filter(pa.compute.equal(decoded.column("kind"), "rows"))
        if rows.num_rows:   # as run_drain leaves them: the segments in Spark
            batch.frame = self.spark.createDataFrame(
                rows.select(["table_id", "schema_version", "commit_ts", "rows", "data"]))
        return batch

    def drain(self, to_ts: int | None = None, from_ts: int | None = None, sink: IcebergSink | None = None,
              table_filter: TableFilter | None = None) -> ch.RunBatch:
        """One run from the checkpoint (or ``from_ts``) to now (or ``to_ts``); records the DDL history
        and saves the checkpoint when the run continues it."""
        start = self.checkpoint if from_ts is None else from_ts
        end = self.cluster.ts() if to_ts is None else to_ts
        run = self.batch(start, end, table_filter)
        s = sink or IcebergSink(self.catalog, spark=self.spark)
        s.check_cluster(run.cluster_id)          # as run_drain_command does (creates the _binlake namespace)
        s.write(run)
        if from_ts is None and table_filter is None:   # as run_drain_command moves its checkpoint
            s.record_history(SchemaHistory(self.cluster.catalog.jobs()), run)
            s.save_checkpoint(run)
            self.checkpoint = end
        return run

    def mirror(self, ident: str) -> list[dict[str, Any]]:
        rows = self.catalog.load_table(ident).scan().to_arrow().to_pylist()
        return [{k: v for k, v in r.items() if not k.startswith("_tidb_")} for r in rows]

    def verify(self, ts: int) -> None:
        """Every upstream table's mirror equals the upstream at ``ts`` as ``binlake verify`` reads it (over
        the emulator's MySQL port), and the emulator's own snapshot gives the same verdict."""
        over_sql = read_snapshot(MySQLTarget.from_dsn(self.cluster.mysql_dsn), ts)
        report = verify_mirrors(self.catalog, over_sql, ts)
        assert report.ok, report.format()
        direct = verify_mirrors(self.catalog, render_rows(self.cluster.snapshot(ts)), ts)
        assert direct.ok, direct.format()

    def close(self) -> None:
        self.cluster.close()
