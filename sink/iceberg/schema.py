"""Iceberg schemas of the mirror and changelog tables, and their evolution by column id.

Each binlake table records in its properties the upstream table id and, as JSON, which Iceberg
column holds which TiDB column id (``binlake.columns``). A new TableInfo is then applied as
Iceberg schema evolution: dropped ids → ``delete_column``, renamed ids → ``rename_column``, new ids
→ ``add_column``, and a changed type → ``update_column`` when Iceberg allows the promotion
(int → long, float → double, a wider decimal of the same scale); any other type change fails the
table with :class:`IncompatibleSchemaChange` naming the DDL. The changelog's ``_tidb_before`` struct
evolves the same way. The changelog's schema derives from its Arrow schema (``sink.changelog``, the
format's owner): :func:`changelog_schema` is that schema's Iceberg layout with field ids in order.

A MODIFY/CHANGE COLUMN that TiDB runs as a reorg gives the column a new id (:class:`Retype`): the
Iceberg field is dropped and a new one added under the column's name, and the mirror's rows written
before the DDL get the old column's values converted as TiDB's backfill converted them
(``transform.codec.convert``; :func:`rename_columns` with ``retypes``), or the table fails with
:class:`IncompatibleSchemaChange` naming the DDL and the column when binlake cannot convert them.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from sink import changelog as fmt
from sink.errors import IncompatibleSchemaChange, SinkError
from transform import changes as ch
from transform.changes import key_columns as key_columns
from transform.codec import convert
from transform.codec.batch import arrow_value
from transform.codec.model import ColumnInfo, TableInfo, arrow_type
from transform.codec.values import missing_value
from transform.history import replaced_columns

PROP_TABLE_ID = fmt.TABLE_ID_KEY
PROP_COLUMNS = "binlake.columns"
PROP_SCHEMA_VERSION = fmt.SCHEMA_VERSION_KEY
PROP_TO_TS = fmt.TO_TS_KEY
MIRROR = "mirror"
CHANGELOG = "changelog"


def iceberg_type(t: pa.DataType) -> IcebergType:
    """The Iceberg type of an Arrow type the decoder produces (``transform.codec.model.arrow_type``)."""
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


def has_rowid(table: TableInfo) -> bool:
    """True when rows carry the hidden ``_tidb_rowid`` handle."""
    return table.has_extra_handle


def column_map(table: TableInfo) -> dict[str, str]:
    """TiDB column id (as text) → column name, stored as ``binlake.columns``."""
    return {str(c.id): c.name for c in table.columns}


def table_properties(table: TableInfo, version: int) -> dict[str, str]:
    """The ``binlake.*`` table properties describing which upstream table and version the schema is,
    and no commit retries: pyiceberg would otherwise re-apply a run's appends on top of a concurrent
    commit (the same changes twice); a run that loses a race must fail instead."""
    return {PROP_TABLE_ID: str(table.id), PROP_COLUMNS: json.dumps(column_map(table)),
            PROP_SCHEMA_VERSION: str(version), "commit.retry.num-retries": "0"}


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
    """Changelog: the after-image columns (+ ``_tidb_rowid``), the row metadata, and ``_tidb_before``,
    all optional: ``sink.changelog.iceberg_layout`` of the changelog's Arrow schema."""
    return iceberg_schema(fmt.iceberg_layout(fmt.changelog_arrow_schema(table)))


def iceberg_schema(schema: pa.Schema) -> Schema:
    """``schema`` as an Iceberg schema: top-level field ids 1, 2, … in order, a struct's fields numbered
    after every top-level field; a nullable field is optional."""
    nid = len(schema) + 1
    fields = []
    for i, f in enumerate(schema):
        typ: IcebergType
        if pa.types.is_struct(f.type):
            typ = StructType(*(NestedField(nid + j, c.name, iceberg_type(c.type), required=not c.nullable)
                               for j, c in enumerate(f.type)))
            nid += f.type.num_fields
        else:
            typ = iceberg_type(f.type)
        fields.append(NestedField(i + 1, f.name, typ, required=not f.nullable))
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


def _matched(current: Schema, props: dict[str, str], new: TableInfo) -> dict[str, str]:
    """TiDB column id → the Iceberg column holding it now. By id for the same table id; by name for
    a new id (TRUNCATE, DROP + CREATE), where a column whose type cannot be promoted is not matched
    (it is dropped and added again)."""
    if props.get(PROP_TABLE_ID) == str(new.id):
        return stored_columns(props)
    by_name = {c.name.lower(): c for c in new.columns}
    out = {}
    for name in stored_columns(props).values():
        col = by_name.get(name.lower())
        if col is None:
            out[f"name:{name}"] = name
            continue
        have = current.find_field(name).field_type
        typ = iceberg_type(arrow_type(col))
        out[str(col.id) if have == typ or _promotable(have, typ) else f"name:{name}"] = name
    return out


class SchemaEdits(Protocol):
    """The edits of pyiceberg's ``UpdateSchema`` the evolution makes (``sink.iceberg.steps.Recorder``
    records them)."""

    def add_column(self, path: str | tuple[str, ...], field_type: IcebergType) -> object: ...

    def delete_column(self, path: str | tuple[str, ...]) -> object: ...

    def rename_column(self, path_from: str | tuple[str, ...], new_name: str) -> object: ...

    def update_column(self, path: str | tuple[str, ...], field_type: IcebergType | None = None,
                      required: bool | None = None) -> object: ...

    def set_identifier_fields(self, *fields: str) -> object: ...


def identifier_names(schema: Schema) -> list[str]:
    """The names of ``schema``'s identifier fields, in identifier-id order."""
    names = []
    for i in schema.identifier_field_ids:
        name = schema.find_column_name(i)
        if name is None:  # pyiceberg checks identifier ids against the fields when it builds a schema
            raise SinkError(f"identifier field id {i} is not a column of the schema {schema}")
        names.append(name)
    return names


def _field(schema: Schema, name: str) -> NestedField | None:
    try:
        return schema.find_field(name)
    except ValueError:
        return None


def _prefixes(kind: str) -> list[tuple[str, ...]]:
    return [(), (ch.BEFORE,)] if kind == CHANGELOG else [()]


def evolve_remove(update: SchemaEdits, current: Schema, props: dict[str, str], new: TableInfo, kind: str) -> None:
    """First half of the evolution to ``new``: drops and renames (and, for the mirror, the new key).
    The changelog keeps a dropped column of the same table id, renamed
    (``sink.changelog.dropped_column_name``), and drops it from ``_tidb_before`` only.

    Run in its own schema update so that a name a drop or rename frees can be taken by an added
    column in :func:`evolve_add`.
    """
    old_map = _matched(current, props, new)
    new_map = column_map(new)
    if kind == MIRROR:
        keys = key_columns(new)
        have = identifier_names(current)
        renamed = {old: new_map[cid] for cid, old in old_map.items() if cid in new_map}
        if [renamed.get(h, h) for h in have] != keys:
            by_new = {v: k for k, v in renamed.items()}
            for k in keys:
                old = by_new.get(k, k)
                field = _field(current, old)
                if field is not None and not field.required:
                    update.update_column(old, required=True)
            update.set_identifier_fields(*keys)
    for cid, old_name in old_map.items():
        if cid not in new_map:
            if kind == CHANGELOG and not cid.startswith("name:"):   # the changes before the drop keep it
                update.rename_column(old_name, fmt.dropped_column_name(old_name, cid))
                update.delete_column((ch.BEFORE, old_name))
                continue
            for p in _prefixes(kind):
                update.delete_column((*p, old_name))
    for cid, old_name in old_map.items():
        if cid in new_map and new_map[cid] != old_name:
            for p in _prefixes(kind):
                update.rename_column((*p, old_name), new_map[cid])


def add_kept_columns(update: SchemaEdits, current: Schema, final: TableInfo, tables: Iterable[TableInfo]) -> None:
    """The changelog's fields for the columns of ``tables`` (the shapes its rows were written in, of
    ``final``'s table id) that ``final`` no longer has, under their dropped names
    (``sink.changelog.dropped_column_name``): the changes written before a DROP COLUMN, or before a
    MODIFY that rewrote the column under a new id, keep their values also when the changelog was
    created after it (in the same run)."""
    kept = {fmt.dropped_column_name(c.name, c.id): c for table in tables for c in table.columns
            if final.column_by_id(c.id) is None}
    for name, col in kept.items():
        if _field(current, name) is None:
            update.add_column(name, iceberg_type(arrow_type(col)))


def evolve_add(update: SchemaEdits, current: Schema, props: dict[str, str], new: TableInfo, kind: str,
               ddl: str) -> None:
    """Second half (``current`` is the schema after :func:`evolve_remove`): added columns and type
    promotions; a change Iceberg cannot promote raises :class:`IncompatibleSchemaChange` naming ``ddl``."""
    matched = _matched_after(props, new)
    for col in new.columns:
        typ = iceberg_type(arrow_type(col))
        field = _field(current, col.name)
        if str(col.id) not in matched or field is None:
            for p in _prefixes(kind):
                update.add_column((*p, col.name), typ)
            continue
        have = field.field_type
        if have != typ:
            if not _promotable(have, typ):
                raise IncompatibleSchemaChange(
                    f"column {col.name!r} changes from {have} to {typ}, which Iceberg cannot promote; "
                    f"DDL: {ddl!r}")
            for p in _prefixes(kind):
                update.update_column((*p, col.name), field_type=typ)


def _matched_after(props: dict[str, str], new: TableInfo) -> set[str]:
    """Column ids already present once the removals ran (same table id: by the stored map)."""
    if props.get(PROP_TABLE_ID) == str(new.id):
        return set(stored_columns(props))
    return {str(c.id) for c in new.columns}


def default_value(col: ColumnInfo) -> pa.Scalar:
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


@dataclass(frozen=True)
class Retype:
    """A column a DDL rewrote under a new TiDB column id (``old`` → ``new``, ``ddl`` its query)."""

    old: ColumnInfo
    new: ColumnInfo
    ddl: str

    def convert(self, values: pa.Array | pa.ChunkedArray) -> pa.Array:
        """``values`` of the old column as TiDB's backfill stored them in the new one;
        :class:`IncompatibleSchemaChange` naming the DDL and the column when binlake cannot."""
        try:
            return convert.convert_array(values, self.old, self.new)
        except convert.ConversionError as e:
            raise IncompatibleSchemaChange(self._refusal(e.message)) from None

    def check(self) -> None:
        """:class:`IncompatibleSchemaChange` unless binlake converts this pair of types at all."""
        reason = convert.unsupported(self.old, self.new)
        if reason is not None:
            raise IncompatibleSchemaChange(self._refusal(reason))

    def _refusal(self, reason: str) -> str:
        return (f"column {self.old.name!r} is rewritten by DDL {self.ddl!r} (TiDB column id {self.old.id} → "
                f"{self.new.id}): the mirror's rows written before it cannot take TiDB's converted values: "
                f"{reason}")


def retypes(events: Iterable[ch.DDLEvent]) -> tuple[Retype, ...]:
    """The columns the events' DDLs rewrote under a new column id, in commit order."""
    out: list[Retype] = []
    for e in sorted(events, key=lambda e: e.commit_ts):
        out.extend(Retype(o, n, e.job.query) for o, n in replaced_columns(e.previous, e.job, e.table))
    return tuple(out)


def retype_chains(source_ids: Iterable[str], final: TableInfo, steps: Iterable[Retype]) -> dict[str, list[Retype]]:
    """TiDB column id (text) of ``source_ids`` that ``final`` lacks → the rewrites leading from it to
    a column of ``final`` (a column rewritten twice has two)."""
    nxt = {r.old.id: r for r in steps}
    have = {c.id for c in final.columns}
    out: dict[str, list[Retype]] = {}
    for sid in source_ids:
        cid, chain = int(sid), []
        while cid not in have and cid in nxt:
            chain.append(nxt[cid])
            cid = nxt[cid].new.id
        if chain and cid in have:
            out[sid] = chain
    return out


def _valid(struct: pa.StructArray, name: str) -> pa.Array:
    """A struct's field with NULL where the struct is NULL (a child may hold anything there)."""
    child = struct.field(name)
    return pc.if_else(struct.is_valid(), child, pa.scalar(None, child.type))


def _carried(values: pa.Array | pa.ChunkedArray, chain: list[Retype]) -> pa.Array:
    for step in chain:
        values = step.convert(values)
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def rename_columns(rows: pa.Table, old_map: dict[str, str], new: TableInfo,
                   retyped: Iterable[Retype] = ()) -> pa.Table:
    """Rename ``rows``' columns (and ``_tidb_before`` fields) from ``old_map`` (TiDB column id →
    name, as ``binlake.columns`` stores it) to ``new``'s names by column id; columns whose id ``new``
    dropped are removed, except that a column ``retyped`` rewrote into one of ``new`` becomes that
    column with its values converted (:class:`Retype`); other columns (metadata) are kept as they are."""
    names = {str(c.id): c.name for c in new.columns}
    target = {name: names.get(cid) for cid, name in old_map.items()}   # old name → new name (None: dropped)
    chains = {old_map[sid]: (names[str(chain[-1].new.id)], chain)
              for sid, chain in retype_chains(old_map, new, retyped).items()}

    def renamed(fields: list[str]) -> list[tuple[str, str]]:
        return [(f, new_name) for f in fields if (new_name := target.get(f, f)) is not None]

    cols = renamed(rows.column_names)
    out = rows.select([o for o, _ in cols]).rename_columns([n for _, n in cols])
    for old, (name, chain) in chains.items():
        if old in rows.column_names:
            out = out.append_column(name, _carried(rows.column(old), chain))
    if ch.BEFORE in out.column_names:
        before = out.column(ch.BEFORE)
        kept = renamed([f.name for f in before.type])
        carry = [(o, n, chain) for o, (n, chain) in chains.items() if before.type.get_field_index(o) >= 0]
        chunks = []
        for c in before.chunks:
            arrays = [c.field(o) for o, _ in kept] + [_carried(_valid(c, o), chain) for o, _, chain in carry]
            fields = [pa.field(n, a.type) for n, a in zip([n for _, n in kept] + [n for _, n, _ in carry], arrays)]
            chunks.append(pa.StructArray.from_arrays(arrays, fields=fields, mask=c.is_null()))
        fields = [pa.field(n, before.type.field(o).type) for o, n in kept] + [
            pa.field(n, arrow_type(chain[-1].new)) for _, n, chain in carry]
        out = out.set_column(out.column_names.index(ch.BEFORE), ch.BEFORE, pa.chunked_array(chunks, pa.struct(fields)))
    return out


def conform(rows: pa.Table, schema: Schema) -> pa.Table:
    """``rows`` with exactly ``schema``'s columns (missing ones null), cast to its Arrow types
    (``sink.changelog.conform`` on the schema's Arrow form, field ids included)."""
    return fmt.conform(rows, schema.as_arrow())
