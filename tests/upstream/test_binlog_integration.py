"""The emulator towards real pumps: TiDB's classic binlog example read back through range scans."""
from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable

import pytest

from schemas import binlog_pb2
from tests.upstream.binlogs import (
    CLASSIC_CHANGES,
    CLASSIC_STATEMENTS,
    CLASSIC_TABLE,
    SchemaTracker,
    committed,
    decoded_changes,
    wait_watermarks,
)
from transform.codec.model import Job
from upstream.cluster import Cluster
from upstream.local import PumpProcess

pytestmark = pytest.mark.integration


def history(cluster: Cluster) -> list[Job]:
    with urllib.request.urlopen(f"{cluster.status_url}/ddl/history") as r:
        return [Job.from_json(j) for j in json.loads(r.read())]


def test_classic_example_binlogs(cluster: Cluster, pumps: Callable[..., PumpProcess]) -> None:
    p1, p2 = pumps("pump-1"), pumps("pump-2")
    r = cluster.server(0).execute(CLASSIC_TABLE)
    create_job = r[0].ddl_job_id
    commit_ts = [cluster.server(srv).execute(sql)[0].commit_ts for srv, sql in CLASSIC_STATEMENTS]
    assert cluster.flush(30)
    wait_watermarks([p1, p2], cluster.cluster_id, commit_ts[-1])
    txns = committed([p1, p2], cluster.cluster_id)
    jobs = history(cluster)
    tracker = SchemaTracker(jobs)

    ddl = [t for t in txns if t.prewrite.ddl_job_id]
    dml = [t for t in txns if not t.prewrite.ddl_job_id]
    assert [t.prewrite.ddl_job_id for t in ddl] == [create_job]
    assert ddl[0].prewrite.ddl_query == b"create table test (id int, name varchar(24), primary key (id))"
    assert ddl[0].prewrite.ddl_schema_state == 5
    job = next(j for j in jobs if j.id == create_job)
    assert job.state == 6 and job.type == 3 and job.binlog.table_info is not None
    assert job.binlog.table_info.pk_is_handle and job.binlog.finished_ts == ddl[0].start_ts

    assert [t.commit_ts for t in dml] == commit_ts            # commit order
    assert {t.pump for t in txns} <= {"pump-1", "pump-2"}
    table_id = job.binlog.table_info.id
    got = []
    for t in dml:
        pv = binlog_pb2.PrewriteValue.FromString(t.prewrite.prewrite_value)
        assert pv.schema_version == job.binlog.schema_version
        assert t.prewrite.prewrite_key[:1] == b"t"
        for tid, kind, ch in decoded_changes(t, tracker):
            assert tid == table_id
            got.append((kind, ch.before, ch.after))
    assert got == CLASSIC_CHANGES
    # the primary key of the first insert txn is the record key of its first row (table, handle 1)
    from upstream.keys import int_record_key
    assert dml[0].prewrite.prewrite_key == int_record_key(table_id, 1)
    assert cluster.snapshot()["test.test"] == [{"id": 1, "name": "c"}, {"id": 2, "name": "c"}]
