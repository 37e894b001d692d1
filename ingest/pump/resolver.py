"""Deciding the fate of a prewrite whose commit binlog never came, by asking the upstream.

TiDB's Pump asks TiKV for the MVCC records of the transaction's primary key; binlake asks TiDB's
status API (``ingest.mvcc``).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import requests

from ingest.mvcc import Decision, Fate, ask
from ingest.tso import physical_ms

log = logging.getLogger(__name__)

DISCOVER_EVERY = 30.0   # seconds between lookups of a TiDB status port in the registry


class UpstreamResolver:
    """Called by the sorter for a prewrite stuck at the head of the queue; True means it is resolved.

    COMMITTED → a commit binlog is written through the normal path (``write_commit``);
    ROLLED_BACK → the prewrite is dropped; otherwise keep waiting. After ``max_txn_timeout`` seconds
    (measured on PD timestamps) a DML prewrite that the upstream has no record or lock of is dropped
    as rolled back (TiDB's lock resolver would roll it back); a live lock keeps it waiting.
    """

    def __init__(self, status_url: str, read_prewrite: Callable[[int], Any],
                 write_commit: Callable[[Any, int], None], latest_ts: Callable[[], int],
                 max_txn_timeout: float, on_query: Callable[[], None] = lambda: None,
                 on_result: Callable[[str], None] = lambda result: None, timeout: float = 3.0,
                 discover: Callable[[], list[str]] | None = None) -> None:
        self._configured = status_url.rstrip("/")
        self._discover = discover
        self._found = ""
        self._looked_at = -DISCOVER_EVERY
        self._read_prewrite = read_prewrite
        self._write_commit = write_commit
        self._latest_ts = latest_ts
        self._max_txn_timeout = max_txn_timeout
        self._on_query = on_query
        self._on_result = on_result
        self._timeout = timeout
        self._session = requests.Session()
        self._last_warning = 0.0

    @property
    def status_url(self) -> str:
        """The upstream's status URL: the configured one, else one ``discover`` finds (a TiDB alive in
        PD's etcd; asked at most every :data:`DISCOVER_EVERY` seconds); "" when there is none."""
        if self._configured or self._discover is None:
            return self._configured
        now = time.monotonic()
        if now - self._looked_at >= DISCOVER_EVERY:
            self._looked_at = now
            try:
                urls = self._discover()
            except Exception as exc:  # noqa: BLE001 (the registry may be briefly away: keep the last found)
                log.warning("looking up a TiDB status port in the registry failed: %s", exc)
                urls = [self._found] if self._found else []
            self._found = urls[0].rstrip("/") if urls else ""
        return self._found

    def query(self, prewrite_key: bytes, start_ts: int) -> Decision:
        """Ask the upstream about the transaction; UNKNOWN on any failure."""
        if not self.status_url:
            return Decision(Fate.UNKNOWN)
        self._on_query()
        return ask(self._session, self.status_url, prewrite_key, start_ts, self._timeout)

    def __call__(self, entry: Any) -> bool:
        """Resolve the prewrite of ``entry`` (an index Entry); True when it no longer blocks."""
        binlog = self._read_prewrite(entry.start_ts)
        if binlog is None:
            log.warning("prewrite %d is not readable; dropping it from the sorter", entry.start_ts)
            return True
        if not self.status_url:
            self._warn(f"prewrite start_ts={entry.start_ts} has no commit yet and no "
                       f"upstream-status-url is configured to ask about it; waiting")
            return False
        decision = self.query(binlog.prewrite_key, entry.start_ts)
        if decision.fate is Fate.COMMITTED:
            log.info("txn %d committed upstream at %d: writing its lost commit binlog",
                     entry.start_ts, decision.commit_ts)
            self._write_commit(binlog, decision.commit_ts)
            self._on_result("committed")
            return True
        if decision.fate is Fate.ROLLED_BACK:
            log.info("txn %d rolled back upstream: dropping its prewrite", entry.start_ts)
            self._on_result("rolled_back")
            return True
        waited = (physical_ms(self._latest_ts()) - physical_ms(entry.start_ts)) / 1000.0
        if waited < self._max_txn_timeout:
            return False
        if decision.fate is Fate.UNKNOWN and binlog.ddl_job_id == 0:
            log.warning("txn %d undecided for %.0fs with no record upstream: treating it as rolled back",
                        entry.start_ts, waited)
            self._on_result("timeout_dropped")
            return True
        self._warn(f"txn {entry.start_ts} still undecided upstream after {waited:.0f}s "
                   f"({decision.fate.value}); the watermark waits for it")
        return False

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning > 60:
            self._last_warning = now
            log.warning(message)
