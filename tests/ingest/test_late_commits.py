"""The pump's sorter reports a commit that arrives at or below the watermark it already published
(TiDB and the pump stamping from two clocks: a drain that read past the watermark misses it), and
nothing when one clock orders them."""
from __future__ import annotations

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
