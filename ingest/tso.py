"""TSO arithmetic (``physical_ms << 18 | logical``) and a client for PD's ``/pdpb.PD/Tso`` stream."""
from __future__ import annotations

import threading

import grpc

from ingest.errors import TSOError
from schemas import pdpb_pb2, pdpb_pb2_grpc

PHYSICAL_SHIFT_BITS = 18
LOGICAL_MASK = (1 << PHYSICAL_SHIFT_BITS) - 1


def compose_ts(physical_ms: int, logical: int) -> int:
    """Return the TSO for a physical Unix-millisecond time and a logical counter."""
    return (physical_ms << PHYSICAL_SHIFT_BITS) | (logical & LOGICAL_MASK)


def physical_ms(ts: int) -> int:
    """Return the physical (Unix milliseconds) part of a TSO."""
    return ts >> PHYSICAL_SHIFT_BITS


def grpc_target(url: str) -> str:
    """Turn ``http://host:port`` (a pd-urls entry) into a gRPC target ``host:port``."""
    url = url.strip()
    for prefix in ("http://", "https://", "grpc://"):
        if url.startswith(prefix):
            url = url[len(prefix):]
    return url.rstrip("/")


class TSOClient:
    """Fetches timestamps from a PD-compatible TSO (``/pdpb.PD/Tso``), trying each pd-url in turn.

    The cluster id of the first response header is kept in ``cluster_id`` when none was given.
    """

    def __init__(self, pd_urls: str | list[str], cluster_id: int = 0, timeout: float = 5.0,
                 credentials: grpc.ChannelCredentials | None = None) -> None:
        urls = pd_urls.split(",") if isinstance(pd_urls, str) else list(pd_urls)
        self._targets = [grpc_target(u) for u in urls if u.strip()]
        if not self._targets:
            raise TSOError("no pd-urls given")
        self.cluster_id = cluster_id
        self._timeout = timeout
        self._credentials = credentials
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}

    def _stub(self, target: str) -> pdpb_pb2_grpc.PDStub:
        channel = self._channels.get(target)
        if channel is None:
            channel = (grpc.secure_channel(target, self._credentials) if self._credentials
                       else grpc.insecure_channel(target))
            self._channels[target] = channel
        return pdpb_pb2_grpc.PDStub(channel)

    def get_ts(self) -> int:
        """Return one fresh TSO; raise ``TSOError`` when no PD answers within the timeout."""
        errors: list[str] = []
        with self._lock:
            for target in self._targets:
                request = pdpb_pb2.TsoRequest(header=pdpb_pb2.RequestHeader(cluster_id=self.cluster_id),
                                              count=1)
                try:
                    resp = next(iter(self._stub(target).Tso(iter([request]), timeout=self._timeout)))
                except grpc.RpcError as exc:
                    errors.append(f"{target}: {exc.details() or exc.code()}")
                    continue
                except StopIteration:
                    errors.append(f"{target}: the TSO stream closed without an answer")
                    continue
                if resp.header.error.type != pdpb_pb2.OK:
                    errors.append(f"{target}: {resp.header.error.message}")
                    continue
                if self.cluster_id == 0:
                    self.cluster_id = resp.header.cluster_id
                return compose_ts(resp.timestamp.physical, resp.timestamp.logical)
        raise TSOError(f"cannot get a timestamp from PD: {'; '.join(errors)}")

    def close(self) -> None:
        """Close every channel."""
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
