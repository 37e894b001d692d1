"""What TiDB's MVCC records say of a transaction at one key: ``GET {upstream}/mvcc/hex/{hex(key)}``
on TiDB's status API (pingcap/tidb ``pkg/server/http_status.go`` routes it to
``pkg/server/handler/tikvhandler/tikv_handler.go``). A Pump asks it of a prewrite whose commit binlog
never came (the transaction's primary key); the Drainer asks it of a row a partition job ran across
(which partition's key the transaction wrote).
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

import requests

log = logging.getLogger(__name__)


class Fate(enum.Enum):
    """What the upstream says about a transaction."""

    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    LOCKED = "locked"      # still prewritten: undecided
    UNKNOWN = "unknown"    # no record of it (not yet prewritten, or already GC'd), or no answer


@dataclass(frozen=True)
class Decision:
    """A fate and, for COMMITTED, the commit ts."""

    fate: Fate
    commit_ts: int = 0


ROLLBACK_OP = 3


def decide(answer: dict[str, Any], start_ts: int) -> Decision:
    """Read TiDB's MVCC-by-key JSON answer for the primary key of the transaction ``start_ts``."""
    value = answer.get("value") or {}
    if value.get("error") or value.get("region_error") or "info" not in value:
        return Decision(Fate.UNKNOWN)
    info = value.get("info") or {}
    writes = info.get("writes") or []
    for w in writes:
        if int(w.get("start_ts", 0)) == start_ts:
            if int(w.get("type", 0)) == ROLLBACK_OP:
                return Decision(Fate.ROLLED_BACK)
            commit_ts = int(w.get("commit_ts", 0))
            if commit_ts <= start_ts:
                log.error("MVCC write of txn %d has commit_ts %d <= start_ts; ignored", start_ts, commit_ts)
                return Decision(Fate.UNKNOWN)
            return Decision(Fate.COMMITTED, commit_ts)
    for w in writes:
        if int(w.get("commit_ts", 0)) == start_ts and w.get("has_overlapped_rollback") \
                and int(w.get("start_ts", 0)) != start_ts:
            return Decision(Fate.ROLLED_BACK)
    lock = info.get("lock")
    if lock and int(lock.get("start_ts", 0)) == start_ts:
        return Decision(Fate.LOCKED)
    return Decision(Fate.UNKNOWN)


def ask(session: requests.Session, status_url: str, key: bytes, start_ts: int, timeout: float = 10.0) -> Decision:
    """What the upstream's MVCC records of ``key`` say of the transaction ``start_ts`` (UNKNOWN on any
    failure, logged)."""
    url = f"{status_url.rstrip('/')}/mvcc/hex/{key.hex()}"
    try:
        resp = session.get(url, timeout=timeout)
    except requests.RequestException as exc:
        log.warning("MVCC query %s failed: %s", url, exc)
        return Decision(Fate.UNKNOWN)
    if resp.status_code != 200:
        log.warning("MVCC query %s answered HTTP %d: %s", url, resp.status_code, resp.text[:200])
        return Decision(Fate.UNKNOWN)
    try:
        return decide(resp.json(), start_ts)
    except (ValueError, TypeError, AttributeError) as exc:
        log.warning("MVCC answer of %s is not the expected JSON: %s", url, exc)
        return Decision(Fate.UNKNOWN)
