"""Named errors of the sinks."""
from __future__ import annotations


class SinkError(Exception):
    """A sink could not take a run's changes (the message names the table and the cause)."""


class IncompatibleSchemaChange(SinkError):
    """A DDL changes a column in a way the sink's table format cannot follow (names the DDL)."""


class CatalogConfigError(SinkError):
    """The catalog URI or warehouse is malformed or unreachable."""
