"""The changelog's format, one owner for every sink that stores it (the Parquet CDC files, the Iceberg
``<db>.<table>__changelog`` tables) and for what reads it back (``verify``, ``check``, ``maintain``).

* Its Arrow schema, :func:`changelog_arrow_schema`: the run's row changes as the decoder produces them
  (``transform.changes``): the metadata columns (not null), ``_tidb_rowid`` for a table without a
  primary-key handle, the table's columns (``transform.codec.model.arrow_type``), ``_tidb_before``.
  The Parquet sink stores exactly this. The Iceberg changelog is :func:`iceberg_layout` of it, which
  ``sink.iceberg.schema.changelog_schema`` turns into an Iceberg schema: the table's columns first,
  then ``_tidb_rowid``, the metadata and ``_tidb_before``, every field optional (the tables were
  created so, and Iceberg adds columns only as optional ones). Both sinks keep the layout their
  existing files have; both come from this one definition.
* :func:`conform`: rows written under one schema version as another's (columns matched by name).
* The run markers (``binlake.from-ts``, ``binlake.to-ts``, ``binlake.batch-id``, ``binlake.cluster-id``)
  that every snapshot and file of a run carries, and their typed parser :class:`RunMarkers`: defined
  beside ``RunBatch``, which renders them (``transform`` imports no sink), and taken from here.
* The upstream identity a table or file records: :data:`TABLE_ID_KEY`, :data:`SCHEMA_VERSION_KEY`
  (Iceberg table properties, Parquet key-value metadata) and the table's progress, :data:`TO_TS_KEY`.
* Names: ``<table>__changelog`` (:func:`changelog_name`), a dropped changelog
  ``<table>__changelog_dropped_<ts>`` (:func:`dropped_changelog_name`), a column the upstream dropped,
  which the Iceberg changelog keeps (the rows written before the drop hold its values; the Parquet
  files keep each schema version's own columns anyway) ``<column>_dropped_c<column id>``
  (:func:`dropped_column_name`), the tag of a table's snapshot at the end of a run ``tidb-ts-<to_ts>``
  (:func:`tag_name`).

No Iceberg library is needed here: verifying a MySQL downstream imports none.
"""
from __future__ import annotations

import pyarrow as pa

from sink.errors import SinkError
from transform.changes import BATCH_ID_MARKER as BATCH_ID_MARKER
from transform.changes import BEFORE, COMMIT_TIME, COMMIT_TIME_TYPE, COMMIT_TS, OP, ROWID, SEQ, START_TS
from transform.changes import CLUSTER_ID_MARKER as CLUSTER_ID_MARKER
from transform.changes import FROM_TS_MARKER as FROM_TS_MARKER
from transform.changes import TO_TS_MARKER as TO_TS_MARKER
from transform.changes import RunMarkers as RunMarkers
from transform.codec.model import TableInfo, arrow_type

CHANGELOG_SUFFIX = "__changelog"
DROPPED_INFIX = "_dropped_"          # a dropped changelog: <table>__changelog_dropped_<drop ts>
TAG_PREFIX = "tidb-ts-"
TABLE_ID_KEY = "binlake.table-id"
SCHEMA_VERSION_KEY = "binlake.schema-version"
TO_TS_KEY = TO_TS_MARKER             # a table's progress: the to-ts of the last run committed to it

# the row metadata, in the order the decoder writes it; none is ever null
METADATA_FIELDS = (pa.field(OP, pa.string(), nullable=False), pa.field(COMMIT_TS, pa.int64(), nullable=False),
                   pa.field(COMMIT_TIME, COMMIT_TIME_TYPE, nullable=False),
                   pa.field(START_TS, pa.int64(), nullable=False), pa.field(SEQ, pa.int32(), nullable=False))
ROWID_FIELD = pa.field(ROWID, pa.int64())


class ConformError(SinkError):
    """Values of a column cannot be read as the type the target schema gives it."""


# ---------------------------------------------------------------------------------------------
# names

def changelog_name(table: str) -> str:
    """The changelog table of the mirror ``table``."""
    return table + CHANGELOG_SUFFIX


def dropped_changelog_name(table: str, drop_ts: int) -> str:
    """What the changelog of ``table`` is called once a DROP TABLE at ``drop_ts`` set it aside."""
    return f"{changelog_name(table)}{DROPPED_INFIX}{drop_ts}"


def dropped_column_name(name: str, column_id: int | str) -> str:
    """What the Iceberg changelog calls the column ``name`` (TiDB column id ``column_id``) once the
    upstream dropped it: the field stays, so the changes written before the drop keep their values."""
    return f"{name}{DROPPED_INFIX}c{column_id}"


def tag_name(to_ts: int) -> str:
    """The tag of a table's snapshot at the end of the run up to ``to_ts`` (``tag-runs``)."""
    return f"{TAG_PREFIX}{to_ts}"


# ---------------------------------------------------------------------------------------------
# schema

def changelog_arrow_schema(table: TableInfo) -> pa.Schema:
    """The changelog of ``table`` (see the module doc): the row metadata, ``_tidb_rowid`` when the rows
    carry it, the table's columns, ``_tidb_before`` (a struct of the table's columns)."""
    columns = [pa.field(c.name, arrow_type(c)) for c in table.columns]
    rowid = [ROWID_FIELD] if table.has_extra_handle else []
    return pa.schema([*METADATA_FIELDS, *rowid, *columns, pa.field(BEFORE, pa.struct(columns))])


def iceberg_layout(schema: pa.Schema) -> pa.Schema:
    """:func:`changelog_arrow_schema` as the Iceberg changelog lays it out: the table's columns, then
    ``_tidb_rowid`` (when present), the row metadata, ``_tidb_before``; every field nullable."""
    tail = {ROWID: 0, **{f.name: 1 for f in METADATA_FIELDS}, BEFORE: 2}
    ordered = sorted(schema, key=lambda f: tail.get(f.name, -1))   # stable: columns keep their order
    return pa.schema([f.with_nullable(True) for f in ordered])


# ---------------------------------------------------------------------------------------------
# conform

def conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` with exactly ``schema``'s columns, in its order: a column ``rows`` lacks is all null (its
    field nullable), the others are cast to the schema's types, and struct fields are matched by name
    the same way (a field the struct lacks is null). :class:`ConformError` names a column whose values
    cannot be cast."""
    arrays: list[pa.ChunkedArray] = []
    fields: list[pa.Field] = []
    for f in schema:
        if f.name in rows.column_names:
            arrays.append(_column(rows.column(f.name), f.type, f.name))
            fields.append(f)
        else:
            arrays.append(pa.chunked_array([pa.nulls(rows.num_rows, f.type)], f.type))
            fields.append(f.with_nullable(True))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))


def _column(col: pa.ChunkedArray, typ: pa.DataType, what: str) -> pa.ChunkedArray:
    if col.type.equals(typ, check_metadata=True):   # a struct's fields carry metadata (Iceberg's field ids)
        return col
    if pa.types.is_struct(typ) and pa.types.is_struct(col.type):
        return pa.chunked_array([_array(c, typ, what) for c in col.chunks], typ)
    return _cast(col, typ, what)


def _array(arr: pa.Array, typ: pa.DataType, what: str) -> pa.Array:
    if arr.type.equals(typ, check_metadata=True):
        return arr
    if pa.types.is_struct(typ) and pa.types.is_struct(arr.type):
        have = {arr.type.field(i).name: i for i in range(arr.type.num_fields)}
        children = [_array(arr.field(have[f.name]), f.type, f"{what}.{f.name}") if f.name in have
                    else pa.nulls(len(arr), f.type) for f in typ]
        return pa.StructArray.from_arrays(children, fields=list(typ), mask=arr.is_null())
    return _cast(arr, typ, what)


def _cast(values: pa.Array | pa.ChunkedArray, typ: pa.DataType, what: str) -> pa.Array | pa.ChunkedArray:
    try:
        return values.cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise ConformError(f"column {what}: cannot read {values.type} values as {typ}: {e}") from e
