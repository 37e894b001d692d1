"""Iceberg schemas of the mirror and changelog tables, and their evolution by column id.

Each binlake table records in its properties the upstream table id and, as JSON, which Iceberg
column holds which TiDB column id (``binlake.columns``). A new TableInfo is then applied as
Iceberg schema evolution: dropped ids → ``delete_column``, renamed ids → ``rename_column``, new ids
→ ``add_column``, and a changed type → ``update_column`` when Iceberg allows the promotion
(int → long, float → double, a wider decimal of the same scale); any other type change fails the
table with :class:`IncompatibleSchemaChange` naming the DDL. The changelog's ``_tidb_before`` struct
evolves the same way.
"""
from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table.update.schema import UpdateSchema
from pyiceberg.types import (BinaryType, DateType, DecimalType, DoubleType, FloatType, IcebergType, IntegerType,
                             LongType, NestedField, StringType, StructType, TimestampType, TimestamptzType)

from sink.errors import IncompatibleSchemaChange, SinkError
from transform import changes as ch
from transform.batch import arrow_value
from transform.schema import ColumnInfo, TableInfo, arrow_type
from transform.values import missing_value

PROP_TABLE_ID = "binlake.table-id"
PROP_COLUMNS = "binlake.columns"
PROP_SCHEMA_VERSION = "binlake.schema-version"
PROP_TO_TS = "binlake.to-ts"
MIRROR = "mirror"
CHANGELOG = "changelog"


def iceberg_type(t: pa.DataType) -> IcebergType:
    """The Iceberg type of an Arrow type the decoder produces (DESIGN §3.6)."""
    if pa.types.is_int32(t):
        return IntegerType()
    if pa.types.is_int64(t):
        return LongType()
    if pa.types.is_decimal(t):
        return DecimalType(t.precision, t.scale)
    if pa.types.is_float32(t):
        return FloatType()
    if pa.types.is_float64(t):
        return DoubleType()
    if pa.types.is_date32(t):
        return DateType()
    if pa.types.is_timestamp(t):
        return TimestamptzType() if t.tz else TimestampType()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return StringType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return BinaryType()
    raise SinkError(f"no Iceberg type for Arrow type {t}")


def key_columns(table: TableInfo) -> list[str]:
    """The mirror's identifier columns: the primary key, else the hidden ``_tidb_rowid``."""
    if table.pk_is_handle and table.pk_handle_column is not None:
        return [table.pk_handle_column.name]
    pk = table.primary_index
    if pk is not None:
        return [c.name for c in pk.columns]
    return [ch.ROWID]


def has_rowid(table: TableInfo) -> bool:
    """True when rows carry the hidden ``_tidb_rowid`` handle."""
    return table.has_extra_handle


def column_map(table: TableInfo) -> dict[str, str]:
    """TiDB column id (as text) → column name, stored as ``binlake.columns``."""
    return {str(c.id): c.name for c in table.columns}


def table_properties(table: TableInfo, version: int) -> dict[str, str]:
    """The ``binlake.*`` table properties describing which upstream table and version the schema is."""
    return {PROP_TABLE_ID: str(table.id), PROP_COLUMNS: json.dumps(column_map(table)),
            PROP_SCHEMA_VERSION: str(version)}


def _fields(table: TableInfo, required: set[str], start: int) -> list[NestedField]:
    out = []
    for i, c in enumerate(table.columns):
        out.append(NestedField(start + i, c.name, iceberg_type(arrow_type(c)), required=c.name in required))
    return out


def mirror_schema(table: TableInfo) -> Schema:
    """Mirror: the table's columns (+ ``_tidb_rowid``), ``_tidb_commit_ts``, ``_tidb_commit_time``."""
    keys = key_columns(table)
    fields = _fields(table, set(keys), 1)
    nid = len(fields) + 1
    if has_rowid(table):
        fields.append(NestedField(nid, ch.ROWID, LongType(), required=ch.ROWID in keys))
        nid += 1
    fields.append(NestedField(nid, ch.COMMIT_TS, LongType(), required=False))
    fields.append(NestedField(nid + 1, ch.COMMIT_TIME, TimestamptzType(), required=False))
    ids = [f.field_id for f in fields if f.name in keys]
    return Schema(*fields, identifier_field_ids=ids)


def changelog_schema(table: TableInfo) -> Schema:
    """Changelog: the after-image columns, the row metadata, and ``_tidb_before``."""
    fields = _fields(table, set(), 1)
    nid = len(fields) + 1
    if has_rowid(table):
        fields.append(NestedField(nid, ch.ROWID, LongType(), required=False))
        nid += 1
    meta = [(ch.OP, StringType()), (ch.COMMIT_TS, LongType()), (ch.COMMIT_TIME, TimestamptzType()),
            (ch.START_TS, LongType()), (ch.SEQ, IntegerType())]
    for name, typ in meta:
        fields.append(NestedField(nid, name, typ, required=False))
        nid += 1
    before = _fields(table, set(), nid + 1)
    fields.append(NestedField(nid, ch.BEFORE, StructType(*before), required=False))
    return Schema(*fields)


def _promotable(old: IcebergType, new: IcebergType) -> bool:
    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return new.scale == old.scale and new.precision >= old.precision
    return False


def stored_columns(props: dict[str, str]) -> dict[str, str]:
    """The ``binlake.columns`` map of a table (empty when absent)."""
    raw = props.get(PROP_COLUMNS)
    return json.loads(raw) if raw else {}


def evolve(update: UpdateSchema, current: Schema, props: dict[str, str], new: TableInfo, kind: str,
           ddl: str) -> bool:
    """Stage the changes that turn the table (``current`` schema, ``props``) into ``new``'s columns.

    Columns are matched by TiDB column id when the stored table id equals ``new.id``, else by name
    (TRUNCATE and re-created tables have a new id). Returns True when anything was staged.
    """
    same_table = props.get(PROP_TABLE_ID) == str(new.id)
    old_map = stored_columns(props) if same_table else {}
    if not same_table:
        by_name = {c.name.lower(): str(c.id) for c in new.columns}
        old_map = {by_name.get(n.lower(), f"name:{n}"): n for n in stored_columns(props).values()}
    new_map = column_map(new)
    prefixes: list[tuple[str, ...]] = [()]
    if kind == CHANGELOG:
        prefixes.append((ch.BEFORE,))
    changed = False
    for cid, old_name in old_map.items():
        if cid not in new_map:
            for p in prefixes:
                update.delete_column((*p, old_name))
            changed = True
    for cid, old_name in old_map.items():
        if cid in new_map and new_map[cid] != old_name:
            for p in prefixes:
                update.rename_column((*p, old_name), new_map[cid])
            changed = True
    for col in new.columns:
        typ = iceberg_type(arrow_type(col))
        cid = str(col.id)
        if cid not in old_map:
            for p in prefixes:
                update.add_column((*p, col.name), typ)
            changed = True
            continue
        have = current.find_field(old_map[cid]).field_type
        if have != typ:
            if not _promotable(have, typ):
                raise IncompatibleSchemaChange(
                    f"column {col.name!r} changes from {have} to {typ}, which Iceberg cannot promote; "
                    f"DDL: {ddl!r}")
            for p in prefixes:
                update.update_column((*p, old_map[cid]), field_type=typ)
            changed = True
    return changed


def default_value(col: ColumnInfo) -> Any:
    """The value a row written before ``col`` existed reads as (its origin default), Arrow-typed."""
    typ = arrow_type(col)
    return pa.scalar(arrow_value(col, typ, missing_value(col)), typ)


def fill_missing(rows: pa.Table, table: TableInfo) -> pa.Table:
    """``rows`` plus every column of ``table`` it lacks, filled with the column's origin default."""
    for col in table.columns:
        if col.name not in rows.column_names:
            value = default_value(col)
            rows = rows.append_column(pa.field(col.name, value.type),
                                      pa.repeat(value, rows.num_rows) if value.is_valid
                                      else pa.nulls(rows.num_rows, value.type))
    return rows


def rename_columns(rows: pa.Table, old_map: dict[str, str], new: TableInfo) -> pa.Table:
    """Rename ``rows``' columns from a stored ``binlake.columns`` map to ``new``'s names (by column id);
    columns whose id ``new`` dropped are removed."""
    names = {c.id: c.name for c in new.columns}
    keep, out = [], []
    for name in rows.column_names:
        cid = next((int(i) for i, n in old_map.items() if n == name and i.isdigit()), None)
        if cid is None:
            keep.append(name)
            out.append(name)
        elif cid in names:
            keep.append(name)
            out.append(names[cid])
    return rows.select(keep).rename_columns(out)


def conform(rows: pa.Table, schema: Schema) -> pa.Table:
    """``rows`` with exactly ``schema``'s columns (missing ones null), cast to its Arrow types."""
    target = schema.as_arrow()
    arrays = []
    for f in target:
        if f.name in rows.column_names:
            col = rows.column(f.name)
            if pa.types.is_struct(f.type):
                col = _conform_struct(col, f.type)
            arrays.append(col.cast(f.type) if col.type != f.type else col)
        else:
            arrays.append(pa.nulls(rows.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=target)


def _conform_struct(col: Any, typ: pa.StructType) -> pa.ChunkedArray:
    chunks = []
    for chunk in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]):
        have = {chunk.type.field(i).name: i for i in range(chunk.type.num_fields)}
        children = []
        for i in range(typ.num_fields):
            f = typ.field(i)
            if f.name in have:
                child = chunk.field(have[f.name])
                children.append(child.cast(f.type) if child.type != f.type else child)
            else:
                children.append(pa.nulls(len(chunk), f.type))
        chunks.append(pa.StructArray.from_arrays(children, fields=list(typ), mask=chunk.is_null()))
    return pa.chunked_array(chunks, type=typ)
