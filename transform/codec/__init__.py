"""The TiDB codec: the bytes TiDB writes into binlogs, read and written exactly.

A leaf package: it imports nothing of binlake's. Modules, one job each:

- ``errors``      named exceptions (every decode failure is a ``CodecError``, bad JSON a ``SchemaError``)
- ``varint``      Go-exact varints, comparable ints/floats, memcomparable bytes
- ``mydecimal``   MyDecimal binary (``WriteBin`` / ``FromBin``)
- ``jsonbinary``  TiDB's JSON binary format to and from JSON text
- ``datums``      datums: ``decode_datums`` / ``encode_datums`` and the flag wrapper types
- ``mysqltypes``  MySQL type codes, column flags, and the one table of per-type facts
- ``model``       ``TableInfo`` / ``ColumnInfo`` / ``IndexInfo`` / ``Job`` and the Arrow type of a column
- ``values``      column values: unflatten datums by column type and flatten them back
- ``rows``        binlog row layouts: ``decode_row`` / ``iter_mutation`` (the emulator writes them)
- ``batch``       many rows of one table to one Arrow ``RecordBatch`` (vectorised)
"""
from __future__ import annotations

from transform.codec.batch import decode_batch
from transform.codec.datums import decode_datums, encode_datums
from transform.codec.errors import CodecError, SchemaError
from transform.codec.model import ColumnInfo, FieldType, IndexInfo, Job, TableInfo, arrow_type
from transform.codec.rows import RowChange, decode_row, iter_mutation

__all__ = [
    "CodecError", "ColumnInfo", "FieldType", "IndexInfo", "Job", "RowChange", "SchemaError", "TableInfo",
    "arrow_type", "decode_batch", "decode_datums", "decode_row", "encode_datums", "iter_mutation",
]
