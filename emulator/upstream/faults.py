"""Fault injection for one emulated TiDB server.

- ``crash_before_commit_binlog(n)``: the next ``n`` transactions commit in KV but never send their
  commit binlog (the server "crashes" there); the pump must resolve them through ``/mvcc/hex``.
- ``abort_after_prewrite(n)``: the next ``n`` transactions fail after both prewrites (a Rollback
  binlog is sent and the KV prewrite is rolled back).
- ``pump_delay``: seconds slept before every binlog write (a slow pump / network).
- ``commit_across_schema_change(n)``: the next ``n`` transactions whose tables changed schema since
  they began commit anyway, their prewrite binlog still carrying the schema version they began at
  (TiDB lets a transaction begun while a DROP COLUMN was in its delete-only state commit after the
  job's last DDL binlog; the emulator has no intermediate states, so this stands for them).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class Faults:
    """Counters of pending one-shot faults plus a write delay; thread-safe."""

    pump_delay: float = 0.0
    _crash: int = 0
    _abort: int = 0
    _stale: int = 0
    crashed: list[tuple[int, int]] = field(default_factory=list)   # (start_ts, commit_ts) of crashed txns
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def crash_before_commit_binlog(self, n: int = 1) -> None:
        """Make the next ``n`` commits skip their commit binlog."""
        with self._lock:
            self._crash += n

    def abort_after_prewrite(self, n: int = 1) -> None:
        """Make the next ``n`` transactions roll back after prewriting."""
        with self._lock:
            self._abort += n

    def commit_across_schema_change(self, n: int = 1) -> None:
        """Let the next ``n`` transactions whose tables changed schema since they began commit anyway."""
        with self._lock:
            self._stale += n

    def take_stale_commit(self) -> bool:
        """Consume one pending commit across a schema change."""
        with self._lock:
            if self._stale:
                self._stale -= 1
                return True
            return False

    def take_crash(self) -> bool:
        """Consume one pending crash."""
        with self._lock:
            if self._crash:
                self._crash -= 1
                return True
            return False

    def take_abort(self) -> bool:
        """Consume one pending abort."""
        with self._lock:
            if self._abort:
                self._abort -= 1
                return True
            return False
