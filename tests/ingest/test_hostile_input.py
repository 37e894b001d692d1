"""Hostile input against a real pump: malformed envelopes on every gRPC method, random and mutated
requests (a seeded hypothesis fuzz, bounded in examples) on gRPC and HTTP, with valid writes in
between. The pump answers with named status codes, logs at most a line per client per minute, stays
up with bounded memory, and stores each valid write exactly once."""
from __future__ import annotations

import random
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import binlog as bl
from ingest.scan_client import ScanClient
from schemas import binlake_pb2, pump_pb2
from tests.ingest.helpers import commit, prewrite
from tests.waiting import wait_for
from upstream.local import PumpProcess, http

pytestmark = pytest.mark.integration

METHODS = ("/binlog.Pump/WriteBinlog", "/binlog.Pump/PullBinlogs", "/binlake.v1.PumpScan/Scan",
           "/binlake.v1.PumpScan/LookupPrewrites", "/binlake.v1.PumpScan/Watermark")
STREAMING = {"/binlog.Pump/PullBinlogs", "/binlake.v1.PumpScan/Scan", "/binlake.v1.PumpScan/LookupPrewrites"}
# what a hostile request may get; UNKNOWN and INTERNAL would mean an unhandled error in the pump
ANSWERS = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
           grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OUT_OF_RANGE}
NOT_PROTOBUF = b"\xff\xff\xff\xff\x0f"   # a varint longer than 64 bits: never a valid message
GUARD_LOG = "WARNING ingest.pump.guard"


class RawPump:
    """Calls a pump's methods with raw request bytes."""

    def __init__(self, addr: str) -> None:
        self.channel = grpc.insecure_channel(addr)

    def call(self, method: str, raw: bytes, timeout: float = 3.0) -> grpc.StatusCode:
        """The status code the pump answered ``raw`` with (a stream is read to its end)."""
        ident: Callable[[bytes], bytes] = lambda b: b  # noqa: E731
        try:
            if method in STREAMING:
                stream = self.channel.unary_stream(method, request_serializer=ident, response_deserializer=ident)
                for _ in stream(raw, timeout=timeout):
                    pass
            else:
                self.channel.unary_unary(method, request_serializer=ident, response_deserializer=ident)(
                    raw, timeout=timeout)
        except grpc.RpcError as e:
            return e.code()
        return grpc.StatusCode.OK

    def close(self) -> None:
        self.channel.close()


@pytest.fixture
def pump(pumps: Callable[..., PumpProcess]) -> PumpProcess:
    return pumps("pump-hostile")


@pytest.fixture
def raw(pump: PumpProcess) -> Iterator[RawPump]:
    client = RawPump(pump.addr)
    yield client
    client.close()


def test_malformed_envelopes_get_invalid_argument_and_one_log_line(pump: PumpProcess, raw: RawPump) -> None:
    for _ in range(20):
        for method in METHODS:
            assert raw.call(method, NOT_PROTOBUF) == grpc.StatusCode.INVALID_ARGUMENT, method
    log = pump.log_tail(400)
    assert "Traceback" not in log
    assert sum(GUARD_LOG in line for line in log.splitlines()) == 1, log   # 100 refusals, one line per minute


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(3)
        if op == 0 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 1:
            b.insert(rng.randrange(len(b) + 1), rng.randrange(256))
        elif b:
            del b[rng.randrange(len(b))]
    return bytes(b)


def test_fuzzed_requests_leave_valid_traffic_stored_once(pump: PumpProcess, raw: RawPump, tso: Any,
                                                         ts: Callable[[], int]) -> None:
    cid = tso.cluster_id
    proc = psutil.Process(pump.proc.pid if pump.proc else 0)
    rss_before = proc.memory_info().rss
    written: list[int] = []
    valid = [pump_pb2.WriteBinlogReq(clusterID=cid, payload=prewrite(1)).SerializeToString(),
             pump_pb2.PullBinlogReq(clusterID=cid).SerializeToString(),
             binlake_pb2.ScanRequest(cluster_id=cid, from_ts=0, to_ts=1).SerializeToString(),
             binlake_pb2.LookupRequest(cluster_id=cid, start_ts=[1, 2]).SerializeToString(),
             binlake_pb2.WatermarkRequest(cluster_id=cid).SerializeToString()]
    answers: list[grpc.StatusCode] = []

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(which=st.integers(0, len(METHODS) - 1), data=st.binary(max_size=512), seed=st.integers(0, 2**32),
           mutate=st.booleans(), path=st.text(max_size=40), verb=st.sampled_from(["GET", "PUT", "POST"]))
    def one(which: int, data: bytes, seed: int, mutate: bool, path: str, verb: str) -> None:
        method = METHODS[which]
        body = _mutate(random.Random(seed), valid[which]) if mutate else data
        if method == "/binlog.Pump/PullBinlogs":
            body = NOT_PROTOBUF + body   # a valid pull would follow the pump forever
        code = raw.call(method, body, timeout=2.0)
        answers.append(code)
        assert code in ANSWERS, (method, body, code)
        status, _ = http(verb, f"{pump.status_url}/{urllib.parse.quote(path)}", timeout=5)
        assert status in (200, 400, 404, 405, 501), (verb, path, status)
        start = ts()   # valid traffic between the hostile calls
        assert raw.call("/binlog.Pump/WriteBinlog", pump_pb2.WriteBinlogReq(
            clusterID=cid, payload=prewrite(start)).SerializeToString()) == grpc.StatusCode.OK
        assert raw.call("/binlog.Pump/WriteBinlog", pump_pb2.WriteBinlogReq(
            clusterID=cid, payload=commit(start, ts())).SerializeToString()) == grpc.StatusCode.OK
        written.append(start)

    one()
    assert grpc.StatusCode.INVALID_ARGUMENT in answers
    assert pump.proc is not None and pump.proc.poll() is None
    # fuzzed prewrites that parse stay unresolved and hold the watermark back: look the writes up by key
    with ScanClient(pump.addr, cid) as client:
        def found() -> list[int]:
            return sorted(r.start_ts for r in client.lookup_prewrites(written) if r.tp == bl.PREWRITE)
        wait_for(lambda: len(found()) >= len(written), what="the last writes to be indexed")
        assert found() == sorted(written)   # each stored, once
    assert proc.memory_info().rss - rss_before < 200 << 20
    log = pump.log_tail(2000)
    assert "Traceback" not in log
    refused = answers.count(grpc.StatusCode.INVALID_ARGUMENT)
    lines = sum(GUARD_LOG in line for line in log.splitlines())
    assert 1 <= lines <= max(2, refused // 20), (lines, refused)   # one line per client per minute
