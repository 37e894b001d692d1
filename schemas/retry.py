"""The one retry helper every package may use (standard library only, as ``schemas.errors``)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["retry"]

T = TypeVar("T")


def retry(call: Callable[[], T], *, attempts: int | None = None, wait: float | Callable[[int], float] = 0.0,
          on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
          retry_if: Callable[[BaseException], bool] | None = None,
          before_sleep: Callable[[BaseException, int, float], object] | None = None,
          sleep: Callable[[float], object] | None = None) -> T:
    """``call()`` until it returns; what it returns.

    A failure is retried when it is an instance of ``on`` and ``retry_if(exc)`` (when given; called
    for every such failure, the last one included, so it may also count, log or clean up) is true,
    while attempts remain: ``attempts`` calls in all (None: no limit). Before the ``n``-th retry
    (``n`` = 1, 2, …) the helper calls ``before_sleep(exc, n, seconds)`` and sleeps ``wait``
    seconds, or ``wait(n - 1)`` when ``wait`` is a function (``lambda i: 0.5 * 2 ** i``: exponential
    backoff; ``sleep``: instead of ``time.sleep``). Any other failure, or the last one, propagates
    unchanged: callers wrap it in their own named error.

    Hand-written rather than tenacity: a first attempt that succeeds costs ~0.1 µs more than an
    inline loop, tenacity's ``Retrying`` ~8 µs more and its import ~15 ms (``bench/retry_overhead.py``);
    and tenacity is only pyiceberg's dependency, absent where a pump is installed alone.
    """
    if attempts is not None and attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    failures = 0
    while True:
        try:
            return call()
        except on as exc:
            failures += 1
            if retry_if is not None and not retry_if(exc):
                raise
            if attempts is not None and failures >= attempts:
                raise
            seconds = wait(failures - 1) if callable(wait) else wait
            if before_sleep is not None:
                before_sleep(exc, failures, seconds)
            (sleep or time.sleep)(seconds)   # looked up per retry: tests may patch time.sleep
