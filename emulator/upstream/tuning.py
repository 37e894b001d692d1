"""Process settings for the emulator: CPU affinity and garbage-collector thresholds.

The emulator is one CPython process: its threads take turns on one GIL and never run Python code in
parallel. Spread over several cores by the scheduler, every GIL hand-off and every wake-up of a
connection's reader thread becomes a cross-core wake-up, which is expensive on virtual machines
(measured on a 2-core Firecracker VM: a WriteBinlog prewrite + commit pair cost the emulator 144-167
µs of CPU pinned to one core, 218-248 µs unpinned). Pinning the process to one core keeps those
hand-offs local; the other cores stay free for the pumps.

A transaction allocates thousands of short-lived containers, and CPython's default first-generation
threshold (700) runs a collection every few hundred of them; ``tune_gc`` freezes what exists after
start-up and raises that threshold.
"""
from __future__ import annotations

import gc
import os

from upstream.errors import UpstreamError

DEFAULT_GC_THRESHOLD = 50_000   # first-generation collections every 50,000 net container allocations
OLDER_GC_THRESHOLDS = (20, 20)  # then the second and third generations (CPython: 10, 10)


class TuningError(UpstreamError):
    """A malformed CPU list, or CPUs this process may not use."""


def parse_cpus(text: str) -> set[int]:
    """``"0"``, ``"0,2"``, ``"1-3"`` -> the CPU numbers; every one must be usable by this process."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi if sep else lo)
        except ValueError:
            raise TuningError(f"cpu-affinity {text!r}: {part!r} is not a CPU number or range like 0-3") from None
        if first < 0 or last < first:
            raise TuningError(f"cpu-affinity {text!r}: bad range {part!r}")
        cpus.update(range(first, last + 1))
    if not cpus:
        raise TuningError(f"cpu-affinity {text!r} names no CPU")
    usable = os.sched_getaffinity(0)
    if not cpus <= usable:
        raise TuningError(f"cpu-affinity {text!r}: CPU(s) {sorted(cpus - usable)} are not available "
                          f"to this process (it may use {sorted(usable)})")
    return cpus


def pin_process(cpus: set[int], pid: int = 0) -> None:
    """Restrict every thread of process ``pid`` (0: this one) to ``cpus``; threads started later
    inherit the setting from the thread that starts them."""
    pid = pid or os.getpid()
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:           # no /proc: the calling thread (or the process's main thread) only
        tids = [pid]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:   # the thread ended meanwhile
            continue


def tune_gc(threshold: int = DEFAULT_GC_THRESHOLD) -> None:
    """Freeze the objects alive now (start-up state is never collected again) and collect the first
    generation every ``threshold`` net container allocations, the older ones more rarely too
    (``threshold`` 0: change nothing)."""
    if threshold <= 0:
        return
    gc.freeze()
    gc.set_threshold(threshold, *OLDER_GC_THRESHOLDS)

