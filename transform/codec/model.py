"""TiDB's schema model (``TableInfo``, ``ColumnInfo``, ``IndexInfo``, ``Job``) read from and
written to TiDB's own JSON, plus each column's Arrow/Iceberg type.

The models are immutable. Keys the model does not interpret are kept verbatim in ``extra`` so that
``to_json()`` of a parsed document gives back every key TiDB wrote.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import pyarrow as pa

from transform.codec import mysqltypes as mt
from transform.codec.errors import SchemaError

T = TypeVar("T")


def memo(table: TableInfo, key: str, build: Callable[[TableInfo], T]) -> T:
    """``build(table)``, computed once per TableInfo object and kept on it under ``key`` (the frozen
    dataclass's ``__dict__``: what a decoder or an encoder derives from a table once)."""
    found = table.__dict__.get(key)
    if found is None:
        found = table.__dict__[key] = build(table)
    return found

JSONDict = dict[str, Any]


def _cistr(name: str) -> JSONDict:
    return {"O": name, "L": name.lower()}


def _name(obj: Any, where: str) -> str:
    if isinstance(obj, dict):
        name = obj.get("O")
        if isinstance(name, str):
            return name
    elif isinstance(obj, str):
        return obj
    raise SchemaError(f"{where}: expected a name object {{'O': ..., 'L': ...}}, got {obj!r}")


def _get(obj: JSONDict, key: str, typ: type | tuple[type, ...], default: Any, where: str) -> Any:
    v = obj.get(key, default)
    if v is None:
        return default
    if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
        raise SchemaError(f"{where}: key {key!r} should be {typ}, got {v!r}")
    return v


def _extra(obj: JSONDict, known: tuple[str, ...]) -> JSONDict:
    return {k: v for k, v in obj.items() if k not in known}


# ---------------------------------------------------------------------------------------------

_FT_KEYS = ("Tp", "Flag", "Flen", "Decimal", "Charset", "Collate", "Elems", "ElemsIsBinaryLit", "Array")


@dataclass(frozen=True)
class FieldType:
    """A column's ``FieldType`` (JSON keys ``Tp``, ``Flag``, ``Flen``, ``Decimal``, …)."""

    tp: int
    flag: int = 0
    flen: int = -1
    decimal: int = -1
    charset: str = ""
    collate: str = ""
    elems: tuple[str, ...] = ()
    elems_is_binary_lit: tuple[bool, ...] | None = None
    array: bool = False
    extra: JSONDict = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, obj: JSONDict) -> FieldType:
        """Parse TiDB's FieldType JSON."""
        if not isinstance(obj, dict):
            raise SchemaError(f"column type must be an object, got {obj!r}")
        w = "FieldType"
        elems = _get(obj, "Elems", list, [], w)
        ebl = obj.get("ElemsIsBinaryLit")
        return cls(
            tp=_get(obj, "Tp", int, 0, w), flag=_get(obj, "Flag", int, 0, w),
            flen=_get(obj, "Flen", int, -1, w), decimal=_get(obj, "Decimal", int, -1, w),
            charset=_get(obj, "Charset", str, "", w), collate=_get(obj, "Collate", str, "", w),
            elems=tuple(str(e) for e in elems),
            elems_is_binary_lit=tuple(bool(b) for b in ebl) if isinstance(ebl, list) else None,
            array=bool(obj.get("Array", False)), extra=_extra(obj, _FT_KEYS),
        )

    def to_json(self) -> JSONDict:
        """TiDB's FieldType JSON."""
        out: JSONDict = {
            "Tp": self.tp, "Flag": self.flag, "Flen": self.flen, "Decimal": self.decimal,
            "Charset": self.charset, "Collate": self.collate,
            "Elems": list(self.elems) if self.elems else None,
            "ElemsIsBinaryLit": list(self.elems_is_binary_lit) if self.elems_is_binary_lit else None,
            "Array": self.array,
        }
        out.update(self.extra)
        return out


_COL_KEYS = ("id", "name", "offset", "origin_default", "origin_default_bit", "default", "default_bit",
             "default_is_expr", "generated_expr_string", "generated_stored", "dependences", "type",
             "state", "comment", "hidden", "change_state_info", "version")


@dataclass(frozen=True)
class ColumnInfo:
    """One column of a table (TiDB ``model.ColumnInfo``)."""

    id: int
    name: str
    offset: int
    type: FieldType
    origin_default: Any = None
    origin_default_bit: str | None = None
    default: Any = None
    default_bit: str | None = None
    default_is_expr: bool = False
    generated_expr_string: str = ""
    generated_stored: bool = False
    dependences: JSONDict | None = None
    state: int = mt.STATE_PUBLIC
    comment: str = ""
    hidden: bool = False
    change_state_info: JSONDict | None = None
    version: int = 2
    extra: JSONDict = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, obj: JSONDict) -> ColumnInfo:
        """Parse TiDB's ColumnInfo JSON."""
        if not isinstance(obj, dict):
            raise SchemaError(f"column must be an object, got {obj!r}")
        w = "ColumnInfo"
        if "id" not in obj or "type" not in obj:
            raise SchemaError(f"{w}: missing 'id' or 'type' in {obj!r}")
        return cls(
            id=_get(obj, "id", int, 0, w), name=_name(obj.get("name"), w),
            offset=_get(obj, "offset", int, 0, w), type=FieldType.from_json(obj["type"]),
            origin_default=obj.get("origin_default"), origin_default_bit=obj.get("origin_default_bit"),
            default=obj.get("default"), default_bit=obj.get("default_bit"),
            default_is_expr=bool(obj.get("default_is_expr", False)),
            generated_expr_string=_get(obj, "generated_expr_string", str, "", w),
            generated_stored=bool(obj.get("generated_stored", False)),
            dependences=obj.get("dependences"), state=_get(obj, "state", int, mt.STATE_PUBLIC, w),
            comment=_get(obj, "comment", str, "", w), hidden=bool(obj.get("hidden", False)),
            change_state_info=obj.get("change_state_info"), version=_get(obj, "version", int, 0, w),
            extra=_extra(obj, _COL_KEYS),
        )

    def to_json(self) -> JSONDict:
        """TiDB's ColumnInfo JSON."""
        out: JSONDict = {
            "id": self.id, "name": _cistr(self.name), "offset": self.offset,
            "origin_default": self.origin_default, "origin_default_bit": self.origin_default_bit,
            "default": self.default, "default_bit": self.default_bit,
            "default_is_expr": self.default_is_expr, "generated_expr_string": self.generated_expr_string,
            "generated_stored": self.generated_stored, "dependences": self.dependences,
            "type": self.type.to_json(), "state": self.state, "comment": self.comment,
            "hidden": self.hidden, "change_state_info": self.change_state_info, "version": self.version,
        }
        out.update(self.extra)
        return out

    @property
    def tp(self) -> int:
        """The MySQL type code."""
        return self.type.tp

    @property
    def unsigned(self) -> bool:
        """True for UNSIGNED numeric columns."""
        return bool(self.type.flag & mt.UNSIGNED_FLAG)

    @property
    def nullable(self) -> bool:
        """True unless the column is NOT NULL."""
        return not self.type.flag & mt.NOT_NULL_FLAG

    @property
    def binary(self) -> bool:
        """True for string/blob columns with the binary charset (values are bytes)."""
        return self.type.charset == mt.BINARY_CHARSET or (
            self.type.tp in mt.STRING_TYPES and self.type.collate == "binary")

    @property
    def virtual_generated(self) -> bool:
        """True for a generated column that is not stored (never written to a row)."""
        return bool(self.generated_expr_string) and not self.generated_stored

    @property
    def mysql_type(self) -> mt.MySQLType:
        """The facts of the column's type; ``SchemaError`` for a type binlake does not handle."""
        t = mt.mysql_type(self.type.tp)
        if t is None:
            raise SchemaError(f"column {self.name}: unsupported MySQL type code {self.type.tp}")
        return t

    @property
    def family(self) -> mt.Family:
        """The column's type family (see ``mysqltypes``)."""
        return self.mysql_type.family

    @property
    def fsp(self) -> int:
        """Fractional-second digits of a DATETIME/TIMESTAMP/TIME column (0 when unspecified)."""
        return self.type.decimal if 0 <= self.type.decimal <= 6 else 0

    @property
    def decimal_scale(self) -> tuple[int, int]:
        """(precision, scale) a DECIMAL column is written at (TiDB's defaults for unspecified)."""
        return (self.type.flen if self.type.flen > 0 else 10), (self.type.decimal if self.type.decimal >= 0 else 0)


_IDX_KEYS = ("id", "idx_name", "tbl_name", "idx_cols", "state", "comment", "index_type", "is_unique",
             "is_primary", "is_invisible", "is_global")


@dataclass(frozen=True)
class IndexColumn:
    """One column of an index: its name, offset in the table, and prefix length (-1 = full)."""

    name: str
    offset: int
    length: int = -1
    extra: JSONDict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class IndexInfo:
    """One index of a table (TiDB ``model.IndexInfo``)."""

    id: int
    name: str
    table_name: str
    columns: tuple[IndexColumn, ...]
    state: int = mt.STATE_PUBLIC
    comment: str = ""
    index_type: int = 1
    unique: bool = False
    primary: bool = False
    invisible: bool = False
    global_: bool = False
    extra: JSONDict = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, obj: JSONDict) -> IndexInfo:
        """Parse TiDB's IndexInfo JSON."""
        if not isinstance(obj, dict):
            raise SchemaError(f"index must be an object, got {obj!r}")
        w = "IndexInfo"
        cols = []
        for c in _get(obj, "idx_cols", list, [], w):
            if not isinstance(c, dict):
                raise SchemaError(f"{w}: index column must be an object, got {c!r}")
            cols.append(IndexColumn(name=_name(c.get("name"), w), offset=_get(c, "offset", int, 0, w),
                                    length=_get(c, "length", int, -1, w),
                                    extra=_extra(c, ("name", "offset", "length"))))
        return cls(
            id=_get(obj, "id", int, 0, w), name=_name(obj.get("idx_name"), w),
            table_name=_name(obj.get("tbl_name", {"O": "", "L": ""}), w), columns=tuple(cols),
            state=_get(obj, "state", int, mt.STATE_PUBLIC, w), comment=_get(obj, "comment", str, "", w),
            index_type=_get(obj, "index_type", int, 1, w), unique=bool(obj.get("is_unique", False)),
            primary=bool(obj.get("is_primary", False)), invisible=bool(obj.get("is_invisible", False)),
            global_=bool(obj.get("is_global", False)), extra=_extra(obj, _IDX_KEYS),
        )

    def to_json(self) -> JSONDict:
        """TiDB's IndexInfo JSON."""
        out: JSONDict = {
            "id": self.id, "idx_name": _cistr(self.name), "tbl_name": _cistr(self.table_name),
            "idx_cols": [dict({"name": _cistr(c.name), "offset": c.offset, "length": c.length}, **c.extra)
                         for c in self.columns],
            "state": self.state, "comment": self.comment, "index_type": self.index_type,
            "is_unique": self.unique, "is_primary": self.primary, "is_invisible": self.invisible,
            "is_global": self.global_,
        }
        out.update(self.extra)
        return out


_TBL_KEYS = ("id", "name", "charset", "collate", "cols", "index_info", "state", "pk_is_handle",
             "is_common_handle", "common_handle_version", "comment", "auto_inc_id", "max_col_id",
             "max_idx_id", "update_timestamp", "version")

# Keys TiDB always writes that this model does not interpret, with their zero values; used when
# a TableInfo built in code (not parsed) is serialised, so the JSON has TiDB's full shape.
_TBL_DEFAULTS: JSONDict = {
    "constraint_info": None, "fk_info": None, "auto_id_cache": 0, "auto_rand_id": 0,
    "max_cst_id": 0, "ShardRowIDBits": 0, "max_shard_row_id_bits": 0, "auto_random_bits": 0,
    "pre_split_regions": 0, "partition": None, "compression": "", "view": None, "sequence": None,
    "Lock": None, "tiflash_replica": None, "is_columnar": False, "temp_table_type": 0,
    "cache_table_status": 0, "policy_ref_info": None, "stats_options": None, "old_schema_id": 0,
}


@dataclass(frozen=True)
class TableInfo:
    """A table's schema at one schema version (TiDB ``model.TableInfo``)."""

    id: int
    name: str
    columns: tuple[ColumnInfo, ...]
    indices: tuple[IndexInfo, ...] = ()
    charset: str = "utf8mb4"
    collate: str = "utf8mb4_bin"
    state: int = mt.STATE_PUBLIC
    pk_is_handle: bool = False
    is_common_handle: bool = False
    common_handle_version: int = 0
    comment: str = ""
    auto_inc_id: int = 0
    max_col_id: int = 0
    max_idx_id: int = 0
    update_timestamp: int = 0
    version: int = 5
    extra: JSONDict = field(default_factory=dict, compare=False)
    source_keys: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    # the table with its virtual generated columns, when this is it without them (without_virtual_columns)
    with_virtual: TableInfo | None = field(default=None, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """The fields only: caches a codec keeps on the object (functions) are not pickled."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    @classmethod
    def from_json(cls, obj: JSONDict) -> TableInfo:
        """Parse TiDB's TableInfo JSON (as served by ``/schema`` or in ``Job.binlog.TableInfo``)."""
        if not isinstance(obj, dict):
            raise SchemaError(f"TableInfo must be an object, got {type(obj).__name__}")
        w = "TableInfo"
        if "id" not in obj or "cols" not in obj:
            raise SchemaError(f"{w}: missing 'id' or 'cols'")
        cols = tuple(ColumnInfo.from_json(c) for c in _get(obj, "cols", list, [], w))
        idxs = tuple(IndexInfo.from_json(i) for i in _get(obj, "index_info", list, [], w))
        ids = [c.id for c in cols]
        if len(set(ids)) != len(ids):
            raise SchemaError(f"{w}: duplicate column ids {ids}")
        return cls(
            id=_get(obj, "id", int, 0, w), name=_name(obj.get("name"), w), columns=cols, indices=idxs,
            charset=_get(obj, "charset", str, "", w), collate=_get(obj, "collate", str, "", w),
            state=_get(obj, "state", int, mt.STATE_PUBLIC, w),
            pk_is_handle=bool(obj.get("pk_is_handle", False)),
            is_common_handle=bool(obj.get("is_common_handle", False)),
            common_handle_version=_get(obj, "common_handle_version", int, 0, w),
            comment=_get(obj, "comment", str, "", w), auto_inc_id=_get(obj, "auto_inc_id", int, 0, w),
            max_col_id=_get(obj, "max_col_id", int, 0, w), max_idx_id=_get(obj, "max_idx_id", int, 0, w),
            update_timestamp=_get(obj, "update_timestamp", int, 0, w),
            version=_get(obj, "version", int, 0, w), extra=_extra(obj, _TBL_KEYS),
            source_keys=tuple(obj),
        )

    def to_json(self) -> JSONDict:
        """TiDB's TableInfo JSON (the shape ``/schema?table_id=N`` serves)."""
        out: JSONDict = {
            "id": self.id, "name": _cistr(self.name), "charset": self.charset, "collate": self.collate,
            "cols": [c.to_json() for c in self.columns],
            "index_info": [i.to_json() for i in self.indices] or None,
            "state": self.state, "pk_is_handle": self.pk_is_handle,
            "is_common_handle": self.is_common_handle, "common_handle_version": self.common_handle_version,
            "comment": self.comment, "auto_inc_id": self.auto_inc_id,
            "max_col_id": self.max_col_id or max((c.id for c in self.columns), default=0),
            "max_idx_id": self.max_idx_id or max((i.id for i in self.indices), default=0),
            "update_timestamp": self.update_timestamp, "version": self.version,
        }
        for k, v in _TBL_DEFAULTS.items():
            out[k] = self.extra.get(k, v)
        out.update(self.extra)
        if self.source_keys is not None:  # parsed: give back exactly the keys TiDB wrote, in order
            out = {k: out[k] for k in self.source_keys if k in out}
        return out

    def without_virtual_columns(self) -> TableInfo:
        """The table as its rows hold it: virtual generated columns (never written to a row, hidden
        ones of expression indexes included) and the indexes naming one are left out, and the offsets
        of the other columns and index columns follow; ``self`` when it has none. A primary key on a
        virtual column (TiDB refuses one) raises :class:`SchemaError`: its rows could not be keyed."""
        virtual = {c.name.lower() for c in self.columns if c.virtual_generated}
        if not virtual:
            return self
        handle = self.pk_handle_column
        pk = self.primary_index
        keyed = ({ic.name.lower() for ic in pk.columns} if pk is not None else set()) | (
            {handle.name.lower()} if handle is not None else set())
        if virtual & keyed:
            raise SchemaError(f"table {self.name}: primary key column(s) {', '.join(sorted(virtual & keyed))} "
                              f"are virtual generated columns, which rows do not hold")
        cols = [c for c in self.columns if not c.virtual_generated]
        cols = [c if c.offset == i else replace(c, offset=i) for i, c in enumerate(cols)]
        offset = {c.name.lower(): c.offset for c in cols}
        indices = tuple(
            replace(ix, columns=tuple(replace(ic, offset=offset[ic.name.lower()]) for ic in ix.columns))
            for ix in self.indices if not any(ic.name.lower() in virtual for ic in ix.columns))
        return replace(self, columns=tuple(cols), indices=indices, with_virtual=self)

    def as_defined(self) -> TableInfo:
        """The table with every column it was defined with: the one :meth:`without_virtual_columns`
        left out of (when its other columns are still these), else ``self``."""
        full = self.with_virtual
        if full is None or [c.id for c in full.columns if not c.virtual_generated] != [c.id for c in self.columns]:
            return self
        return full

    # -- lookups ---------------------------------------------------------------------------

    def column_by_id(self, col_id: int) -> ColumnInfo | None:
        """The column with this id, or None (e.g. dropped since)."""
        for c in self.columns:
            if c.id == col_id:
                return c
        return None

    @property
    def pk_handle_column(self) -> ColumnInfo | None:
        """The int primary key column that is the row handle (``pk_is_handle``), if any."""
        if not self.pk_is_handle:
            return None
        for c in self.columns:
            if c.type.flag & mt.PRI_KEY_FLAG and c.tp in mt.INT_TYPES:
                return c
        raise SchemaError(f"table {self.name}: pk_is_handle but no int primary key column")

    @property
    def primary_index(self) -> IndexInfo | None:
        """The PRIMARY index, if the table has one."""
        for i in self.indices:
            if i.primary:
                return i
        return None

    @property
    def common_handle_columns(self) -> tuple[tuple[ColumnInfo, IndexColumn], ...]:
        """For a clustered table, the PRIMARY index columns in index order (else empty)."""
        if not self.is_common_handle:
            return ()
        pk = self.primary_index
        if pk is None:
            raise SchemaError(f"table {self.name}: is_common_handle but no primary index")
        out = []
        for ic in pk.columns:
            col = next((c for c in self.columns if c.name.lower() == ic.name.lower()), None)
            if col is None:
                raise SchemaError(f"table {self.name}: primary index names unknown column {ic.name}")
            out.append((col, ic))
        return tuple(out)

    @property
    def is_view(self) -> bool:
        """True for a view (TiDB keeps views as TableInfos with a ``view`` field): it holds no rows."""
        return self.extra.get("view") is not None

    @property
    def has_extra_handle(self) -> bool:
        """True when rows are keyed by the hidden ``_tidb_rowid`` (no int PK handle, not clustered)."""
        return not self.pk_is_handle and not self.is_common_handle


# ---------------------------------------------------------------------------------------------
# Arrow / Iceberg types

def arrow_type(col: ColumnInfo) -> pa.DataType:
    """The Arrow type a column's values are written as (maps 1:1 to the Iceberg type)."""
    t = col.mysql_type
    match t.family:
        case mt.Family.INT if t.int_bits == 64:
            return pa.decimal128(20, 0) if col.unsigned else pa.int64()
        case mt.Family.INT:
            return pa.int64() if t.int_bits == 32 and col.unsigned else pa.int32()
        case mt.Family.DECIMAL:
            prec, scale = col.decimal_scale
            return pa.string() if prec > 38 else pa.decimal128(prec, scale)
        case mt.Family.FLOAT:
            return pa.float32()
        case mt.Family.DOUBLE:
            return pa.float64()
        case mt.Family.DATE:
            return pa.date32()
        case mt.Family.DATETIME:
            return pa.timestamp("us")
        case mt.Family.TIMESTAMP:
            return pa.timestamp("us", tz="UTC")
        case mt.Family.YEAR:
            return pa.int32()
        case mt.Family.BIT:
            return pa.int64()
        case mt.Family.DURATION | mt.Family.ENUM | mt.Family.SET | mt.Family.JSON:
            return pa.string()
        case mt.Family.STRING:
            return pa.binary() if col.binary else pa.string()
        case mt.Family.GEOMETRY:
            return pa.binary()


# ---------------------------------------------------------------------------------------------
# DDL jobs

_JOB_KEYS = ("id", "type", "schema_id", "table_id", "schema_name", "table_name", "state", "query",
             "binlog", "schema_state", "start_ts", "real_start_ts")


@dataclass(frozen=True)
class HistoryInfo:
    """``Job.binlog``: the schema after the job (keys ``SchemaVersion``, ``DBInfo``, ``TableInfo``…)."""

    schema_version: int = 0
    db_info: JSONDict | None = None
    table_info: TableInfo | None = None
    finished_ts: int = 0
    multiple_table_infos: tuple[TableInfo, ...] = ()

    @classmethod
    def from_json(cls, obj: JSONDict | None) -> HistoryInfo:
        """Parse the ``binlog`` object of a Job."""
        if obj is None:
            return cls()
        if not isinstance(obj, dict):
            raise SchemaError(f"Job.binlog must be an object, got {obj!r}")
        ti = obj.get("TableInfo")
        multi = obj.get("MultipleTableInfos") or []
        return cls(
            schema_version=_get(obj, "SchemaVersion", int, 0, "HistoryInfo"),
            db_info=obj.get("DBInfo"), table_info=TableInfo.from_json(ti) if ti else None,
            finished_ts=_get(obj, "FinishedTS", int, 0, "HistoryInfo"),
            multiple_table_infos=tuple(TableInfo.from_json(t) for t in multi),
        )

    def to_json(self) -> JSONDict:
        """TiDB's HistoryInfo JSON (untagged Go field names)."""
        return {
            "SchemaVersion": self.schema_version, "DBInfo": self.db_info,
            "TableInfo": self.table_info.to_json() if self.table_info else None,
            "FinishedTS": self.finished_ts,
            "MultipleTableInfos": [t.to_json() for t in self.multiple_table_infos] or None,
        }


@dataclass(frozen=True)
class Job:
    """A DDL job from ``/ddl/history`` (TiDB ``model.Job``)."""

    id: int
    type: int
    schema_id: int
    table_id: int
    schema_name: str = ""
    table_name: str = ""
    state: int = 0
    query: str = ""
    binlog: HistoryInfo = field(default_factory=HistoryInfo)
    schema_state: int = 0
    start_ts: int = 0
    real_start_ts: int = 0
    extra: JSONDict = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, obj: JSONDict) -> Job:
        """Parse TiDB's Job JSON."""
        if not isinstance(obj, dict):
            raise SchemaError(f"Job must be an object, got {type(obj).__name__}")
        w = "Job"
        return cls(
            id=_get(obj, "id", int, 0, w), type=_get(obj, "type", int, 0, w),
            schema_id=_get(obj, "schema_id", int, 0, w), table_id=_get(obj, "table_id", int, 0, w),
            schema_name=_get(obj, "schema_name", str, "", w), table_name=_get(obj, "table_name", str, "", w),
            state=_get(obj, "state", int, 0, w), query=_get(obj, "query", str, "", w),
            binlog=HistoryInfo.from_json(obj.get("binlog")),
            schema_state=_get(obj, "schema_state", int, 0, w), start_ts=_get(obj, "start_ts", int, 0, w),
            real_start_ts=_get(obj, "real_start_ts", int, 0, w), extra=_extra(obj, _JOB_KEYS),
        )

    def to_json(self) -> JSONDict:
        """TiDB's Job JSON."""
        out: JSONDict = {
            "id": self.id, "type": self.type, "schema_id": self.schema_id, "table_id": self.table_id,
            "schema_name": self.schema_name, "table_name": self.table_name, "state": self.state,
            "err": None, "err_count": 0, "row_count": 0, "raw_args": None,
            "schema_state": self.schema_state, "snapshot_ver": 0, "real_start_ts": self.real_start_ts,
            "start_ts": self.start_ts, "dependency_id": 0, "query": self.query,
            "binlog": self.binlog.to_json(), "version": 1, "reorg_meta": None,
            "multi_schema_info": None, "priority": 0,
        }
        out.update(self.extra)
        return out
