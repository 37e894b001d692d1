"""Named errors of the TiDB codec.

Every failure to decode bytes raises a subclass of :class:`CodecError`, which carries the byte
offset where the problem was found and, when known, the column id being decoded. A malformed
TableInfo/Job JSON document raises :class:`SchemaError`. Both are terminal named errors
(``schemas.errors``, the codec's one import of ours) and value errors (``ValueError``).
"""
from __future__ import annotations

from schemas.errors import BinlakeError


class CodecError(BinlakeError, ValueError):
    """Bytes that are not valid TiDB encoding (or a value that cannot be encoded)."""

    def __init__(self, message: str, offset: int | None = None, column_id: int | None = None) -> None:
        self.message = message
        self.offset = offset
        self.column_id = column_id
        self.row: int | None = None  # set by the batch decoder: the row's index in its input
        super().__init__(message)

    def __str__(self) -> str:
        where = []
        if self.column_id is not None:
            where.append(f"column id {self.column_id}")
        if self.offset is not None:
            where.append(f"byte offset {self.offset}")
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def at(self, column_id: int | None = None, base: int = 0) -> CodecError:
        """Return this error with its column id set (if unset) and its offset shifted by ``base``."""
        if self.column_id is None:
            self.column_id = column_id
        if self.offset is not None and base:
            self.offset += base
        return self


class TruncatedError(CodecError):
    """The data ends in the middle of a datum."""


class UnknownFlagError(CodecError):
    """A datum starts with a flag byte TiDB never writes there."""


class VarintOverflowError(CodecError):
    """A varint is longer than 10 bytes or overflows 64 bits."""


class DecimalError(CodecError):
    """A MyDecimal value is malformed, or its precision/frac is out of range or overflowed."""


class JSONBinaryError(CodecError):
    """A JSON binary value is malformed (bad type code, offsets outside its buffer, bad UTF-8)."""


class RowLayoutError(CodecError):
    """A row payload does not have TiDB's row layout (pairs, handle prefix, update halves)."""


class ColumnValueError(CodecError):
    """A datum is well-formed but not a valid value for its column (bad enum index, bad date)."""


class SchemaError(BinlakeError, ValueError):
    """A TableInfo/Job JSON document is malformed or uses an unsupported column type."""
