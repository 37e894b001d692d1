"""gRPC services of a pump: TiDB's ``binlog.Pump`` and binlake's ``binlake.v1.PumpScan``.

Served by the front door (``ingest.frontdoor``, gRPC over HTTP/2 by ``ingest.http2.server``) on one
event loop: a WriteBinlog call answers with the storage's future, which the writer resolves once its
group commit is durable, so 32 or 3,200 concurrent writers cost no threads and arrive together for
group commit. Blocking storage reads (scans, pulls) run on a thread pool and hand their batches back
to the loop.
"""
from __future__ import annotations

import asyncio
import enum
import logging
import socket
import stat
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

import grpc

from ingest.errors import DiskFull, IngestError, MalformedBinlog, NotOnline, StorageClosed
from ingest.frontdoor import FrontDoor
from ingest.http2 import Call, Methods, Reply, RpcAbort
from ingest.httpserver import warn_if_plain
from ingest.peerlog import PeerLog
from ingest.pump.config import PumpConfig
from ingest.pump.guard import CallGuard
from ingest.pump.http_api import StatusHandler
from schemas import binlake_pb2, pump_pb2

if TYPE_CHECKING:
    from ingest.pump.pump import Pump
    from ingest.pump.storage.storage import LoopWriter

log = logging.getLogger(__name__)

# 16 MiB rather than 4: grpc.aio sends a stream's messages one at a time, and the time between two
# of them (the completion's way back through grpc's poller thread and the event loop, under the GIL
# the scan's producer holds most of the time) is most likely why fewer, larger messages are faster:
# -2 to +29 % (about +12 % typical) in A/B scans of a saved 256 MiB fill (docs/benchmarks.md).
DEFAULT_BATCH_BYTES = 16 << 20
MAX_BATCH_BYTES = 64 << 20
SCAN_AHEAD = 1  # encoded batches a scan may have ready while one is being sent (2 measured the same)
T = TypeVar("T")


class _End(enum.Enum):
    """The end marker of ``_drain`` and ``_prefetch`` (an enum member, so ``is`` tells it from an item)."""

    DONE = enum.auto()


_DONE: Final = _End.DONE


class PumpService:
    """``/binlog.Pump/WriteBinlog`` and ``/binlog.Pump/PullBinlogs`` as TiDB's client and drainer expect."""

    def __init__(self, pump: Pump, io: ThreadPoolExecutor) -> None:
        self.pump = pump
        self.io = io
        self._succ = pump.metrics.rpc_duration.labels("WriteBinlog", "succ")
        self._fail = pump.metrics.rpc_duration.labels("WriteBinlog", "fail")
        self._writer: LoopWriter | None = None  # batches this server loop's writes (set on first call)

    def WriteBinlog(self, request: pump_pb2.WriteBinlogReq, call: Call) -> Reply:
        """Start storing the binlog; the reply is the storage's future, done once it is durable
        (an empty ``WriteBinlogResp`` serializes to no bytes)."""
        pump = self.pump
        if request.clusterID != pump.cluster_id:
            _check_cluster(pump, request.clusterID)
        writer = self._writer
        if writer is None:
            writer = self._writer = pump.storage.loop_writer(asyncio.get_running_loop())
        try:
            durable = pump.write_binlog(request.payload, writer)
        except (MalformedBinlog, NotOnline, DiskFull, StorageClosed, OSError) as exc:
            raise self.failed(exc) from None
        return b"" if durable is None else durable

    def observe(self, seconds: float, ok: bool) -> None:
        """TiDB's ``binlog_pump_rpc_duration_seconds{method="WriteBinlog"}``."""
        (self._succ if ok else self._fail).observe(seconds)

    def failed(self, exc: BaseException) -> BaseException:
        """The status a failed write ends with (counted as a lost binlog, as TiDB's pump does)."""
        if isinstance(exc, MalformedBinlog):
            answer: BaseException = RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed binlog payload: {exc}")
        elif isinstance(exc, (NotOnline, DiskFull)):
            answer = RpcAbort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        elif isinstance(exc, StorageClosed):
            answer = RpcAbort(grpc.StatusCode.UNAVAILABLE, str(exc))
        elif isinstance(exc, OSError):
            answer = RpcAbort(grpc.StatusCode.INTERNAL, f"write binlog failed: {exc}")
        else:
            return exc
        self.pump.metrics.loss_binlog.inc()
        return answer

    async def PullBinlogs(self, request: pump_pb2.PullBinlogReq, call: Call) -> AsyncGenerator[bytes, None]:
        _check_cluster(self.pump, request.clusterID)
        cancelled = False

        def stopped() -> bool:
            return cancelled or self.pump.stopping

        try:
            items = self.pump.storage.pull_commits(request.startFrom.offset, stopped)
            async for entry, payload in _drain(items, self.io):
                yield _pull_answer(payload, entry.start_ts, entry.commit_ts).SerializeToString()
        finally:
            cancelled = True


def _pull_answer(payload: bytes, start_ts: int, commit_ts: int) -> pump_pb2.PullBinlogResp:
    """A ``PullBinlogResp`` byte-equal to TiDB's pump v8.3.0 (compared with one on the wire): the
    payload, ``meta`` with the binlog's start and commit ts, and an empty ``pos`` (gogoproto writes a
    non-nullable message even when empty)."""
    return pump_pb2.PullBinlogResp(entity=pump_pb2.Entity(
        pos=pump_pb2.Pos(), payload=payload, meta=pump_pb2.Meta(startTs=start_ts, commitTs=commit_ts)))


class ScanService:
    """binlake's range scans: raw records in columnar batches bounded by bytes.

    Scan and LookupPrewrites yield ``RecordBatch`` messages already encoded (``ScanColumns.encode``,
    byte-identical to protobuf's serializer), so the wire contract is that of ``binlake.proto``.
    """

    def __init__(self, pump: Pump, io: ThreadPoolExecutor) -> None:
        self.pump = pump
        self.io = io

    async def Scan(self, request: binlake_pb2.ScanRequest, call: Call) -> AsyncGenerator[bytes, None]:
        _check_cluster(self.pump, request.cluster_id)
        if request.to_ts and request.to_ts < request.from_ts:
            raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT,
                           f"empty range: to_ts {request.to_ts} < from_ts {request.from_ts}")
        storage = self.pump.storage
        wm = storage.max_commit_ts
        to = wm if request.to_ts <= 0 else min(request.to_ts, wm)
        if request.from_ts < storage.gc_ts:
            log.warning("scan from %d starts below gc ts %d: records may have been purged",
                        request.from_ts, storage.gc_ts)
        batches = storage.scan_batches(request.from_ts, to, _batch_limit(request.max_batch_bytes))
        async for message in _prefetch((columns.encode(to) for columns in batches), self.io):
            yield message

    async def LookupPrewrites(self, request: binlake_pb2.LookupRequest, call: Call) -> AsyncGenerator[bytes, None]:
        _check_cluster(self.pump, request.cluster_id)
        batches = self.pump.storage.lookup_batches(list(request.start_ts), _batch_limit(request.max_batch_bytes))
        async for message in _prefetch((columns.encode(0) for columns in batches), self.io):
            yield message

    def Watermark(self, request: binlake_pb2.WatermarkRequest, call: Call) -> bytes:
        _check_cluster(self.pump, request.cluster_id)
        s = self.pump.storage
        answer: bytes = binlake_pb2.WatermarkResponse(
            node_id=self.pump.node_id, cluster_id=self.pump.cluster_id, max_commit_ts=s.max_commit_ts,
            oldest_unresolved_ts=s.oldest_unresolved(), state=self.pump.state,
            gc_ts=s.gc_ts).SerializeToString()
        return answer


async def _drain(items: Iterator[T], io: ThreadPoolExecutor) -> AsyncIterator[T]:
    """Iterate a blocking iterator on the I/O pool, yielding its items on the event loop."""
    loop = asyncio.get_running_loop()
    while True:
        item = await loop.run_in_executor(io, next, items, _DONE)
        if item is _DONE:
            return
        yield item


async def _prefetch(items: Iterator[T], io: ThreadPoolExecutor, depth: int = SCAN_AHEAD) -> AsyncIterator[T]:
    """``_drain`` with one producer running ahead on the I/O pool: up to ``depth`` items wait
    while one is being sent, so reading and sending overlap."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Queue[tuple[T | _End, BaseException | None]] = asyncio.Queue()
    room = threading.Semaphore(depth)
    stopped = False

    def put(item: T | _End, error: BaseException | None = None) -> bool:
        try:
            loop.call_soon_threadsafe(ready.put_nowait, (item, error))
            return True
        except RuntimeError:  # the loop is closed
            return False

    def produce() -> None:
        try:
            for item in items:
                while not room.acquire(timeout=0.5):   # a consumer that went away without a word
                    if stopped:
                        return
                if stopped or not put(item):
                    return
            put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            put(_DONE, exc)

    loop.run_in_executor(io, produce)
    try:
        while True:
            item, error = await ready.get()
            if error is not None:
                raise error
            if item is _DONE:
                return
            room.release()
            yield item
    finally:
        stopped = True
        room.release()  # a producer waiting for room sees ``stopped`` and ends


def pump_methods(pump_service: PumpService, scan_service: ScanService | None, guard: CallGuard) -> Methods:
    """``binlog.Pump`` and, given ``scan_service``, ``binlake.v1.PumpScan``, every method through ``guard``."""
    methods = {
        "/binlog.Pump/WriteBinlog": guard.unary("WriteBinlog", pump_pb2.WriteBinlogReq.FromString,
                                                pump_service.WriteBinlog, errors=pump_service.failed,
                                                observe=pump_service.observe),
        "/binlog.Pump/PullBinlogs": guard.stream("PullBinlogs", pump_pb2.PullBinlogReq.FromString,
                                                 pump_service.PullBinlogs),
    }
    if scan_service is not None:
        methods.update({
            "/binlake.v1.PumpScan/Scan": guard.stream("Scan", binlake_pb2.ScanRequest.FromString, scan_service.Scan),
            "/binlake.v1.PumpScan/LookupPrewrites": guard.stream(
                "LookupPrewrites", binlake_pb2.LookupRequest.FromString, scan_service.LookupPrewrites),
            "/binlake.v1.PumpScan/Watermark": guard.unary("Watermark", binlake_pb2.WatermarkRequest.FromString,
                                                          scan_service.Watermark),
        })
    return methods


def _batch_limit(requested: int) -> int:
    return min(requested, MAX_BATCH_BYTES) if requested > 0 else DEFAULT_BATCH_BYTES


def _check_cluster(pump: Pump, cluster_id: int) -> None:
    if cluster_id != pump.cluster_id:
        raise RpcAbort(grpc.StatusCode.FAILED_PRECONDITION,
                       f"cluster ID are mismatch, {cluster_id} vs {pump.cluster_id}")


def claim_socket(path: str) -> Path:
    """The absolute path of the pump's unix socket, free to bind: a stale socket file (nobody accepts
    on it) is removed. ``IngestError`` when a process accepts there, when the path is not a socket or
    its directory does not exist."""
    sock = Path(path).absolute()
    if not sock.parent.is_dir():
        raise IngestError(f"socket {sock}: the directory {sock.parent} does not exist")
    try:
        mode = sock.lstat().st_mode
    except FileNotFoundError:
        return sock
    if not stat.S_ISSOCK(mode):
        raise IngestError(f"socket {sock} exists and is not a socket: remove it or choose another socket path")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(str(sock))
    except (ConnectionRefusedError, FileNotFoundError):
        sock.unlink(missing_ok=True)
        log.info("removed the stale socket %s", sock)
        return sock
    except OSError as exc:
        raise IngestError(f"socket {sock}: cannot tell whether another process uses it: {exc}") from exc
    finally:
        probe.close()
    raise IngestError(f"socket {sock} is in use by another process (another pump?): stop it or choose "
                      f"another socket path")


def remove_socket(sock: Path | None) -> None:
    """Remove the pump's socket file, if it is still there and still a socket."""
    if sock is None:
        return
    try:
        if stat.S_ISSOCK(sock.lstat().st_mode):
            sock.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove the socket %s: %s", sock, exc)


class ServerThread:
    """The pump's front door (``ingest.frontdoor``): gRPC and the HTTP API on ``addr``, on
    ``status-addr`` (an alias kept for binlake's own tools) and on the unix socket, served by one
    uvloop event loop in a thread of its own; start/stop from any thread."""

    def __init__(self, pump: Pump, options: PumpConfig, io_threads: int = 32) -> None:
        self.io = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="pump-io")
        handler = type("StatusHandler", (StatusHandler,), {"pump": pump})
        methods = pump_methods(PumpService(pump, self.io), ScanService(pump, self.io) if options.pump_scan else None,
                               CallGuard(options.security))
        self.door = FrontDoor(methods, handler, options.security, options.max_message_size, PeerLog(log), "pump-door")
        self.socket: Path | None = None   # the unix socket this server made (removed at stop)
        try:
            self.door.listen(options.addr)
            if options.status_addr and options.status_addr != options.addr:
                warn_if_plain(options.status_addr, options.security, "the pump's status API")
                self.door.listen(options.status_addr)
            if options.socket:
                self.socket = claim_socket(options.socket)
                self.door.listen(f"unix:{self.socket}")
        except BaseException:
            self.stop(grace=0)
            raise

    def stop(self, grace: float = 10.0) -> None:
        """Stop accepting calls, give running ones ``grace`` seconds, then stop the loop."""
        self.door.stop(grace)
        self.io.shutdown(wait=False, cancel_futures=True)
        remove_socket(self.socket)
