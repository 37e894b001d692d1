"""Named errors of the Drainer's stages (the codec's own are in ``transform.codec.errors``)."""
from __future__ import annotations


class TransformError(Exception):
    """Base class of every error raised by the Drainer's stages in ``transform``."""


class DrainError(TransformError):
    """A run cannot complete: a commit without its prewrite, a DML on an unknown table, … (named)."""
