"""Pairing of prewrites and commits in arrival order, and the ``max_commit_ts`` watermark.

TiDB Binlog's rule (``pump/storage/sorter.go``): items are taken in arrival order; a commit passes
only when every earlier prewrite on this pump is resolved (its commit or rollback arrived, or the
resolver decided it). So no commit with a ts at or below the watermark can appear later here, as
long as TiDB and the pump take their timestamps from one clock (PD's): a commit that does ("late")
is reported to ``on_late``, since a drain that already read past the watermark misses it.

One commit at or below the watermark is not late: the one the resolver writes for a prewrite that
arrived here after later commits. TiDB takes a transaction's commit ts only once a pump has
acknowledged its prewrite, so a prewrite that arrives behind commits of higher ts was not
acknowledged in time (this pump stalled): TiDB wrote the transaction to another pump, and the
resolver's commit here is a duplicate that drains drop.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from ingest.pump.storage.index import COMMIT, PREWRITE, Entry

log = logging.getLogger(__name__)

RESOLVE_AFTER = 1.0  # seconds a prewrite waits at the head before the resolver is asked
RESOLVED_KEPT = 1024  # resolved transactions remembered, so their commits are not taken for late ones


class Sorter:
    """Consumes index entries in arrival order and emits commit timestamps as they become safe.

    ``push`` runs a round in the caller's thread (the indexer): it passes every entry up to the
    first unresolved prewrite and calls ``emit(entry)`` with the highest commit-like entry passed.
    A thread of its own only watches a blocked head: ``resolve(entry) -> bool`` is called for a
    prewrite that has waited more than ``RESOLVE_AFTER`` seconds at the head (then at most once a
    second while it stays there); True drops it. A round only records when the head became
    blocked; it wakes the watcher only when the watcher is idle (no head was blocked), so under
    load the watcher wakes about once per ``RESOLVE_AFTER``, not once per round.
    """

    def __init__(self, emit: Callable[[Entry], None], resolve: Callable[[Entry], bool],
                 last_emitted: int = 0, on_late: Callable[[Entry, int], None] | None = None) -> None:
        self._emit = emit
        self._resolve = resolve
        self._on_late = on_late
        self._items: deque[Entry] = deque()
        self._waiting: dict[int, int] = {}  # start_ts → prewrites still unresolved
        self._cond = threading.Condition()
        self._round = threading.Lock()  # one round (pass + emit) at a time, so emits stay ordered
        self._blocked: Entry | None = None
        # start_ts of the prewrites the resolver decided (the newest RESOLVED_KEPT) or is deciding now
        self._resolved: dict[int, None] = {}
        self._blocked_since = 0.0  # monotonic time the current blocked head became the head
        self._watcher_idle = False
        self._closed = False
        self.last_emitted = last_emitted
        self._thread = threading.Thread(target=self._run, name="pump-sorter", daemon=True)
        self._thread.start()

    def push(self, entries: list[Entry]) -> None:
        """Append entries in arrival order and pass what has become safe."""
        late: list[tuple[Entry, int]] = []
        with self._round:
            with self._cond:
                waiting, items, last = self._waiting, self._items, self.last_emitted
                for e in entries:
                    if e.tp == PREWRITE:
                        waiting[e.start_ts] = waiting.get(e.start_ts, 0) + 1
                    else:
                        if waiting.pop(e.start_ts, None) is not None and e.tp == COMMIT and e.commit_ts <= last:
                            if e.start_ts in self._resolved:
                                log.info("txn %d: the resolver's commit at %d is below the watermark (%d): its "
                                         "prewrite reached this pump after later commits, so TiDB wrote the "
                                         "transaction to another pump; this copy is a duplicate",
                                         e.start_ts, e.commit_ts, last)
                            else:
                                late.append((e, last))
                    items.append(e)
            self._pass()
        if late and self._on_late is not None:
            for e, watermark in late:
                self._on_late(e, watermark)

    def _pass(self) -> None:
        """One round (the caller holds ``_round``): pass everything up to the first unresolved
        prewrite, emit the highest commit passed, and tell the watcher about a new blocked head."""
        best: Entry | None = None
        blocked: Entry | None = None
        with self._cond:
            items, waiting, last = self._items, self._waiting, self.last_emitted
            while items:
                head = items[0]
                if head.tp == PREWRITE and head.start_ts in waiting:
                    blocked = head
                    break
                items.popleft()
                if head.commit_ts > last and head.is_commit_like:
                    last, best = head.commit_ts, head
            self.last_emitted = last
            if blocked is not self._blocked:
                self._blocked = blocked
                if blocked is not None:
                    self._blocked_since = time.monotonic()
                    if self._watcher_idle:
                        self._watcher_idle = False
                        self._cond.notify()
        if best is not None:
            self._emit(best)

    def oldest_unresolved(self) -> int:
        """Start ts of the oldest unresolved prewrite, 0 when all are matched."""
        with self._cond:
            return min(self._waiting) if self._waiting else 0

    def all_matched(self) -> bool:
        """True when no prewrite is waiting for its commit or rollback."""
        with self._cond:
            return not self._waiting

    def pending(self) -> int:
        """Number of entries not yet consumed."""
        with self._cond:
            return len(self._items)

    def _run(self) -> None:
        """Watch the blocked head; ask the resolver about it once it has waited long enough."""
        seen: Entry | None = None
        next_try = 0.0
        while True:
            with self._cond:
                if self._closed:
                    return
                head = self._blocked
                if head is not seen:
                    seen = head
                    next_try = self._blocked_since + RESOLVE_AFTER
                if head is None:
                    self._watcher_idle = True
                    self._cond.wait(1.0)
                    continue
                wait = min(1.0, next_try - time.monotonic())
                if wait > 0:
                    self._cond.wait(wait)
                    continue
            next_try = time.monotonic() + 1.0
            with self._cond:
                self._resolved[head.start_ts] = None   # before: its commit may be indexed while it resolves
                if len(self._resolved) > RESOLVED_KEPT:
                    del self._resolved[next(iter(self._resolved))]
            if self._try_resolve(head):
                with self._round:
                    self._drop_head(head)
                    self._pass()
            else:
                with self._cond:
                    self._resolved.pop(head.start_ts, None)

    def _drop_head(self, head: Entry) -> None:
        """Remove a prewrite the resolver decided (if still at the head), and one unresolved count
        of its start_ts."""
        with self._cond:
            if not self._items or self._items[0] is not head:
                return  # its commit or rollback arrived meanwhile
            self._items.popleft()
            count = self._waiting.get(head.start_ts, 0)
            if count <= 1:
                self._waiting.pop(head.start_ts, None)
            else:
                self._waiting[head.start_ts] = count - 1

    def _try_resolve(self, head: Entry) -> bool:
        try:
            return self._resolve(head)
        except Exception:
            log.exception("resolving prewrite start_ts=%d failed; will retry", head.start_ts)
            return False

    def close(self) -> None:
        """Stop the watcher thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
