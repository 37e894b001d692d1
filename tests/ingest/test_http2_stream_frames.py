"""``ingest.http2.stream`` against a scripted HTTP/2 server: the frame shapes grpcio never sends
(padding, CONTINUATION, GOAWAY, windows of 0) and broken answers, each with its expected outcome."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from hpack import Encoder

from ingest.http2.framing import PREFACE, WireRpcError, frame
from ingest.http2.stream import stream_call

DATA, HEADERS, RST, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS, PADDED, PRIORITY = 0x1, 0x4, 0x8, 0x20


class Peer:
    """The server side of one connection: reads the client's frames, sends scripted ones."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.file = conn.makefile("rb")
        assert self.file.read(len(PREFACE)) == PREFACE
        self.encoder = Encoder()
        self.request_data = 0      # DATA bytes of the request received so far

    def send(self, *frames: bytes) -> None:
        self.conn.sendall(b"".join(frames))

    def headers(self, *pairs: tuple[str, str]) -> bytes:
        return self.encoder.encode(list(pairs))

    def read_frame(self) -> tuple[int, int, int, bytes]:
        head = self.file.read(9)
        payload = self.file.read(int.from_bytes(head[:3], "big"))
        typ, flags = head[3], head[4]
        if typ == DATA:
            self.request_data += len(payload)
        return typ, flags, int.from_bytes(head[5:9], "big"), payload

    def read_request(self) -> None:
        while True:
            typ, flags, _, _ = self.read_frame()
            if typ == DATA and flags & END_STREAM:
                return


def message(body: bytes) -> bytes:
    return b"\0" + len(body).to_bytes(4, "big") + body


def run(script: Callable[[Peer], None], request: bytes = b"req") -> tuple[Any, list[bytes]]:
    """Serve one connection with ``script``; return (outcome, messages received) where outcome is
    "OK" or the WireRpcError."""
    listener = socket.create_server(("127.0.0.1", 0))
    failures: list[BaseException] = []

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            script(Peer(conn))
            time.sleep(0.2)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)
        finally:
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    got: list[bytes] = []
    outcome: Any = "OK"
    try:
        for m in stream_call(f"127.0.0.1:{listener.getsockname()[1]}", "/t.S/M", request, 5.0, 1 << 24):
            got.append(bytes(m))
    except WireRpcError as exc:
        outcome = exc
    thread.join(10)
    listener.close()
    assert not failures, failures
    return outcome, got


def test_padding_priority_and_continuation_frames() -> None:
    bodies = [b"hello", b"", b"world" * 10_000]

    def script(p: Peer) -> None:
        p.send(frame(SETTINGS, 0, 0))
        p.read_request()
        block = p.headers((":status", "200"), ("content-type", "application/grpc"))
        pad = bytes([7])
        p.send(frame(HEADERS, PADDED | PRIORITY, 1, pad + b"\0\0\0\3\x10" + block[:2] + bytes(7)),
               frame(CONTINUATION, 0, 1, block[2:3]), frame(CONTINUATION, END_HEADERS, 1, block[3:]))
        data = b"".join(map(message, bodies))
        for i in range(0, len(data), 777):                      # messages split across padded frames
            p.send(frame(DATA, PADDED, 1, bytes([13]) + data[i:i + 777] + bytes(13)))
        p.send(frame(PING, 0, 0, b"12345678"))
        trailers = p.headers(("grpc-status", "0"))
        p.send(frame(HEADERS, END_STREAM, 1, trailers[:1]), frame(CONTINUATION, END_HEADERS, 1, trailers[1:]))

    assert run(script) == ("OK", bodies)


def test_the_request_waits_for_the_servers_windows() -> None:
    request = b"r" * 200_000
    sent: list[int] = []

    def script(p: Peer) -> None:
        p.send(frame(SETTINGS, 0, 0, (4).to_bytes(2, "big") + (0).to_bytes(4, "big")))   # stream window 0
        while p.request_data < 65_535:                          # the connection window still allows 65,535
            p.read_frame()
        time.sleep(0.3)
        sent.append(p.request_data)
        p.send(frame(SETTINGS, 0, 0, (4).to_bytes(2, "big") + (100_000).to_bytes(4, "big")),
               frame(WINDOW_UPDATE, 0, 0, (1 << 20).to_bytes(4, "big")))
        while p.request_data < 100_000:
            p.read_frame()
        time.sleep(0.3)
        sent.append(p.request_data)
        p.send(frame(WINDOW_UPDATE, 0, 1, (1 << 20).to_bytes(4, "big")))
        p.read_request()
        sent.append(p.request_data)
        p.send(frame(HEADERS, END_HEADERS, 1, p.headers((":status", "200"))),
               frame(DATA, 0, 1, message(b"ok")),
               frame(HEADERS, END_STREAM | END_HEADERS, 1, p.headers(("grpc-status", "0"))))

    assert run(script, request) == ("OK", [b"ok"])
    assert sent == [65_535, 100_000, len(message(request))]


def _status_case(*frames_after_request: Callable[[Peer], bytes]) -> Callable[[Peer], None]:
    def script(p: Peer) -> None:
        p.send(frame(SETTINGS, 0, 0))
        p.read_request()
        p.send(*(make(p) for make in frames_after_request))
    return script


@pytest.mark.parametrize("script, code, details", [
    (_status_case(lambda p: frame(HEADERS, END_STREAM | END_HEADERS, 1, p.headers(
        (":status", "200"), ("grpc-status", "5"), ("grpc-message", "nope%20x")))),
     grpc.StatusCode.NOT_FOUND, "nope x"),
    (_status_case(lambda p: frame(GOAWAY, 0, 0, bytes(8))), grpc.StatusCode.UNAVAILABLE, "stream not processed"),
    (_status_case(lambda p: frame(RST, 0, 1, bytes(4))), grpc.StatusCode.INTERNAL, "reset by the server"),
    (_status_case(lambda p: frame(HEADERS, END_HEADERS, 1, p.headers((":status", "200"))),
                  lambda p: frame(DATA, 0, 1, message(b"abcdef")[:7])),
     grpc.StatusCode.UNAVAILABLE, "connection to 127.0.0.1"),   # closed, or reset with our ACK unread
    (_status_case(lambda p: frame(HEADERS, END_STREAM | END_HEADERS, 1, p.headers((":status", "503")))),
     grpc.StatusCode.UNAVAILABLE, "HTTP status 503"),
    (_status_case(lambda p: frame(HEADERS, END_STREAM | END_HEADERS, 1, p.headers(
        (":status", "200"), ("grpc-status", "abc")))), grpc.StatusCode.INTERNAL, "malformed grpc-status"),
    (_status_case(lambda p: frame(HEADERS, PADDED | END_HEADERS, 1, bytes([200]) + p.headers((":status", "200")))),
     grpc.StatusCode.INTERNAL, "padding longer than the frame"),
], ids=["trailers-only", "goaway-before-our-stream", "rst", "eof-inside-a-message", "http-503",
        "bad-grpc-status", "bad-padding"])
def test_broken_or_refused_answers_end_with_the_right_status(script: Callable[[Peer], None],
                                                             code: grpc.StatusCode, details: str) -> None:
    outcome, got = run(script)
    assert isinstance(outcome, WireRpcError) and outcome.code() is code and details in outcome.details()
    assert got == []


def test_a_graceful_goaway_lets_our_stream_finish() -> None:
    def script(p: Peer) -> None:
        p.send(frame(SETTINGS, 0, 0))
        p.read_request()
        p.send(frame(GOAWAY, 0, 0, (0x7FFFFFFF).to_bytes(4, "big") + bytes(4)),
               frame(HEADERS, END_HEADERS, 1, p.headers((":status", "200"))),
               frame(GOAWAY, 0, 0, (1).to_bytes(4, "big") + bytes(4)),
               frame(0x42, 0, 0, b"x" * 100_000),              # an unknown frame type, larger than the buffer
               frame(DATA, 0, 1, message(b"ok")),
               frame(HEADERS, END_STREAM | END_HEADERS, 1, p.headers(("grpc-status", "0"))))

    assert run(script) == ("OK", [b"ok"])
