"""The MySQL/TiDB sink as the commands see it: ``--sink mysql|tidb``, the ``[syncer]`` keys of
:mod:`sink.mysql.config`, relay-log recovery without the upstream, and ``verify --against mysql://``."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ingest.config import ConfigError
from sink.base import Sink
from sink.compare import Expired
from sink.mysql.config import MySQLSettings
from sink.plugin import Capabilities, Flag, Recovery, SinkContext, SinkSpec, Verifier
from sink.verify_report import VerifyReport

if TYPE_CHECKING:

    from sink.mysql.sink import MySQLSink
    from sink.mysql.target import MySQLTarget
    from sink.restore import RestoreTarget


TO_SECURITY = "[syncer.to.security]"
CHECKPOINT_SECURITY = "[syncer.to.checkpoint.security]"


def target_of(settings: MySQLSettings) -> MySQLTarget:
    """The ``[syncer.to]`` downstream (``dsn`` over host/port/user/password or password-file)."""
    from sink.mysql.target import MySQLTarget, TLSFiles

    to = settings.to
    params = dict(to.params)
    if settings.sql_mode and not any(k.lower() == "sql_mode" for k in params):
        params["sql_mode"] = settings.sql_mode      # TiDB Binlog's [syncer] sql-mode, on the downstream session
    tls = TLSFiles.of(to.security, TO_SECURITY)
    if to.dsn:
        return MySQLTarget.from_dsn(to.dsn, params=params, read_timeout=to.read_timeout, tls=tls)
    return MySQLTarget(to.host, to.port, to.user, to.secret(), params, to.read_timeout, tls)


def checkpoint_target_of(settings: MySQLSettings) -> MySQLTarget | None:
    """The database ``[syncer.to.checkpoint]`` names for the checkpoint row (``type`` mysql or tidb,
    TiDB Binlog's defaults for what is not set); None: the checkpoint is on the downstream."""
    from sink.mysql.target import MySQLTarget, TLSFiles

    cp = settings.to.checkpoint
    if not cp.elsewhere:
        return None
    return MySQLTarget(cp.host or "127.0.0.1", cp.port or 3306, cp.user or "root", cp.secret(), {},
                       settings.to.read_timeout, TLSFiles.of(cp.security, CHECKPOINT_SECURITY))


class MySQLVerifier(Verifier):
    """A MySQL downstream compared at its checkpoint row's ts (or the one asked for)."""

    def __init__(self, settings: MySQLSettings, cluster_id: int | None, dsn: str) -> None:
        from sink.mysql.target import MySQLTarget, TLSFiles

        self.settings = settings
        self.cluster_id = cluster_id
        self.conn: Any = MySQLTarget.from_dsn(dsn, params=settings.to.params,
                                              tls=TLSFiles.of(settings.to.security, TO_SECURITY)).connect()
        self._notes: list[str] = []

    def checkpoint(self) -> int | None:
        from sink.mysql.checkpoint import CheckpointTable

        if self.cluster_id is None:
            raise ConfigError("give --cluster-id or --pd-urls: the checkpoint row is the cluster's")
        where = self.settings.to.checkpoint
        elsewhere = checkpoint_target_of(self.settings)
        conn = elsewhere.connect() if elsewhere is not None else self.conn
        try:
            cp = CheckpointTable(conn, self.cluster_id, where.schema_, where.table).load()
        finally:
            if conn is not self.conn:
                conn.close()
        if cp is None:
            return None
        if not cp.consistent:
            self._notes.append(f"note: the checkpoint at {cp.commit_ts} is not consistent (a run is applying "
                               f"or stopped uncleanly)")
        return cp.commit_ts

    def compare(self, upstream: Mapping[str, list[dict[str, Any]]], ts: int,
                tables: Sequence[str] | None, expired: Mapping[str, Expired] | None = None) -> VerifyReport:
        from sink.mysql.verify import verify_downstream

        return verify_downstream(self.conn, dict(upstream), ts, expired=expired)

    def notes(self) -> list[str]:
        return list(self._notes)

    def close(self) -> None:
        self.conn.close()


class MySQLSpec(SinkSpec[MySQLSettings]):
    """TiDB Binlog's mysql/tidb downstream: transactions in commit order, a checkpoint row there."""

    names = ("mysql", "tidb")
    section = "syncer"
    config = MySQLSettings
    capabilities = Capabilities(per_transaction=True, table_subsets=False, verify=True, skips_commit_ts=True,
                                recovery_without_upstream=True, replays_ddl=True, starts_now=True)
    against_schemes = ("mysql",)
    restore_schemes = ("mysql", "tidb")
    flags = (
        Flag("--to-dsn", "syncer.to.dsn", "the MySQL/TiDB downstream of --sink mysql|tidb (over [syncer.to])",
             metavar="mysql://USER:PASS@HOST:PORT"),
        Flag("--safe-mode", "syncer.safe-mode", "MySQL sink: INSERT as REPLACE, UPDATE as DELETE + REPLACE "
             "(idempotent replay)", kind="switch"),
        Flag("--merge", "syncer.to.merge", "MySQL sink: apply each flush's net change per primary key with "
             "multi-row DELETE/REPLACE (TiDB Binlog's merge mode)", kind="switch"),
        Flag("--worker-count", "syncer.worker-count", "MySQL sink: parallel appliers (default 16)", type=int,
             short="-c"),
        Flag("--txn-batch", "syncer.txn-batch", "MySQL sink: DMLs per downstream transaction (default 20)",
             type=int),
    )

    def _sink(self, ctx: SinkContext[MySQLSettings]) -> MySQLSink:
        from sink.mysql.sink import MySQLOptions, MySQLSink

        return MySQLSink(target_of(ctx.settings), MySQLOptions(
            settings=ctx.settings, tidb=ctx.name == "tidb", table_filter=ctx.table_filter, dry_run=ctx.dry_run,
            checkpoint_target=checkpoint_target_of(ctx.settings), event_filter=ctx.event_filter))

    def open(self, ctx: SinkContext[MySQLSettings]) -> Sink:
        sink = self._sink(ctx)
        if ctx.cluster_id is not None:
            try:
                sink.load_checkpoint(ctx.cluster_id)
            except BaseException:
                sink.close()
                raise
        return sink

    def recover(self, ctx: SinkContext[MySQLSettings], cause: Exception) -> Recovery | None:
        """TiDB Binlog's relay-log recovery (:meth:`sink.mysql.sink.MySQLSink.recover`): without PD the
        checkpoint table's only row names the cluster. A dry run counts what it would replay."""
        from sink.mysql.checkpoint import CheckpointTable

        if not ctx.settings.relay.log_dir:
            return None
        sink = self._sink(ctx)
        try:
            cluster_id = ctx.cluster_id
            if cluster_id is None:
                where = ctx.settings.to.checkpoint
                cluster_id = CheckpointTable.sole_cluster(sink.checkpoint_conn, where.schema_, where.table)
                if cluster_id is None:
                    return None
            sink.load_checkpoint(cluster_id)
            before = sink.loaded
            done = sink.recover()
        finally:
            sink.close()
        if done is None or before is None:
            return None
        records, ts = done
        return Recovery(cluster_id, before.commit_ts, ts, records)

    def restore_target(self, uri: str, settings: MySQLSettings) -> RestoreTarget:
        """``mysql://…`` or ``tidb://…`` (DDL unchanged): DDL replay, bulk INSERTs, the checkpoint row."""
        from sink.mysql.restore import MySQLRestore

        return MySQLRestore.from_uri(uri, settings)

    def verifier(self, ctx: SinkContext[MySQLSettings], against: str | None) -> Verifier:
        dsn = against or ctx.settings.to.dsn
        if not dsn:
            raise ConfigError("verify against a MySQL downstream needs --against mysql://USER:PASS@HOST:PORT "
                              "or [syncer.to] dsn")
        return MySQLVerifier(ctx.settings, ctx.cluster_id, dsn)


SPEC = MySQLSpec()
