"""The newest index entries as numpy columns in memory, so that range scans of recent ranges skip
LevelDB's entry-by-entry iteration (about 0.3 µs of the pump's GIL per record, a third of the scan
producer; docs/benchmarks.md, "pump_scan session 2026-11-22 12:57 UTC").

Promise: for a range ``(from_ts, to_ts]`` with ``from_ts >= floor``, ``select`` returns exactly the
entries LevelDB holds in that range, as raw index values (``VALUE_DTYPE``), ascending by key ts, one
per key (the last one written wins, as LevelDB's put does). Every LevelDB entry whose key ts is above
``floor`` is here:
- at open, the newest ``capacity`` keys are loaded from LevelDB and the floor is set just below them;
- every entry indexed later is added once its LevelDB write succeeded, before the sorter sees it,
  so before the watermark can pass it;
- when the cache is full, its oldest block is dropped and the floor rises to that block's largest
  key ts;
- GC raises the floor to the purge ts before LevelDB's keys are deleted.
``select`` returns None for ranges that start below the floor: those are read from LevelDB.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable
from itertools import islice

import numpy as np

from ingest.pump.storage.index import VALUE_DTYPE, value_key_ts

BLOCK = 1 << 16             # entries per block (the unit of eviction)
DEFAULT_CAPACITY = 1 << 21  # ~58 MiB of entries


class RecentEntries:
    """See the module docstring. Appends come from one thread (the indexer); selects from any."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, block: int = BLOCK) -> None:
        self.capacity = max(0, capacity)
        self.block = block
        self._max_blocks = -(-self.capacity // block) + 1   # full blocks, plus the one being filled
        self._lock = threading.Lock()
        self._blocks: list[np.ndarray] = []
        self._fills: list[int] = []
        self._spans: list[tuple[int, int]] = []   # per block: the smallest and largest key ts in it
        self._floor = 0 if self.capacity else np.iinfo(np.int64).max

    @property
    def floor(self) -> int:
        """Entries with a key ts above this are all here."""
        return self._floor

    def __len__(self) -> int:
        return sum(self._fills)

    def load(self, newest_first: Iterable[bytes]) -> None:
        """Start from LevelDB's raw values, largest key ts first (``Index.newest_values``): the
        first ``capacity`` are kept, in ascending order; if there are more, the floor goes just
        below the smallest kept key."""
        if not self.capacity:
            return
        it = iter(newest_first)
        pieces: list[np.ndarray] = []
        kept = 0
        while kept < self.capacity:
            chunk = list(islice(it, min(self.block, self.capacity - kept)))
            if not chunk:
                break
            pieces.append(np.frombuffer(b"".join(chunk), dtype=VALUE_DTYPE))
            kept += len(chunk)
        if pieces and next(it, None) is not None:
            self._floor = int(value_key_ts(pieces[-1]).min()) - 1
        for piece in reversed(pieces):
            self._add(piece[::-1])

    def add(self, packed: list[bytes]) -> None:
        """Add newly indexed raw values, in the order they were written."""
        if self.capacity and packed:
            self._add(np.frombuffer(b"".join(packed), dtype=VALUE_DTYPE))

    def _add(self, values: np.ndarray) -> None:
        pos = 0
        while pos < len(values):
            if not self._blocks or self._fills[-1] == self.block:
                block = np.empty(self.block, dtype=VALUE_DTYPE)
                with self._lock:
                    self._blocks.append(block)
                    self._fills.append(0)
                    self._spans.append((np.iinfo(np.int64).max, np.iinfo(np.int64).min))
                    self._evict_locked()
            block, fill = self._blocks[-1], self._fills[-1]
            n = min(self.block - fill, len(values) - pos)
            piece = values[pos:pos + n]
            block[fill:fill + n] = piece   # beyond every reader's fill: nobody reads it yet
            keys = value_key_ts(piece)
            lo, hi = self._spans[-1]
            pos += n
            with self._lock:
                self._fills[-1] = fill + n
                self._spans[-1] = (min(lo, int(keys.min())), max(hi, int(keys.max())))

    def _evict_locked(self) -> None:
        while len(self._blocks) > self._max_blocks:
            del self._blocks[0]
            fill = self._fills.pop(0)
            _, hi = self._spans.pop(0)
            if fill:
                self._floor = max(self._floor, hi)

    def raise_floor(self, ts: int) -> None:
        """Entries with key ts at or below ``ts`` no longer count (GC deletes them from LevelDB)."""
        with self._lock:
            self._floor = max(self._floor, ts)

    def select(self, from_ts: int, to_ts: int) -> np.ndarray | None:
        """LevelDB's raw values with ``from_ts < key ts <= to_ts``, ascending and one per key; None
        when ``from_ts`` is below the floor."""
        with self._lock:
            if from_ts < self._floor:
                return None
            # Only blocks whose keys reach into the range: a small recent range reads one or two.
            parts = [block[:fill] for block, fill, (lo, hi) in zip(self._blocks, self._fills, self._spans)
                     if fill and hi > from_ts and lo <= to_ts]
        keys, picked = [], []
        for part in parts:
            k = value_key_ts(part)
            inside = (k > from_ts) & (k <= to_ts)
            if inside.all():
                keys.append(k)
                picked.append(part)
            elif inside.any():
                keys.append(k[inside])
                picked.append(part[inside])
        if not picked:
            return np.zeros(0, dtype=VALUE_DTYPE)
        k = np.concatenate(keys)
        values = np.concatenate(picked)
        if len(k) > 1 and bool((k[1:] <= k[:-1]).any()):
            order = np.argsort(k, kind="stable")
            k, values = k[order], values[order]
            last = np.ones(len(k), dtype=bool)
            last[:-1] = k[1:] != k[:-1]
            if not last.all():
                values = values[last]
        return values
