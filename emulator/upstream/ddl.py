"""DDL statements → the next schema version and TiDB's history Job.

``plan(stmt, …)`` validates a DDL against the current schema and returns a :class:`DDLPlan`: the new
database/table maps, the Job fields (action type, ids, names, final schema state) and the TableInfo
or DBInfo the job's ``binlog`` carries. Nothing changes until the caller installs the plan.

TiDB rules followed: one global id allocator (table id before job id); column ids grow from the
table's ``max_col_id``; index ids from ``max_idx_id``; a single-column integer primary key is the
row handle (``pk_is_handle``) unless NONCLUSTERED; other primary keys are clustered when CLUSTERED is
written or the session's ``tidb_enable_clustered_index`` is ON; otherwise rows get ``_tidb_rowid``.
"""
from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from transform.codec import mysqltypes as mt
from transform.codec.model import ColumnInfo, FieldType, IndexColumn, IndexInfo, TableInfo
from upstream.catalog import DBInfo, InfoSchema, TableEntry
from upstream.coltypes import coerce, default_text, field_type, type_class, zero_text
from upstream.errors import SQLError, UnsupportedSQL
from upstream.exprs import Now
from upstream.sql import DDL, literal

# ActionType (pingcap/tidb pkg/meta/model/job.go; pkg/parser/model/ddl.go in older releases)
CREATE_SCHEMA, DROP_SCHEMA, CREATE_TABLE, DROP_TABLE = 1, 2, 3, 4
ADD_COLUMN, DROP_COLUMN, ADD_INDEX, DROP_INDEX = 5, 6, 7, 8
TRUNCATE_TABLE, MODIFY_COLUMN, RENAME_TABLE = 11, 12, 14
ADD_PRIMARY_KEY, DROP_PRIMARY_KEY, MULTI_SCHEMA_CHANGE = 32, 33, 61

KEY_FLAGS = mt.PRI_KEY_FLAG | mt.UNIQUE_KEY_FLAG | mt.MULTIPLE_KEY_FLAG


@dataclass
class DDLPlan:
    """What a DDL does: the new maps and the Job's fields."""

    action: int
    schema_id: int
    table_id: int
    schema_name: str
    table_name: str
    schema_state: int
    dbs: dict[str, DBInfo] | None = None
    tables: dict[int, TableEntry] | None = None
    table_info: TableInfo | None = None
    db_info: DBInfo | None = None
    delete_only_binlog: bool = False    # DROP COLUMN: TiDB writes an extra binlog at StateDeleteOnly


def _ident(node: Any) -> str:
    if isinstance(node, (exp.Identifier, exp.Column, exp.Table, exp.Var)):
        return node.name
    if isinstance(node, exp.Ordered):
        return _ident(node.this)
    if isinstance(node, str):
        return node
    raise UnsupportedSQL(f"name {node.sql('mysql') if hasattr(node, 'sql') else node!r}")


def _index_part(node: Any) -> tuple[str, int]:
    if isinstance(node, exp.Ordered):
        node = node.this
    if isinstance(node, exp.Anonymous) and len(node.expressions) == 1 and isinstance(node.expressions[0], exp.Literal):
        return node.name, int(node.expressions[0].this)
    return _ident(node), -1


# ---- columns ---------------------------------------------------------------------------------

@dataclass
class _ColSpec:
    col: ColumnInfo
    primary: bool = False
    unique: bool = False


def build_column(cd: exp.ColumnDef, col_id: int, offset: int, charset: str, collate: str, stmt: str) -> _ColSpec:
    """A ColumnInfo from a column definition (type, NULL/NOT NULL, DEFAULT, AUTO_INCREMENT, keys, COMMENT)."""
    kind = cd.args.get("kind")
    if not isinstance(kind, exp.DataType):
        raise UnsupportedSQL(f"column {cd.name} without a type", stmt)
    ccharset, ccollate = charset, collate
    not_null = False
    explicit_null = False
    default: Any = _NODEFAULT
    auto_inc = primary = unique = on_update = False
    comment = ""
    for c in cd.args.get("constraints") or []:
        k = c.args.get("kind") if isinstance(c, exp.ColumnConstraint) else c
        if isinstance(k, exp.NotNullColumnConstraint):
            if k.args.get("allow_null"):
                explicit_null = True
            else:
                not_null = True
        elif isinstance(k, exp.DefaultColumnConstraint):
            default = literal(k.this, stmt)
        elif isinstance(k, exp.PrimaryKeyColumnConstraint):
            primary = True
        elif isinstance(k, exp.UniqueColumnConstraint):
            unique = True
        elif isinstance(k, exp.AutoIncrementColumnConstraint):
            auto_inc = True
        elif isinstance(k, exp.CommentColumnConstraint):
            comment = str(literal(k.this, stmt))
        elif isinstance(k, exp.CharacterSetColumnConstraint):
            ccharset = _ident(k.this).lower()
            ccollate = "binary" if ccharset == "binary" else f"{ccharset}_bin"
        elif isinstance(k, exp.CollateColumnConstraint):
            ccollate = _ident(k.this).lower()
        elif isinstance(k, exp.OnUpdateColumnConstraint):
            on_update = True
        else:
            raise UnsupportedSQL(f"column option {(k or c).sql('mysql')[:60]}", stmt)
    ft = field_type(kind, ccharset, ccollate)
    flag = ft.flag
    if primary or not_null:
        flag |= mt.NOT_NULL_FLAG
    if explicit_null and primary:
        raise SQLError(f"All parts of a PRIMARY KEY must be NOT NULL (column {cd.name})")
    if auto_inc:
        if ft.tp not in mt.INT_TYPES:
            raise SQLError(f"Incorrect column specifier for column '{cd.name}'")
        flag |= mt.AUTO_INCREMENT_FLAG | mt.NOT_NULL_FLAG
    if on_update:
        flag |= mt.ON_UPDATE_NOW_FLAG
    if ft.tp == mt.TYPE_TIMESTAMP and not explicit_null and default is _NODEFAULT and not primary:
        pass  # TiDB (explicit_defaults_for_timestamp=ON): a plain TIMESTAMP column is nullable
    ft = dataclasses.replace(ft, flag=flag)
    col = ColumnInfo(id=col_id, name=cd.name, offset=offset, type=ft, comment=comment, version=2)
    has_default = default is not _NODEFAULT
    if has_default:
        col = _with_default(col, default, stmt)
    elif flag & mt.NOT_NULL_FLAG and not flag & mt.AUTO_INCREMENT_FLAG:
        col = dataclasses.replace(col, type=dataclasses.replace(ft, flag=flag | mt.NO_DEFAULT_VALUE_FLAG))
    return _ColSpec(col, primary, unique)


class _NoDefault:
    pass


_NODEFAULT = _NoDefault()


def _with_default(col: ColumnInfo, default: Any, stmt: str) -> ColumnInfo:
    if isinstance(default, Now):
        if col.tp not in (mt.TYPE_TIMESTAMP, mt.TYPE_DATETIME):
            raise SQLError(f"Invalid default value for '{col.name}'")
        fsp = col.type.decimal if col.type.decimal > 0 else 0
        return dataclasses.replace(col, default="CURRENT_TIMESTAMP" + (f"({fsp})" if fsp else ""))
    if default is None:
        if not col.nullable:
            raise SQLError(f"Invalid default value for '{col.name}'")
        return col
    try:
        value = coerce(col, default)
    except SQLError as e:
        raise SQLError(f"Invalid default value for '{col.name}': {e}") from None
    text = default_text(col, value)
    if col.tp == mt.TYPE_BIT:
        b64 = base64.b64encode(text.encode("latin-1")).decode()
        return dataclasses.replace(col, default=text, default_bit=b64)
    return dataclasses.replace(col, default=text)


def default_value(col: ColumnInfo, now: Callable[[], Any]) -> Any:
    """The value an INSERT uses for a column it does not name (``SQLError`` if it has no default)."""
    d = col.default
    if d is None:
        if col.type.flag & mt.NO_DEFAULT_VALUE_FLAG:
            raise SQLError(f"Field '{col.name}' doesn't have a default value")
        if not col.nullable and col.tp == mt.TYPE_ENUM and col.type.elems:
            return col.type.elems[0]
        return None
    if isinstance(d, str) and d.upper().startswith("CURRENT_TIMESTAMP"):
        return coerce(col, now())
    if col.tp == mt.TYPE_BIT:
        raw = base64.b64decode(col.default_bit) if col.default_bit else str(d).encode("latin-1")
        return int.from_bytes(raw, "big")
    return coerce(col, d)


def _renumber(cols: list[ColumnInfo], indices: list[IndexInfo]) -> tuple[list[ColumnInfo], list[IndexInfo]]:
    """Offsets follow list order; index column offsets follow their columns."""
    cols = [c if c.offset == i else dataclasses.replace(c, offset=i) for i, c in enumerate(cols)]
    pos = {c.name.lower(): i for i, c in enumerate(cols)}
    out = []
    for ix in indices:
        icols = tuple(dataclasses.replace(ic, offset=pos[ic.name.lower()]) for ic in ix.columns)
        out.append(dataclasses.replace(ix, columns=icols))
    return cols, out


def _key_flags(cols: list[ColumnInfo], indices: list[IndexInfo], pk_handle: str | None) -> list[ColumnInfo]:
    """Recompute PRI/UNIQUE/MULTIPLE key flags from the primary key and the indexes."""
    flags = {c.name.lower(): c.type.flag & ~KEY_FLAGS for c in cols}
    if pk_handle:
        flags[pk_handle.lower()] |= mt.PRI_KEY_FLAG
    for ix in indices:
        first = ix.columns[0].name.lower()
        if ix.primary:
            for ic in ix.columns:
                flags[ic.name.lower()] |= mt.PRI_KEY_FLAG
        elif ix.unique and len(ix.columns) == 1:
            flags[first] |= mt.UNIQUE_KEY_FLAG
        elif not flags[first] & (mt.PRI_KEY_FLAG | mt.UNIQUE_KEY_FLAG):
            flags[first] |= mt.MULTIPLE_KEY_FLAG
    return [c if c.type.flag == flags[c.name.lower()] else
            dataclasses.replace(c, type=dataclasses.replace(c.type, flag=flags[c.name.lower()])) for c in cols]


def _pk_handle_name(t: TableInfo) -> str | None:
    c = t.pk_handle_column
    return c.name if c is not None else None


def _rebuild(t: TableInfo, cols: list[ColumnInfo], indices: list[IndexInfo], **changes: Any) -> TableInfo:
    cols, indices = _renumber(cols, indices)
    pk = changes.pop("pk_handle") if "pk_handle" in changes else _pk_handle_name(t)
    cols = _key_flags(cols, indices, pk)
    return dataclasses.replace(t, columns=tuple(cols), indices=tuple(indices), **changes)


# ---- CREATE TABLE ---------------------------------------------------------------------------

_OK_PROPS = (exp.EngineProperty, exp.CharacterSetProperty, exp.CollateProperty, exp.SchemaCommentProperty,
             exp.AutoIncrementProperty, exp.RowFormatProperty)


def build_table(tree: exp.Create, table_id: int, clustered: bool | None, clustered_default: bool,
                stmt: str) -> tuple[TableInfo, int]:
    """A new TableInfo from CREATE TABLE; returns it and the AUTO_INCREMENT start (0 if not given)."""
    schema = tree.this
    if not isinstance(schema, exp.Schema):
        raise UnsupportedSQL("CREATE TABLE without a column list (LIKE / AS SELECT)", stmt)
    charset, collate, comment, auto_start = "utf8mb4", "utf8mb4_bin", "", 0
    props = tree.args.get("properties")
    for p in (props.expressions if props else []):
        if not isinstance(p, _OK_PROPS):
            raise UnsupportedSQL(f"table option {p.sql('mysql')[:60]}", stmt)
        if isinstance(p, exp.CharacterSetProperty):
            charset = _ident(p.this).lower()
            collate = "binary" if charset == "binary" else f"{charset}_bin"
        elif isinstance(p, exp.CollateProperty):
            collate = _ident(p.this).lower()
        elif isinstance(p, exp.SchemaCommentProperty):
            comment = str(literal(p.this, stmt))
        elif isinstance(p, exp.AutoIncrementProperty):
            auto_start = int(literal(p.this, stmt))
    specs: list[_ColSpec] = []
    index_defs: list[tuple[str | None, list[tuple[str, int]], bool, bool]] = []  # name, cols, unique, primary
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            spec = build_column(item, len(specs) + 1, len(specs), charset, collate, stmt)
            specs.append(spec)
            if spec.primary:
                index_defs.append(("PRIMARY", [(spec.col.name, -1)], True, True))
            elif spec.unique:
                index_defs.append((None, [(spec.col.name, -1)], True, False))
            continue
        node = item.this if isinstance(item, exp.Constraint) and len(item.expressions) == 1 else item
        if isinstance(item, exp.Constraint):
            node = item.expressions[0]
        if isinstance(node, exp.PrimaryKey):
            index_defs.append(("PRIMARY", [_index_part(e) for e in node.expressions], True, True))
        elif isinstance(node, exp.UniqueColumnConstraint):
            inner = node.this
            if isinstance(inner, exp.Schema):
                index_defs.append((_ident(inner.this) if inner.this else None,
                                   [_index_part(e) for e in inner.expressions], True, False))
            else:
                raise UnsupportedSQL(f"UNIQUE definition {node.sql('mysql')[:60]}", stmt)
        elif isinstance(node, exp.IndexColumnConstraint):
            if node.args.get("kind"):
                raise UnsupportedSQL(f"{node.args['kind']} index", stmt)
            index_defs.append((_ident(node.this) if node.this else None,
                               [_index_part(e) for e in node.expressions], False, False))
        else:
            raise UnsupportedSQL(f"table element {item.sql('mysql')[:60]}", stmt)
    if not specs:
        raise SQLError("A table must have at least 1 column")
    names = [s.col.name.lower() for s in specs]
    if len(set(names)) != len(names):
        raise SQLError("Duplicate column name in CREATE TABLE")
    by_name = {s.col.name.lower(): s.col for s in specs}
    primaries = [d for d in index_defs if d[3]]
    if len(primaries) > 1:
        raise SQLError("Multiple primary key defined")
    cols = [s.col for s in specs]
    for _, parts, _, _ in index_defs:
        for n, _ in parts:
            if n.lower() not in by_name:
                raise SQLError(f"Key column '{n}' doesn't exist in table")
    pk_parts = primaries[0][1] if primaries else []
    pk_is_handle = is_common = False
    if pk_parts:
        cols = [dataclasses.replace(c, type=dataclasses.replace(c.type, flag=c.type.flag | mt.NOT_NULL_FLAG
                                                                  | (0 if c.default is not None or c.type.flag
                                                                     & mt.AUTO_INCREMENT_FLAG
                                                                     else mt.NO_DEFAULT_VALUE_FLAG)))
                if c.name.lower() in {n.lower() for n, _ in pk_parts} else c for c in cols]
        single = by_name[pk_parts[0][0].lower()]
        if len(pk_parts) == 1 and single.tp in mt.INT_TYPES and clustered is not False:
            pk_is_handle = True
        elif clustered or (clustered is None and clustered_default):
            is_common = True
    elif clustered:
        raise SQLError("CLUSTERED needs a PRIMARY KEY")
    indices: list[IndexInfo] = []
    used: set[str] = set()
    next_idx = 0
    tname = tree.this.this.name
    for name, parts, unique, primary in index_defs:
        if primary and pk_is_handle:
            continue
        if name is None:
            base = parts[0][0]
            name, suffix = base, 2
            while name.lower() in used:
                name, suffix = f"{base}_{suffix}", suffix + 1
        if name.lower() in used:
            raise SQLError(f"Duplicate key name '{name}'")
        used.add(name.lower())
        next_idx += 1
        icols = tuple(IndexColumn(by_name[n.lower()].name, 0, length) for n, length in parts)
        indices.append(IndexInfo(id=next_idx, name=name, table_name=tname, columns=icols,
                                 unique=unique or primary, primary=primary, index_type=1))
    pk_handle = by_name[pk_parts[0][0].lower()].name if pk_is_handle else None
    t = TableInfo(id=table_id, name=tname, columns=(), charset=charset, collate=collate,
                  pk_is_handle=pk_is_handle, is_common_handle=is_common,
                  common_handle_version=1 if is_common else 0, comment=comment,
                  max_col_id=len(cols), max_idx_id=next_idx, version=5)
    t = _rebuild(t, cols, indices, pk_handle=pk_handle)
    if is_common:
        for c, _ in t.common_handle_columns:
            if c.tp in (mt.TYPE_JSON,) or c.tp in mt.BLOB_TYPES:
                raise SQLError(f"column '{c.name}' cannot be part of a clustered primary key")
            if c.tp in mt.STRING_TYPES and not c.binary and not c.type.collate.lower().endswith("_bin"):
                raise UnsupportedSQL(f"clustered primary key on column {c.name} with collation {c.type.collate}")
    return t, auto_start


# ---- ALTER TABLE ----------------------------------------------------------------------------

def _position(cols: list[ColumnInfo], new: ColumnInfo, pos: Any, stmt: str) -> list[ColumnInfo]:
    if pos is None:
        return cols + [new]
    where = str(pos.args.get("position") or "").lower()
    if where == "first":
        return [new] + cols
    if where == "after":
        after = _ident(pos.this).lower()
        for i, c in enumerate(cols):
            if c.name.lower() == after:
                return cols[: i + 1] + [new] + cols[i + 1:]
        raise SQLError(f"Unknown column '{_ident(pos.this)}' in 'table'")
    raise UnsupportedSQL(f"column position {where}", stmt)


def _col_index(t: TableInfo, name: str) -> int:
    for i, c in enumerate(t.columns):
        if c.name.lower() == name.lower():
            return i
    raise SQLError(f"[ddl:1054]Unknown column '{name}' in '{t.name}'")


def add_column(t: TableInfo, cd: exp.ColumnDef, stmt: str, now: Callable[[], Any]) -> TableInfo:
    """ADD COLUMN: new id, origin default = its default (or zero value when NOT NULL without one)."""
    if any(c.name.lower() == cd.name.lower() for c in t.columns):
        raise SQLError(f"[schema:1060]Duplicate column name '{cd.name}'")
    spec = build_column(cd, t.max_col_id + 1, 0, t.charset, t.collate, stmt)
    if spec.primary or spec.unique or spec.col.type.flag & mt.AUTO_INCREMENT_FLAG:
        raise UnsupportedSQL("ADD COLUMN with PRIMARY KEY, UNIQUE or AUTO_INCREMENT", stmt)
    col = spec.col
    if isinstance(col.default, str) and col.default.upper().startswith("CURRENT_TIMESTAMP"):
        origin: Any = default_text(col, coerce(col, now()))
    elif col.default is not None:
        origin = col.default
    elif not col.nullable:
        origin = zero_text(col)
    else:
        origin = None
    col = dataclasses.replace(col, origin_default=origin, origin_default_bit=col.default_bit)
    cols = _position(list(t.columns), col, cd.args.get("position"), stmt)
    return _rebuild(t, cols, list(t.indices), max_col_id=t.max_col_id + 1)


def drop_column(t: TableInfo, name: str, stmt: str) -> TableInfo:
    """DROP COLUMN: refused for primary-key columns and columns of multi-column indexes."""
    i = _col_index(t, name)
    col = t.columns[i]
    if len(t.columns) == 1:
        raise SQLError(f"can't drop only column {col.name} in table {t.name}")
    if col.type.flag & mt.PRI_KEY_FLAG:
        raise UnsupportedSQL(f"DROP COLUMN of primary key column {col.name}", stmt)
    indices = []
    for ix in t.indices:
        names = [ic.name.lower() for ic in ix.columns]
        if col.name.lower() in names:
            if len(names) > 1:
                raise UnsupportedSQL(f"DROP COLUMN {col.name} covered by the multi-column index {ix.name}", stmt)
            continue
        indices.append(ix)
    cols = [c for c in t.columns if c.id != col.id]
    return _rebuild(t, cols, indices)


_INT_ORDER = [mt.TYPE_TINY, mt.TYPE_SHORT, mt.TYPE_INT24, mt.TYPE_LONG, mt.TYPE_LONGLONG]
_TEXT_ORDER = [mt.TYPE_TINY_BLOB, mt.TYPE_BLOB, mt.TYPE_MEDIUM_BLOB, mt.TYPE_LONG_BLOB]


def _compatible(old: FieldType, new: FieldType) -> bool:
    """True when every value of ``old`` is a valid value of ``new`` unchanged (no reorganization)."""
    if type_class(old) != type_class(new):
        return False
    if old.tp in mt.INT_TYPES:
        return _INT_ORDER.index(new.tp) >= _INT_ORDER.index(old.tp)
    if old.tp in _TEXT_ORDER and new.tp in _TEXT_ORDER:
        return _TEXT_ORDER.index(new.tp) >= _TEXT_ORDER.index(old.tp) and old.charset == new.charset
    if old.tp != new.tp or old.charset != new.charset:
        return False
    if old.tp == mt.TYPE_NEWDECIMAL:
        return new.decimal == old.decimal and new.flen >= old.flen
    if old.tp in (mt.TYPE_ENUM, mt.TYPE_SET):
        return new.elems[: len(old.elems)] == old.elems
    if old.tp in (mt.TYPE_DATETIME, mt.TYPE_TIMESTAMP, mt.TYPE_DURATION):
        return new.decimal >= old.decimal
    if old.tp == mt.TYPE_STRING and old.charset == "binary":
        return new.flen == old.flen
    return new.flen >= old.flen or old.tp in (mt.TYPE_FLOAT, mt.TYPE_DOUBLE, mt.TYPE_JSON, mt.TYPE_YEAR)


def modify_column(t: TableInfo, old_name: str, cd: exp.ColumnDef, stmt: str) -> TableInfo:
    """MODIFY/CHANGE COLUMN without data reorganization (same column id; widening only). A column
    that becomes NOT NULL is checked against the existing rows at commit (``check_existing_rows``)."""
    i = _col_index(t, old_name)
    old = t.columns[i]
    if cd.name.lower() != old.name.lower() and any(c.name.lower() == cd.name.lower() for c in t.columns):
        raise SQLError(f"[schema:1060]Duplicate column name '{cd.name}'")
    spec = build_column(cd, old.id, old.offset, t.charset, t.collate, stmt)
    if spec.primary or spec.unique:
        raise UnsupportedSQL("MODIFY COLUMN adding PRIMARY KEY or UNIQUE", stmt)
    new = spec.col
    key = old.type.flag & KEY_FLAGS
    new_flag = (new.type.flag & ~KEY_FLAGS) | key
    if key & mt.PRI_KEY_FLAG:
        new_flag |= mt.NOT_NULL_FLAG
        if new.default is None:
            new_flag |= mt.NO_DEFAULT_VALUE_FLAG
    newft = dataclasses.replace(new.type, flag=new_flag)
    if not _compatible(old.type, newft):
        raise UnsupportedSQL(
            f"MODIFY COLUMN {old.name} from {mt.type_to_str(old.tp, old.type.charset)}({old.type.flen}) to "
            f"{mt.type_to_str(newft.tp, newft.charset)}({newft.flen}) (needs data reorganization)", stmt)
    if (old.type.flag & mt.AUTO_INCREMENT_FLAG) != (newft.flag & mt.AUTO_INCREMENT_FLAG):
        raise UnsupportedSQL("MODIFY COLUMN adding or removing AUTO_INCREMENT", stmt)
    new = dataclasses.replace(new, type=newft, origin_default=old.origin_default,
                              origin_default_bit=old.origin_default_bit, comment=new.comment)
    cols = list(t.columns)
    del cols[i]
    pos = cd.args.get("position")
    if pos is None:
        cols.insert(i, new)
    else:
        cols = _position(cols, new, pos, stmt)
    indices = [dataclasses.replace(ix, columns=tuple(
        dataclasses.replace(ic, name=new.name) if ic.name.lower() == old.name.lower() else ic
        for ic in ix.columns)) for ix in t.indices]
    pk = _pk_handle_name(t)
    if pk is not None and pk.lower() == old.name.lower():
        pk = new.name
    return _rebuild(t, cols, indices, pk_handle=pk)


def rename_column(t: TableInfo, old_name: str, new_name: str, stmt: str) -> TableInfo:
    """RENAME COLUMN (TiDB runs it as a modify-column job)."""
    i = _col_index(t, old_name)
    old = t.columns[i]
    if old.name.lower() != new_name.lower() and any(c.name.lower() == new_name.lower() for c in t.columns):
        raise SQLError(f"[schema:1060]Duplicate column name '{new_name}'")
    cols = list(t.columns)
    cols[i] = dataclasses.replace(old, name=new_name)
    indices = [dataclasses.replace(ix, columns=tuple(
        dataclasses.replace(ic, name=new_name) if ic.name.lower() == old.name.lower() else ic
        for ic in ix.columns)) for ix in t.indices]
    pk = _pk_handle_name(t)
    if pk is not None and pk.lower() == old.name.lower():
        pk = new_name
    return _rebuild(t, cols, indices, pk_handle=pk)


def add_index(t: TableInfo, node: Any, stmt: str) -> TableInfo:
    """ADD INDEX / ADD UNIQUE (a secondary index; ADD PRIMARY KEY is refused)."""
    if isinstance(node, exp.PrimaryKey):
        raise UnsupportedSQL("ALTER TABLE … ADD PRIMARY KEY", stmt)
    if isinstance(node, exp.UniqueColumnConstraint) and isinstance(node.this, exp.Schema):
        name = _ident(node.this.this) if node.this.this else None
        parts = [_index_part(e) for e in node.this.expressions]
        unique = True
    elif isinstance(node, exp.IndexColumnConstraint) and not node.args.get("kind"):
        name = _ident(node.this) if node.this else None
        parts = [_index_part(e) for e in node.expressions]
        unique = False
    else:
        raise UnsupportedSQL(f"ADD {node.sql('mysql')[:60]}", stmt)
    for n, _ in parts:
        _col_index(t, n)
    used = {ix.name.lower() for ix in t.indices}
    if name is None:
        base, k = parts[0][0], 2
        name = base
        while name.lower() in used:
            name, k = f"{base}_{k}", k + 1
    if name.lower() in used or name.upper() == "PRIMARY":
        raise SQLError(f"[ddl:1061]Duplicate key name '{name}'")
    cols = {c.name.lower(): c.name for c in t.columns}
    ix = IndexInfo(id=t.max_idx_id + 1, name=name, table_name=t.name,
                   columns=tuple(IndexColumn(cols[n.lower()], 0, ln) for n, ln in parts), unique=unique,
                   index_type=1)
    return _rebuild(t, list(t.columns), list(t.indices) + [ix], max_idx_id=t.max_idx_id + 1)


def add_primary_key(t: TableInfo, node: exp.PrimaryKey, clustered: bool | None, stmt: str) -> TableInfo:
    """ADD PRIMARY KEY on a table without one: a NONCLUSTERED primary index (rows keep ``_tidb_rowid``);
    its columns become NOT NULL. Existing rows are checked at commit (``check_existing_rows``)."""
    if clustered:
        raise UnsupportedSQL("ADD PRIMARY KEY … CLUSTERED (a clustered key can only be created with the table)", stmt)
    if t.pk_is_handle or t.is_common_handle or t.primary_index is not None:
        raise SQLError("[schema:1068]Multiple primary key defined")
    parts = [_index_part(e) for e in node.expressions]
    for n, _ in parts:
        _col_index(t, n)
    names = {n.lower() for n, _ in parts}
    cols = [c if c.name.lower() not in names else
            dataclasses.replace(c, type=dataclasses.replace(c.type, flag=c.type.flag | mt.NOT_NULL_FLAG))
            for c in t.columns]
    by = {c.name.lower(): c.name for c in t.columns}
    ix = IndexInfo(id=t.max_idx_id + 1, name="PRIMARY", table_name=t.name,
                   columns=tuple(IndexColumn(by[n.lower()], 0, ln) for n, ln in parts), unique=True,
                   primary=True, index_type=1)
    return _rebuild(t, cols, list(t.indices) + [ix], max_idx_id=t.max_idx_id + 1)


def check_existing_rows(old: TableInfo | None, new: TableInfo, rows: Iterable[Mapping[int, Any]]) -> None:
    """Refuse a change that the existing ``rows`` (by column id, as ``new`` sees them) violate, as
    TiDB's checks and index backfill do: a NULL in a column that became NOT NULL, or in a new
    primary key's column (``[ddl:1138]``), or two rows with the same non-NULL entry of a new unique
    index (``[kv:1062]``)."""
    known = {ix.id for ix in old.indices} if old is not None else set()
    was_nullable = {c.id for c in old.columns if c.nullable} if old is not None else set()
    not_null = [c.id for c in new.columns if c.id in was_nullable and not c.nullable]
    by_name = {c.name.lower(): c for c in new.columns}
    specs: list[tuple[IndexInfo, list[tuple[ColumnInfo, int]], set[tuple[Any, ...]]]] = []
    for ix in new.indices:
        if ix.unique and ix.id not in known:
            cols = [(by_name[ic.name.lower()], ic.length) for ic in ix.columns]
            specs.append((ix, cols, set()))
    if not specs and not not_null:
        return
    for row in rows:
        if any(row.get(cid) is None for cid in not_null):
            raise SQLError("[ddl:1138]Invalid use of NULL value")
        for ix, cols, seen in specs:
            vals = [row.get(c.id) for c, _ in cols]
            if any(v is None for v in vals):
                if ix.primary:
                    raise SQLError("[ddl:1138]Invalid use of NULL value")
                continue
            entry = tuple(_index_value(c, length, v) for (c, length), v in zip(cols, vals))
            if entry in seen:
                raise SQLError(f"[kv:1062]Duplicate entry '{'-'.join(str(v) for v in vals)}' "
                               f"for key '{new.name}.{ix.name}'")
            seen.add(entry)


def _index_value(col: ColumnInfo, length: int, v: Any) -> Any:
    """What a unique index compares: the prefix for prefix indexes, case-folded for ``_ci`` collations."""
    if isinstance(v, (str, bytes)) and length > 0:
        v = v[:length]
    if isinstance(v, str) and col.type.collate.lower().endswith("_ci"):
        v = v.casefold()
    return v


def drop_primary_key(t: TableInfo, stmt: str) -> TableInfo:
    """DROP PRIMARY KEY of a NONCLUSTERED primary key (a clustered one is the row handle: refused)."""
    if t.pk_is_handle or t.is_common_handle:
        raise UnsupportedSQL("DROP PRIMARY KEY of a clustered primary key (it is the row handle)", stmt)
    if t.primary_index is None:
        raise SQLError("[ddl:1091]Can't DROP 'PRIMARY'; check that column/key exists")
    return _rebuild(t, list(t.columns), [ix for ix in t.indices if not ix.primary])


def drop_index(t: TableInfo, name: str, stmt: str) -> TableInfo:
    """DROP INDEX (not the primary key)."""
    if name.upper() == "PRIMARY":
        raise UnsupportedSQL("DROP PRIMARY KEY", stmt)
    keep = [ix for ix in t.indices if ix.name.lower() != name.lower()]
    if len(keep) == len(t.indices):
        raise SQLError(f"[ddl:1091]index {name} doesn't exist")
    return _rebuild(t, list(t.columns), keep)


# ---- planning ---------------------------------------------------------------------------------

def _table_name(node: Any, session_db: str | None, stmt: str) -> tuple[str, str]:
    if isinstance(node, exp.Schema):
        node = node.this
    if not isinstance(node, exp.Table):
        raise UnsupportedSQL(f"table reference {node}", stmt)
    db = node.db or session_db
    if not db:
        raise SQLError("[planner:1046]No database selected")
    return db, node.name


def _with_table(schema: InfoSchema, entry: TableEntry) -> dict[int, TableEntry]:
    tables = dict(schema.tables)
    tables[entry.info.id] = entry
    return tables


def plan(stmt: DDL, schema: InfoSchema, gen_ids: Callable[[int], list[int]], session_db: str | None,
         clustered_default: bool, now: Callable[[], Any]) -> DDLPlan | None:
    """Validate a DDL against ``schema``; return what it changes (None: nothing to do, e.g. IF NOT EXISTS)."""
    text = stmt.text
    tree = stmt.tree
    if stmt.kind == "create_database":
        name = _ident(tree.this)
        if name.lower() in schema.dbs:
            if tree.args.get("exists"):
                return None
            raise SQLError(f"[schema:1007]Can't create database '{name}'; database exists")
        db = DBInfo(gen_ids(1)[0], name)
        dbs = dict(schema.dbs)
        dbs[name.lower()] = db
        return DDLPlan(CREATE_SCHEMA, db.id, 0, name, "", mt.STATE_PUBLIC, dbs=dbs, db_info=db)
    if stmt.kind == "drop_database":
        name = _ident((tree.args.get("tables") or [tree.this])[0])
        db0 = schema.dbs.get(name.lower())
        if db0 is None:
            if tree.args.get("exists"):
                return None
            raise SQLError(f"[schema:1008]Can't drop database '{name}'; database doesn't exist")
        dbs = dict(schema.dbs)
        del dbs[name.lower()]
        tables = {k: e for k, e in schema.tables.items() if e.db.id != db0.id}
        return DDLPlan(DROP_SCHEMA, db0.id, 0, db0.name, "", mt.STATE_NONE, dbs=dbs, tables=tables,
                       db_info=dataclasses.replace(db0, state=mt.STATE_NONE))
    if stmt.kind == "create_table":
        dbname, tname = _table_name(tree.this, session_db, text)
        db = schema.db(dbname)
        if schema.find(dbname, tname) is not None:
            if tree.args.get("exists"):
                return None
            raise SQLError(f"[schema:1050]Table '{dbname}.{tname}' already exists")
        table_id = gen_ids(1)[0]
        info, _ = build_table(tree, table_id, stmt.clustered, clustered_default, text)
        entry = TableEntry(db, info)
        return DDLPlan(CREATE_TABLE, db.id, info.id, db.name, info.name, mt.STATE_PUBLIC,
                       tables=_with_table(schema, entry), table_info=info)
    if stmt.kind == "drop_table":
        nodes = tree.args.get("tables") or ([tree.this] if tree.this is not None else [])
        if len(nodes) != 1:
            raise UnsupportedSQL("DROP TABLE of several tables in one statement", text)
        dbname, tname = _table_name(nodes[0], session_db, text)
        e = schema.find(dbname, tname)
        if e is None:
            if tree.args.get("exists"):
                return None
            raise SQLError(f"[schema:1051]Unknown table '{dbname}.{tname}'")
        tables = dict(schema.tables)
        del tables[e.info.id]
        return DDLPlan(DROP_TABLE, e.db.id, e.info.id, e.db.name, e.info.name, mt.STATE_NONE, tables=tables,
                       table_info=dataclasses.replace(e.info, state=mt.STATE_NONE))
    if stmt.kind == "truncate_table":
        if len(tree.expressions) != 1:
            raise UnsupportedSQL("TRUNCATE of several tables", text)
        dbname, tname = _table_name(tree.expressions[0], session_db, text)
        e = schema.table(dbname, tname)
        new_id = gen_ids(1)[0]
        info = dataclasses.replace(e.info, id=new_id)
        tables = dict(schema.tables)
        del tables[e.info.id]
        tables[new_id] = TableEntry(e.db, info)
        return DDLPlan(TRUNCATE_TABLE, e.db.id, e.info.id, e.db.name, e.info.name, mt.STATE_PUBLIC,
                       tables=tables, table_info=info)
    if stmt.kind == "rename_table":
        assert stmt.rename is not None
        (odb, oname), (ndb, nname) = stmt.rename[0]
        odb = odb or session_db
        ndb = ndb or session_db
        if not odb or not ndb:
            raise SQLError("[planner:1046]No database selected")
        return _rename(schema, odb, oname, ndb, nname)
    if stmt.kind == "alter_table":
        dbname, tname = _table_name(tree.this, session_db, text)
        e = schema.table(dbname, tname)
        actions = tree.args.get("actions") or []
        if not actions:
            raise UnsupportedSQL("ALTER TABLE without actions", text)
        t = e.info
        if len(actions) == 1 and isinstance(actions[0], exp.AlterRename):
            ndb, nname = _table_name(actions[0].this, dbname, text)
            return _rename(schema, dbname, tname, ndb, nname)
        # Several specs: TiDB's multi-schema change, one job (type 61) applying them in order.
        new = t
        action = state = 0
        delete_only = False
        for a in actions:
            action, state, new, delete_only = _alter_one(new, a, stmt, now)
        if len(actions) > 1:
            action, state, delete_only = MULTI_SCHEMA_CHANGE, mt.STATE_PUBLIC, False
        return DDLPlan(action, e.db.id, t.id, e.db.name, t.name, state,
                       tables=_with_table(schema, TableEntry(e.db, new)), table_info=new,
                       delete_only_binlog=delete_only)
    raise UnsupportedSQL(f"DDL {stmt.kind}", text)


def _alter_one(t: TableInfo, a: Any, stmt: DDL, now: Callable[[], Any]) -> tuple[int, int, TableInfo, bool]:
    """One ALTER TABLE spec: (action type, final schema state, new TableInfo, delete-only binlog)."""
    text = stmt.text
    if isinstance(a, exp.ColumnDef):
        return ADD_COLUMN, mt.STATE_PUBLIC, add_column(t, a, text, now), False
    if isinstance(a, exp.Drop) and str(a.args.get("kind") or "").upper() == "COLUMN":
        targets = a.args.get("tables") or []
        if len(targets) != 1:
            raise UnsupportedSQL("DROP COLUMN of several columns", text)
        return DROP_COLUMN, mt.STATE_NONE, drop_column(t, _ident(targets[0]), text), True
    if isinstance(a, exp.Drop) and str(a.args.get("kind") or "").upper() == "INDEX":
        return DROP_INDEX, mt.STATE_NONE, drop_index(t, _ident((a.args.get("tables") or [None])[0]), text), False
    if isinstance(a, exp.DropPrimaryKey):
        return DROP_PRIMARY_KEY, mt.STATE_NONE, drop_primary_key(t, text), False
    if isinstance(a, exp.ModifyColumn):
        old = _ident(a.args["rename_from"]) if a.args.get("rename_from") else a.this.name
        return MODIFY_COLUMN, mt.STATE_PUBLIC, modify_column(t, old, a.this, text), False
    if isinstance(a, exp.RenameColumn):
        return MODIFY_COLUMN, mt.STATE_PUBLIC, rename_column(t, _ident(a.this), _ident(a.args["to"]), text), False
    if isinstance(a, exp.AddConstraint) and len(a.expressions) == 1:
        node = a.expressions[0]
        if isinstance(node, exp.PrimaryKey):
            return ADD_PRIMARY_KEY, mt.STATE_PUBLIC, add_primary_key(t, node, stmt.clustered, text), False
        return ADD_INDEX, mt.STATE_PUBLIC, add_index(t, node, text), False
    if isinstance(a, exp.AlterRename):
        raise UnsupportedSQL("RENAME TO together with other ALTER TABLE specs", text)
    raise UnsupportedSQL(f"ALTER TABLE … {type(a).__name__} ({a.sql('mysql')[:60]})", text)


def _rename(schema: InfoSchema, odb: str, oname: str, ndb: str, nname: str) -> DDLPlan:
    e = schema.table(odb, oname)
    target_db = schema.db(ndb)
    if schema.find(ndb, nname) is not None:
        raise SQLError(f"[schema:1050]Table '{nname}' already exists")
    extra = dict(e.info.extra)
    if target_db.id != e.db.id:
        extra["old_schema_id"] = e.db.id
    info = dataclasses.replace(e.info, name=nname, extra=extra,
                               indices=tuple(dataclasses.replace(ix, table_name=nname) for ix in e.info.indices))
    return DDLPlan(RENAME_TABLE, target_db.id, info.id, target_db.name, info.name, mt.STATE_PUBLIC,
                   tables=_with_table(schema, TableEntry(target_db, info)), table_info=info)
