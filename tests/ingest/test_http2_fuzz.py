"""A fuzz target for the pump's HTTP/2 server (``ingest.http2.server.GrpcConnection``: the frame parser,
the HPACK decoder behind it, streams, flow control, dispatch): seeded hypothesis sequences of frames,
valid and broken, fed in random cuts to one connection over an in-memory transport.

Whatever a client sends, the server must answer as RFC 9113 says (a connection error ends the
connection with GOAWAY, a stream error resets one stream), never reach its "bug of ours" path (an
exception logged as INTERNAL_ERROR), and keep the bytes it holds bounded. Run briefly in
``make test`` (a bounded number of examples, derandomized); set ``FUZZ_EXAMPLES`` to run it longer.
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import pytest
from hpack import Encoder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.http2 import server
from ingest.http2.calls import Call, Method
from ingest.http2.framing import PREFACE, frame

DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, END_HEADERS, PADDED, PRIO = 0x1, 0x4, 0x8, 0x20
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "400"))


class Transport(asyncio.Transport):
    """What the connection writes, kept; closing is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.written += data

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.written += data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def get_write_buffer_size(self) -> int:
        return 0


def _echo(request: bytes, call: Call) -> bytes:
    return request[:16]


async def _echo_later(request: bytes, call: Call) -> bytes:
    await asyncio.sleep(0)
    return request[:16]


async def _numbers(request: bytes, call: Call) -> Any:
    for i in range(3):
        yield bytes([i])


METHODS = {"/fuzz.S/Echo": Method(_echo), "/fuzz.S/Later": Method(_echo_later),
           "/fuzz.S/Stream": Method(_numbers, streaming=True)}


def _block(path: str, extra: list[tuple[str, str]]) -> bytes:
    return Encoder().encode([(":method", "POST"), (":scheme", "http"), (":path", path),
                             ("content-type", "application/grpc"), *extra])


sids = st.sampled_from([0, 1, 1, 3, 3, 5, 2, 0x7fffffff])
heads = st.builds(_block, st.sampled_from([*METHODS, "/fuzz.S/Missing", ""]),
                  st.lists(st.sampled_from([("grpc-timeout", "1S"), ("grpc-timeout", "x"), ("grpc-encoding", "gzip"),
                                            ("grpc-encoding", "br"), ("te", "trailers")]), max_size=2))
messages = st.builds(lambda flag, body, lie: bytes([flag]) + max(0, len(body) + lie).to_bytes(4, "big") + body,
                     st.sampled_from([0, 0, 1]), st.binary(max_size=40), st.sampled_from([0, 0, 1, -1, 1 << 20]))
payloads = st.one_of(st.binary(max_size=48), heads, messages,
                     st.integers(0, 2**32 - 1).map(lambda n: n.to_bytes(4, "big")),
                     st.lists(st.tuples(st.integers(0, 8), st.integers(0, 2**32 - 1)), max_size=3)
                     .map(lambda kv: b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in kv)))
frames = st.builds(lambda typ, flags, sid, payload: frame(typ, flags, sid, payload),
                   st.sampled_from([DATA, HEADERS, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY,
                                    WINDOW_UPDATE, CONTINUATION, 0x42]),
                   st.sampled_from([0, END_STREAM, END_HEADERS, END_STREAM | END_HEADERS, PADDED, PRIO, 0xff]),
                   sids, payloads)
# a request done right, so sequences reach the states after it (replies, windows, resets of live streams)
good = st.builds(lambda sid, path, body: frame(HEADERS, END_HEADERS, sid, _block(path, []))
                 + frame(DATA, END_STREAM, sid, b"\x00" + len(body).to_bytes(4, "big") + body),
                 st.sampled_from([1, 3, 5]), st.sampled_from(list(METHODS)), st.binary(max_size=20))


@pytest.fixture
def bugs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """What the server logs at ERROR: its "bug of ours" path."""
    caplog.set_level(logging.ERROR, logger=server.__name__)
    return caplog


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.one_of(frames, good), max_size=12), st.lists(st.integers(1, 64), max_size=6))
def test_no_frame_sequence_reaches_the_servers_bug_path(bugs: pytest.LogCaptureFixture, sequence: list[bytes],
                                                        cuts: list[int]) -> None:
    bugs.clear()
    wire = b"".join(sequence)

    async def run() -> tuple[Transport, server.GrpcConnection]:
        conn = server.GrpcConnection(METHODS, max_message=1 << 16, peer="fuzz", cn=None)
        transport = Transport()
        at = 0
        conn.start(transport, PREFACE)
        for cut in cuts:                       # the bytes arrive in random pieces
            conn.data_received(wire[at:at + cut])
            at += cut
            await asyncio.sleep(0)
        conn.data_received(wire[at:])
        for _ in range(3):                     # the handlers' tasks run
            await asyncio.sleep(0)
        conn.connection_lost(None)
        await asyncio.sleep(0)
        return transport, conn

    transport, conn = asyncio.run(run())
    assert [r.getMessage() for r in bugs.records if r.levelno >= logging.ERROR] == []
    assert len(conn.buf) < 9 + server.MAX_FRAME           # never more than one unfinished frame held
    assert conn.partial <= conn.partial_limit
    assert transport.written[3] == SETTINGS                # our SETTINGS went first


def test_the_fuzz_target_can_find_a_bug(monkeypatch: pytest.MonkeyPatch, bugs: pytest.LogCaptureFixture) -> None:
    """A SETTINGS handler that breaks is found by the same check: the target can fail."""
    async def run() -> None:
        conn = server.GrpcConnection(METHODS, max_message=1 << 16, peer="fuzz", cn=None)
        monkeypatch.setattr(conn, "_settings", lambda *a: 1 / 0)
        conn.start(Transport(), PREFACE + frame(SETTINGS, 0, 0, b""))

    asyncio.run(run())
    assert any("connection of fuzz failed" in r.getMessage() for r in bugs.records)
