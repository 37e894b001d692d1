"""Client of TiDB's ``/binlog.Pump/PullBinlogs``: a pump's commit binlogs in commit order, read as
TiDB Binlog's drainer reads them, for pumps that do not serve ``binlake.v1.PumpScan`` (TiDB
Binlog's Go pump).

The request is TiDB's drainer's: ``PullBinlogReq{clusterID, startFrom{suffix 0, offset ts}}``. The
answer is a stream, strictly ascending in commit ts and never past the pump's watermark, of commit
binlogs whose prewrite fields (``prewrite_value``, the DDL fields) the pump has filled in from the
prewrite, and of fake binlogs (``start_ts == commit_ts``) while the pump is idle. The stream never
ends on its own. A pump resolves its own lost commits (TiDB Binlog's pump asks TiKV), so there is
nothing to look up elsewhere: a commit whose prewrite the pump lacks is not sent at all.
"""
from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError

from ingest.errors import IngestError, MalformedBinlog
from ingest.http2 import stream_call
from schemas import binlog_pb2, pump_pb2

METHOD = "/binlog.Pump/PullBinlogs"
MAX_MESSAGE = (1 << 31) - 1
COMPRESSORS = ("", "gzip")   # TiDB Binlog's drainer ``compressor``


class PullStreamError(IngestError):
    """A PullBinlogs stream broke the protocol's promises: it ended, went backwards in commit ts, or
    carried an answer that is not a ``PullBinlogResp`` (transient: a stream ends when its pump stops)."""

    transient = True


@dataclass(frozen=True)
class Pulled:
    """One binlog of the stream: its type, timestamps, DDL fields and marshalled ``binlog.Binlog``."""

    tp: int
    start_ts: int
    commit_ts: int
    ddl_job_id: int
    ddl_schema_state: int
    payload: bytes

    @property
    def fake(self) -> bool:
        """A fake binlog: it only says the pump has nothing older left to send."""
        return self.start_ts == self.commit_ts


def parse_answer(raw: bytes | bytearray, addr: str) -> Pulled:
    """One ``PullBinlogResp``'s binlog: ``PullStreamError`` when the answer is not a
    ``PullBinlogResp``, ``MalformedBinlog`` when its payload is not a binlog (TiDB Binlog's drainer
    counts that as ``unmarshal_binlog`` and stops)."""
    try:
        payload = pump_pb2.PullBinlogResp.FromString(bytes(raw)).entity.payload
    except DecodeError as exc:
        raise PullStreamError(f"pump {addr} sent a PullBinlogs answer that is not one: {exc}") from exc
    try:
        b = binlog_pb2.Binlog.FromString(payload)
    except DecodeError as exc:
        raise MalformedBinlog(f"pump {addr} sent a PullBinlogs payload of {len(payload)} bytes that is not a "
                              f"binlog: {exc}") from exc
    return Pulled(b.tp, b.start_ts, b.commit_ts, b.ddl_job_id, b.ddl_schema_state, payload)


class PullClient:
    """Reads one pump's PullBinlogs stream through ``ingest.http2.stream``; ``tls`` (a client context,
    ``SecurityConfig.h2_client_context()``) enables TLS. ``compressor`` is TiDB's drainer option:
    ``gzip`` asks the pump to compress the stream (grpc-go servers answer in the request's encoding).
    ``idle_timeout``: the longest silence of the pump before the read fails with DEADLINE_EXCEEDED
    (an idle pump sends a fake binlog every few seconds), with TLS as without. Errors are
    ``grpc.RpcError`` with the pump's status code, or :class:`PullStreamError`."""

    def __init__(self, addr: str, cluster_id: int, idle_timeout: float = 120.0,
                 tls: ssl.SSLContext | None = None, compressor: str = "") -> None:
        if compressor not in COMPRESSORS:
            raise ValueError(f"compressor {compressor!r} is not one of {COMPRESSORS}")
        self.addr = addr
        self.cluster_id = cluster_id
        self.idle_timeout = idle_timeout
        self.tls = tls
        self.compressor = compressor

    def _answers(self, after: int) -> Iterator[bytes | bytearray]:
        request = pump_pb2.PullBinlogReq(clusterID=self.cluster_id,
                                         startFrom=pump_pb2.Pos(suffix=0, offset=after)).SerializeToString()
        yield from stream_call(self.addr, METHOD, request, self.idle_timeout, MAX_MESSAGE,
                               gzip=self.compressor == "gzip", tls=self.tls)

    def binlogs(self, after: int) -> Iterator[Pulled]:
        """Every binlog with commit ts above ``after``, ascending, without end (the caller stops
        reading); ``PullStreamError`` if the pump's stream ends or goes backwards."""
        last = after
        for raw in self._answers(after):
            item = parse_answer(raw, self.addr)
            if item.commit_ts <= last:
                raise PullStreamError(f"pump {self.addr} sent commit ts {item.commit_ts} after {last}: its "
                                      f"PullBinlogs stream must be strictly ascending")
            last = item.commit_ts
            yield item
        raise PullStreamError(f"pump {self.addr} ended its PullBinlogs stream after commit ts {last}: the stream "
                              f"ends only when the pump stops")

    def read_range(self, from_ts: int, to_ts: int) -> Iterator[Pulled]:
        """The binlogs with commit ts in ``(from_ts, to_ts]``; reading stops at the first binlog at or
        past ``to_ts`` (none below it can follow), so ``to_ts`` must not be above the pump's watermark."""
        for item in self.binlogs(from_ts):
            if item.commit_ts > to_ts:
                return
            yield item
            if item.commit_ts == to_ts:
                return

    def latest(self, after: int, budget: float = 2.0) -> int:
        """The highest commit ts the pump sends above ``after`` until it has been silent for this
        client's ``idle_timeout`` or ``budget`` seconds have passed (``after`` if it sends none):
        what the pump has emitted, so at or below its watermark now."""
        last = after
        deadline = time.monotonic() + budget
        try:
            for item in self.binlogs(after):
                last = item.commit_ts
                if time.monotonic() >= deadline:
                    break
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        return last

    def first(self, after: int) -> Pulled:
        """The first binlog above ``after`` (an idle pump sends a fake one within seconds)."""
        for item in self.binlogs(after):
            return item
        raise AssertionError("binlogs() never ends without an error")

