"""Which available pump takes a prewrite: TiDB's ``range`` and ``hash`` strategies.

Selectors only choose pumps for prewrites; the client remembers which pump took each prewrite and
sends the commit there itself.
"""
from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

RANGE = "range"
HASH = "hash"

_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193


class _HasNodeID(Protocol):
    @property
    def node_id(self) -> str: ...


P = TypeVar("P", bound=_HasNodeID)


def hash_ts(ts: int) -> int:
    """FNV-1a (32 bit) of the decimal text of ``ts``, as TiDB's ``hashTs`` computes it."""
    h = _FNV32_OFFSET
    for byte in str(ts).encode():
        h = ((h ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return h


class Selector(ABC, Generic[P]):
    """Chooses a pump for a prewrite from the current available list; thread-safe."""

    name = ""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pumps: list[P] = []

    def set_pumps(self, pumps: Sequence[P]) -> None:
        """Replace the available list (the client passes it sorted by node id)."""
        with self._lock:
            self._pumps = list(pumps)
            self._on_change()

    def pumps(self) -> list[P]:
        """The current available list, in selection order."""
        with self._lock:
            return list(self._pumps)

    def select(self, start_ts: int, retry: int) -> P | None:
        """The pump for try number ``retry`` (0-based) of the prewrite ``start_ts``; None if none is available."""
        with self._lock:
            if not self._pumps:
                return None
            return self._pick(start_ts, retry)

    def _on_change(self) -> None:
        """Called under the lock after the list changed."""

    @abstractmethod
    def _pick(self, start_ts: int, retry: int) -> P:
        """Choose from the non-empty ``self._pumps`` (called under the lock)."""


class RangeSelector(Selector[P]):
    """Round-robin over the available list; the offset goes back to 0 whenever the list changes."""

    name = RANGE

    def __init__(self) -> None:
        super().__init__()
        self._offset = 0

    def _on_change(self) -> None:
        self._offset = 0

    def _pick(self, start_ts: int, retry: int) -> P:
        if self._offset >= len(self._pumps):
            self._offset = 0
        pump = self._pumps[self._offset]
        self._offset += 1
        return pump


class HashSelector(Selector[P]):
    """``pumps[(hash_ts(start_ts) + retry) % len(pumps)]``: deterministic for a start ts and list."""

    name = HASH

    def _pick(self, start_ts: int, retry: int) -> P:
        return self._pumps[(hash_ts(start_ts) + retry) % len(self._pumps)]


def new_selector(strategy: str) -> Selector[P]:
    """The selector for ``strategy`` ("range" or "hash"); anything else is logged and gives range."""
    if strategy == HASH:
        return HashSelector()
    if strategy != RANGE:
        log.warning("[pumps client] unknown algorithm %r, use range as default", strategy)
    return RangeSelector()
