"""``ingest.pull_client`` against a grpcio server that plays a pump's ``/binlog.Pump/PullBinlogs``:
the request TiDB's drainer sends, a range read that stops at ``to_ts``, streams that end early, go
backwards or carry no binlog, gzip both ways, and TLS with the same silence limit."""
from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from ingest import binlog as bl
from ingest.errors import MalformedBinlog
from ingest.http2 import WireRpcError, stream_call
from ingest.pull_client import PullClient, PullStreamError
from schemas import binlog_pb2, pump_pb2
from tests.certs import tls_world
from upstream.local import free_port

CLUSTER = 42


def answer(start: int, commit: int, tp: int = bl.COMMIT, value: bytes = b"", job: int = 0) -> bytes:
    b = binlog_pb2.Binlog(tp=tp, start_ts=start, commit_ts=commit, ddl_job_id=job)
    if value:
        b.prewrite_value = value
    return pump_pb2.PullBinlogResp(entity=pump_pb2.Entity(payload=b.SerializeToString())).SerializeToString()


class FakePump:
    """Answers PullBinlogs from ``script`` (the binlogs after the request's offset), then behaves as
    ``ending`` says: ``"wait"`` (a live pump with nothing newer), ``"ok"`` (ends the stream)."""

    def __init__(self) -> None:
        self.script: list[tuple[int, int, int]] = []   # (start, commit, tp)
        self.ending = "wait"
        self.requests: list[pump_pb2.PullBinlogReq] = []
        self.extra: list[bytes] = []                     # raw answers sent after the script

    def pull(self, raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        req = pump_pb2.PullBinlogReq.FromString(raw)
        self.requests.append(req)
        if req.clusterID != CLUSTER:
            context.abort(grpc.StatusCode.UNKNOWN, f"cluster ID are mismatch, {req.clusterID} vs {CLUSTER}")
        for start, commit, tp in self.script:
            if commit > req.startFrom.offset:
                yield answer(start, commit, tp, value=b"v%d" % start)
        yield from self.extra
        if self.ending == "wait":
            while context.is_active():
                time.sleep(0.05)


def _serve(pump: FakePump, compression: grpc.Compression | None = None,
           credentials: grpc.ServerCredentials | None = None) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(4), compression=compression)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("binlog.Pump", {
        "PullBinlogs": grpc.unary_stream_rpc_method_handler(pump.pull)})])
    addr = f"127.0.0.1:{free_port()}"
    if credentials is None:
        server.add_insecure_port(addr)
    else:
        server.add_secure_port(addr, credentials)
    server.start()
    return server, addr


@pytest.fixture
def fake() -> Iterator[tuple[FakePump, str]]:
    pump = FakePump()
    server, addr = _serve(pump)
    try:
        yield pump, addr
    finally:
        server.stop(0)


def test_a_range_read_sends_tidbs_request_and_stops_at_to_ts(fake: tuple[FakePump, str]) -> None:
    pump, addr = fake
    pump.script = [(10, 11, bl.COMMIT), (12, 12, bl.ROLLBACK), (13, 15, bl.COMMIT), (16, 20, bl.COMMIT)]
    got = list(PullClient(addr, CLUSTER, idle_timeout=5).read_range(10, 15))
    assert [(p.start_ts, p.commit_ts, p.fake) for p in got] == [(10, 11, False), (12, 12, True), (13, 15, False)]
    assert binlog_pb2.Binlog.FromString(got[0].payload).prewrite_value == b"v10"
    req = pump.requests[-1]
    assert (req.clusterID, req.startFrom.suffix, req.startFrom.offset) == (CLUSTER, 0, 10)
    # no binlog at to_ts itself: the read ends at the first one past it, without waiting
    assert [p.commit_ts for p in PullClient(addr, CLUSTER, idle_timeout=5).read_range(0, 14)] == [11, 12]
    assert PullClient(addr, CLUSTER, idle_timeout=5).first(15).commit_ts == 20


def test_a_stream_that_ends_goes_backwards_or_is_not_binlogs_fails_by_name(fake: tuple[FakePump, str]) -> None:
    pump, addr = fake
    pump.script = [(10, 11, bl.COMMIT)]
    pump.ending = "ok"
    with pytest.raises(PullStreamError, match=r"ended its PullBinlogs stream after commit ts 11"):
        list(PullClient(addr, CLUSTER, idle_timeout=5).read_range(0, 30))
    pump.script = [(10, 11, bl.COMMIT), (5, 9, bl.COMMIT)]
    pump.ending = "wait"
    with pytest.raises(PullStreamError, match="sent commit ts 9 after 11: .* strictly ascending"):
        list(PullClient(addr, CLUSTER, idle_timeout=5).read_range(0, 30))
    pump.script = []
    pump.extra = [b"\x0a\x03\x12\x01\xff"]   # an Entity whose payload is not a Binlog
    with pytest.raises(MalformedBinlog, match="payload of 1 bytes that is not a binlog"):
        list(PullClient(addr, CLUSTER, idle_timeout=5).read_range(0, 30))
    pump.extra = [b"\x0a\x05\xff"]   # not a PullBinlogResp at all
    with pytest.raises(PullStreamError, match="answer that is not one"):
        list(PullClient(addr, CLUSTER, idle_timeout=5).read_range(0, 30))


def test_another_clusters_pump_and_a_silent_pump_answer_with_their_status(fake: tuple[FakePump, str]) -> None:
    pump, addr = fake
    with pytest.raises(grpc.RpcError) as refused:
        PullClient(addr, CLUSTER + 1, idle_timeout=5).first(0)
    assert refused.value.code() == grpc.StatusCode.UNKNOWN and "cluster ID are mismatch" in refused.value.details()
    pump.script = [(10, 11, bl.COMMIT)]
    with pytest.raises(grpc.RpcError) as silent:
        list(PullClient(addr, CLUSTER, idle_timeout=0.5).read_range(0, 30))
    assert silent.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_gzip_is_asked_for_and_read_from_a_compressing_server() -> None:
    pump = FakePump()
    pump.script = [(i, i + 1, bl.COMMIT) for i in range(10, 400, 2)]
    server, addr = _serve(pump, compression=grpc.Compression.Gzip)
    try:
        got = [p.commit_ts for p in PullClient(addr, CLUSTER, idle_timeout=5, compressor="gzip").read_range(0, 399)]
        assert got == [i + 1 for i in range(10, 400, 2)]
        # the answers really came compressed: inflated, this one is over the limit the reader is given
        big = pump_pb2.PullBinlogReq(clusterID=CLUSTER).SerializeToString()
        pump.script, pump.extra, pump.ending = [], [answer(1, 2, value=bytes(1 << 20))], "ok"
        with pytest.raises(WireRpcError, match="inflated") as over:
            list(stream_call(addr, "/binlog.Pump/PullBinlogs", big, 5, 1 << 19, gzip=True))
        assert over.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # a server that compresses unasked (grpcio's does) is read too
        pump.extra = [answer(1, 2, value=b"z" * 100_000)]
        plain = list(stream_call(addr, "/binlog.Pump/PullBinlogs", big, 5, 1 << 20))
        assert binlog_pb2.Binlog.FromString(pump_pb2.PullBinlogResp.FromString(plain[0]).entity.payload
                                            ).prewrite_value == b"z" * 100_000
    finally:
        server.stop(0)


def test_tls_reads_compresses_and_times_out_a_silent_pump(tmp_path: Path) -> None:
    """Over TLS (a grpcio server with a certificate, mutual TLS) the same reader reads gzip answers,
    and ``idle_timeout`` bounds the pump's silence as it does in plain text."""
    world = tls_world(tmp_path)
    pump = FakePump()
    pump.script = [(10, 11, bl.COMMIT), (13, 15, bl.COMMIT)]
    server, addr = _serve(pump, compression=grpc.Compression.Gzip,
                          credentials=world.server.grpc_server_credentials())
    tls = world.client.h2_client_context()
    try:
        client = PullClient(addr, CLUSTER, idle_timeout=5, tls=tls, compressor="gzip")
        assert [p.commit_ts for p in client.read_range(0, 15)] == [11, 15]
        silent = PullClient(addr, CLUSTER, idle_timeout=0.5, tls=tls)
        with pytest.raises(grpc.RpcError) as err:
            list(silent.read_range(0, 16))
        # the client's own 0.5 s idle timeout fired (not another, longer one)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED and "sent nothing for 0.5s" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            list(PullClient(addr, CLUSTER, idle_timeout=5).read_range(0, 16))   # plain text to a TLS server
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(0)


def test_an_unknown_compressor_is_refused() -> None:
    with pytest.raises(ValueError, match="compressor 'snappy'"):
        PullClient("127.0.0.1:1", CLUSTER, compressor="snappy")
