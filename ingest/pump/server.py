"""gRPC services of a pump: TiDB's ``binlog.Pump`` and binlake's ``binlake.v1.PumpScan``.

Served by ``grpc.aio`` on one event loop: a WriteBinlog call is a coroutine parked on a future
that the storage writer resolves once its group commit is durable, so 32 or 3,200 concurrent
writers cost no threads and arrive together for group commit. Blocking storage reads (scans,
pulls) run on a thread pool and hand their batches back to the loop.
"""
from __future__ import annotations

import asyncio
import enum
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import grpc
import uvloop

from ingest.errors import DiskFull, IngestError, MalformedBinlog, NotOnline, StorageClosed
from ingest.http2.framing import HTTP2_OPTIONS
from ingest.pump.config import PumpConfig
from ingest.pump.guard import CallGuard
from schemas import binlake_pb2, binlake_pb2_grpc, pump_pb2, pump_pb2_grpc

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
SOCKET_MODE = 0o660  # the unix socket: the pump's user and group may connect (connecting needs write)
T = TypeVar("T")


class _End(enum.Enum):
    """The end marker of ``_drain`` and ``_prefetch`` (an enum member, so ``is`` tells it from an item)."""

    DONE = enum.auto()


_DONE: Final = _End.DONE


class PumpService(pump_pb2_grpc.PumpServicer):
    """``/binlog.Pump/WriteBinlog`` and ``/binlog.Pump/PullBinlogs`` as TiDB's client and drainer expect."""

    def __init__(self, pump: Pump, io: ThreadPoolExecutor) -> None:
        self.pump = pump
        self.io = io
        self._succ = pump.metrics.rpc_duration.labels("WriteBinlog", "succ")
        self._fail = pump.metrics.rpc_duration.labels("WriteBinlog", "fail")
        self._writer: LoopWriter | None = None  # batches this server loop's writes (set on first call)

    async def WriteBinlog(self, request: pump_pb2.WriteBinlogReq,
                          context: grpc.aio.ServicerContext) -> pump_pb2.WriteBinlogResp:
        started = time.monotonic()
        pump = self.pump
        if request.clusterID != pump.cluster_id:
            await _check_cluster(pump, request.clusterID, context)
        try:
            writer = self._writer
            if writer is None:
                writer = self._writer = pump.storage.loop_writer(asyncio.get_running_loop())
            durable = pump.write_binlog(request.payload, writer)
            if durable is not None:
                await durable
        except MalformedBinlog as exc:
            await self._failed(context, started, grpc.StatusCode.INVALID_ARGUMENT,
                               f"malformed binlog payload: {exc}")
        except (NotOnline, DiskFull) as exc:
            await self._failed(context, started, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except StorageClosed as exc:
            await self._failed(context, started, grpc.StatusCode.UNAVAILABLE, str(exc))
        except OSError as exc:
            await self._failed(context, started, grpc.StatusCode.INTERNAL, f"write binlog failed: {exc}")
        self._succ.observe(time.monotonic() - started)
        return pump_pb2.WriteBinlogResp()

    async def _failed(self, context: grpc.aio.ServicerContext, started: float, code: grpc.StatusCode,
                      message: str) -> None:
        self._fail.observe(time.monotonic() - started)
        self.pump.metrics.loss_binlog.inc()
        await context.abort(code, message)

    async def PullBinlogs(self, request: pump_pb2.PullBinlogReq,
                          context: grpc.aio.ServicerContext) -> AsyncIterator[pump_pb2.PullBinlogResp]:
        await _check_cluster(self.pump, request.clusterID, context)
        cancelled = False

        def stopped() -> bool:
            return cancelled or self.pump.stopping

        try:
            items = self.pump.storage.pull_commits(request.startFrom.offset, stopped)
            async for entry, payload in _drain(items, self.io):
                yield _pull_answer(payload, entry.start_ts, entry.commit_ts)
        finally:
            cancelled = True


def _pull_answer(payload: bytes, start_ts: int, commit_ts: int) -> pump_pb2.PullBinlogResp:
    """A ``PullBinlogResp`` byte-equal to TiDB's pump v8.3.0 (compared with one on the wire): the
    payload, ``meta`` with the binlog's start and commit ts, and an empty ``pos`` (gogoproto writes a
    non-nullable message even when empty)."""
    return pump_pb2.PullBinlogResp(entity=pump_pb2.Entity(
        pos=pump_pb2.Pos(), payload=payload, meta=pump_pb2.Meta(startTs=start_ts, commitTs=commit_ts)))


class ScanService(binlake_pb2_grpc.PumpScanServicer):
    """binlake's range scans: raw records in columnar batches bounded by bytes.

    Scan and LookupPrewrites yield ``RecordBatch`` messages already encoded (``ScanColumns.encode``,
    byte-identical to protobuf's serializer); ``add_services`` registers them with a
    pass-through serializer, so the wire contract is that of ``binlake.proto``.
    """

    def __init__(self, pump: Pump, io: ThreadPoolExecutor) -> None:
        self.pump = pump
        self.io = io

    async def Scan(self, request: binlake_pb2.ScanRequest,
                   context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        await _check_cluster(self.pump, request.cluster_id, context)
        if request.to_ts and request.to_ts < request.from_ts:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
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

    async def LookupPrewrites(self, request: binlake_pb2.LookupRequest,
                              context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        await _check_cluster(self.pump, request.cluster_id, context)
        batches = self.pump.storage.lookup_batches(list(request.start_ts), _batch_limit(request.max_batch_bytes))
        async for message in _prefetch((columns.encode(0) for columns in batches), self.io):
            yield message

    async def Watermark(self, request: binlake_pb2.WatermarkRequest,
                        context: grpc.aio.ServicerContext) -> binlake_pb2.WatermarkResponse:
        await _check_cluster(self.pump, request.cluster_id, context)
        s = self.pump.storage
        return binlake_pb2.WatermarkResponse(
            node_id=self.pump.node_id, cluster_id=self.pump.cluster_id, max_commit_ts=s.max_commit_ts,
            oldest_unresolved_ts=s.oldest_unresolved(), state=self.pump.state, gc_ts=s.gc_ts)


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
                room.acquire()
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


def add_services(pump_service: PumpService, scan_service: ScanService | None, server: grpc.aio.Server,
                 guard: CallGuard) -> None:
    """Register ``binlog.Pump`` and, given ``scan_service``, ``binlake.v1.PumpScan``, every method
    through ``guard``; Scan and LookupPrewrites send pre-encoded RecordBatches."""
    pump = {
        "WriteBinlog": guard.unary("WriteBinlog", pump_pb2.WriteBinlogReq.FromString, pump_service.WriteBinlog,
                                   pump_pb2.WriteBinlogResp.SerializeToString),
        "PullBinlogs": guard.stream("PullBinlogs", pump_pb2.PullBinlogReq.FromString, pump_service.PullBinlogs,
                                    pump_pb2.PullBinlogResp.SerializeToString),
    }
    if scan_service is None:
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("binlog.Pump", pump)])
        return
    scan = {
        "Scan": guard.stream("Scan", binlake_pb2.ScanRequest.FromString, scan_service.Scan, _encoded),
        "LookupPrewrites": guard.stream("LookupPrewrites", binlake_pb2.LookupRequest.FromString,
                                        scan_service.LookupPrewrites, _encoded),
        "Watermark": guard.unary("Watermark", binlake_pb2.WatermarkRequest.FromString, scan_service.Watermark,
                                 binlake_pb2.WatermarkResponse.SerializeToString),
    }
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("binlog.Pump", pump),
                                     grpc.method_handlers_generic_handler("binlake.v1.PumpScan", scan)])


def _encoded(message: bytes) -> bytes:
    return message


def _batch_limit(requested: int) -> int:
    return min(requested, MAX_BATCH_BYTES) if requested > 0 else DEFAULT_BATCH_BYTES


async def _check_cluster(pump: Pump, cluster_id: int, context: grpc.aio.ServicerContext) -> None:
    if cluster_id != pump.cluster_id:
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
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


async def start_server(pump: Pump, options: PumpConfig, io: ThreadPoolExecutor,
                       sock: Path | None = None) -> grpc.aio.Server:
    """Create and start the aio gRPC server with its services (PumpScan unless ``pump-scan`` is off)
    on ``options.addr`` and, given one, on
    the unix socket ``sock`` (TLS on both if configured, as TiDB's pump does)."""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", options.max_message_size),
                                      ("grpc.max_send_message_length", -1),
                                      ("grpc.so_reuseport", 0), *HTTP2_OPTIONS])
    add_services(PumpService(pump, io), ScanService(pump, io) if options.pump_scan else None, server,
                 CallGuard(options.security))
    creds = options.security.grpc_server_credentials()
    for target in [options.addr] + ([f"unix:{sock}"] if sock is not None else []):
        port = server.add_secure_port(target, creds) if creds else server.add_insecure_port(target)
        if port == 0:
            raise OSError(f"cannot listen on {target} (address in use?)")
    await server.start()
    if sock is not None:
        os.chmod(sock, SOCKET_MODE)
    return server


class ServerThread:
    """Runs the aio server's event loop (uvloop: ~10 % more WriteBinlog calls/s than asyncio's
    default loop, bench/pump_write.py) in a thread of its own; start/stop from any thread."""

    def __init__(self, pump: Pump, options: PumpConfig, io_threads: int = 32) -> None:
        self.io = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="pump-io")
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="pump-grpc", daemon=True)
        self._thread.start()
        self._server: grpc.aio.Server | None = None
        self.socket: Path | None = None   # the unix socket this server made (removed at stop)
        try:
            if options.socket:
                self.socket = claim_socket(options.socket)
            self._server = self._run(start_server(pump, options, self.io, self.socket))
        except BaseException:
            self._stop_loop()
            remove_socket(self.socket)
            raise

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.io.shutdown(wait=False, cancel_futures=True)

    def stop(self, grace: float = 10.0) -> None:
        """Stop accepting calls, give running ones ``grace`` seconds, then stop the loop."""
        if self._server is not None:
            try:
                self._run(self._server.stop(grace), timeout=grace + 5)
            except Exception:
                log.exception("gRPC server stop failed")
        self._stop_loop()
        remove_socket(self.socket)
