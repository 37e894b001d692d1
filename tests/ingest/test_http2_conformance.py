"""RFC 9113 conformance of the pump's HTTP/2 server, case by case, against a real pump process: raw
frames on a socket to its gRPC address, each case citing the section it checks and expecting what
that section says.

Where else the server's protocol handling is tested: ``test_front_door.py`` (an in-process front
door with test methods: connection errors and their GOAWAY codes, stream errors, refused streams,
flow control), ``test_http2_fuzz.py`` (random frame sequences never reach the server's bug path),
``test_hostile_input.py`` (hostile gRPC requests on every pump method). Cases here that overlap
the first are kept because this suite runs them against the pump as it ships (its method table,
guard and front door).

Known deviation, by choice: a DATA frame on a stream the server already closed is ignored rather
than answered with RST_STREAM STREAM_CLOSED (§6.1): the server does not remember whether it reset
the stream, and after a reset §5.1 requires such frames to be ignored (a client still sending a
large refused message would otherwise draw one RST_STREAM per frame).
"""
from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.http2 import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PING,
    PREFACE,
    PRIORITY,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    HpackDecoder,
    frame,
    hpack_string,
)
from schemas import binlake_pb2, pump_pb2
from tests.ingest.helpers import read_frame
from upstream.local import LocalTSO, PumpProcess

pytestmark = pytest.mark.integration

# RFC 9113 §7 error codes
PROTOCOL_ERROR, FLOW_CONTROL_ERROR, STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM = 1, 3, 5, 6, 7
ACK, PADDED, PRIORITY_FLAG = 0x1, 0x8, 0x20
WATERMARK = "/binlake.v1.PumpScan/Watermark"
PULL = "/binlog.Pump/PullBinlogs"
TIMEOUT = 5.0


@pytest.fixture(scope="module")
def pump(tso: LocalTSO, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PumpProcess]:
    """One pump for the module's cases (each opens connections of its own)."""
    work: Path = tmp_path_factory.mktemp("conformance")
    p = PumpProcess(data_dir=work / "pump", pd_url=tso.url, registry=f"file://{work / 'registry.json'}",
                    node_id="pump-conformance", extra_args=["--heartbeat-interval", "0.5"])
    yield p.start()
    p.kill()


def field(name: bytes, value: bytes) -> bytes:
    """One header field as an HPACK literal without indexing (the name as given: no case folding)."""
    return b"\x00" + hpack_string(name) + hpack_string(value)


def request_block(path: str = WATERMARK, extra: tuple[tuple[bytes, bytes], ...] = (),
                  drop: tuple[bytes, ...] = ()) -> bytes:
    """A gRPC request's header block, ``drop`` left out, ``extra`` appended."""
    fields = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path.encode()), (b":authority", b"pump"),
              (b"content-type", b"application/grpc"), (b"te", b"trailers")]
    return b"".join(field(n, v) for n, v in fields if n not in drop) + b"".join(field(n, v) for n, v in extra)


class Peer:
    """A raw HTTP/2 client of the pump: frames out, frames in, nothing checked on our side."""

    def __init__(self, addr: str, preface: bytes = PREFACE + frame(SETTINGS, 0, 0, b"")) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        self.sock.sendall(preface)
        self.buf = b""
        self.decoder = HpackDecoder()
        self.headers: dict[bytes, bytes] = {}

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))

    def read(self) -> tuple[int, int, int, bytes] | None:
        """The next frame (type, flags, stream, payload); None once the pump closed the connection."""
        got, self.buf = read_frame(self.sock, self.buf)
        return got

    def until(self, want: Callable[[int, int, int, bytes], bool]) -> tuple[int, int, int, bytes]:
        """Frames are read until ``want`` accepts one (header blocks decoded on the way)."""
        while True:
            got = self.read()
            assert got is not None, "the pump closed the connection"
            if got[0] == HEADERS:
                self.headers = dict(self.decoder.decode(got[3]))
            if want(*got):
                return got

    def goaway(self) -> int:
        """The error code of the pump's GOAWAY; the connection must be closed after it."""
        error = None
        while (got := self.read()) is not None:
            if got[0] == GOAWAY:
                error = int.from_bytes(got[3][4:8], "big")
        assert error is not None, "the connection ended without GOAWAY"
        return error

    def end_of(self, sid: int) -> tuple[int, Any]:
        """How stream ``sid`` ended: ``(RST_STREAM, error code)``, or ``(HEADERS, response fields)``
        for an answer whose header block ends the stream."""
        typ, _, _, payload = self.until(lambda t, f, s, p: s == sid and (t == RST_STREAM or (
            t == HEADERS and bool(f & END_STREAM))))
        return (typ, int.from_bytes(payload, "big")) if typ == RST_STREAM else (typ, self.headers)

    def alive(self) -> None:
        """The connection still serves: a PING is answered (RFC 9113 §6.7)."""
        self.send(frame(PING, 0, 0, b"stillok?"))
        _, flags, _, payload = self.until(lambda t, f, s, p: t == PING)
        assert flags & ACK and payload == b"stillok?"

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def peer(pump: PumpProcess) -> Iterator[Peer]:
    c = Peer(pump.addr)
    yield c
    c.close()


def message(payload: bytes) -> bytes:
    return b"\0" + len(payload).to_bytes(4, "big") + payload


def watermark(tso: LocalTSO) -> bytes:
    return message(binlake_pb2.WatermarkRequest(cluster_id=tso.cluster_id).SerializeToString())


def code(n: int) -> bytes:
    return n.to_bytes(4, "big")


def answered(c: Peer, sid: int) -> bool:
    """The request on ``sid`` got a gRPC answer with status OK."""
    typ, got = c.end_of(sid)
    return typ == HEADERS and got.get(b"grpc-status") == b"0"


# ---- §3.4 the connection preface, §4.2 frame size, §5.5 extensibility ------------------------------

def test_3_4_an_invalid_preface_ends_the_connection_without_http2(pump: PumpProcess) -> None:
    """§3.4: an invalid preface is a connection error (GOAWAY may be omitted: the peer is not HTTP/2).
    The front door reads it as HTTP/1.1 (TiDB Binlog's cmux, see docs/architecture.md 4.1): no HTTP/2 is
    spoken and the connection ends."""
    c = Peer(pump.addr, preface=b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + frame(SETTINGS, 0, 0, b""))
    try:
        got = b""
        while chunk := c.sock.recv(1 << 16):
            got += chunk
        # the loop ended: the pump closed the connection; what it wrote first is not the HTTP/2 server's preface
        # (http.server answers a request line of version 2.0 with a bare 505 page), or a GOAWAY PROTOCOL_ERROR
        assert not (len(got) >= 9 and got[3] == SETTINGS), "an HTTP/2 SETTINGS frame answered a bad preface"
        if len(got) >= 17 and got[3] == GOAWAY:
            assert got[13:17] == code(PROTOCOL_ERROR)
    finally:
        c.close()


def test_3_4_the_server_preface_is_a_settings_frame(peer: Peer) -> None:
    """§3.4: the server's connection preface is a SETTINGS frame (not an ACK), first."""
    typ, flags, sid, payload = peer.read() or (None, 0, 0, b"")
    assert (typ, flags & ACK, sid, len(payload) % 6) == (SETTINGS, 0, 0, 0)


def test_4_2_a_frame_over_max_frame_size_is_frame_size_error(peer: Peer) -> None:
    """§4.2: a frame over the SETTINGS_MAX_FRAME_SIZE we advertised is a FRAME_SIZE_ERROR."""
    _, _, _, settings = peer.until(lambda t, f, s, p: t == SETTINGS and not f & ACK)
    ours = dict((int.from_bytes(settings[i:i + 2], "big"), int.from_bytes(settings[i + 2:i + 6], "big"))
                for i in range(0, len(settings), 6))
    limit = ours.get(0x5, 16384)
    peer.send(frame(HEADERS, END_HEADERS, 1, request_block()), (limit + 1).to_bytes(3, "big") + bytes((DATA, 0))
              + code(1) + bytes(64))                                        # the header says it all
    assert peer.goaway() == FRAME_SIZE_ERROR


def test_5_5_unknown_frame_types_and_settings_are_ignored(peer: Peer, tso: LocalTSO) -> None:
    """§5.5: frames of unknown types are ignored (on stream 0, on a stream, with any flags); §6.5.2:
    an unknown SETTINGS identifier is ignored."""
    peer.send(frame(0x42, 0xff, 0, b"anything"), frame(SETTINGS, 0, 0, b"\x7f\x7f" + code(9)),
              frame(HEADERS, END_HEADERS, 1, request_block()), frame(0x42, 0, 1, b"x"), frame(DATA, END_STREAM, 1,
                                                                                              watermark(tso)))
    assert answered(peer, 1)


# ---- §5.1 stream states, §5.1.1 stream identifiers -------------------------------------------------

@pytest.mark.parametrize("frames", [
    pytest.param(lambda: frame(HEADERS, END_HEADERS, 2, request_block()), id="HEADERS on an even stream"),
    pytest.param(lambda: frame(HEADERS, END_HEADERS, 5, request_block()) + frame(HEADERS, END_HEADERS, 3,
                                                                                    request_block()),
                 id="stream ids going backwards"),
    pytest.param(lambda: frame(DATA, 0, 7, message(b"")), id="DATA on an idle stream"),
    pytest.param(lambda: frame(RST_STREAM, 0, 9, code(8)), id="RST_STREAM on an idle stream"),
])
def test_5_1_frames_a_stream_cannot_take_in_its_state_are_protocol_errors(peer: Peer, frames: Callable[[], bytes]
                                                                         ) -> None:
    """§5.1.1: a client's new stream id is odd and larger than every one before (PROTOCOL_ERROR);
    §5.1 idle: any frame but HEADERS or PRIORITY on an idle stream is a PROTOCOL_ERROR (§6.1, §6.4)."""
    peer.send(frames())
    assert peer.goaway() == PROTOCOL_ERROR


def test_5_1_window_update_on_an_idle_stream_is_a_protocol_error(peer: Peer) -> None:
    """§5.1 idle: a WINDOW_UPDATE on an idle stream is a connection error PROTOCOL_ERROR."""
    peer.send(frame(WINDOW_UPDATE, 0, 11, code(100)))
    assert peer.goaway() == PROTOCOL_ERROR


def test_5_1_priority_on_an_idle_stream_is_allowed(peer: Peer, tso: LocalTSO) -> None:
    """§5.1, §6.3: PRIORITY may be sent on an idle stream, and does not open it: a lower stream id opens
    afterwards."""
    peer.send(frame(PRIORITY, 0, 9, code(0) + b"\x10"), frame(HEADERS, END_HEADERS, 1, request_block()),
              frame(DATA, END_STREAM, 1, watermark(tso)))
    assert answered(peer, 1)


def test_5_1_data_on_a_half_closed_remote_stream_is_stream_closed(pump: PumpProcess, tso: LocalTSO) -> None:
    """§5.1 half-closed (remote): a frame other than WINDOW_UPDATE, PRIORITY or RST_STREAM is a stream
    error STREAM_CLOSED; §6.9, §6.3 those three are accepted meanwhile. (A PullBinlogs call from the
    start follows the pump, so its stream stays half-closed on the pump's side.)"""
    pull = message(pump_pb2.PullBinlogReq(clusterID=tso.cluster_id).SerializeToString())
    c = Peer(pump.addr)
    try:
        c.send(frame(HEADERS, END_HEADERS, 1, request_block(PULL)), frame(DATA, END_STREAM, 1, pull))
        c.send(frame(WINDOW_UPDATE, 0, 1, code(1000)), frame(PRIORITY, 0, 1, code(0) + b"\x01"))
        c.alive()
        c.send(frame(DATA, 0, 1, message(b"")))
        assert c.end_of(1) == (RST_STREAM, STREAM_CLOSED)
        c.alive()
    finally:
        c.close()


# ---- §6.1 DATA, §6.2 HEADERS, §6.10 CONTINUATION, §4.3 header blocks --------------------------------

def test_6_1_data_on_stream_0_is_a_protocol_error(peer: Peer) -> None:
    """§6.1: DATA on stream 0 is a connection error PROTOCOL_ERROR."""
    peer.send(frame(DATA, 0, 0, b"x"))
    assert peer.goaway() == PROTOCOL_ERROR


def test_6_1_padding_as_long_as_the_frame_is_a_protocol_error(peer: Peer) -> None:
    """§6.1: a pad length not smaller than the payload is a connection error PROTOCOL_ERROR."""
    peer.send(frame(HEADERS, END_HEADERS, 1, request_block()), frame(DATA, PADDED, 1, b"\x05" + bytes(4)))
    assert peer.goaway() == PROTOCOL_ERROR


def test_6_2_headers_on_stream_0_is_a_protocol_error(peer: Peer) -> None:
    """§6.2: HEADERS on stream 0 is a connection error PROTOCOL_ERROR."""
    peer.send(frame(HEADERS, END_HEADERS, 0, request_block()))
    assert peer.goaway() == PROTOCOL_ERROR


def test_6_2_padded_and_prioritized_headers_split_over_continuations_are_served(peer: Peer, tso: LocalTSO) -> None:
    """§6.2 (padding, priority fields) and §6.10 (a header block continued over CONTINUATION frames)."""
    block = request_block()
    peer.send(frame(HEADERS, PADDED | PRIORITY_FLAG, 1, b"\x03" + code(0) + b"\x20" + block[:7] + bytes(3)),
              frame(CONTINUATION, 0, 1, block[7:20]), frame(CONTINUATION, END_HEADERS, 1, block[20:]),
              frame(DATA, END_STREAM, 1, watermark(tso)))
    assert answered(peer, 1)


@pytest.mark.parametrize("frames", [
    pytest.param(lambda: frame(CONTINUATION, END_HEADERS, 1, request_block()), id="CONTINUATION without HEADERS"),
    pytest.param(lambda: frame(HEADERS, 0, 1, request_block()[:5]) + frame(PING, 0, 0, bytes(8)),
                 id="another frame inside a header block"),
    pytest.param(lambda: frame(HEADERS, 0, 1, request_block()[:5]) + frame(CONTINUATION, END_HEADERS, 3,
                                                                           request_block()[5:]),
                 id="CONTINUATION of another stream"),
    pytest.param(lambda: frame(HEADERS, END_HEADERS, 1, request_block()) + frame(CONTINUATION, END_HEADERS, 1, b""),
                 id="CONTINUATION after END_HEADERS"),
])
def test_6_10_a_header_block_is_contiguous(peer: Peer, frames: Callable[[], bytes]) -> None:
    """§6.10, §4.3: a header block is one HEADERS and CONTINUATIONs of its stream with nothing between;
    anything else is a connection error PROTOCOL_ERROR."""
    peer.send(frames())
    assert peer.goaway() == PROTOCOL_ERROR


# ---- §6.3 PRIORITY, §6.4 RST_STREAM, §6.5 SETTINGS, §6.7 PING ------------------------------------------

@pytest.mark.parametrize("frames, error", [
    pytest.param(lambda: frame(PRIORITY, 0, 0, code(1) + b"\x10"), PROTOCOL_ERROR, id="PRIORITY on stream 0"),
    pytest.param(lambda: frame(RST_STREAM, 0, 0, code(8)), PROTOCOL_ERROR, id="RST_STREAM on stream 0"),
    pytest.param(lambda: frame(HEADERS, END_HEADERS, 1, request_block()) + frame(RST_STREAM, 0, 1, code(8)[:3]),
                 FRAME_SIZE_ERROR, id="RST_STREAM of 3 bytes"),
    pytest.param(lambda: frame(SETTINGS, 0, 0, bytes(7)), FRAME_SIZE_ERROR, id="SETTINGS of 7 bytes"),
    pytest.param(lambda: frame(SETTINGS, ACK, 0, bytes(6)), FRAME_SIZE_ERROR, id="SETTINGS ACK with a payload"),
    pytest.param(lambda: frame(SETTINGS, 0, 1, b""), PROTOCOL_ERROR, id="SETTINGS on a stream"),
    pytest.param(lambda: frame(SETTINGS, 0, 0, b"\x00\x02" + code(2)), PROTOCOL_ERROR, id="ENABLE_PUSH 2"),
    pytest.param(lambda: frame(SETTINGS, 0, 0, b"\x00\x04" + code(1 << 31)), FLOW_CONTROL_ERROR,
                 id="INITIAL_WINDOW_SIZE 2^31"),
    pytest.param(lambda: frame(SETTINGS, 0, 0, b"\x00\x05" + code(16383)), PROTOCOL_ERROR, id="MAX_FRAME_SIZE 16383"),
    pytest.param(lambda: frame(SETTINGS, 0, 0, b"\x00\x05" + code(1 << 24)), PROTOCOL_ERROR,
                 id="MAX_FRAME_SIZE 2^24"),
    pytest.param(lambda: frame(PING, 0, 0, bytes(7)), FRAME_SIZE_ERROR, id="PING of 7 bytes"),
    pytest.param(lambda: frame(PING, 0, 1, bytes(8)), PROTOCOL_ERROR, id="PING on a stream"),
    pytest.param(lambda: frame(GOAWAY, 0, 1, code(0) + code(0)), PROTOCOL_ERROR, id="GOAWAY on a stream"),
    pytest.param(lambda: frame(5, END_HEADERS, 1, code(2)), PROTOCOL_ERROR, id="PUSH_PROMISE from a client"),
])
def test_6_control_frames_malformed_are_connection_errors(peer: Peer, frames: Callable[[], bytes], error: int) -> None:
    """§6.3 PRIORITY on stream 0; §6.4 RST_STREAM on stream 0 or not 4 bytes; §6.5 SETTINGS not a multiple
    of 6 bytes, an ACK with a payload, on a stream; §6.5.2 values out of range; §6.7 PING not 8 bytes or on a
    stream; §6.8 GOAWAY on a stream; §8.4 a client's PUSH_PROMISE."""
    peer.send(frames())
    assert peer.goaway() == error


def test_6_3_priority_of_the_wrong_length_is_a_stream_error(peer: Peer) -> None:
    """§6.3: a PRIORITY frame not 5 bytes long is a stream error FRAME_SIZE_ERROR."""
    peer.send(frame(HEADERS, END_HEADERS, 1, request_block()), frame(PRIORITY, 0, 1, bytes(4)))
    assert peer.end_of(1) == (RST_STREAM, FRAME_SIZE_ERROR)
    peer.alive()


def test_6_4_rst_stream_ends_only_its_stream(peer: Peer, tso: LocalTSO) -> None:
    """§6.4: RST_STREAM closes its stream; the connection serves the next one."""
    peer.send(frame(HEADERS, END_HEADERS, 1, request_block()), frame(RST_STREAM, 0, 1, code(8)),
              frame(HEADERS, END_HEADERS, 3, request_block()), frame(DATA, END_STREAM, 3, watermark(tso)))
    assert answered(peer, 3)


def test_6_5_settings_are_acknowledged(peer: Peer) -> None:
    """§6.5.3: every SETTINGS frame is acknowledged with an empty SETTINGS ACK."""
    peer.send(frame(SETTINGS, 0, 0, b"\x00\x04" + code(1 << 20) + b"\x00\x05" + code(1 << 20)))
    _, _, _, payload = peer.until(lambda t, f, s, p: t == SETTINGS and bool(f & ACK))
    assert payload == b""


def test_6_7_ping_is_answered_with_the_same_payload(peer: Peer) -> None:
    """§6.7: a PING is answered with a PING ACK carrying its payload; a PING ACK is not answered."""
    peer.send(frame(PING, ACK, 0, b"ignoreme"), frame(PING, 0, 0, b"\x00\x01\x02\x03\xfc\xfd\xfe\xff"))
    _, flags, sid, payload = peer.until(lambda t, f, s, p: t == PING)
    assert (flags, sid, payload) == (ACK, 0, b"\x00\x01\x02\x03\xfc\xfd\xfe\xff")


# ---- §6.9 WINDOW_UPDATE and flow control ----------------------------------------------------------------

def test_6_9_a_zero_increment_on_a_stream_is_a_stream_error(peer: Peer, tso: LocalTSO) -> None:
    """§6.9: a WINDOW_UPDATE of 0 on a stream is a stream error PROTOCOL_ERROR; the connection serves on."""
    peer.send(frame(HEADERS, END_HEADERS, 1, request_block()), frame(WINDOW_UPDATE, 0, 1, code(0)))
    assert peer.end_of(1) == (RST_STREAM, PROTOCOL_ERROR)
    peer.send(frame(HEADERS, END_HEADERS, 3, request_block()), frame(DATA, END_STREAM, 3, watermark(tso)))
    assert answered(peer, 3)


def test_6_9_a_zero_increment_on_the_connection_is_a_connection_error(peer: Peer) -> None:
    """§6.9: a WINDOW_UPDATE of 0 on stream 0 is a connection error PROTOCOL_ERROR."""
    peer.send(frame(WINDOW_UPDATE, 0, 0, code(0)))
    assert peer.goaway() == PROTOCOL_ERROR


def test_6_9_1_a_stream_window_over_2_31_is_a_stream_error(peer: Peer) -> None:
    """§6.9.1: a stream's window over 2^31-1 is a stream error FLOW_CONTROL_ERROR."""
    peer.send(frame(HEADERS, END_HEADERS, 1, request_block()), frame(WINDOW_UPDATE, 0, 1, code(0x7fffffff)))
    assert peer.end_of(1) == (RST_STREAM, FLOW_CONTROL_ERROR)
    peer.alive()


def test_6_9_1_the_connection_window_over_2_31_is_a_connection_error(peer: Peer) -> None:
    """§6.9.1: the connection's window over 2^31-1 is a connection error FLOW_CONTROL_ERROR."""
    peer.send(frame(WINDOW_UPDATE, 0, 0, code(0x7fffffff)))
    assert peer.goaway() == FLOW_CONTROL_ERROR


def test_6_9_2_initial_window_size_pushing_a_stream_over_2_31_is_a_connection_error(peer: Peer) -> None:
    """§6.9.2: a SETTINGS_INITIAL_WINDOW_SIZE that takes an open stream's window over 2^31-1 is a
    connection error FLOW_CONTROL_ERROR."""
    peer.send(frame(HEADERS, END_HEADERS, 1, request_block()), frame(WINDOW_UPDATE, 0, 1, code(0x7fffffff - 65535)),
              frame(SETTINGS, 0, 0, b"\x00\x04" + code(65536)))
    assert peer.goaway() == FLOW_CONTROL_ERROR


# ---- §8 HTTP semantics: malformed requests are stream errors PROTOCOL_ERROR ------------------------------

MALFORMED = [
    pytest.param({"extra": ((b"x-Binlake", b"1"),)}, id="uppercase field name (8.2.1)"),
    pytest.param({"extra": ((b":foo", b"1"),)}, id="unknown pseudo-header (8.3)"),
    pytest.param({"extra": ((b":status", b"200"),)}, id="response pseudo-header in a request (8.3)"),
    pytest.param({"extra": ((b":path", WATERMARK.encode()),)}, id="pseudo-header after a regular field (8.3)"),
    pytest.param({"drop": (b":scheme",)}, id="no :scheme (8.3.1)"),
    pytest.param({"extra": ((b"connection", b"keep-alive"),)}, id="connection-specific field (8.2.2)"),
    pytest.param({"drop": (b"te",), "extra": ((b"te", b"gzip"),)}, id="te other than trailers (8.2.2)"),
]


@pytest.mark.parametrize("shape", MALFORMED)
def test_8_1_1_a_malformed_request_is_a_stream_error(peer: Peer, tso: LocalTSO, shape: dict[str, Any]) -> None:
    """§8.1.1: a malformed request (§8.2.1 uppercase names, §8.2.2 connection-specific fields, §8.3
    pseudo-header rules) is a stream error PROTOCOL_ERROR; the connection serves on."""
    peer.send(frame(HEADERS, END_HEADERS, 1, request_block(**shape)), frame(DATA, END_STREAM, 1, watermark(tso)))
    assert peer.end_of(1) == (RST_STREAM, PROTOCOL_ERROR)


def test_8_3_1_a_request_without_method_or_path_is_a_stream_error(peer: Peer, tso: LocalTSO) -> None:
    """§8.3.1: a request without :method, or with an empty :path, is malformed: stream error PROTOCOL_ERROR."""
    peer.send(frame(HEADERS, END_HEADERS, 1, request_block(drop=(b":method",))), frame(DATA, END_STREAM, 1,
                                                                                       watermark(tso)))
    assert peer.end_of(1) == (RST_STREAM, PROTOCOL_ERROR)
    peer.send(frame(HEADERS, END_HEADERS, 3, request_block(path="")), frame(DATA, END_STREAM, 3, watermark(tso)))
    assert peer.end_of(3) == (RST_STREAM, PROTOCOL_ERROR)
    peer.alive()


def test_8_1_1_content_length_other_than_the_data_is_a_stream_error(peer: Peer, tso: LocalTSO) -> None:
    """§8.1.1: a content-length that differs from the DATA payloads' total (more, less, none at all, or
    not a number) is malformed: stream error PROTOCOL_ERROR; one that matches is served."""
    body = watermark(tso)

    def length(n: int | str) -> tuple[tuple[bytes, bytes], ...]:
        return ((b"content-length", str(n).encode()),)

    peer.send(frame(HEADERS, END_HEADERS, 1, request_block(extra=length(len(body) + 1))),
              frame(DATA, END_STREAM, 1, body))
    assert peer.end_of(1) == (RST_STREAM, PROTOCOL_ERROR)
    peer.send(frame(HEADERS, END_HEADERS, 3, request_block(extra=length(len(body) - 1))),
              frame(DATA, END_STREAM, 3, body))
    assert peer.end_of(3) == (RST_STREAM, PROTOCOL_ERROR)
    peer.send(frame(HEADERS, END_HEADERS | END_STREAM, 5, request_block(extra=length(len(body)))))
    assert peer.end_of(5) == (RST_STREAM, PROTOCOL_ERROR)
    peer.send(frame(HEADERS, END_HEADERS, 7, request_block(extra=length("12a"))), frame(DATA, END_STREAM, 7, body))
    assert peer.end_of(7) == (RST_STREAM, PROTOCOL_ERROR)
    peer.send(frame(HEADERS, END_HEADERS, 9, request_block(extra=length(len(body)))),
              frame(DATA, 0, 9, body[:3]), frame(DATA, END_STREAM, 9, body[3:]))
    assert answered(peer, 9)


def test_5_1_trailers_on_a_closed_stream_are_a_stream_error(peer: Peer, tso: LocalTSO) -> None:
    """§5.1 closed, §5.4.2: a HEADERS ending a stream the server already closed (late trailers) is a
    stream error STREAM_CLOSED, and the connection serves on; a HEADERS opening a stream below the
    highest opened is the connection error of §5.1.1."""
    peer.send(frame(HEADERS, END_HEADERS, 1, request_block()), frame(DATA, END_STREAM, 1, watermark(tso)))
    assert answered(peer, 1)
    peer.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, request_block()))
    assert peer.end_of(1) == (RST_STREAM, STREAM_CLOSED)
    peer.send(frame(HEADERS, END_HEADERS, 3, request_block()), frame(DATA, END_STREAM, 3, watermark(tso)))
    assert answered(peer, 3)
    peer.send(frame(HEADERS, END_HEADERS, 1, request_block()))
    assert peer.goaway() == PROTOCOL_ERROR


# ---- §6.8 GOAWAY: a request after the server's GOAWAY ------------------------------------------------

def test_6_8_streams_opened_after_the_servers_goaway_are_not_processed(pumps: Callable[..., PumpProcess]) -> None:
    """§6.8: once a server sent GOAWAY (here: a pump stopping gracefully while a request is open),
    streams above its last stream id are not processed: refused (REFUSED_STREAM, §8.7) or ignored,
    never answered; the open stream is not cut by the GOAWAY itself."""
    pump = pumps("pump-goaway")
    c = Peer(pump.addr)
    try:
        c.send(frame(HEADERS, END_HEADERS, 1, request_block()))                 # open, its body not sent
        c.alive()
        assert pump.proc is not None
        pump.proc.terminate()                                                    # SIGTERM: the pump pauses
        _, _, _, payload = c.until(lambda t, f, s, p: t == GOAWAY)
        assert int.from_bytes(payload[:4], "big") & 0x7fffffff == 1 and int.from_bytes(payload[4:8], "big") == 0
        c.send(frame(HEADERS, END_HEADERS | END_STREAM, 3, request_block()))
        got = c.read()
        while got is not None and got[2] != 3 and got[0] != GOAWAY:
            got = c.read()
        assert got is None or got[0] == GOAWAY or (got[0], int.from_bytes(got[3], "big")) == (RST_STREAM,
                                                                                               REFUSED_STREAM), got
    finally:
        c.close()
