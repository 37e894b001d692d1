"""``ingest.http2.stream`` against a real grpcio server: messages, statuses, flow control, limits, silence."""
from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from ingest.http2.framing import WireRpcError
from ingest.http2.stream import stream_call
from upstream.local import free_port

SIZES = [0, 1, 5, 16_383, 16_384, 70_000, 1 << 20, 5 << 20 | 7]


def _payload(i: int, size: int) -> bytes:
    block = hashlib.sha256(str(i).encode()).digest()
    return (block * (size // len(block) + 1))[:size]


class Handlers:
    """Streaming methods whose behaviour the tests choose; records what the server saw."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()

    def sizes(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        for i, size in enumerate(SIZES):
            yield _payload(i, size)

    def echo(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield len(request).to_bytes(8, "big") + hashlib.sha256(request).digest()

    def fail_after_two(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield b"one"
        yield b"two"
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "cluster id 7 is not ours: 100% wrong")

    def fail_at_once(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "empty range")
        yield b""  # pragma: no cover - a generator, never reached

    def silent(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield b"hello"
        time.sleep(3)
        yield b"late"

    def endless(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        context.add_callback(self.cancelled.set)
        while context.is_active():
            yield b"x" * 65536


@pytest.fixture
def server() -> Iterator[tuple[str, Handlers]]:
    handlers = Handlers()
    srv = grpc.server(futures.ThreadPoolExecutor(8))
    methods = {name: grpc.unary_stream_rpc_method_handler(getattr(handlers, name))
               for name in ("sizes", "echo", "fail_after_two", "fail_at_once", "silent", "endless")}
    srv.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.Stream", methods)])
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    yield f"127.0.0.1:{port}", handlers
    srv.stop(0)


def call(addr: str, method: str, request: bytes = b"req", idle: float = 10.0,
         max_message: int = 1 << 30) -> list[bytes]:
    return [bytes(m) for m in stream_call(addr, f"/test.Stream/{method}", request, idle, max_message)]


def test_messages_arrive_whole_and_in_order_as_grpcio_reads_them(server: tuple[str, Handlers]) -> None:
    addr, _ = server
    got = call(addr, "sizes")
    assert [len(m) for m in got] == SIZES
    assert got == [_payload(i, n) for i, n in enumerate(SIZES)]
    with grpc.insecure_channel(addr, [("grpc.max_receive_message_length", 1 << 30)]) as ch:
        assert got == list(ch.unary_stream("/test.Stream/sizes")(b"req"))


def test_a_request_larger_than_the_servers_first_window_is_sent_whole(server: tuple[str, Handlers]) -> None:
    addr, _ = server
    request = _payload(9, 3 << 20)
    [answer] = call(addr, "echo", request)
    assert answer == len(request).to_bytes(8, "big") + hashlib.sha256(request).digest()


@pytest.mark.parametrize("method, code, details, before", [
    ("fail_after_two", grpc.StatusCode.FAILED_PRECONDITION, "cluster id 7 is not ours: 100% wrong", [b"one", b"two"]),
    ("fail_at_once", grpc.StatusCode.INVALID_ARGUMENT, "empty range", []),
    ("no_such_method", grpc.StatusCode.UNIMPLEMENTED, None, []),
])
def test_the_servers_status_ends_the_call(server: tuple[str, Handlers], method: str, code: grpc.StatusCode,
                                          details: str | None, before: list[bytes]) -> None:
    addr, _ = server
    got: list[bytes] = []
    with pytest.raises(grpc.RpcError) as err:
        for m in stream_call(addr, f"/test.Stream/{method}", b"", 10.0, 1 << 20):
            got.append(bytes(m))
    assert isinstance(err.value, WireRpcError) and err.value.code() is code
    if details is not None:
        assert err.value.details() == details
    assert got == before


def test_a_message_over_the_limit_is_refused(server: tuple[str, Handlers]) -> None:
    addr, _ = server
    with pytest.raises(WireRpcError) as err:
        call(addr, "sizes", max_message=1 << 20)
    assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"{5 << 20 | 7} vs. {1 << 20}" in err.value.details()


def test_silence_longer_than_the_idle_timeout_is_a_deadline(server: tuple[str, Handlers]) -> None:
    addr, _ = server
    got: list[bytes] = []
    with pytest.raises(WireRpcError) as err:   # the server's second message comes after 3 s of silence
        for m in stream_call(addr, "/test.Stream/silent", b"", 0.5, 1 << 20):
            got.append(bytes(m))
    assert err.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED and got == [b"hello"]


def test_no_server_is_unavailable() -> None:
    with pytest.raises(WireRpcError) as err:
        call(f"127.0.0.1:{free_port()}", "sizes")
    assert err.value.code() is grpc.StatusCode.UNAVAILABLE


def test_a_caller_that_stops_early_cancels_the_call(server: tuple[str, Handlers]) -> None:
    addr, handlers = server
    stream: Any = stream_call(addr, "/test.Stream/endless", b"", 10.0, 1 << 20)
    assert len(next(stream)) == 65536
    stream.close()
    assert handlers.cancelled.wait(10), "the server never saw the call end"
    assert call(addr, "echo", b"abc")  # the server still serves
