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


class UndecodableBinlog(DrainError):
    """A binlog received from a pump does not decode (TiDB Binlog's drainer counts it as
    ``unmarshal_binlog`` and stops); terminal: the pump keeps sending the same bytes."""

    transient = False

    @classmethod
    def in_stage(cls, stage: str, detail: str) -> UndecodableBinlog:
        """The error of ``stage`` (pull, decode) meeting such a binlog; ``detail`` says what is wrong."""
        return cls(f"{stage} stage: a binlog received from a pump does not decode: {detail}")


class FilterRuleError(TransformError, ValueError):
    """A ``[syncer.binlog-filter-rule]`` / ``[[syncer.table-migrate-rule]]`` the drainer cannot use: an
    unknown event type, a pattern or regular expression Go would refuse, a rule name not defined
    (named, with the rule)."""


class GoRegexError(TransformError, ValueError):
    """A regular expression of the configuration that Go's ``regexp.Compile`` refuses (RE2's reason)."""


class PartitionError(TransformError):
    """A row's partition cannot be known as TiDB knows it: an expression or value binlake does not
    evaluate as TiDB does, or no partition takes the value (terminal: the same rows meet it again)."""

    transient = False
