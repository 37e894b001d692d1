"""The pump's sorter reports a commit that arrives at or below the watermark it already published
(TiDB and the pump stamping from two clocks: a drain that read past the watermark misses it), and
nothing when one clock orders them, nor the resolver's duplicate commit of a prewrite that reached
a stalled pump after later commits."""
from __future__ import annotations

import threading

import pytest

from ingest.pump.storage import sorter as sorter_module
from ingest.pump.storage.index import COMMIT, PREWRITE, ROLLBACK, Entry
from ingest.pump.storage.sorter import Sorter
from ingest.pump.storage.vlog import Pointer


def _entry(tp: int, start: int, commit: int = 0) -> Entry:
    return Entry(start if tp == PREWRITE else commit, tp, start, commit, Pointer(0, 0))


def _sorter() -> tuple[Sorter, list[int], list[tuple[int, int]]]:
    emitted: list[int] = []
    late: list[tuple[int, int]] = []
    sorter = Sorter(lambda e: emitted.append(e.commit_ts), lambda e: False,
                    on_late=lambda e, watermark: late.append((e.commit_ts, watermark)))
    return sorter, emitted, late


def test_a_commit_below_the_published_watermark_is_reported() -> None:
    sorter, emitted, late = _sorter()
    try:
        sorter.push([_entry(PREWRITE, 5), _entry(COMMIT, 5, 10)])
        sorter.push([_entry(ROLLBACK, 20, 20)])                 # a fake binlog stamped by a clock ahead
        sorter.push([_entry(PREWRITE, 12), _entry(COMMIT, 12, 15)])
        assert emitted == [10, 20] and late == [(15, 20)]
    finally:
        sorter.close()


def test_commits_one_clock_orders_are_not_reported() -> None:
    sorter, emitted, late = _sorter()
    try:
        sorter.push([_entry(PREWRITE, 5), _entry(PREWRITE, 6)])
        sorter.push([_entry(COMMIT, 6, 12)])                    # waits for the prewrite of 5
        sorter.push([_entry(COMMIT, 5, 11), _entry(ROLLBACK, 20, 20)])
        sorter.push([_entry(PREWRITE, 21), _entry(COMMIT, 21, 25), _entry(COMMIT, 5, 11)])   # a repeat: no pair
        assert emitted == [20, 25] and late == []
    finally:
        sorter.close()


def test_the_resolvers_commit_of_a_prewrite_that_came_after_later_commits_is_not_reported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The pump stalled with the prewrite of 12 unacknowledged: TiDB wrote txn 12 to another pump and
    # went on (commit 30 here); the stalled prewrite then arrives, and the resolver finds txn 12
    # committed at 15 and writes that commit. Its entry reaches the sorter while the resolver runs.
    monkeypatch.setattr(sorter_module, "RESOLVE_AFTER", 0.05)
    emitted: list[int] = []
    late: list[tuple[int, int]] = []
    resolved = threading.Event()

    def resolve(e: Entry) -> bool:
        sorter.push([_entry(COMMIT, e.start_ts, 15)])
        resolved.set()
        return True

    sorter = Sorter(lambda e: emitted.append(e.commit_ts), resolve,
                    on_late=lambda e, watermark: late.append((e.commit_ts, watermark)))
    try:
        sorter.push([_entry(PREWRITE, 25), _entry(COMMIT, 25, 30)])
        sorter.push([_entry(PREWRITE, 12)])
        assert resolved.wait(10)
        sorter.push([_entry(PREWRITE, 40), _entry(COMMIT, 40, 45)])
        assert emitted == [30, 45] and late == [] and sorter.all_matched()
        sorter.push([_entry(PREWRITE, 50), _entry(COMMIT, 50, 44)])   # TiDB's own commit below: still late
        assert late == [(44, 45)]
    finally:
        sorter.close()
