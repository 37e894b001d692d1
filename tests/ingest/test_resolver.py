"""Reading TiDB's MVCC-by-key answers (``GET /mvcc/hex/{key}``: kvproto's ``MvccGetByKeyResponse`` as TiDB
prints it) into a transaction's fate."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ingest.mvcc import Decision, Fate, decide
from ingest.pump import resolver as resolver_module
from ingest.pump.resolver import UpstreamResolver
from ingest.registry.file import FileRegistry
from ingest.topology import tidb_status_urls

S = 450146262626074627
C = 450146262627385345
S2 = 450146262652289026
COMMITTED = {"key": "74", "region_id": 14, "value": {"info": {"writes": [
    {"start_ts": S, "commit_ts": C, "short_value": "gAABAAAAAgMAYWJj"}]}}}
ROLLED_BACK = {"key": "74", "region_id": 14, "value": {"info": {"writes": [
    {"type": 3, "start_ts": S2, "commit_ts": S2, "short_value": "cA=="},
    {"start_ts": S, "commit_ts": C, "short_value": "gAABAAAAAgMAYWJj"}]}}}
LOCKED = {"key": "74", "region_id": 14, "value": {"info": {
    "lock": {"start_ts": S2, "primary": "dIAAAAAAAABwX3KAAAAAAAAAAQ==", "short_value": "gAABAAAAAgMAeHl6"},
    "writes": [{"start_ts": S, "commit_ts": C, "short_value": "gAABAAAAAgMAYWJj"}]}}}
EMPTY = {"key": "74", "region_id": 14, "value": {"info": {}}}


def test_committed_put_without_type_field() -> None:
    assert decide(COMMITTED, S) == Decision(Fate.COMMITTED, C)


def test_rollback_record() -> None:
    assert decide(ROLLED_BACK, S2) == Decision(Fate.ROLLED_BACK)
    assert decide(ROLLED_BACK, S) == Decision(Fate.COMMITTED, C)


def test_lock_means_undecided() -> None:
    assert decide(LOCKED, S2) == Decision(Fate.LOCKED)


def test_nothing_known() -> None:
    assert decide(EMPTY, S) == Decision(Fate.UNKNOWN)
    assert decide({"value": {"error": "region unavailable"}}, S) == Decision(Fate.UNKNOWN)


def test_overlapped_rollback() -> None:
    answer = {"value": {"info": {"writes": [{"start_ts": 5, "commit_ts": S, "has_overlapped_rollback": True}]}}}
    assert decide(answer, S) == Decision(Fate.ROLLED_BACK)


def test_delete_and_lock_records_mean_committed() -> None:
    for op in (1, 2):
        answer = {"value": {"info": {"writes": [{"type": op, "start_ts": S, "commit_ts": C}]}}}
        assert decide(answer, S) == Decision(Fate.COMMITTED, C)


def test_the_status_url_is_a_live_tidb_from_the_registry_when_none_is_configured(tmp_path: Path,
                                                                                  monkeypatch: Any) -> None:
    """TiDB announces ``/topology/tidb/<ip:port>/info`` and keeps ``…/ttl`` alive: only such a one counts."""
    registry = FileRegistry(str(tmp_path / "registry.json"))
    assert tidb_status_urls(registry) == []
    registry.put("/topology/tidb/10.0.0.2:4000/info", json.dumps({"ip": "10.0.0.2", "status_port": 10080}).encode())
    registry.put("/topology/tidb/10.0.0.1:4000/info", json.dumps({"ip": "10.0.0.1", "status_port": 10080}).encode())
    registry.put("/topology/tidb/10.0.0.1:4000/ttl", b"1700000000000000000")
    registry.put("/topology/tidb/bad:4000/info", b"not json")
    registry.put("/topology/tidb/bad:4000/ttl", b"1")
    assert tidb_status_urls(registry) == ["http://10.0.0.1:10080"]          # 10.0.0.2 has no live ttl key
    assert tidb_status_urls(registry, https=True) == ["https://10.0.0.1:10080"]

    asked: list[int] = []

    def discover() -> list[str]:
        asked.append(1)
        return tidb_status_urls(registry)

    def resolver(configured: str) -> UpstreamResolver:
        return UpstreamResolver(configured, read_prewrite=lambda ts: None, write_commit=lambda b, ts: None,
                                latest_ts=lambda: 0, max_txn_timeout=600, discover=discover)

    assert resolver("http://tidb:10080/").status_url == "http://tidb:10080" and not asked
    r = resolver("")
    assert r.status_url == "http://10.0.0.1:10080" and r.status_url == "http://10.0.0.1:10080"
    assert len(asked) == 1                                                   # looked up once per interval
    registry.delete("/topology/tidb/10.0.0.1:4000/ttl")                      # that TiDB stopped
    monkeypatch.setattr(resolver_module, "DISCOVER_EVERY", 0.0)
    assert r.status_url == ""
