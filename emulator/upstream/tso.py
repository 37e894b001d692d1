"""A PD-compatible timestamp oracle: ``/pdpb.PD/Tso`` answering strictly increasing TSOs, and
``/pdpb.PD/GetMembers`` (one member, the leader), which PD's own client calls first."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc

from ingest.tso import LOGICAL_MASK
from schemas import pdpb_pb2, pdpb_pb2_grpc


class TimestampOracle:
    """Hands out ``physical_ms << 18 | logical`` timestamps, strictly increasing across calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._physical = 0
        self._logical = 0

    def allocate(self, count: int = 1) -> tuple[int, int]:
        """Reserve ``count`` timestamps; return (physical, logical) of the last one."""
        with self._lock:
            now = int(time.time() * 1000)
            if now > self._physical:
                self._physical, self._logical = now, 0
            if self._logical + count > LOGICAL_MASK:
                self._physical += 1  # logical space exhausted: step into the next millisecond
                self._logical = 0
            self._logical += count
            return self._physical, self._logical

    def last(self) -> int:
        """The last timestamp handed out (0 before the first), as ``physical << 18 | logical``."""
        with self._lock:
            return (self._physical << 18) | self._logical

    def ts(self) -> int:
        """One fresh timestamp as ``physical << 18 | logical``."""
        physical, logical = self.allocate(1)
        return (physical << 18) | logical


class TSOService(pdpb_pb2_grpc.PDServicer):
    """``GetMembers`` and the ``Tso`` stream, as a single-member PD; every header carries ``cluster_id``.

    As PD does, a TSO request must name the cluster: cluster id 0 is refused ("mismatch cluster id"),
    so clients learn the id from ``GetMembers`` first. ``client_url`` is what ``GetMembers`` names as
    the member's and the leader's address (a Go PD client dials the leader's first client url).
    """

    MEMBER_ID = 1

    def __init__(self, cluster_id: int, oracle: TimestampOracle | None = None, client_url: str = "") -> None:
        self.cluster_id = cluster_id
        self.oracle = oracle or TimestampOracle()
        self.client_url = client_url

    def GetMembers(self, request: pdpb_pb2.GetMembersRequest,
                   context: grpc.ServicerContext) -> pdpb_pb2.GetMembersResponse:
        member = pdpb_pb2.Member(name="binlake-upstream", member_id=self.MEMBER_ID,
                                 client_urls=[self.client_url], peer_urls=[self.client_url])
        return pdpb_pb2.GetMembersResponse(header=pdpb_pb2.ResponseHeader(cluster_id=self.cluster_id),
                                           members=[member], leader=member, etcd_leader=member)

    def Tso(self, request_iterator: Iterator[pdpb_pb2.TsoRequest],
            context: grpc.ServicerContext) -> Iterator[pdpb_pb2.TsoResponse]:
        for req in request_iterator:
            header = pdpb_pb2.ResponseHeader(cluster_id=self.cluster_id)
            if req.header.cluster_id != self.cluster_id:
                header.error.type = pdpb_pb2.UNKNOWN
                header.error.message = (f"mismatch cluster id, need {self.cluster_id} "
                                        f"but got {req.header.cluster_id}")
                yield pdpb_pb2.TsoResponse(header=header)
                continue
            count = max(req.count, 1)
            physical, logical = self.oracle.allocate(count)
            yield pdpb_pb2.TsoResponse(header=header, count=count,
                                       timestamp=pdpb_pb2.Timestamp(physical=physical, logical=logical))


def serve_tso(addr: str, cluster_id: int, oracle: TimestampOracle | None = None,
              credentials: grpc.ServerCredentials | None = None) -> tuple[grpc.Server, int]:
    """Start a TSO server on ``addr`` (port 0 picks one; TLS with ``credentials``); return the server
    and its port.

    Pass ``oracle`` to share one timestamp source with in-process users (the upstream emulator)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="tso"))
    service = TSOService(cluster_id, oracle)
    pdpb_pb2_grpc.add_PDServicer_to_server(service, server)
    port = server.add_secure_port(addr, credentials) if credentials else server.add_insecure_port(addr)
    if port == 0:
        raise OSError(f"cannot listen on {addr}")
    host = addr.rsplit(":", 1)[0].strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    service.client_url = f"{'https' if credentials else 'http'}://{host}:{port}"
    server.start()
    return server, port
