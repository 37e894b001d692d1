"""One emulated TiDB server: its own PumpsClient (binlog sink; in this process, or in a child process
with ``client_process``), fault switches and committer, over the cluster's shared catalog, KV and TSO."""
from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from upstream.binlogs import BinlogSink
from upstream.faults import Faults
from upstream.pump_client.process import ProcessPumpsClient
from upstream.session import Result, Session
from upstream.twopc import Committer
from upstream.txn import Transaction

if TYPE_CHECKING:
    from upstream.cluster import Cluster


class TiDBServer:
    """A TiDB stand-in in the cluster (``index`` is its position in ``Cluster.servers``)."""

    def __init__(self, cluster: Cluster, index: int, registry: str | None, ignore_error: bool = False,
                 client_options: dict[str, Any] | None = None, client_process: bool = False,
                 client_cpus: set[int] | None = None) -> None:
        self.cluster = cluster
        self.index = index
        self.faults = Faults()
        factory = None
        if client_process and registry is not None:
            factory = partial(ProcessPumpsClient, registry, cluster.cluster_id, cpus=client_cpus,
                              **(client_options or {}))
        self.binlog = BinlogSink(registry, cluster.cluster_id, self.faults, ignore_error, client_options, factory)
        self.committer = Committer(cluster, self.binlog, self.faults)

    def begin(self) -> Transaction:
        """Start a transaction: start ts and schema snapshot taken atomically w.r.t. commits."""
        ts, schema = self.cluster.begin_ts()
        return Transaction(ts, schema, self.cluster.kv)

    def session(self, db: str | None = "test", clustered_default: bool | None = None) -> Session:
        """A new session on this server."""
        return Session(self, db, clustered_default)

    def execute(self, script: str, db: str | None = "test") -> list[Result]:
        """Run a script in a fresh session (autocommit unless it says BEGIN … COMMIT)."""
        s = self.session(db)
        try:
            return s.execute(script)
        finally:
            s.close()

    def close(self) -> None:
        """Let commits under way finish, flush pending commit binlogs and close the pump client."""
        self.committer.close()
        self.binlog.close()
