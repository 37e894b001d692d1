"""The front door: gRPC and HTTP/1.1 on one port (a real pump process: grpcio and a raw HTTP/1.1
client on its ``addr``, TiDB's ``PUT /state/{id}/pause``), and the hand-written HTTP/2 server under
raw frames (an in-process ``FrontDoor`` with test methods): flow control, many streams, deadlines,
gzip, and protocol violations answered with the RFC's error codes."""
from __future__ import annotations

import asyncio
import gzip
import io
import json
import logging
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hpack import Encoder

from binlake.drain_config import DrainerConfig
from binlake.follow import Follower
from ingest.frontdoor import FrontDoor
from ingest.http2.calls import Call, Method, RpcAbort
from ingest.http2.framing import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    frame,
)
from ingest.http2.hpack_decoder import HpackDecoder
from ingest.http2.server import (
    COMPRESSION_ERROR,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
)
from ingest.httpserver import GuardedHandler
from ingest.peerlog import PeerLog
from ingest.registry import load_registry
from ingest.registry.base import OFFLINE, PAUSED, PUMP
from ingest.security import SecurityConfig
from ingest.state_route import state_change
from schemas import binlake_pb2, pump_pb2
from tests.ingest.helpers import commit, prewrite, read_frame
from tests.waiting import wait_for
from upstream.local import PumpProcess

# ---- a raw HTTP/2 client ------------------------------------------------------------------------


class RawH2:
    """Frames to and from a server, nothing checked on our side."""

    def __init__(self, port: int, settings: bytes = b"") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))
        self.enc = Encoder()
        self.dec = HpackDecoder()
        self.buf = b""

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))

    def headers(self, sid: int, path: str, end_stream: bool = False, extra: list[tuple[str, str]] | None = None,
                content_type: str = "application/grpc") -> bytes:
        block = self.enc.encode([(":method", "POST"), (":scheme", "http"), (":path", path),
                                 (":authority", "test"), ("content-type", content_type), ("te", "trailers"),
                                 *(extra or [])])
        return frame(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), sid, block)

    @staticmethod
    def message(sid: int, payload: bytes, end_stream: bool = True, compressed: bool = False) -> bytes:
        body = bytes((1 if compressed else 0,)) + len(payload).to_bytes(4, "big") + payload
        return frame(DATA, END_STREAM if end_stream else 0, sid, body)

    def read_frame(self) -> tuple[int, int, int, bytes] | None:
        """(type, flags, stream, payload), or None once the server closed the connection."""
        got, self.buf = read_frame(self.sock, self.buf)
        return got

    def until(self, want: Callable[[int, int, int, bytes], bool]) -> tuple[int, int, int, bytes]:
        """Frames are read (answering nothing) until ``want`` accepts one; fails if the connection ends first."""
        while True:
            got = self.read_frame()
            assert got is not None, "the server closed the connection first"
            if got[0] == HEADERS:
                decoded = self.dec.decode(got[3])
                self.last_headers = {k.decode(): v.decode() for k, v in decoded}
            if want(*got):
                return got

    def goaway_code(self) -> int | None:
        """The error code of the server's GOAWAY, once the connection ends (None: no GOAWAY)."""
        code = None
        while (got := self.read_frame()) is not None:
            if got[0] == GOAWAY:
                code = int.from_bytes(got[3][4:8], "big")
        return code

    def status_of(self, sid: int) -> tuple[str, str]:
        """The grpc-status and grpc-message of stream ``sid`` (its HEADERS carrying END_STREAM)."""
        self.until(lambda t, f, s, p: t == HEADERS and s == sid and bool(f & END_STREAM))
        return self.last_headers.get("grpc-status", ""), self.last_headers.get("grpc-message", "")

    def close(self) -> None:
        self.sock.close()


# ---- an in-process door with test methods -------------------------------------------------------


class Door:
    """A FrontDoor on loopback serving ``/t.T/Echo`` (unary), ``/t.T/Slow`` (never answers),
    ``/t.T/Count`` (streams N messages of N bytes), ``/t.T/Forever`` (streams until cancelled) and an
    HTTP handler."""

    def __init__(self, max_message: int = 1 << 20) -> None:
        self.cancelled = threading.Event()
        self.door = FrontDoor({"/t.T/Echo": Method(self.echo), "/t.T/Slow": Method(self.slow),
                               "/t.T/Count": Method(self.count, streaming=True),
                               "/t.T/Forever": Method(self.forever, streaming=True)},
                              Hello, SecurityConfig(), max_message, PeerLog(logging.getLogger("t")),
                              "test-door")
        self.port = self.door.listen("127.0.0.1:0")

    @staticmethod
    def echo(raw: bytes, call: Call) -> bytes:
        if raw == b"abort":
            raise RpcAbort(grpc.StatusCode.FAILED_PRECONDITION, "asked to fail: 100% ☃")
        return raw

    @staticmethod
    async def slow(raw: bytes, call: Call) -> bytes:
        await asyncio.sleep(60)
        return raw

    @staticmethod
    async def count(raw: bytes, call: Call) -> AsyncIterator[bytes]:
        n = int(raw)
        for i in range(n):
            yield bytes((i % 256,)) * n

    async def forever(self, raw: bytes, call: Call) -> AsyncIterator[bytes]:
        try:
            while True:
                yield b"tick"
                await asyncio.sleep(0.01)
        finally:
            self.cancelled.set()

    def stop(self) -> None:
        self.door.stop(grace=1)


class Hello(GuardedHandler):
    def do_GET(self) -> None:
        self.send_body(200, f"hello {self.path}".encode(), "text/plain")


@pytest.fixture
def door() -> Iterator[Door]:
    d = Door()
    yield d
    d.stop()


def _channel(port: int) -> grpc.Channel:
    return grpc.insecure_channel(f"127.0.0.1:{port}")


def _ident(b: bytes) -> bytes:
    return b


def test_grpcio_unary_and_streams_and_http_on_one_port(door: Door) -> None:
    with _channel(door.port) as ch:
        echo = ch.unary_unary("/t.T/Echo", request_serializer=_ident, response_deserializer=_ident)
        assert echo(b"x" * 300_000, timeout=10) == b"x" * 300_000           # frames and windows both ways
        assert echo(b"", timeout=10) == b""
        with pytest.raises(grpc.RpcError) as failed:
            echo(b"abort", timeout=10)
        assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert failed.value.details() == "asked to fail: 100% ☃"             # percent-encoded on the wire
        count = ch.unary_stream("/t.T/Count", request_serializer=_ident, response_deserializer=_ident)
        got = list(count(b"3000", timeout=30))                               # 9 MB: over every window
        assert [len(m) for m in got] == [3000] * 3000 and got[7] == bytes((7,)) * 3000
        futures = [echo.future(str(i).encode(), timeout=10) for i in range(500)]   # many streams at once
        assert [f.result() for f in futures] == [str(i).encode() for i in range(500)]
        for path, code in (("/t.T/Nope", grpc.StatusCode.UNIMPLEMENTED), ("/x.Y/Echo", grpc.StatusCode.UNIMPLEMENTED)):
            with pytest.raises(grpc.RpcError) as missing:
                ch.unary_unary(path, request_serializer=_ident, response_deserializer=_ident)(b"", timeout=5)
            assert missing.value.code() == code
        with pytest.raises(grpc.RpcError) as late:
            ch.unary_unary("/t.T/Slow", request_serializer=_ident, response_deserializer=_ident)(b"", timeout=0.3)
        assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    with socket.create_connection(("127.0.0.1", door.port), timeout=5) as s:   # HTTP/1.1, kept alive
        for path in ("/a", "/b"):
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            head = _read_response(s)
            assert head.startswith(b"HTTP/1.1 200") and head.endswith(f"hello {path}".encode())


def test_http1_requests_that_never_finish_are_cut_off(door: Door, monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest import httpserver
    monkeypatch.setattr(httpserver, "REQUEST_TIMEOUT", 0.5)
    for partial in (b"PUT /x HTTP/1.1\r\nContent-Length: 10\r\n\r\n12345", b"GET /slow HTTP/1.1\r\nHost"):
        with socket.create_connection(("127.0.0.1", door.port), timeout=5) as s:   # recv fails after 5 s
            s.sendall(partial)
            assert s.recv(100) == b""                                        # closed by the server


def _read_response(s: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += s.recv(4096)
    return head + b"\r\n\r\n" + body


def test_the_server_honours_grpc_timeout_and_cancels_the_stream(door: Door) -> None:
    c = RawH2(door.port)
    try:
        c.sock.settimeout(5)                                                  # the deadline comes long before
        c.send(c.headers(1, "/t.T/Forever", extra=[("grpc-timeout", "200m")]), c.message(1, b""))
        assert c.status_of(1)[0] == str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])
        assert door.cancelled.wait(5), "the stream's iterator was not cancelled at the deadline"
        c.send(c.headers(3, "/t.T/Echo", extra=[("grpc-timeout", "xx")]), c.message(3, b""))
        assert c.status_of(3)[0] == str(grpc.StatusCode.INTERNAL.value[0])    # malformed timeout
    finally:
        c.close()


def test_gzip_requests_get_gzip_answers_and_a_bomb_is_refused(door: Door) -> None:
    c = RawH2(door.port)
    try:
        c.send(c.headers(1, "/t.T/Echo", extra=[("grpc-encoding", "gzip"), ("grpc-accept-encoding", "gzip")]),
               c.message(1, gzip.compress(b"hello"), compressed=True))
        _, _, _, data = c.until(lambda t, f, s, p: t == DATA and s == 1)
        assert data[0] == 1 and gzip.decompress(data[5:]) == b"hello"
        assert c.status_of(1)[0] == "0"
        bomb = gzip.compress(bytes(4 << 20))                                  # inflates past 1 MiB
        c.send(c.headers(3, "/t.T/Echo", extra=[("grpc-encoding", "gzip")]), c.message(3, bomb, compressed=True))
        assert c.status_of(3)[0] == str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
        c.send(c.headers(5, "/t.T/Echo", extra=[("grpc-encoding", "br")]), c.message(5, b"x", compressed=True))
        assert c.status_of(5)[0] == str(grpc.StatusCode.UNIMPLEMENTED.value[0])
        c.send(c.headers(7, "/t.T/Echo"), c.message(7, b"x", compressed=True))   # flag without encoding
        assert c.status_of(7)[0] == str(grpc.StatusCode.INTERNAL.value[0])
        whole = gzip.compress(bytes(range(256)) * 40)
        for sid, cut in ((9, whole[:len(whole) // 2]), (11, whole + b"trailing")):   # truncated, extra bytes
            c.send(c.headers(sid, "/t.T/Echo", extra=[("grpc-encoding", "gzip")]), c.message(sid, cut, compressed=True))
            assert c.status_of(sid)[0] == str(grpc.StatusCode.INVALID_ARGUMENT.value[0])
    finally:
        c.close()


def test_stream_errors_leave_the_connection_serving(door: Door) -> None:
    c = RawH2(door.port)
    try:
        big = bytes(2 << 20)                                                  # declared over max_message
        c.send(c.headers(1, "/t.T/Echo"), frame(DATA, 0, 1, b"\x00" + len(big).to_bytes(4, "big") + big[:1000]))
        assert c.status_of(1)[0] == str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
        c.send(c.headers(3, "/t.T/Echo", end_stream=True))                   # no message at all
        assert c.status_of(3)[0] == str(grpc.StatusCode.INVALID_ARGUMENT.value[0])
        c.send(c.headers(5, "/t.T/Echo"), c.message(5, b"a", end_stream=False), c.message(5, b"b"))  # two messages
        assert c.status_of(5)[0] == str(grpc.StatusCode.INVALID_ARGUMENT.value[0])
        c.send(c.headers(7, "/t.T/Echo", content_type="text/html"), c.message(7, b""))
        c.until(lambda t, f, s, p: t == HEADERS and s == 7)
        assert c.last_headers[":status"] == "415"
        c.send(frame(WINDOW_UPDATE, 0, 7, (1).to_bytes(4, "big")))           # on a closed stream: ignored
        c.send(c.headers(11, "/t.T/Echo"), c.message(11, b"still here"))
        _, _, _, data = c.until(lambda t, f, s, p: t == DATA and s == 11)
        assert data[5:] == b"still here"
        c.send(frame(PING, 0, 0, b"12345678"))
        _, flags, _, payload = c.until(lambda t, f, s, p: t == PING)
        assert flags == 1 and payload == b"12345678"
    finally:
        c.close()


@pytest.mark.parametrize("attack, code", [
    (lambda c: frame(DATA, 0, 0, b"x"), PROTOCOL_ERROR),                                      # DATA on stream 0
    (lambda c: frame(DATA, 0, 41, b"x"), PROTOCOL_ERROR),                                     # DATA on an idle stream
    (lambda c: c.headers(2, "/t.T/Echo"), PROTOCOL_ERROR),                                    # even stream id
    (lambda c: c.headers(5, "/t.T/Echo") + c.headers(3, "/t.T/Echo"), PROTOCOL_ERROR),       # stream ids go back
    (lambda c: frame(HEADERS, END_HEADERS, 1, b"\x80"), COMPRESSION_ERROR),                  # HPACK index 0
    (lambda c: frame(HEADERS, END_HEADERS, 1, b"\xff\xff\xff\xff\xff\x7f"), COMPRESSION_ERROR),
    (lambda c: (2 << 20).to_bytes(3, "big") + b"\x00\x00\x00\x00\x00\x01", FRAME_SIZE_ERROR),  # over MAX_FRAME
    (lambda c: frame(SETTINGS, 0, 0, b"\x00\x04\x80\x00\x00\x00"), FLOW_CONTROL_ERROR),     # window over 2^31-1
    (lambda c: frame(SETTINGS, 0, 0, b"\x00\x05\x00\x00\x00\x01"), PROTOCOL_ERROR),         # frame size too small
    (lambda c: frame(SETTINGS, 0, 0, b"\x00\x04\x00"), FRAME_SIZE_ERROR),
    (lambda c: frame(PING, 0, 0, b"1234"), FRAME_SIZE_ERROR),
    (lambda c: frame(WINDOW_UPDATE, 0, 0, bytes(4)), PROTOCOL_ERROR),
    (lambda c: frame(WINDOW_UPDATE, 0, 0, b"\x7f\xff\xff\xff"), FLOW_CONTROL_ERROR),
    (lambda c: frame(CONTINUATION, END_HEADERS, 1, b""), PROTOCOL_ERROR),                    # no HEADERS before
    (lambda c: frame(HEADERS, 0, 1, b"") + frame(PING, 0, 0, bytes(8)), PROTOCOL_ERROR),      # block interrupted
    (lambda c: frame(HEADERS, 0, 1, b"") + frame(CONTINUATION, 0, 1, bytes(200_000)) * 2, ENHANCE_YOUR_CALM),
    (lambda c: frame(5, 0, 1, bytes(4)), PROTOCOL_ERROR),                                     # PUSH_PROMISE
])
def test_connection_errors_get_goaway_with_the_rfc_code(door: Door, attack: Callable[[RawH2], bytes],
                                                        code: int) -> None:
    c = RawH2(door.port)
    try:
        c.send(attack(c))
        assert c.goaway_code() == code
        assert c.buf == b"", "bytes after the GOAWAY frame: its length is wrong"
    finally:
        c.close()
    with _channel(door.port) as ch:                                           # the server serves on
        assert ch.unary_unary("/t.T/Echo", request_serializer=_ident, response_deserializer=_ident)(
            b"ok", timeout=5) == b"ok"


def test_a_client_breaking_many_connections_is_logged_once_a_minute(door: Door, caplog: pytest.LogCaptureFixture,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """However many connections one client ends with a protocol error, the pump writes one line about
    it per minute; the next line says how many were held back."""
    from ingest.http2 import server

    monkeypatch.setattr(server, "protocol_errors", PeerLog(server.log))
    caplog.set_level(logging.INFO, logger=server.log.name)
    def break_one() -> None:
        c = RawH2(door.port)
        try:
            c.send(frame(PING, 0, 0, b"1234"))
            assert c.goaway_code() == FRAME_SIZE_ERROR
        finally:
            c.close()

    for _ in range(40):
        break_one()
    lines = [r.getMessage() for r in caplog.records if r.name == server.log.name]
    assert lines == ["127.0.0.1: closed an HTTP/2 connection: malformed PING"], lines
    server.protocol_errors._last["127.0.0.1"] = (-1e9, 39)      # a minute later: one line, with the count
    break_one()
    assert [r.getMessage() for r in caplog.records if r.name == server.log.name][-1].endswith(
        "(39 more from this client held back)")


def test_unfinished_requests_over_all_connections_are_bounded(door: Door) -> None:
    """Many clients each holding an unfinished request within its connection's limit cannot exhaust
    the process: past the front door's budget a request is answered RESOURCE_EXHAUSTED, and what a
    closed connection held is given back."""
    door.door.budget.limit = 3 << 20                  # three unfinished 1 MiB messages, over all connections
    chunk = bytes(16 << 10)

    def unfinished(c: RawH2, sync: bool = True) -> None:   # a 1 MiB message, all but its last 5 bytes sent
        size = (1 << 20) - 5
        c.send(c.headers(1, "/t.T/Echo"), frame(DATA, 0, 1, b"\x00" + size.to_bytes(4, "big")))
        sent = 0
        while sent + len(chunk) < size - 5:
            c.send(frame(DATA, 0, 1, chunk))
            sent += len(chunk)
        c.send(frame(DATA, 0, 1, bytes(size - 5 - sent)))
        if sync:
            c.send(frame(PING, 0, 0, b"12345678"))
            c.until(lambda t, f, s, p: t == PING)    # everything before the PING was read

    held = [RawH2(door.port) for _ in range(3)]
    try:
        for c in held:
            unfinished(c)
        assert door.door.budget.held > (3 << 20) - (64 << 10)
        extra = RawH2(door.port)
        try:
            unfinished(extra, sync=False)
            code, message = extra.status_of(1)
            assert code == str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]), message
            assert "more than 3145728 bytes of unfinished requests over all its connections" in message
        finally:
            extra.close()
        held.pop().close()                             # its bytes go back to the budget
        wait_for(lambda: door.door.budget.held < (2 << 20) + (64 << 10), 10, "the closed connection's bytes freed")
        again = RawH2(door.port)
        try:
            again.send(again.headers(1, "/t.T/Echo"), again.message(1, b"room again"))
            assert again.status_of(1)[0] == "0"
        finally:
            again.close()
    finally:
        for c in held:
            c.close()


def test_streams_over_the_limit_are_refused_and_rst_cancels(door: Door) -> None:
    from ingest.http2 import server
    c = RawH2(door.port)
    try:
        opened = b"".join(c.headers(1 + 2 * i, "/t.T/Slow") for i in range(server.MAX_STREAMS + 1))
        c.send(opened)
        last = 1 + 2 * server.MAX_STREAMS
        _, _, sid, payload = c.until(lambda t, f, s, p: t == RST_STREAM)
        assert sid == last and int.from_bytes(payload, "big") == REFUSED_STREAM
        c.send(frame(RST_STREAM, 0, 1, (8).to_bytes(4, "big")))                # the client cancels stream 1
        c.send(c.headers(last + 2, "/t.T/Echo"), c.message(last + 2, b"room again"))
        _, _, _, data = c.until(lambda t, f, s, p: t == DATA and s == last + 2)
        assert data[5:] == b"room again"
    finally:
        c.close()


def test_a_connection_lost_with_open_streams_ends_them_quietly(door: Door, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            c = RawH2(door.port)
            c.send(*(c.headers(1 + 2 * i, "/t.T/Slow") for i in range(5)),
                   c.headers(11, "/t.T/Forever"), c.message(11, b""))
            c.until(lambda t, f, s, p: t == DATA and s == 11)
            c.close()
        with _channel(door.port) as ch:
            assert ch.unary_unary("/t.T/Echo", request_serializer=_ident, response_deserializer=_ident)(
                b"after", timeout=5) == b"after"
        assert door.cancelled.wait(5)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


# ---- a real pump: HTTP/1.1 and gRPC on addr ------------------------------------------------------


@pytest.fixture
def pump(pumps: Callable[..., PumpProcess]) -> PumpProcess:
    return pumps("pump-door")


@pytest.mark.parametrize("action, final", [("pause", PAUSED), ("close", OFFLINE)])
def test_pump_addr_serves_grpc_and_http_and_binlogctl_state_changes(pump: PumpProcess, tso: Any,
                                                                    ts: Callable[[], int], action: str,
                                                                    final: str) -> None:
    cid = int(tso.cluster_id)
    host, port = pump.addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s, _channel(int(port)) as ch:
        write = ch.unary_unary("/binlog.Pump/WriteBinlog", request_serializer=pump_pb2.WriteBinlogReq.SerializeToString,
                               response_deserializer=pump_pb2.WriteBinlogResp.FromString)
        start = ts()
        write(pump_pb2.WriteBinlogReq(clusterID=cid, payload=prewrite(start)), timeout=10)
        write(pump_pb2.WriteBinlogReq(clusterID=cid, payload=commit(start, ts())), timeout=10)   # close waits for it
        s.sendall(b"GET /status HTTP/1.1\r\nHost: pump\r\n\r\n")
        status = json.loads(_read_response(s).partition(b"\r\n\r\n")[2])
        assert status["status"]["pump-door"]["state"] == "online"
        watermark = ch.unary_unary("/binlake.v1.PumpScan/Watermark",
                                   request_serializer=binlake_pb2.WatermarkRequest.SerializeToString,
                                   response_deserializer=binlake_pb2.WatermarkResponse.FromString)
        assert watermark(binlake_pb2.WatermarkRequest(cluster_id=cid), timeout=10).node_id == "pump-door"
        s.sendall(b"PUT /state/another/pause HTTP/1.1\r\nHost: pump\r\nContent-Length: 0\r\n\r\n")
        assert _read_response(s).startswith(b"HTTP/1.1 400")
        s.sendall(f"PUT /state/pump-door/{action} HTTP/1.1\r\nHost: pump\r\n\r\n".encode())   # binlogctl's
        answer = _read_response(s)
        assert answer.startswith(b"HTTP/1.1 200") and f"apply state {action} success".encode() in answer
    registry = load_registry(pump.registry)
    try:
        wait_for(lambda: (n := registry.get_node(PUMP, "pump-door")) is not None and n.state == final, 30,
                 lambda: pump.log_tail())
    finally:
        registry.close()


@pytest.mark.parametrize("action, final", [("pause", PAUSED), ("close", OFFLINE)])
def test_the_follow_drainers_cistern_port_answers_binlogctl(tmp_path: Path, action: str, final: str) -> None:
    """``binlogctl -cmd pause-drainer`` sends ``PUT /state/{id}/pause`` to the drainer's registered
    host, its Cistern gRPC address: answered there, beside ``Notify``."""
    options = DrainerConfig(registry=f"file://{tmp_path / 'registry.json'}", node_id="d-door",
                            addr="127.0.0.1:0", status_addr="127.0.0.1:0")
    follower = Follower(options, 1.0, io.StringIO())
    follower._start_servers()
    try:
        host, port = follower.advertise.rsplit(":", 1)
        with _channel(int(port)) as ch:
            notify = ch.unary_unary("/binlog.Cistern/Notify", request_serializer=_ident, response_deserializer=_ident)
            assert notify(b"", timeout=10) == b""
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"GET /status HTTP/1.1\r\nHost: d\r\n\r\n")
            assert "LastTS" in json.loads(_read_response(s).partition(b"\r\n\r\n")[2])
            s.sendall(b"PUT /state/another/pause HTTP/1.1\r\nHost: d\r\n\r\n")   # as the pump answers it
            wrong = _read_response(s)
            assert wrong.startswith(b"HTTP/1.1 400") and json.loads(wrong.partition(b"\r\n\r\n")[2])["code"] == 3
            assert not follower.stop.is_set()
            s.sendall(f"PUT /state/d-door/{action} HTTP/1.1\r\nHost: d\r\n\r\n".encode())
            answer = _read_response(s)
            assert answer.startswith(b"HTTP/1.1 200") and f"apply state {action} success".encode() in answer
        assert follower.stop.is_set() and follower.final_state == final
    finally:
        assert follower.door is not None
        follower.door.stop(0)


def test_the_state_route_binlogctl_and_binlake_ctl_send() -> None:
    """One ``/state/<id>/<action>`` for pumps and drainers: the id compared URL-decoded (``binlake ctl``
    quotes it), TiDB Binlog's JSON answer, the node's refusal as a 400."""
    applied: list[str] = []

    def apply(action: str) -> str | None:
        applied.append(action)
        return "pump h:8250 is paused, state can only change when online" if len(applied) > 1 else None

    def answer(path: str) -> tuple[int, dict[str, Any]] | None:
        got = state_change(path, "pump", "h:8250", apply)
        return None if got is None else (got[0], json.loads(got[1]))

    assert answer("/status") is None and answer("/state/h:8250") is None
    assert answer("/state/h%3A8250/pause") == (200, {"message": "apply state pause success", "code": 200,
                                                     "data": None})
    assert answer("/state/h:8250/close?x=1") == (400, {"message": "pump h:8250 is paused, state can only "
                                                       "change when online", "code": 3, "data": None})
    assert answer("/state/other/pause") == (400, {"message": "invalid nodeID other, this pump is h:8250",
                                                  "code": 3, "data": None})
    status, body = answer("/state/h:8250/online") or (0, {})
    assert status == 400 and body["code"] == 3 and "invalid action online" in body["message"]
    assert applied == ["pause", "close"]
