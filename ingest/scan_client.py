"""Client of a pump's ``binlake.v1.PumpScan`` service: watermark, range scans, prewrite lookups."""
from __future__ import annotations

import ssl
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import Message

from ingest.errors import MalformedBatch
from ingest.http2 import stream_call, unary_call
from schemas import binlake_pb2

MAX_MESSAGE = (1 << 31) - 1


@dataclass(frozen=True)
class Record:
    """One raw stored record: its key ts, binlog type, timestamps and marshalled ``binlog.Binlog``."""

    key_ts: int
    tp: int
    start_ts: int
    commit_ts: int
    payload: bytes


class ScanBatch:
    """One ``binlake.v1.RecordBatch``, parsed from its wire bytes without copies: numpy columns read
    in place from the fixed-width fields, and ``data``, a view of the bytes holding the payloads:
    record i's payload is ``data[offsets[i]:offsets[i] + lengths[i]]`` (ranges never overlap; other
    bytes may lie between them). Nothing is copied per record until a payload is asked for."""

    __slots__ = ("key_ts", "tp", "start_ts", "commit_ts", "offsets", "lengths", "data", "scanned_to")

    def __init__(self, raw: bytes | bytearray) -> None:
        fields, self.scanned_to = _fields(raw)
        empty = memoryview(b"")
        key_ts = fields.get(8, empty)
        n = len(key_ts) // 8
        self.key_ts = _column(key_ts, "<i8", n, "key_ts")
        self.tp = _column(fields.get(9, empty), "<i4", n, "tp")
        self.start_ts = _column(fields.get(10, empty), "<i8", n, "start_ts")
        self.commit_ts = _column(fields.get(11, empty), "<i8", n, "commit_ts")
        self.offsets = _column(fields.get(12, empty), "<u4", n, "offsets")
        self.lengths = _column(fields.get(13, empty), "<u4", n, "lengths")
        self.data: memoryview = fields.get(14, empty)
        if n and int((self.offsets.astype(np.int64) + self.lengths).max()) > len(self.data):
            raise MalformedBatch(f"a payload of the batch ends past its {len(self.data)} data bytes")

    def __len__(self) -> int:
        return len(self.key_ts)

    def payload(self, i: int) -> bytes:
        """Record i's payload."""
        start = int(self.offsets[i])
        return bytes(self.data[start:start + int(self.lengths[i])])

    def payloads(self) -> list[bytes]:
        """Every record's payload, in record order."""
        data = bytes(self.data)
        return [data[o:o + n] for o, n in zip(self.offsets.tolist(), self.lengths.tolist())]


def _varint(buf: bytes | bytearray, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise MalformedBatch("RecordBatch: truncated or overlong varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(raw: bytes | bytearray) -> tuple[dict[int, memoryview], int]:
    """The length-delimited fields of RecordBatch wire bytes by number (the last occurrence wins,
    as in protobuf; unknown fields are skipped), and ``scanned_to``."""
    view = memoryview(raw)
    fields: dict[int, memoryview] = {}
    scanned_to = 0
    i, n = 0, len(raw)
    while i < n:
        tag, i = _varint(raw, i)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = _varint(raw, i)
            if number == 7:
                scanned_to = value - (1 << 64) if value >= 1 << 63 else value
        elif wire == 2:
            length, i = _varint(raw, i)
            if i + length > n:
                raise MalformedBatch(f"RecordBatch: field {number} runs past the message end")
            fields[number] = view[i:i + length]
            i += length
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise MalformedBatch(f"RecordBatch: unexpected wire type {wire} of field {number}")
    if i != n:
        raise MalformedBatch("RecordBatch: truncated message")
    return fields, scanned_to


def _column(field: memoryview, dtype: str, n: int, name: str) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    if len(field) != n * width:
        raise MalformedBatch(f"RecordBatch column {name} holds {len(field)} bytes, not {n} values of {width}")
    return np.frombuffer(field, dtype=dtype)


def records(batch: ScanBatch) -> Iterator[Record]:
    """Split a batch into Records."""
    for key_ts, tp, start, commit, payload in zip(batch.key_ts.tolist(), batch.tp.tolist(),
                                                  batch.start_ts.tolist(), batch.commit_ts.tolist(),
                                                  batch.payloads()):
        yield Record(key_ts, tp, start, commit, payload)


class ScanClient:
    """Talks to one pump. ``tls`` (a client context, ``SecurityConfig.h2_client_context()``) enables
    TLS, mutual when it carries a client certificate.

    Every call goes through ``ingest.http2.stream`` on a connection of its own, plain text or TLS
    (each batch received straight into its own buffer, about 40% less client CPU than grpcio). A call
    fails with ``DEADLINE_EXCEEDED`` when the pump sends nothing for ``timeout`` seconds, and with
    ``UNAVAILABLE`` when it cannot be reached (TLS handshake included). Errors are ``grpc.RpcError``
    (``WireRpcError``) with the pump's status code."""

    def __init__(self, addr: str, cluster_id: int, timeout: float = 30.0, tls: ssl.SSLContext | None = None) -> None:
        self.addr = addr
        self.cluster_id = cluster_id
        self.timeout = timeout
        self.tls = tls

    def watermark(self) -> binlake_pb2.WatermarkResponse:
        """The pump's watermark, oldest unresolved prewrite, state and gc ts."""
        request = binlake_pb2.WatermarkRequest(cluster_id=self.cluster_id).SerializeToString()
        raw = unary_call(self.addr, "/binlake.v1.PumpScan/Watermark", request, self.timeout, MAX_MESSAGE, self.tls)
        resp: binlake_pb2.WatermarkResponse = binlake_pb2.WatermarkResponse.FromString(bytes(raw))
        return resp

    def scan_batches(self, from_ts: int, to_ts: int = 0, max_batch_bytes: int = 0) -> Iterator[ScanBatch]:
        """Stream the batches of records whose key ts is in ``(from_ts, to_ts]`` (≤ the watermark),
        ascending by key ts; ``max_batch_bytes`` bounds each batch's ``data`` (0: the pump's default)."""
        req = binlake_pb2.ScanRequest(cluster_id=self.cluster_id, from_ts=from_ts, to_ts=to_ts,
                                      max_batch_bytes=max_batch_bytes)
        yield from self._stream("/binlake.v1.PumpScan/Scan", req)

    def scan(self, from_ts: int, to_ts: int = 0) -> Iterator[Record]:
        """Every record whose key ts is in ``(from_ts, to_ts]``, ascending."""
        for batch in self.scan_batches(from_ts, to_ts):
            yield from records(batch)

    def lookup_prewrites(self, start_ts: Iterable[int]) -> Iterator[Record]:
        """The stored prewrites among ``start_ts``."""
        req = binlake_pb2.LookupRequest(cluster_id=self.cluster_id, start_ts=list(start_ts))
        for batch in self._stream("/binlake.v1.PumpScan/LookupPrewrites", req):
            yield from records(batch)

    def _stream(self, method: str, request: Message) -> Iterator[ScanBatch]:
        """The batches of a server-streaming call (the client's ``timeout`` as the longest silence)."""
        for raw in stream_call(self.addr, method, request.SerializeToString(), self.timeout, MAX_MESSAGE,
                               tls=self.tls):
            yield ScanBatch(raw)

    def close(self) -> None:
        """Nothing to release: each call's connection is closed when the call ends."""

    def __enter__(self) -> ScanClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
