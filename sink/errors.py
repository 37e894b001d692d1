"""Named errors of the sinks (kinds: ``schemas.errors``; terminal unless marked transient)."""
from __future__ import annotations

from schemas.errors import BinlakeError


class SinkError(BinlakeError):
    """A sink could not take a run's changes (the message names the table and the cause)."""


class IncompatibleSchemaChange(SinkError):
    """A DDL changes a column in a way the sink's table format cannot follow (names the DDL)."""


class CatalogConfigError(SinkError):
    """The catalog URI or warehouse is malformed or unreachable (transient: pyiceberg's connection
    errors look like this too, and a follower must outlive a catalog database restart)."""

    transient = True
