"""Reading TiDB's MVCC-by-key answers (``GET /mvcc/hex/{key}``: kvproto's ``MvccGetByKeyResponse`` as TiDB
prints it) into a transaction's fate."""
from __future__ import annotations

from ingest.pump.resolver import Decision, Fate, decide

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
