"""The plain HTTP/2 gRPC unary client (``upstream.pump_client.h2channel``) against a real grpcio server on loopback."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from ingest.http2 import WireRpcError
from schemas import pump_pb2, pump_pb2_grpc
from upstream.pump_client.channel import WRITE_BINLOG, H2WriteChannel, open_write_channel
from upstream.pump_client.h2channel import H2Channel

SERVER_MAX_RECEIVE = 8 << 20


class Pump(pump_pb2_grpc.PumpServicer):
    """Answers by the payload: ``ok:X`` echoes X, ``sleep:S`` waits S seconds, ``fail:`` aborts,
    anything else answers its length."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def WriteBinlog(self, request: pump_pb2.WriteBinlogReq, context: grpc.ServicerContext) -> pump_pb2.WriteBinlogResp:
        with self.lock:
            self.calls += 1
        payload = request.payload
        if payload.startswith(b"ok:"):
            return pump_pb2.WriteBinlogResp(errmsg=f"echo {request.clusterID} {payload[3:].decode()}")
        if payload.startswith(b"sleep:"):
            time.sleep(float(payload[6:]))
            return pump_pb2.WriteBinlogResp()
        if payload.startswith(b"fail:"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "cluster id mismatch: 100% wrong, ünïcode")
        return pump_pb2.WriteBinlogResp(errmsg=str(len(payload)))


@pytest.fixture
def server() -> Iterator[tuple[str, Pump, grpc.Server]]:
    pump = Pump()
    srv = grpc.server(ThreadPoolExecutor(max_workers=16),
                      options=[("grpc.max_receive_message_length", SERVER_MAX_RECEIVE)])
    pump_pb2_grpc.add_PumpServicer_to_server(pump, srv)
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    yield f"127.0.0.1:{port}", pump, srv
    srv.stop(0)


@pytest.fixture
def channel(server: tuple[str, Pump, grpc.Server]) -> Iterator[H2WriteChannel]:
    ch = H2WriteChannel(server[0])
    yield ch
    ch.close()


def write(channel: H2WriteChannel, payload: bytes, timeout: float = 10.0, cluster: int = 7) -> Any:
    return channel.write(pump_pb2.WriteBinlogReq(clusterID=cluster, payload=payload), timeout).result()


def test_unary_calls_match_their_responses_under_concurrency(server: tuple[str, Pump, grpc.Server],
                                                             channel: H2WriteChannel) -> None:
    pump = server[1]

    def one(i: int) -> None:
        for j in range(40):
            assert write(channel, f"ok:{i}-{j}".encode(), cluster=i).errmsg == f"echo {i} {i}-{j}"
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(one, range(32)))
    assert pump.calls == 32 * 40


def test_large_messages_respect_frame_size_and_flow_control(channel: H2WriteChannel) -> None:
    big = bytes(range(256)) * (6 << 12)          # 6 MiB: many 16 KiB frames, past the 64 KiB windows
    sizes = [len(big), 70_000, 65_535, 1]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda n: write(channel, big[:n]).errmsg, sizes))
    assert got == [str(n) for n in sizes]


def test_small_calls_queue_between_the_frames_of_large_ones(channel: H2WriteChannel) -> None:
    """Frames of many callers share the send queue: large bodies waiting for windows and small calls
    sent meanwhile all arrive whole, each answered on its own stream."""
    big = bytes(range(256)) * (1 << 12)          # 1 MiB: past the peer's initial windows

    def one(i: int) -> str:
        if i % 4 == 0:
            return write(channel, big[:len(big) - i]).errmsg
        return write(channel, f"ok:{i}".encode(), cluster=i).errmsg
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(one, range(64)))
    assert got == [str(len(big) - i) if i % 4 == 0 else f"echo {i} {i}" for i in range(64)]


def test_server_status_and_message_reach_the_caller(channel: H2WriteChannel) -> None:
    with pytest.raises(WireRpcError) as info:
        write(channel, b"fail:")
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == "cluster id mismatch: 100% wrong, ünïcode"
    assert isinstance(info.value, grpc.RpcError)
    assert write(channel, b"ok:after").errmsg == "echo 7 after"      # the connection survives it


def test_oversize_message_is_refused_by_the_server(channel: H2WriteChannel) -> None:
    with pytest.raises(WireRpcError) as info:
        write(channel, b"x" * (SERVER_MAX_RECEIVE + 1024))
    assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert write(channel, b"ok:still").errmsg == "echo 7 still"


def test_deadline_exceeded_then_the_connection_is_still_usable(channel: H2WriteChannel) -> None:
    with pytest.raises(WireRpcError) as info:          # the server would answer OK after 3 s
        write(channel, b"sleep:3", timeout=0.3)
    assert info.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert write(channel, b"ok:next").errmsg == "echo 7 next"


def test_a_body_waiting_for_window_is_reset_at_its_deadline() -> None:
    """A peer that never opens its flow-control window: the client sends what the initial windows
    allow (65,535 bytes), waits, and at the deadline resets the stream (RST_STREAM CANCEL through the
    send queue) and fails the call with DEADLINE_EXCEEDED."""
    import socket
    listener = socket.create_server(("127.0.0.1", 0))
    received = bytearray()
    reset = threading.Event()

    def peer() -> None:
        conn, _ = listener.accept()
        conn.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")          # empty SETTINGS, nothing else
        conn.settimeout(10)
        while not reset.is_set():
            chunk = conn.recv(65536)
            if not chunk:
                break
            received.extend(chunk)
            pos = 24                                                 # after the connection preface
            while len(received) - pos >= 9:
                length = int.from_bytes(received[pos:pos + 3], "big")
                if received[pos + 3] == 3 and int.from_bytes(received[pos + 5:pos + 9], "big") == 1:
                    reset.set()                                      # RST_STREAM on stream 1
                pos += 9 + length
        conn.close()

    thread = threading.Thread(target=peer, daemon=True)
    thread.start()
    channel = H2Channel(f"127.0.0.1:{listener.getsockname()[1]}", 1 << 20)
    try:
        call = channel.unary(WRITE_BINLOG, b"x" * 100_000, 0.5, pump_pb2.WriteBinlogResp.FromString)
        with pytest.raises(WireRpcError) as info:
            call.result(5)
        assert info.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert reset.wait(5), "no RST_STREAM reached the peer"
        data = 0
        pos = 24
        while len(received) - pos >= 9:
            length = int.from_bytes(received[pos:pos + 3], "big")
            if received[pos + 3] == 0:
                data += length
            pos += 9 + length
        assert data == 65_535                                        # no byte past the initial window
    finally:
        channel.close()
        listener.close()
        thread.join(5)


def test_callbacks_run_once_also_when_added_late(server: tuple[str, Pump, grpc.Server]) -> None:
    addr, _, _ = server
    channel = H2Channel(addr, 1 << 20)
    try:
        req = pump_pb2.WriteBinlogReq(clusterID=1, payload=b"ok:cb").SerializeToString()
        seen: list[Any] = []
        done = threading.Event()
        call = channel.unary(WRITE_BINLOG, req, 5.0, pump_pb2.WriteBinlogResp.FromString)
        call.add_done_callback(lambda c: (seen.append(c.result().errmsg), done.set()))
        assert done.wait(5)
        call.add_done_callback(lambda c: seen.append("late"))      # already done: runs at once, here
        assert seen == ["echo 1 cb", "late"]
    finally:
        channel.close()


def test_lost_server_fails_calls_in_flight_and_later_calls_redial(server: tuple[str, Pump, grpc.Server],
                                                                  channel: H2WriteChannel) -> None:
    srv = server[2]
    assert write(channel, b"ok:1").errmsg == "echo 7 1"
    slow = channel.write(pump_pb2.WriteBinlogReq(clusterID=7, payload=b"sleep:5"), 10.0)
    time.sleep(0.3)
    srv.stop(0)
    with pytest.raises(WireRpcError) as info:
        slow.result(5)
    assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    with pytest.raises(WireRpcError) as info:
        write(channel, b"ok:2")
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE


def test_refused_connection_and_closed_channel_are_unavailable() -> None:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                            # nothing listens there now
    channel = H2WriteChannel(f"127.0.0.1:{port}")
    with pytest.raises(WireRpcError) as info:
        write(channel, b"ok:x")
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE and "failed to connect" in info.value.details()
    channel.close()
    with pytest.raises(WireRpcError) as info:
        write(channel, b"ok:x")
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE


def test_transport_choice() -> None:
    creds = grpc.ssl_channel_credentials()
    assert type(open_write_channel("127.0.0.1:1")).__name__ == "H2WriteChannel"
    assert type(open_write_channel("127.0.0.1:1", transport="grpc")).__name__ == "GrpcWriteChannel"
    assert type(open_write_channel("127.0.0.1:1", creds)).__name__ == "GrpcWriteChannel"
    with pytest.raises(ValueError, match="plain text only"):
        open_write_channel("127.0.0.1:1", creds, transport="h2")
    with pytest.raises(ValueError, match="unknown pump client transport"):
        open_write_channel("127.0.0.1:1", transport="quic")
