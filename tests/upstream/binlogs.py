"""Reading back what the emulator wrote: range scans of every pump, commits paired with prewrites."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

from ingest import binlog as bl
from ingest.registry import load_registry
from ingest.registry.base import PUMP
from ingest.scan_client import ScanClient
from schemas import binlog_pb2
from tests.waiting import wait_for
from transform.codec.model import Job, TableInfo
from transform.codec.rows import decode_row, iter_mutation
from upstream.local import PumpProcess

# TiDB's classic binlog example: the table, then (server index, statement) in order, and the row
# changes TiDB writes for them.
CLASSIC_TABLE = "create table test (id int, name varchar(24), primary key (id))"
CLASSIC_STATEMENTS = [(0, 'insert into test values (1, "a"), (2, "b")'),
                      (1, "update test set name = 'c' where id = 1"),
                      (0, "update test set name = 'd' where id = 2"),
                      (1, "delete from test where id = 2"),
                      (0, "insert into test values (2, 'c')")]
CLASSIC_CHANGES = [
    ("insert", None, {"id": 1, "name": "a"}),
    ("insert", None, {"id": 2, "name": "b"}),
    ("update", {"id": 1, "name": "a"}, {"id": 1, "name": "c"}),
    ("update", {"id": 2, "name": "b"}, {"id": 2, "name": "d"}),
    ("delete", {"id": 2, "name": "d"}, None),
    ("insert", None, {"id": 2, "name": "c"}),
]


@dataclass
class Txn:
    """A committed transaction as the pumps hold it."""

    start_ts: int
    commit_ts: int
    prewrite: binlog_pb2.Binlog
    pump: str


def wait_watermarks(pumps: list[PumpProcess], cluster_id: int, above: int, timeout: float = 30.0) -> None:
    """Wait until every pump's watermark passed ``above``: the one its Watermark RPC tells, or for a
    pump without PumpScan (``pump-scan = false``) the one its registry entry carries, which is
    what a drain's plan reads of it."""
    for p in pumps:
        with ScanClient(p.addr, cluster_id) as c:
            wait_for(lambda c=c, p=p: _watermark(c, p) >= above, timeout,
                     lambda p=p: f"pump {p.node_id}'s watermark to pass {above}\n{p.log_tail()}")


def _watermark(client: ScanClient, pump: PumpProcess) -> int:
    try:
        return int(client.watermark().max_commit_ts)
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.UNIMPLEMENTED:
            raise
    registry = load_registry(pump.registry)
    try:
        node = registry.get_node(PUMP, pump.node_id)
    finally:
        registry.close()
    return node.max_commit_ts if node is not None else 0


def committed(pumps: list[PumpProcess], cluster_id: int, to_ts: int = 0) -> list[Txn]:
    """Every committed transaction in (0, to_ts] on the pumps, ascending commit ts (rollbacks and fakes dropped)."""
    prewrites: dict[int, tuple[binlog_pb2.Binlog, str]] = {}
    commits: dict[int, tuple[int, str]] = {}
    for p in pumps:
        with ScanClient(p.addr, cluster_id) as c:
            recs = list(c.scan(0, to_ts))
            for r in recs:
                if r.tp == bl.PREWRITE:
                    prewrites[r.start_ts] = (bl.parse(r.payload), p.node_id)
                elif r.tp == bl.COMMIT:
                    assert r.start_ts not in commits or commits[r.start_ts][0] == r.commit_ts
                    commits[r.start_ts] = (r.commit_ts, p.node_id)
            missing = [s for s, (_, node) in commits.items() if node == p.node_id and s not in prewrites]
            for r in c.lookup_prewrites(missing):
                prewrites[r.start_ts] = (bl.parse(r.payload), p.node_id)
    out = []
    for start, (cts, node) in commits.items():
        assert start in prewrites, f"commit {start}@{cts} on {node} has no prewrite"
        pw, pnode = prewrites[start]
        assert pnode == node, f"txn {start}: prewrite on {pnode}, commit on {node}"
        out.append(Txn(start, cts, pw, node))
    out.sort(key=lambda t: t.commit_ts)
    return out


class SchemaTracker:
    """Drainer-style schema tracking from /ddl/history: the TableInfo of a table at a schema version."""

    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = sorted(jobs, key=lambda j: j.binlog.schema_version)

    def table(self, table_id: int, version: int) -> TableInfo:
        """The TableInfo of ``table_id`` after every job with SchemaVersion ≤ ``version``."""
        found = None
        for j in self.jobs:
            if j.binlog.schema_version > version:
                break
            ti = j.binlog.table_info
            if ti is not None and ti.id == table_id:
                found = ti
        assert found is not None, f"no TableInfo for table {table_id} at version {version}"
        return found

    def name(self, table_id: int, version: int) -> str:
        """``db.table`` of a table at a version."""
        dbs: dict[int, str] = {}
        tables: dict[int, tuple[int, str]] = {}
        for j in self.jobs:
            if j.binlog.schema_version > version:
                break
            if j.binlog.db_info:
                dbs[j.binlog.db_info["id"]] = j.binlog.db_info["db_name"]["O"]
            if j.binlog.table_info is not None:
                tables[j.binlog.table_info.id] = (j.schema_id, j.binlog.table_info.name)
        sid, name = tables[table_id]
        return f"{dbs[sid]}.{name}"


def decoded_changes(txn: Txn, tracker: SchemaTracker) -> list[tuple[int, str, Any]]:
    """(table id, kind, RowChange) of a DML transaction, in binlog order."""
    pv = binlog_pb2.PrewriteValue()
    pv.ParseFromString(txn.prewrite.prewrite_value)
    out = []
    for tm in pv.mutations:
        table = tracker.table(tm.table_id, pv.schema_version)
        for kind, data in iter_mutation(tm):
            out.append((tm.table_id, kind, decode_row(table, kind, data)))
    return out
