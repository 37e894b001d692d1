"""Process settings of a Spark Python worker running binlake's tasks: the executor side of
``binlake/process.py``, which executors never run.

A Python worker is reused from task to task (``spark.python.worker.reuse``). The decode task turns
row payloads into Arrow columns, allocating millions of short-lived objects and no reference cycle,
while the worker holds a large heap (pyspark, pyarrow, the broadcast schema history, the task's
input); with CPython's first-generation threshold of 700 the collector rescans that heap again and
again. The codec itself leaves ``gc`` alone: the task entry calls :func:`tune_worker`, which, once per
worker process, collects what is garbage now, freezes what is left (it lives as long as the worker)
and raises the thresholds; cycles made later are still collected, more rarely.
"""
from __future__ import annotations

import gc

# first-generation collections every 50,000 net container allocations (CPython: 700), the older
# generations 20 times rarer each (CPython: 10); as binlake.process.DRIVER_GC_THRESHOLDS
WORKER_GC_THRESHOLDS = (50_000, 20, 20)

_tuned: list[bool] = []


def tune_worker() -> None:
    """Apply the worker's collector settings; once per process (later calls do nothing). Only a
    Spark task's entry calls it: never in a driver, a test process or a library."""
    if _tuned:
        return
    _tuned.append(True)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*WORKER_GC_THRESHOLDS)
