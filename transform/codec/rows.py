"""Binlog row layouts: what TiDB writes into ``TableMutation.inserted_rows / updated_rows /
deleted_rows`` (always the old "v1" row format), and the walk over a mutation's ``sequence``.

- insert: handle datum(s) ++ (column id, value) pairs, or ``00`` when no column is stored;
- update: old pairs ++ new pairs over the same column ids (``-1, handle`` ends each half for
  tables keyed by ``_tidb_rowid``);
- delete: pairs of every column (plus ``-1, handle`` for ``_tidb_rowid`` tables), no prefix.

``decode_row`` returns images holding every column of the TableInfo: columns absent from the
payload get the value TiDB Binlog's drainer fills in (``values.missing_value``), the int PK
handle column is rebuilt from the handle, and ids the TableInfo does not know are ignored.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from transform.codec import mysqltypes as mt
from transform.codec.datums import decode_one, skip_one
from transform.codec.errors import CodecError, RowLayoutError
from transform.codec.model import ColumnInfo, TableInfo, memo
from transform.codec.values import Unflatten, make_unflatten, missing_value
from transform.codec.varint import U64_MASK

INSERT = "insert"
UPDATE = "update"
DELETE = "delete"
KINDS = (INSERT, UPDATE, DELETE)


@dataclass
class RowChange:
    """One decoded row change: images are dicts by column name (``None`` where absent)."""

    kind: str
    handle: Any
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    old_handle: Any = None


class _RowShape:
    """What decoding needs of one table (column order, handle columns, fills), built once per TableInfo object."""

    def __init__(self, table: TableInfo) -> None:
        self.table = table
        self.cols: tuple[ColumnInfo, ...] = table.columns
        self.index: dict[int, int] = {c.id: i for i, c in enumerate(self.cols)}
        self.unflatten: list[Unflatten] = [make_unflatten(c) for c in self.cols]
        self._missing: dict[int, Any] = {}
        pkcol = table.pk_handle_column
        self.pk_index = self.index[pkcol.id] if pkcol is not None else -1
        self.pk_unsigned = bool(pkcol is not None and pkcol.unsigned)
        self.common = table.common_handle_columns
        self.common_index = [self.index[c.id] for c, _ in self.common]
        self.extra_handle = table.has_extra_handle
        self.n_prefix = len(self.common) if table.is_common_handle else 1
        self.names = [c.name for c in self.cols]
        self.ids = [c.id for c in self.cols]

    def missing(self, i: int) -> Any:
        if i not in self._missing:
            self._missing[i] = missing_value(self.cols[i])
        return self._missing[i]


def row_shape(table: TableInfo) -> _RowShape:
    """The cached row shape of ``table``."""
    return memo(table, "_binlake_row_shape", _RowShape)


# ---------------------------------------------------------------------------------------------
# decoding

def _read_pairs(data: bytes, off: int, wanted: Mapping[int, int]) -> list[tuple[int, Any, int]]:
    """Read (column id, datum, datum offset) pairs from ``off`` to the end of ``data``.

    Values of ids neither in ``wanted`` nor -1 (``_tidb_rowid``) are only skipped over, as TiDB
    does (their datum is ``None`` in the result)."""
    pairs = []
    n = len(data)
    while off < n:
        start = off
        cid, off = decode_one(data, off)
        if type(cid) is not int:
            raise RowLayoutError(f"expected a varint column id, got {type(cid).__name__}", start)
        vstart = off
        try:
            if cid in wanted or cid == mt.EXTRA_HANDLE_ID:
                val, off = decode_one(data, off)
            else:
                val, off = None, skip_one(data, off)
        except CodecError as e:
            raise e.at(cid) from None
        pairs.append((cid, val, vstart))
    return pairs


def _image(shape: _RowShape, pairs: list[tuple[int, Any, int]], fill: dict[int, Any]) -> tuple[dict[str, Any], Any]:
    """Build a full image dict from pairs; returns (image, value of column -1 or None)."""
    vals: list[Any] = [_ABSENT] * len(shape.cols)
    rowid = None
    index = shape.index
    for cid, val, off in pairs:
        i = index.get(cid)
        if i is None:
            if cid == mt.EXTRA_HANDLE_ID:
                if type(val) is not int:
                    raise RowLayoutError("the _tidb_rowid handle is not an int", off, cid)
                rowid = val
            continue
        if vals[i] is not _ABSENT:
            raise RowLayoutError("column id appears twice in one row image", off, cid)
        if val is None:
            vals[i] = None
            continue
        try:
            vals[i] = shape.unflatten[i](val)
        except CodecError as e:
            e.offset = off if e.offset is None else e.offset
            raise e.at(cid) from None
    out = {}
    for i, c in enumerate(shape.cols):
        v = vals[i]
        if v is _ABSENT:
            v = fill[i] if i in fill else shape.missing(i)
            if type(v) is _Prefix:
                v = v.value()
        out[c.name] = v
    return out, rowid


class _Prefix:
    """A clustered-handle prefix datum, unflattened only if its column is absent from the row."""

    __slots__ = ("shape", "i", "datum", "offset")

    def __init__(self, shape: _RowShape, i: int, datum: Any, offset: int) -> None:
        self.shape, self.i, self.datum, self.offset = shape, i, datum, offset

    def value(self) -> Any:
        if self.datum is None:
            return None
        try:
            return self.shape.unflatten[self.i](self.datum)
        except CodecError as e:
            e.offset = self.offset if e.offset is None else e.offset
            raise e.at(self.shape.cols[self.i].id) from None


class _Absent:
    __slots__ = ()


_ABSENT = _Absent()


def _handle_of(shape: _RowShape, image: dict[str, Any], rowid: Any) -> Any:
    if shape.extra_handle:
        return rowid
    if shape.pk_index >= 0:
        return image[shape.cols[shape.pk_index].name]
    return tuple(image[shape.cols[i].name] for i in shape.common_index)


def decode_row(table: TableInfo, kind: str, data: bytes) -> RowChange:
    """Decode one binlog row payload of ``table``.

    ``kind`` is ``"insert"``, ``"update"`` or ``"delete"``. Returns a :class:`RowChange` whose
    images hold every column of ``table`` by name, and whose ``handle`` is the int handle
    (``_tidb_rowid`` or the int PK), or for clustered tables a tuple of the PK values. Raises a
    :class:`CodecError` subclass naming the column id and byte offset on any malformed input.
    """
    shape = row_shape(table)
    data = bytes(data)
    if kind == INSERT:
        off = 0
        prefix = []
        for _ in range(shape.n_prefix):
            start = off
            v, off = decode_one(data, off)
            prefix.append((v, start))
        fill: dict[int, Any] = {}
        if shape.pk_index >= 0 or shape.extra_handle:
            h, start = prefix[0]
            if type(h) is not int:
                raise RowLayoutError("insert handle is not a varint int", start)
            handle: Any = h & U64_MASK if shape.pk_unsigned else h
            if shape.pk_index >= 0:  # the PK column's value is the handle: it must fit the column
                fill[shape.pk_index] = _Prefix(shape, shape.pk_index, handle, start)
        else:
            # Clustered handle: a PK column absent from the row is rebuilt from its prefix datum
            # (only then: for restored-data columns the prefix holds a collation key, not the value).
            for (_, ic), i, (v, start) in zip(shape.common, shape.common_index, prefix):
                if ic.length in (-1, 0):
                    fill[i] = _Prefix(shape, i, v, start)
            handle = None
        pairs = [] if data[off:] in (b"", b"\x00") else _read_pairs(data, off, shape.index)
        after, _ = _image(shape, pairs, fill)
        if shape.common:
            handle = tuple(after[shape.cols[i].name] for i in shape.common_index)
        return RowChange(INSERT, handle, None, after)
    if kind == UPDATE:
        if data in (b"", b"\x00"):
            raise RowLayoutError("update payload has no columns", 0)
        pairs = _read_pairs(data, 0, shape.index)
        half = len(pairs) // 2
        if len(pairs) % 2:
            raise RowLayoutError(f"update payload has an odd number of pairs ({len(pairs)})", len(data))
        old, new = pairs[:half], pairs[half:]
        for (a, _, _), (b, _, off) in zip(old, new):
            if a != b:
                raise RowLayoutError(f"update halves list different column ids ({a} vs {b})", off, b)
        before, old_rowid = _image(shape, old, {})
        after, new_rowid = _image(shape, new, {})
        return RowChange(UPDATE, _handle_of(shape, after, new_rowid), before, after,
                         _handle_of(shape, before, old_rowid))
    if kind == DELETE:
        pairs = [] if data in (b"", b"\x00") else _read_pairs(data, 0, shape.index)
        before, rowid = _image(shape, pairs, {})
        return RowChange(DELETE, _handle_of(shape, before, rowid), before, None)
    raise ValueError(f"unknown row kind {kind!r}; expected one of {KINDS}")


# ---------------------------------------------------------------------------------------------
# TableMutation.sequence

_SEQ_KIND = {0: (INSERT, "inserted_rows"), 1: (UPDATE, "updated_rows"), 4: (DELETE, "deleted_rows")}


class Mutation(Protocol):
    """What :func:`iter_mutation` reads of a ``binlog_pb2.TableMutation`` (the codec does not import
    the generated protobuf module)."""

    @property
    def inserted_rows(self) -> Sequence[bytes]: ...

    @property
    def updated_rows(self) -> Sequence[bytes]: ...

    @property
    def deleted_rows(self) -> Sequence[bytes]: ...

    @property
    def sequence(self) -> Sequence[int]: ...


def iter_mutation(mutation: Mutation) -> Iterator[tuple[str, bytes]]:
    """Yield (kind, row bytes) of a ``binlog_pb2.TableMutation`` in transaction order.

    Follows ``sequence`` (Insert=0, Update=1, DeleteRow=4), taking the next unread row of the
    matching list each time; an empty ``sequence`` means TiDB's older order: all inserts, then
    updates, then deletes. A sequence that names an obsolete type, runs past a list, or leaves
    rows unread raises :class:`RowLayoutError`. The copies TiDB writes while it moves rows between
    partitions are still there (:func:`without_double_writes` leaves them out).
    """
    lists = {"inserted_rows": mutation.inserted_rows, "updated_rows": mutation.updated_rows,
             "deleted_rows": mutation.deleted_rows}
    if not len(mutation.sequence):
        for kind, name in ((INSERT, "inserted_rows"), (UPDATE, "updated_rows"), (DELETE, "deleted_rows")):
            for row in lists[name]:
                yield kind, row
        return
    pos = {name: 0 for name in lists}
    for i, tp in enumerate(mutation.sequence):
        entry = _SEQ_KIND.get(int(tp))
        if entry is None:
            raise RowLayoutError(f"sequence[{i}] is the unsupported mutation type {int(tp)}")
        kind, name = entry
        rows = lists[name]
        if pos[name] >= len(rows):
            raise RowLayoutError(f"sequence[{i}] asks for {name}[{pos[name]}] but there are {len(rows)}")
        yield kind, rows[pos[name]]
        pos[name] += 1
    for name, rows in lists.items():
        if pos[name] != len(rows):
            raise RowLayoutError(f"sequence leaves {len(rows) - pos[name]} of {name} unread")


def without_double_writes(table: TableInfo, changes: Sequence[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """``changes`` (one mutation of ``table``, in order) without the copies TiDB writes while it
    moves the table's rows between partitions (REORGANIZE PARTITION, PARTITION BY, REMOVE
    PARTITIONING).

    TiDB then writes each row change to the partition the row is in and again to the one it is
    being moved to (``partitionedTable`` Add/Update/RemoveRecord), and every physical write adds to
    the binlog mutation, which names only the logical table: an insert comes twice, a delete twice,
    an update twice or as an update plus a delete of the old image (plus an insert of the new), a
    row moving partitions as delete + insert followed by the same again or by an update. A copy
    follows the change it copies at once and is a change no transaction can make (a second insert of
    a row it holds, a delete or update from an image the row no longer has). Most are known by
    their bytes (delete and update images hold every column, the handle too; an update is the old
    image then the new); an insert after an update, and a change after a partition move, are decoded
    to be compared.
    """
    kept: list[tuple[str, bytes]] = []
    moved: tuple[RowChange, RowChange] | None = None   # the last two kept: delete, insert (decoded)
    updated: bytes | None = None            # the last kept is this update ...
    copied = False                          # ... and its old image's delete came as a copy
    for kind, data in changes:
        if kept and kept[-1] == (kind, data):
            continue
        if kind == DELETE:
            if updated is not None and len(data) < len(updated) and updated.startswith(data):
                copied = True
                continue
            if moved is not None and data == kept[-2][1] and moved[1].after != moved[0].before:
                continue
        elif kind == INSERT:
            if updated is not None and copied and _same_row(decode_row(table, UPDATE, updated),
                                                            decode_row(table, INSERT, data)):
                continue
        elif kind == UPDATE and moved is not None and data.startswith(kept[-2][1]):
            if _same_row(decode_row(table, UPDATE, data), moved[1]):
                continue
        moved = None
        if kind == INSERT and kept and kept[-1][0] == DELETE:
            moved = (decode_row(table, DELETE, kept[-1][1]), decode_row(table, INSERT, data))
        updated, copied = (data, False) if kind == UPDATE else (None, False)
        kept.append((kind, data))
    return kept


def _same_row(a: RowChange, b: RowChange) -> bool:
    """True when two changes leave the same row (handle and after-image)."""
    return a.handle == b.handle and a.after == b.after
