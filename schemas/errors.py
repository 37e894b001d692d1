"""The root of binlake's named errors and their two kinds (the retry helper is ``schemas.retry``).

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

from typing import ClassVar, TypeGuard

__all__ = ["BinlakeError", "is_terminal"]


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
