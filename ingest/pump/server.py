"""gRPC services of a pump: TiDB's ``binlog.Pump`` and binlake's ``binlake.v1.PumpScan``."""
from __future__ import annotations

import logging
import time
from concurrent import futures
from typing import TYPE_CHECKING, Iterable, Iterator

import grpc

from ingest.errors import DiskFull, MalformedBinlog, NotOnline, StorageClosed
from ingest.pump.options import PumpOptions
from ingest.pump.storage import Entry
from schemas import binlake_pb2, binlake_pb2_grpc, pump_pb2, pump_pb2_grpc

if TYPE_CHECKING:
    from ingest.pump.pump import Pump

log = logging.getLogger(__name__)

DEFAULT_BATCH_BYTES = 4 << 20
MAX_BATCH_BYTES = 64 << 20


class PumpService(pump_pb2_grpc.PumpServicer):
    """``/binlog.Pump/WriteBinlog`` and ``/binlog.Pump/PullBinlogs`` as TiDB's client and drainer expect."""

    def __init__(self, pump: "Pump") -> None:
        self.pump = pump

    def WriteBinlog(self, request: pump_pb2.WriteBinlogReq, context: grpc.ServicerContext) -> pump_pb2.WriteBinlogResp:
        started = time.monotonic()
        label = "succ"
        try:
            _check_cluster(self.pump, request.clusterID, context)
            self.pump.write_binlog(request.payload)
            return pump_pb2.WriteBinlogResp()
        except MalformedBinlog as exc:
            label = "fail"
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed binlog payload: {exc}")
        except (NotOnline, DiskFull) as exc:
            label = "fail"
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except StorageClosed as exc:
            label = "fail"
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        except OSError as exc:
            label = "fail"
            context.abort(grpc.StatusCode.INTERNAL, f"write binlog failed: {exc}")
        finally:
            if label == "fail":
                self.pump.metrics.loss_binlog.inc()
            self.pump.metrics.rpc_duration.labels("WriteBinlog", label).observe(time.monotonic() - started)
        raise AssertionError("unreachable")  # context.abort raises

    def PullBinlogs(self, request: pump_pb2.PullBinlogReq, context: grpc.ServicerContext) -> Iterator[pump_pb2.PullBinlogResp]:
        _check_cluster(self.pump, request.clusterID, context)
        stopped = lambda: not context.is_active() or self.pump.stopping  # noqa: E731
        for entry, payload in self.pump.storage.pull_commits(request.startFrom.offset, stopped):
            yield pump_pb2.PullBinlogResp(entity=pump_pb2.Entity(
                payload=payload, meta=pump_pb2.Meta(startTs=entry.start_ts, commitTs=entry.commit_ts)))


class ScanService(binlake_pb2_grpc.PumpScanServicer):
    """binlake's range scans: raw records in columnar batches bounded by bytes."""

    def __init__(self, pump: "Pump") -> None:
        self.pump = pump

    def Scan(self, request: binlake_pb2.ScanRequest, context: grpc.ServicerContext) -> Iterator[binlake_pb2.RecordBatch]:
        _check_cluster(self.pump, request.cluster_id, context)
        if request.to_ts and request.to_ts < request.from_ts:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"empty range: to_ts {request.to_ts} < from_ts {request.from_ts}")
        storage = self.pump.storage
        wm = storage.max_commit_ts
        to = wm if request.to_ts <= 0 else min(request.to_ts, wm)
        if request.from_ts < storage.gc_ts:
            log.warning("scan from %d starts below gc ts %d: records may have been purged",
                        request.from_ts, storage.gc_ts)
        yield from _batches(storage.scan(request.from_ts, to), _batch_limit(request.max_batch_bytes), to)

    def LookupPrewrites(self, request: binlake_pb2.LookupRequest, context: grpc.ServicerContext) -> Iterator[binlake_pb2.RecordBatch]:
        _check_cluster(self.pump, request.cluster_id, context)
        records = self.pump.storage.lookup_prewrites(request.start_ts)
        yield from _batches(records, _batch_limit(request.max_batch_bytes), 0)

    def Watermark(self, request: binlake_pb2.WatermarkRequest, context: grpc.ServicerContext) -> binlake_pb2.WatermarkResponse:
        _check_cluster(self.pump, request.cluster_id, context)
        s = self.pump.storage
        return binlake_pb2.WatermarkResponse(
            node_id=self.pump.node_id, cluster_id=self.pump.cluster_id, max_commit_ts=s.max_commit_ts,
            oldest_unresolved_ts=s.oldest_unresolved(), state=self.pump.state, gc_ts=s.gc_ts)


def _batch_limit(requested: int) -> int:
    return min(requested, MAX_BATCH_BYTES) if requested > 0 else DEFAULT_BATCH_BYTES


def _batches(records: Iterable[tuple[Entry, bytes]], limit: int, scanned_to: int) -> Iterator[binlake_pb2.RecordBatch]:
    """Group records into RecordBatch messages of at most ``limit`` payload bytes (at least one record)."""
    key_ts: list[int] = []
    tps: list[int] = []
    starts: list[int] = []
    commits: list[int] = []
    lengths: list[int] = []
    payloads: list[bytes] = []
    size = 0
    for entry, payload in records:
        if payloads and size + len(payload) > limit:
            yield binlake_pb2.RecordBatch(key_ts=key_ts, tp=tps, start_ts=starts, commit_ts=commits,
                                          lengths=lengths, payloads=b"".join(payloads), scanned_to=scanned_to)
            key_ts, tps, starts, commits, lengths, payloads, size = [], [], [], [], [], [], 0
        key_ts.append(entry.key_ts)
        tps.append(entry.tp)
        starts.append(entry.start_ts)
        commits.append(entry.commit_ts)
        lengths.append(len(payload))
        payloads.append(payload)
        size += len(payload)
    yield binlake_pb2.RecordBatch(key_ts=key_ts, tp=tps, start_ts=starts, commit_ts=commits,
                                  lengths=lengths, payloads=b"".join(payloads), scanned_to=scanned_to)


def _check_cluster(pump: "Pump", cluster_id: int, context: grpc.ServicerContext) -> None:
    if cluster_id != pump.cluster_id:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                      f"cluster ID are mismatch, {cluster_id} vs {pump.cluster_id}")


def build_server(pump: "Pump", options: PumpOptions, workers: int = 64) -> grpc.Server:
    """Create (not start) the gRPC server with both services on ``options.addr``, TLS if configured."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pump-grpc"),
        options=[("grpc.max_receive_message_length", options.max_message_size),
                 ("grpc.max_send_message_length", -1),
                 ("grpc.so_reuseport", 0)])
    pump_pb2_grpc.add_PumpServicer_to_server(PumpService(pump), server)
    binlake_pb2_grpc.add_PumpScanServicer_to_server(ScanService(pump), server)
    sec = options.security
    if sec.enabled:
        with open(sec.ssl_key, "rb") as f:
            key = f.read()
        with open(sec.ssl_cert, "rb") as f:
            cert = f.read()
        ca = None
        if sec.ssl_ca:
            with open(sec.ssl_ca, "rb") as f:
                ca = f.read()
        creds = grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                            require_client_auth=ca is not None)
        port = server.add_secure_port(options.addr, creds)
    else:
        port = server.add_insecure_port(options.addr)
    if port == 0:
        raise OSError(f"cannot listen on {options.addr} (address in use?)")
    return server

