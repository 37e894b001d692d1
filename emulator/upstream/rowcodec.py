"""TiDB's binlog row layouts written from row images: what the emulated TiDB puts into
``TableMutation.inserted_rows / updated_rows / deleted_rows`` (the old "v1" row format), byte for byte
as TiDB does. The inverse of ``transform.codec.rows.decode_row``; the product only decodes, so the
encoder lives with the emulator (and serves the codec's round-trip tests and the benchmarks' loads).
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from transform.codec import mydecimal
from transform.codec import mysqltypes as mt
from transform.codec.datums import Duration, EncodedJson, encode_datum
from transform.codec.errors import CodecError, ColumnValueError, SchemaError
from transform.codec.model import ColumnInfo, TableInfo, memo
from transform.codec.rows import DELETE, INSERT, KINDS, UPDATE
from transform.codec.values import Flatten, make_flatten, pack_time
from transform.codec.varint import INT64_MAX as _I64_MAX
from transform.codec.varint import INT64_MIN as _I64_MIN
from transform.codec.varint import U64_MASK, encode_uvarint, encode_varint


class _Absent:
    """A column not in the image (None means NULL)."""


_ABSENT = _Absent()


class _Encoder:
    """Per-table encoding plan, built once per TableInfo object."""

    def __init__(self, table: TableInfo) -> None:
        self.cols: tuple[ColumnInfo, ...] = table.columns
        index = {c.id: i for i, c in enumerate(self.cols)}
        self.flatten: list[Flatten] = [make_flatten(c) for c in self.cols]
        self.pair: list[Callable[[Any], bytes]] = [_pair_encoder(c, f) for c, f in zip(self.cols, self.flatten)]
        pkcol = table.pk_handle_column
        self.pk_index = index[pkcol.id] if pkcol is not None else -1
        self.common = table.common_handle_columns
        self.common_index = [index[c.id] for c, _ in self.common]
        self.extra_handle = table.has_extra_handle
        self.names = [c.name for c in self.cols]
        self.ids = [c.id for c in self.cols]
        self.writable = [i for i, c in enumerate(self.cols)
                         if not c.virtual_generated
                         and c.state not in (mt.STATE_DELETE_ONLY, mt.STATE_DELETE_REORGANIZATION)]
        # A NULL is written as ``id, 00`` on insert only when the column has a default (TiDB's CanSkip).
        self.null_pair = [encode_datum(c.id) + b"\x00" if c.default is not None or c.origin_default is not None
                          else None for c in self.cols]


def _encoder_for(table: TableInfo) -> _Encoder:
    """The cached encoding plan of ``table``."""
    return memo(table, "_binlake_encoder", _Encoder)


def _pair_encoder(col: ColumnInfo, flatten: Flatten) -> Callable[[Any], bytes]:
    """``encode_datum(col.id) + encode_datum(flatten(v))`` for a non-None ``v``, with the column id
    encoded once and the common int and text cases inlined (same bytes, fewer calls)."""
    prefix = encode_datum(col.id)
    cid = col.id

    def generic(v: Any) -> bytes:
        try:
            return prefix + encode_datum(flatten(v))
        except CodecError as e:
            raise e.at(cid) from None

    if col.family is mt.Family.INT and not col.unsigned:
        head = prefix + b"\x08"

        def signed(v: Any) -> bytes:
            if type(v) is int and _I64_MIN <= v <= _I64_MAX:
                return head + encode_uvarint(((v << 1) ^ (v >> 63)) & U64_MASK)
            return generic(v)
        return signed
    if col.family is mt.Family.DECIMAL:
        prec, frac = col.decimal_scale
        if 0 < prec <= mydecimal.MAX_DECIMAL_WIDTH and frac <= min(prec, mydecimal.MAX_DECIMAL_SCALE):
            head = prefix + b"\x06" + bytes((prec, frac))

            def decimal(v: Any) -> bytes:
                if type(v) is Decimal:
                    try:
                        return head + mydecimal.encode_bin(v, prec, frac)
                    except CodecError as e:
                        raise e.at(cid) from None
                return generic(v)
            return decimal
    if col.family is mt.Family.JSON:
        head = prefix + b"\x0a"

        def json_value(v: Any) -> bytes:
            if type(v) is EncodedJson:
                return head + v.payload
            return generic(v)
        return json_value
    if col.family is mt.Family.DATETIME:
        head = prefix + b"\x09"

        def datetime_value(v: Any) -> bytes:
            if type(v) is dt.datetime and v.tzinfo is None:
                return head + encode_uvarint(pack_time(v.year, v.month, v.day, v.hour, v.minute, v.second,
                                                       v.microsecond))
            return generic(v)
        return datetime_value
    if col.family is mt.Family.STRING and not col.binary:
        head = prefix + b"\x02"

        def text(v: Any) -> bytes:
            if type(v) is str:
                b = v.encode("utf-8")
                return head + encode_varint(len(b)) + b
            return generic(v)
        return text
    return generic



def _needs_restored_data(col: ColumnInfo, new_collation: bool) -> bool:
    """TiDB's ``NeedRestoredData`` for a clustered PK column."""
    if not new_collation or col.family is not mt.Family.STRING or col.binary:
        return False
    coll = col.type.collate.lower()
    if coll == "utf8mb4_0900_bin":
        return False
    return not coll.endswith("_bin") or col.tp == mt.TYPE_VARCHAR


def _sort_key(col: ColumnInfo, datum: Any, new_collation: bool) -> Any:
    """The datum TiDB puts in a clustered handle for a string PK column (collation key)."""
    if not new_collation or col.family is not mt.Family.STRING or col.binary:
        return datum
    coll = col.type.collate.lower()
    if coll in ("utf8mb4_bin", "utf8_bin", "ascii_bin", "latin1_bin"):
        return bytes(datum).rstrip(b" ")
    if coll in ("binary", "utf8mb4_0900_bin"):
        return datum
    raise SchemaError(f"column {col.name}: collation {coll} sort keys are not implemented; "
                      f"pass the clustered handle datums explicitly")


def _flat(plan: _Encoder, i: int, value: Any) -> Any:
    if value is None:
        return None
    try:
        return plan.flatten[i](value)
    except CodecError as e:
        raise e.at(plan.cols[i].id) from None


def _pairs(plan: _Encoder, image: Mapping[Any, Any], keys: Sequence[Any], cols: Sequence[int], out: bytearray) -> None:
    pair = plan.pair
    all_cols = plan.cols
    for i in cols:
        v = image.get(keys[i], _ABSENT)
        if v is None:
            out += encode_datum(all_cols[i].id) + b"\x00"
        elif v is _ABSENT:
            c = all_cols[i]
            raise ColumnValueError(f"column {c.name} missing from the row image", None, c.id)
        else:
            out += pair[i](v)


def encode_row(table: TableInfo, kind: str, before: Mapping[Any, Any] | None,
               after: Mapping[Any, Any] | None, handle: Any = None, *, new_collation: bool = True,
               by_id: bool = False) -> bytes:
    """Encode one row change exactly as TiDB writes it into a binlog (the inverse of decode_row).

    - images are keyed by column name, or by column id with ``by_id=True``;
    - ``handle``: the ``_tidb_rowid`` for tables without an int PK handle (required there); for
      int-PK tables it defaults to the PK value; for clustered tables it may be a sequence of
      handle datums (otherwise built from the PK values and the collation, see ``new_collation``).
    - insert: columns absent from ``after``, virtual generated columns, the int PK handle, and
      NULLs of columns without a default are not written (TiDB's ``CanSkip``);
    - update/delete: every stored column must be in the image(s); NULLs are written as ``00``.
    """
    plan = _encoder_for(table)
    out = bytearray()
    cols = plan.cols
    keys = plan.ids if by_id else plan.names
    writable = plan.writable
    if kind == INSERT:
        if after is None:
            raise ValueError("an insert needs an after image")
        skip = set()
        if plan.pk_index >= 0:
            h = handle if handle is not None else after.get(keys[plan.pk_index])
            if not isinstance(h, int):
                raise ColumnValueError("insert into a pk-is-handle table needs an int handle")
            out += encode_datum(h - (1 << 64) if h > (1 << 63) - 1 else h)
            skip.add(plan.pk_index)
        elif plan.extra_handle:
            if not isinstance(handle, int):
                raise ColumnValueError("insert into a _tidb_rowid table needs handle=<int>")
            out += encode_datum(handle)
        else:
            if handle is not None:
                for d in handle:
                    out += encode_datum(d)
            for (c, ic), i in zip(plan.common, plan.common_index):
                if handle is None:
                    d = _flat(plan, i, after[keys[i]])
                    if c.family is mt.Family.DURATION:
                        d = Duration(d)
                    out += encode_datum(_sort_key(c, d, new_collation))
                if ic.length in (-1, 0) and not _needs_restored_data(c, new_collation):
                    skip.add(i)
        body = bytearray()
        pair = plan.pair
        null_pair = plan.null_pair
        for i in writable:
            if i in skip:
                continue
            v = after.get(keys[i], _ABSENT)
            if v is None:
                null = null_pair[i]
                if null is not None:
                    body += null
            elif v is not _ABSENT:
                body += pair[i](v)
        out += body or b"\x00"
        return bytes(out)
    if kind == UPDATE:
        if before is None or after is None:
            raise ValueError("an update needs before and after images")
        for image, h in ((before, handle), (after, handle)):
            _pairs(plan, image, keys, writable, out)
            if plan.extra_handle:
                if not isinstance(h, int):
                    raise ColumnValueError("update of a _tidb_rowid table needs handle=<int>")
                out += encode_datum(mt.EXTRA_HANDLE_ID) + encode_datum(h)
        return bytes(out)
    if kind == DELETE:
        if before is None:
            raise ValueError("a delete needs a before image")
        _pairs(plan, before, keys, range(len(cols)), out)
        if plan.extra_handle:
            if not isinstance(handle, int):
                raise ColumnValueError("delete from a _tidb_rowid table needs handle=<int>")
            out += encode_datum(mt.EXTRA_HANDLE_ID) + encode_datum(handle)
        return bytes(out or b"\x00")
    raise ValueError(f"unknown row kind {kind!r}; expected one of {KINDS}")
