"""TSO arithmetic (``physical_ms << 18 | logical``) and a client for PD: ``/pdpb.PD/GetMembers`` for the
cluster id, then the ``/pdpb.PD/Tso`` stream."""
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

    A real PD refuses a TSO request whose header carries cluster id 0, so when none was given the
    client learns it first as PD's own client does: ``GetMembers``, whose response header carries
    the cluster id (kept in ``cluster_id``).
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

    def learn_cluster_id(self) -> int:
        """Return the cluster id, asking PD's ``GetMembers`` when none is known yet.

        Raises ``TSOError`` naming every pd-url's answer when none gives a non-zero id, and when two
        pd-urls belong to different clusters (PD's client refuses such a list too).
        """
        with self._lock:
            return self._learn_cluster_id()

    def _learn_cluster_id(self) -> int:
        if self.cluster_id:
            return self.cluster_id
        errors: list[str] = []
        found: dict[int, str] = {}
        for target in self._targets:
            try:
                resp = self._stub(target).GetMembers(pdpb_pb2.GetMembersRequest(), timeout=self._timeout)
            except grpc.RpcError as exc:
                errors.append(f"{target}: {exc.details() or exc.code()}")
                continue
            if resp.header.error.type != pdpb_pb2.OK:
                errors.append(f"{target}: {resp.header.error.message}")
            elif resp.header.cluster_id == 0:
                errors.append(f"{target}: GetMembers answered cluster id 0")
            else:
                found.setdefault(resp.header.cluster_id, target)
        if len(found) > 1:
            raise TSOError("pd-urls belong to different clusters: "
                           + ", ".join(f"{target} is cluster {cid}" for cid, target in found.items()))
        if not found:
            raise TSOError(f"cannot learn the cluster id from PD (GetMembers): {'; '.join(errors)}")
        self.cluster_id = next(iter(found))
        return self.cluster_id

    def get_ts(self) -> int:
        """Return one fresh TSO; raise ``TSOError`` when no PD answers within the timeout."""
        errors: list[str] = []
        with self._lock:
            cluster_id = self._learn_cluster_id()
            for target in self._targets:
                request = pdpb_pb2.TsoRequest(header=pdpb_pb2.RequestHeader(cluster_id=cluster_id), count=1)
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
                return compose_ts(resp.timestamp.physical, resp.timestamp.logical)
        raise TSOError(f"cannot get a timestamp from PD: {'; '.join(errors)}")

    def close(self) -> None:
        """Close every channel."""
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
