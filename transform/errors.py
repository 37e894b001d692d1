"""Named errors of the Drainer's stages (the codec's own are in ``transform.codec.errors``; kinds:
``schemas.errors``)."""
from __future__ import annotations

from schemas.errors import BinlakeError


class TransformError(BinlakeError):
    """Base class of every error raised by the Drainer's stages in ``transform``."""


class DrainError(TransformError):
    """A run cannot complete: a commit without its prewrite, a DML on an unknown table, a Spark task
    that failed (a pump gone mid-stream, …) (named). Transient: a task's cause is known only as text."""

    transient = True
