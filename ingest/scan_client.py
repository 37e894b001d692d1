"""Client of a pump's ``binlake.v1.PumpScan`` service: watermark, range scans, prewrite lookups."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

import grpc

from schemas import binlake_pb2, binlake_pb2_grpc

MAX_MESSAGE = (1 << 31) - 1
# Larger HTTP/2 frames and stream window for MiB-sized batches (as the pump's server sets).
HTTP2_OPTIONS = [("grpc.http2.max_frame_size", 1 << 20), ("grpc.http2.lookahead_bytes", 64 << 20)]


@dataclass(frozen=True)
class Record:
    """One raw stored record: its key ts, binlog type, timestamps and marshalled ``binlog.Binlog``."""

    key_ts: int
    tp: int
    start_ts: int
    commit_ts: int
    payload: bytes


def records(batch: binlake_pb2.RecordBatch) -> Iterator[Record]:
    """Split a columnar RecordBatch into Records."""
    data = batch.payloads
    offset = 0
    for key_ts, tp, start, commit, length in zip(batch.key_ts, batch.tp, batch.start_ts, batch.commit_ts,
                                                 batch.lengths):
        yield Record(key_ts, tp, start, commit, data[offset:offset + length])
        offset += length


class ScanClient:
    """Talks to one pump. ``credentials`` enables TLS (mutual when they carry a client certificate)."""

    def __init__(self, addr: str, cluster_id: int, timeout: float = 30.0,
                 credentials: grpc.ChannelCredentials | None = None) -> None:
        opts = [("grpc.max_receive_message_length", MAX_MESSAGE), *HTTP2_OPTIONS]
        self.addr = addr
        self.cluster_id = cluster_id
        self.timeout = timeout
        self._channel = (grpc.secure_channel(addr, credentials, opts) if credentials
                         else grpc.insecure_channel(addr, opts))
        self._stub = binlake_pb2_grpc.PumpScanStub(self._channel)

    def watermark(self) -> binlake_pb2.WatermarkResponse:
        """The pump's watermark, oldest unresolved prewrite, state and gc ts."""
        return self._stub.Watermark(binlake_pb2.WatermarkRequest(cluster_id=self.cluster_id),
                                    timeout=self.timeout)

    def scan_batches(self, from_ts: int, to_ts: int = 0, max_batch_bytes: int = 0) -> Iterator[binlake_pb2.RecordBatch]:
        """Stream the batches of records whose key ts is in ``(from_ts, to_ts]`` (≤ the watermark)."""
        req = binlake_pb2.ScanRequest(cluster_id=self.cluster_id, from_ts=from_ts, to_ts=to_ts,
                                      max_batch_bytes=max_batch_bytes)
        yield from self._stub.Scan(req)

    def scan(self, from_ts: int, to_ts: int = 0) -> Iterator[Record]:
        """Every record whose key ts is in ``(from_ts, to_ts]``, ascending."""
        for batch in self.scan_batches(from_ts, to_ts):
            yield from records(batch)

    def lookup_prewrites(self, start_ts: Iterable[int]) -> Iterator[Record]:
        """The stored prewrites among ``start_ts``."""
        req = binlake_pb2.LookupRequest(cluster_id=self.cluster_id, start_ts=list(start_ts))
        for batch in self._stub.LookupPrewrites(req, timeout=self.timeout):
            yield from records(batch)

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def __enter__(self) -> "ScanClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
