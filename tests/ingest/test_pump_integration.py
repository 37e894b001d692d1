"""Real pump processes on loopback, driven over gRPC and HTTP as TiDB, drainers and operators would."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from ingest import binlog as bl
from ingest.registry import load_registry
from ingest.registry.base import DRAINER, PUMP, NodeStatus
from ingest.scan_client import ScanBatch, ScanClient
from ingest.scan_client import records as scan_records
from schemas import binlake_pb2, binlog_pb2, cistern_pb2, cistern_pb2_grpc, pump_pb2, pump_pb2_grpc
from tests.ingest.helpers import MVCCHandler, commit, prewrite, writer
from tests.waiting import wait_for
from transform.codec.varint import encode_uvarint
from upstream.local import PumpProcess, free_port, http

pytestmark = pytest.mark.integration

Start = Callable[..., PumpProcess]


def scan_keys(pump: PumpProcess, cluster_id: int, from_ts: int = 0, to_ts: int = 0) -> list[tuple[int, int]]:
    with ScanClient(pump.addr, cluster_id) as c:
        return [(r.key_ts, r.tp) for r in c.scan(from_ts, to_ts)]


def wait_watermark(pump: PumpProcess, cluster_id: int, above: int, timeout: float = 15.0) -> int:
    with ScanClient(pump.addr, cluster_id) as c:
        return wait_for(lambda: (wm := c.watermark().max_commit_ts) > above and wm, timeout,
                        lambda: f"the watermark to pass {above}\n{pump.log_tail()}")


def test_go_style_and_standard_binlogs_accepted(pumps: Start, tso: Any, ts: Callable[[], int]) -> None:
    p = pumps()
    w = writer(p, tso.cluster_id)
    s1 = ts()
    w.write(prewrite(s1, b"go-style"))                          # gogoproto bytes, zero fields present
    c1 = ts()
    std = binlog_pb2.Binlog(tp=bl.COMMIT, start_ts=s1, commit_ts=c1).SerializeToString()

    assert commit(s1, c1).endswith(b"\x38\x00\x40\x00") and not std.endswith(b"\x38\x00\x40\x00")
    w.write(std)                                                # standard proto2 encoding: zero fields absent
    s2 = ts()
    w.write(binlog_pb2.Binlog(start_ts=s2, prewrite_key=b"k", prewrite_value=b"std").SerializeToString())
    c2 = ts()
    w.write(commit(s2, c2))
    wait_watermark(p, tso.cluster_id, c2 - 1)
    assert scan_keys(p, tso.cluster_id, s1 - 1, c2) == [(s1, bl.PREWRITE), (c1, bl.COMMIT),
                                                        (s2, bl.PREWRITE), (c2, bl.COMMIT)]
    w.close()


def test_refusals_are_specific(pumps: Start, tso: Any, ts: Callable[[], int]) -> None:
    p = pumps(config_text="max-message-size = 1048576\n")
    w = writer(p, tso.cluster_id)
    with pytest.raises(grpc.RpcError) as err:
        w.write(prewrite(ts()), cluster_id=tso.cluster_id + 1)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "cluster ID are mismatch" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        w.write(b"\xff\xff\xff")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed binlog payload" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        w.write(prewrite(ts(), b"x" * (2 << 20)))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    bad_commit = bl.marshal_gogo(binlog_pb2.Binlog(tp=bl.COMMIT, start_ts=10, commit_ts=5))
    with pytest.raises(grpc.RpcError, match="commit_ts 5 <= start_ts 10"):
        w.write(bad_commit)
    before = ts()
    w.write(b"")                                  # the pump client's probe: success, nothing stored
    fake_after = wait_watermark(p, tso.cluster_id, before)
    keys = scan_keys(p, tso.cluster_id, 0, fake_after)
    assert all(k != 0 for k, _ in keys) and all(tp == bl.ROLLBACK for _, tp in keys)  # only fake binlogs
    w.close()


def test_pull_binlogs_in_commit_order_with_prewrite_fields(pumps: Start, tso: Any, ts: Callable[[], int]) -> None:
    p = pumps()
    w = writer(p, tso.cluster_id)
    starts = [ts() for _ in range(4)]
    for i, s in enumerate(starts):
        w.write(prewrite(s, f"rows-{i}".encode()))
    commits = {}
    for s in reversed(starts):                    # commits arrive in the opposite order of prewrites
        commits[s] = ts()
        w.write(commit(s, commits[s]))
    last = max(commits.values())
    wait_watermark(p, tso.cluster_id, last - 1)
    channel = grpc.insecure_channel(p.addr)
    stream = pump_pb2_grpc.PumpStub(channel).PullBinlogs(
        pump_pb2.PullBinlogReq(clusterID=tso.cluster_id, startFrom=pump_pb2.Pos(offset=starts[0] - 1)))
    got: list[binlog_pb2.Binlog] = []
    for resp in stream:
        b = binlog_pb2.Binlog.FromString(resp.entity.payload)
        got.append(b)
        if b.commit_ts >= last:
            break
    stream.cancel()
    channel.close()
    real = [b for b in got if b.tp == bl.COMMIT]
    assert [b.commit_ts for b in got] == sorted(b.commit_ts for b in got)
    assert len({b.commit_ts for b in got}) == len(got)
    assert [(b.start_ts, b.commit_ts, b.prewrite_value) for b in real] == \
        [(s, commits[s], f"rows-{starts.index(s)}".encode()) for s in reversed(starts)]
    w.close()


def _bytes_field(number: int, value: bytes) -> bytes:
    return encode_uvarint(number << 3 | 2) + encode_uvarint(len(value)) + value


def go_binlog(tp: int, start_ts: int, commit_ts: int, key: bytes | None = None, value: bytes | None = None,
              query: bytes | None = None, job_id: int = 0, schema_state: int = 0) -> bytes:
    """tipb's ``(*Binlog).Marshal``, by hand: tp, start_ts and commit_ts always; prewrite_key,
    prewrite_value and ddl_query only when not nil; ddl_job_id and ddl_schema_state always."""
    out = b"\x08" + encode_uvarint(tp) + b"\x10" + encode_uvarint(start_ts) + b"\x18" + encode_uvarint(commit_ts)
    for number, field in ((4, key), (5, value), (6, query)):
        if field is not None:
            out += _bytes_field(number, field)
    return out + b"\x38" + encode_uvarint(job_id) + b"\x40" + encode_uvarint(schema_state)


def go_pull_answer(payload: bytes, start_ts: int, commit_ts: int) -> bytes:
    """The Go pump's ``PullBinlogResp`` (as TiDB Binlog v8.3.0's pump sent one here): ``Entity`` with an
    empty ``Pos`` (gogoproto writes the non-nullable message), the payload, and ``Meta`` holding the
    binlog's start and commit ts."""
    meta = b"\x08" + encode_uvarint(start_ts) + b"\x10" + encode_uvarint(commit_ts)
    entity = b"\x0a\x00" + _bytes_field(2, payload) + _bytes_field(4, meta)
    return _bytes_field(1, entity)


def test_pull_binlogs_answers_byte_equal_to_the_go_pump(pumps: Start, tso: Any, ts: Callable[[], int]) -> None:
    p = pumps()
    w = writer(p, tso.cluster_id)
    key, rows = b"t\x80\x00\x00\x00\x00\x00\x00\x00\x2a_r\x01", b"\x08\x07\x12\x03abc"
    query, job = b"create table t (a int primary key)", 42
    dml_start = ts()
    w.write(go_binlog(bl.PREWRITE, dml_start, 0, key, rows))          # TiDB's DML prewrite
    dml_commit = ts()
    w.write(go_binlog(bl.COMMIT, dml_start, dml_commit, key))         # its commit: prewrite_value nil
    ddl_start = ts()
    w.write(go_binlog(bl.PREWRITE, ddl_start, 0, key, None, query, job, 5))  # a DDL: no prewrite_value
    ddl_commit = ts()
    w.write(go_binlog(bl.COMMIT, ddl_start, ddl_commit, key, None, query, job, 5))
    wait_watermark(p, tso.cluster_id, ddl_commit)                   # a fake binlog after the DDL too
    channel = grpc.insecure_channel(p.addr)
    pull = channel.unary_stream("/binlog.Pump/PullBinlogs",
                                request_serializer=pump_pb2.PullBinlogReq.SerializeToString,
                                response_deserializer=None)          # the answers' bytes as sent
    stream = pull(pump_pb2.PullBinlogReq(clusterID=tso.cluster_id, startFrom=pump_pb2.Pos(offset=dml_start)))
    answers: dict[int, bytes] = {}
    fake: tuple[int, bytes] | None = None
    for raw in stream:
        b = binlog_pb2.Binlog.FromString(pump_pb2.PullBinlogResp.FromString(raw).entity.payload)
        answers[b.commit_ts] = raw
        if b.commit_ts > ddl_commit:
            fake = (b.commit_ts, raw)
            break
    stream.cancel()
    channel.close()
    w.close()
    assert answers[dml_commit] == go_pull_answer(go_binlog(bl.COMMIT, dml_start, dml_commit, key, rows),
                                                 dml_start, dml_commit)
    assert answers[ddl_commit] == go_pull_answer(go_binlog(bl.COMMIT, ddl_start, ddl_commit, key, None, query,
                                                           job, 5), ddl_start, ddl_commit)
    assert b"\x2a\x00" not in answers[ddl_commit]                    # no empty prewrite_value
    assert fake is not None
    assert fake[1] == go_pull_answer(go_binlog(bl.ROLLBACK, fake[0], fake[0]), fake[0], fake[0])


def test_range_scan_lookup_and_watermark(pumps: Start, tso: Any, ts: Callable[[], int]) -> None:
    p = pumps()
    w = writer(p, tso.cluster_id)
    early = ts()
    w.write(prewrite(early, b"early"))
    pairs = []
    for _ in range(20):
        s = ts()
        w.write(prewrite(s, b"v" * 1000))
        c = ts()
        w.write(commit(s, c))
        pairs.append((s, c))
    late_commit = ts()
    w.write(commit(early, late_commit))
    wait_watermark(p, tso.cluster_id, late_commit - 1)
    mid = pairs[9][1]
    with ScanClient(p.addr, tso.cluster_id) as client:
        batches = list(client.scan_batches(mid, late_commit, max_batch_bytes=3000))
        assert len(batches) > 3 and all(sum(b.lengths) <= 3000 or len(b.lengths) == 1 for b in batches)
        records = [r for b in batches for r in scan_records(b)]
        keys = [r.key_ts for r in records]
        assert keys == sorted(keys) and all(mid < k <= late_commit for k in keys)
        assert (late_commit, bl.COMMIT) in [(r.key_ts, r.tp) for r in records]
        assert early not in keys                     # its prewrite is older than the range: look it up
        found = list(client.lookup_prewrites([early, pairs[0][0], 12345]))
        assert [(r.start_ts, bl.parse(r.payload).prewrite_value) for r in found] == \
            [(early, b"early"), (pairs[0][0], b"v" * 1000)]
        wm = client.watermark()
        assert wm.max_commit_ts >= late_commit and wm.state == "online" and wm.node_id == "pump-1"
        assert wm.cluster_id == tso.cluster_id and wm.oldest_unresolved_ts == 0
        beyond = list(client.scan(wm.max_commit_ts, wm.max_commit_ts + 10**12))
        assert all(r.key_ts <= client.watermark().max_commit_ts for r in beyond)
    w.close()


def test_scans_over_the_wire_read_what_grpcio_reads(pumps: Start, tso: Any, ts: Callable[[], int]) -> None:
    """ScanClient reads Scan and LookupPrewrites with ``ingest.http2.stream`` (no TLS): the batches equal
    grpcio's, for one batch and for many, and a lookup request larger than HTTP/2's first window."""
    p = pumps()
    w = writer(p, tso.cluster_id)
    starts = []
    for i in range(40):
        s = ts()
        w.write(prewrite(s, bytes([i]) * (100 * i)))
        w.write(commit(s, ts()))
        starts.append(s)
    last = ts()
    w.write(commit(starts[0], last))  # a second commit of one start ts: both are stored
    wait_watermark(p, tso.cluster_id, last - 1)

    def shape(batches: Any) -> list[Any]:
        return [(b.key_ts.tolist(), b.tp.tolist(), b.start_ts.tolist(), b.commit_ts.tolist(), b.payloads(),
                 b.scanned_to) for b in batches]

    lookup = [starts[3], *range(1, 20_000), starts[30]]   # ~100 KB of request
    with ScanClient(p.addr, tso.cluster_id) as client, grpc.insecure_channel(p.addr) as ch:
        scan = ch.unary_stream("/binlake.v1.PumpScan/Scan",
                               request_serializer=binlake_pb2.ScanRequest.SerializeToString,
                               response_deserializer=ScanBatch)
        find = ch.unary_stream("/binlake.v1.PumpScan/LookupPrewrites",
                               request_serializer=binlake_pb2.LookupRequest.SerializeToString,
                               response_deserializer=ScanBatch)
        for limit, at_least in ((0, 1), (5000, 10)):
            wire = shape(client.scan_batches(0, 0, limit))
            assert len(wire) >= at_least and sum(len(b[0]) for b in wire) == 81
            assert wire == shape(scan(binlake_pb2.ScanRequest(cluster_id=tso.cluster_id, max_batch_bytes=limit)))
        found = [(r.start_ts, r.payload) for r in client.lookup_prewrites(lookup)]
        assert [s for s, _ in found] == [starts[3], starts[30]]
        assert found == [(r.start_ts, r.payload) for b in find(binlake_pb2.LookupRequest(
            cluster_id=tso.cluster_id, start_ts=lookup)) for r in scan_records(b)]
    with ScanClient(p.addr, tso.cluster_id + 1) as stranger, pytest.raises(grpc.RpcError) as err:
        list(stranger.scan(0))
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION and "mismatch" in err.value.details()
    w.close()


def test_lost_commit_resolved_through_upstream_mvcc(pumps: Start, tso: Any, ts: Callable[[], int],
                                                    mvcc_server: tuple[str, type[MVCCHandler]]) -> None:
    url, mvcc = mvcc_server
    p = pumps(extra=["--upstream-status-url", url])
    w = writer(p, tso.cluster_id)
    lost, rolled, locked = ts(), ts(), ts()
    keys = {lost: b"t\x80lost", rolled: b"t\x80rolled", locked: b"t\x80locked"}
    for s, k in keys.items():
        w.write(prewrite(s, b"rows", key=k))
    lost_commit = ts()
    mvcc.answers[keys[lost].hex().upper()] = {"key": keys[lost].hex().upper(), "region_id": 2, "value": {
        "info": {"writes": [{"start_ts": lost, "commit_ts": lost_commit, "short_value": "AA=="}]}}}
    mvcc.answers[keys[rolled].hex().upper()] = {"key": "", "region_id": 2, "value": {
        "info": {"writes": [{"type": 3, "start_ts": rolled, "commit_ts": rolled, "short_value": "cA=="}]}}}
    mvcc.answers[keys[locked].hex().upper()] = {"key": "", "region_id": 2, "value": {
        "info": {"lock": {"start_ts": locked, "primary": "dA=="}}}}
    # The first two are resolved by the pump; the third is still locked and holds the watermark.
    with ScanClient(p.addr, tso.cluster_id) as c:
        wait_for(lambda: c.watermark().oldest_unresolved_ts == locked
                 and keys[locked].hex().upper() in mvcc.asked, 15, p.log_tail)
        assert c.watermark().max_commit_ts < locked
        w.write(commit(locked, ts()))
        wm = wait_watermark(p, tso.cluster_id, locked)
        records = {(r.key_ts, r.tp): r for r in c.scan(lost - 1, wm)}
    synthesized = bl.parse(records[(lost_commit, bl.COMMIT)].payload)
    assert (synthesized.start_ts, synthesized.commit_ts, synthesized.prewrite_key) == (lost, lost_commit, keys[lost])
    assert not any(tp == bl.COMMIT and r.start_ts == rolled for (k, tp), r in records.items())
    status, metrics = http("GET", f"{p.status_url}/metrics")
    assert status == 200
    assert b'binlog_pump_storage_resolved_prewrites_total{result="committed"} 1.0' in metrics
    assert b'binlog_pump_storage_resolved_prewrites_total{result="rolled_back"} 1.0' in metrics
    w.close()


def test_gc_on_demand(pumps: Start, tso: Any, ts: Callable[[], int]) -> None:
    p = pumps(extra=["--gc", "1m"])
    w = writer(p, tso.cluster_id)
    from ingest.tso import compose_ts, physical_ms
    old = compose_ts(physical_ms(ts()) - 3 * 3600 * 1000, 0)    # three hours ago
    w.write(prewrite(old, b"old"))
    w.write(commit(old, old + 1))
    recent = ts()
    w.write(prewrite(recent, b"recent"))
    w.write(commit(recent, ts()))
    wait_watermark(p, tso.cluster_id, recent)
    assert http("GET", f"{p.status_url}/debug/binlog/{old}")[0] == 200
    status, body = http("POST", f"{p.status_url}/debug/gc/trigger")
    assert (status, body) == (200, b"trigger gc success")
    wait_for(lambda: http("GET", f"{p.status_url}/debug/binlog/{old}")[0] == 404, 10, p.log_tail)
    keys = [k for k, _ in scan_keys(p, tso.cluster_id)]
    assert old not in keys and old + 1 not in keys and recent in keys
    assert p.status()["binlake"]["gc_ts"] > old
    w.close()


def test_second_pump_on_same_data_dir_fails(pumps: Start, tso: Any, tmp_path: Path) -> None:
    first = pumps()
    second = PumpProcess(data_dir=first.data_dir, pd_url=tso.url, registry=first.registry, node_id="pump-1")
    second.start(wait=False)
    assert second.wait_exit(30) == 1
    assert "locked by another pump" in second.log_tail()
    assert first.status()["binlake"]["state"] == "online"


def _ctl(registry: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "binlake.cli", "ctl", *args, "--registry", registry],
                          capture_output=True, text=True, timeout=30)


def test_pause_and_offline_through_ctl(pumps: Start, tso: Any, ts: Callable[[], int], tmp_path: Path) -> None:
    p1, p2 = pumps("pump-1"), pumps("pump-2")
    registry_uri = p1.registry
    listing = _ctl(registry_uri, "pumps")
    assert listing.returncode == 0
    assert "pump-1" in listing.stdout and "pump-2" in listing.stdout and listing.stdout.count("online") == 2
    paused = _ctl(registry_uri, "pause-pump", "--node-id", "pump-1")
    assert paused.returncode == 0, paused.stderr
    assert p1.wait_exit(30) == 0
    registry = load_registry(registry_uri)
    assert registry.get_node(PUMP, "pump-1").state == "paused"
    # A registered drainer that has not consumed pump-2's data keeps it closing.
    registry.put_node(DRAINER, NodeStatus(node_id="drainer-1", host="127.0.0.1:1", state="online",
                                          max_commit_ts=0))
    w = writer(p2, tso.cluster_id)
    s = ts()
    w.write(prewrite(s))
    assert _ctl(registry_uri, "offline-pump", "--node-id", "pump-2").returncode == 0
    wait_for(lambda: registry.get_node(PUMP, "pump-2").state == "closing", 10, p2.log_tail)
    with pytest.raises(grpc.RpcError, match="no online: closing"):
        w.write(prewrite(ts()))
    w.write(commit(s, ts()))                     # commits still accepted while closing
    time.sleep(1)
    assert p2.proc is not None and p2.proc.poll() is None
    registry.put_node(DRAINER, NodeStatus(node_id="drainer-1", host="127.0.0.1:1", state="online",
                                          max_commit_ts=ts()))
    assert p2.wait_exit(30) == 0
    assert registry.get_node(PUMP, "pump-2").state == "offline"
    missing = _ctl(registry_uri, "pause-pump", "--node-id", "nope")
    assert missing.returncode == 1 and "nope" in missing.stderr
    w.close()
    registry.close()


class _Cistern(cistern_pb2_grpc.CisternServicer):
    def __init__(self) -> None:
        self.notified = threading.Event()

    def Notify(self, request: cistern_pb2.NotifyReq, context: grpc.ServicerContext) -> cistern_pb2.NotifyResp:
        self.notified.set()
        return cistern_pb2.NotifyResp()


def test_notifies_online_drainers_before_serving(pumps: Start, tso: Any, tmp_path: Path) -> None:
    registry_uri = f"file://{tmp_path / 'registry.json'}"
    registry = load_registry(registry_uri)
    cistern = _Cistern()
    server = grpc.server(futures.ThreadPoolExecutor(2))
    cistern_pb2_grpc.add_CisternServicer_to_server(cistern, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    registry.put_node(DRAINER, NodeStatus(node_id="d1", host=f"127.0.0.1:{port}", state="online"))
    registry.put_node(DRAINER, NodeStatus(node_id="d2", host="127.0.0.1:1", state="paused"))  # not asked
    pumps("pump-n")
    # /status says online as soon as the registry does, which TiDB's order puts before the Notify
    # calls (a notified drainer reads the registry): wait for the call rather than race it.
    assert cistern.notified.wait(10)
    server.stop(0)
    # A dead online drainer: the new pump gives up, writes offline and exits.
    registry.put_node(DRAINER, NodeStatus(node_id="d3", host=f"127.0.0.1:{free_port()}", state="online"))
    dead = pumps("pump-m", wait=False)
    assert dead.wait_exit(60) == 1
    assert "fail to notify all living drainer" in dead.log_tail()
    assert registry.get_node(PUMP, "pump-m").state == "offline"
    registry.close()


def test_etcd_registry(pumps: Start, tso: Any, ts: Callable[[], int], etcd_server: Any) -> None:
    before = ts()
    p = pumps("pump-e", registry=etcd_server.uri)
    out = etcd_server.etcdctl("get", "--prefix", "/tidb-binlog/v1/pumps/")
    assert "/tidb-binlog/v1/pumps/pump-e" in out
    status = json.loads(out.splitlines()[1])
    assert list(status) == ["nodeId", "host", "state", "isAlive", "score", "label", "maxCommitTS", "updateTS"]
    assert (status["nodeId"], status["host"], status["state"]) == ("pump-e", p.addr, "online")
    after = ts()
    # a TSO from PD, as TiDB's pump writes it (not Unix milliseconds)
    assert before <= status["updateTS"] and status["updateTS"] >> 18 <= after >> 18
    listing = _ctl(etcd_server.uri, "pumps")
    assert listing.returncode == 0 and "pump-e" in listing.stdout


def test_status_debug_and_metrics(pumps: Start, tso: Any, ts: Callable[[], int]) -> None:
    p = pumps()
    w = writer(p, tso.cluster_id)
    s = ts()
    w.write(prewrite(s, binlog_pb2.PrewriteValue(schema_version=7, mutations=[
        binlog_pb2.TableMutation(table_id=42, inserted_rows=[b"a", b"b"])]).SerializeToString()))
    status, body = wait_for(lambda: (a := http("GET", f"{p.status_url}/debug/binlog/{s}"))[0] != 404 and a,
                            10, p.log_tail)  # indexed shortly after the ack
    assert status == 200 and b"schema_version=7" in body and b"table 42: 2 inserted" in body
    st = p.status()
    assert set(st) >= {"status", "CommitTS", "Checkpoint", "ErrMsg"} and st["CommitTS"] > s
    assert st["status"]["pump-1"]["state"] == "online"
    assert http("GET", f"{p.status_url}/drainers") == (200, b"[]")
    status, metrics = http("GET", f"{p.status_url}/metrics")
    one_successful_write = b'binlog_pump_rpc_duration_seconds_count{label="succ",method="WriteBinlog"} 1.0'
    assert status == 200 and one_successful_write in metrics
    assert http("PUT", f"{p.status_url}/state/other/pause")[0] == 400
    assert http("GET", f"{p.status_url}/nope")[0] == 404
    w.close()
