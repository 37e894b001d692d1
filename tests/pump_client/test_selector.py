"""Unit tests of the selectors (no network: pumps are plain objects with a node id)."""
from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from upstream.pump_client.selector import HashSelector, RangeSelector, hash_ts, new_selector


@dataclass(frozen=True)
class Node:
    node_id: str


A, B, C = Node("a"), Node("b"), Node("c")


def test_hash_ts_is_fnv1a_of_decimal_text() -> None:
    assert hash_ts(0) == 0x350CA8AF                    # FNV-1a 32 of "0"
    assert hash_ts(1) == 0x340CA71C                    # FNV-1a 32 of "1"
    assert hash_ts(425_000_000_000_000_000) != hash_ts(425_000_000_000_000_001)


def test_range_round_robin_and_offset_reset() -> None:
    sel: RangeSelector[Node] = RangeSelector()
    assert sel.select(1, 0) is None
    sel.set_pumps([A, B, C])
    assert [sel.select(s, 0) for s in range(7)] == [A, B, C, A, B, C, A]
    sel.set_pumps([A, C])                              # any change starts over at offset 0
    assert [sel.select(s, 0) for s in range(3)] == [A, C, A]
    sel.set_pumps([A])
    assert [sel.select(s, r) for s, r in [(1, 0), (1, 1), (2, 5)]] == [A, A, A]


def test_hash_deterministic_and_retry_moves_on() -> None:
    sel: HashSelector[Node] = HashSelector()
    pumps = [A, B, C]
    sel.set_pumps(pumps)
    for start in (7, 1000, 425_123_456_789_012_345):
        first = sel.select(start, 0)
        assert first is pumps[hash_ts(start) % 3]
        assert sel.select(start, 0) is first           # no hidden state
        assert sel.select(start, 1) is pumps[(hash_ts(start) + 1) % 3]
    sel.set_pumps([])
    assert sel.select(7, 0) is None


def test_unknown_strategy_is_range_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        sel = new_selector("score")
    assert isinstance(sel, RangeSelector) and sel.name == "range"
    assert "unknown algorithm 'score'" in caplog.text
    assert isinstance(new_selector("hash"), HashSelector)
    assert isinstance(new_selector("range"), RangeSelector)
