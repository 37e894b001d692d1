"""The TiDB codec and the row-level half of the Drainer.

Modules, one job each:

- ``errors``      named exceptions (every decode failure is a ``CodecError``)
- ``varint``      Go-exact varints, comparable ints/floats, memcomparable bytes
- ``mydecimal``   MyDecimal binary (``WriteBin`` / ``FromBin``)
- ``jsonbinary``  TiDB's JSON binary format to and from JSON text
- ``codec``       datums: ``decode_datums`` / ``encode_datums`` and the flag wrapper types
- ``mysqltypes``  MySQL type codes and column flags
- ``schema``      ``TableInfo`` / ``ColumnInfo`` / ``IndexInfo`` / ``Job`` and the Arrow type of a column
- ``values``      column values: unflatten datums by column type and flatten them back
- ``rows``        binlog row layouts: ``decode_row`` / ``encode_row`` / ``iter_mutation``
- ``batch``       many rows of one table to one Arrow ``RecordBatch`` (vectorised)
"""
