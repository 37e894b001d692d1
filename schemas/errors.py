"""The root of binlake's named errors, their two kinds, and the one retry helper.

Every error binlake raises on purpose (a refused config, an unreachable pump, corrupt bytes, a sink
of another cluster, …) is a :class:`BinlakeError`; its message is one line meant for the user, and
the ``binlake`` command prints it as ``binlake CMD: error: MESSAGE`` with exit status 1 (any other
exception is a bug and keeps its traceback). Each class says whether waiting and trying again can
help (:attr:`BinlakeError.transient`):

- *transient*: the cause can go away on its own (a pump or PD that does not answer, a concurrent
  run, a busy lock, a lost downstream connection): ``binlake drain --follow`` retries the run after
  its interval;
- *terminal*: only someone changing something can help (a config error, a sink of another cluster,
  an incompatible schema change, corrupt data): ``--follow`` stops with the message and exit 1.

A class whose raise sites mix both kinds is declared transient (``--follow`` then retries as it
always did); ``tests/test_errors.py`` holds the kind of every named class and fails on a new one
that has not been given one.

This module lives in ``schemas`` because every package may import it (docs/architecture.md,
section 3: it is the one module of ours the codec imports). Pure Python, standard library only:
importing it loads neither protobuf nor pyarrow, so the command can name errors for free.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar, TypeGuard, TypeVar

__all__ = ["BinlakeError", "is_terminal", "retry"]

T = TypeVar("T")


class BinlakeError(Exception):
    """Root of every named error; ``transient`` (a class attribute) tells whether retrying can help."""

    transient: ClassVar[bool] = False

    @property
    def kind(self) -> str:
        """``"transient"`` or ``"terminal"``."""
        return "transient" if self.transient else "terminal"


def is_terminal(exc: BaseException) -> TypeGuard[BinlakeError]:
    """True for a named error that retrying cannot cure; False for a transient one and for any other
    exception (unknown: callers that retry keep retrying it)."""
    return isinstance(exc, BinlakeError) and not exc.transient


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
