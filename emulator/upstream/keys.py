"""TiDB KV keys the emulator needs: record keys ``t{table_id}_r{handle}`` (int or clustered handle) and
the DDL-history meta key a DDL transaction uses as its primary key.

These helpers live here rather than in ``transform`` (which only decodes row payloads); they follow
TiDB's ``tablecodec.EncodeRowKeyWithHandle`` (pingcap/tidb ``pkg/tablecodec/tablecodec.go``) and its meta key
layout (``pkg/meta/meta.go``'s ``DDLJobHistory`` hash, encoded by ``pkg/structure/type.go``).
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from transform.codec import mysqltypes as mt
from transform.codec.datums import DecimalDatum, Duration, KeyBytes, KeyInt, KeyUint, Uint, encode_datum
from transform.codec.model import ColumnInfo, TableInfo
from transform.codec.values import make_flatten
from transform.codec.varint import encode_cmp_int, encode_memcmp_bytes
from upstream.errors import UnsupportedSQL

_INT64_MAX = (1 << 63) - 1
_BIN_COLLATIONS = ("utf8mb4_bin", "utf8_bin", "ascii_bin", "latin1_bin", "binary")


def record_prefix(table_id: int) -> bytes:
    """``t`` + comparable table id + ``_r``: the prefix of every record key of the table."""
    return b"t" + encode_cmp_int(table_id) + b"_r"


def int_record_key(table_id: int, handle: int) -> bytes:
    """The record key of an int handle (``_tidb_rowid`` or the int PK). A ``BIGINT UNSIGNED`` PK
    handle of 2^63 or more is, as in TiDB, the int64 with its bit pattern: its key is that negative
    int's comparable form, so such handles sort before 0."""
    if handle > _INT64_MAX:
        handle -= 1 << 64
    return b"t" + encode_cmp_int(table_id) + b"_r" + encode_cmp_int(handle)


def _key_datum(col: ColumnInfo, value: Any) -> Any:
    """The comparable (``EncodeKey``) datum of one clustered PK value."""
    d = make_flatten(col)(value)
    if col.family is mt.Family.DURATION:
        return Duration(d)
    t = type(d)
    if t is Uint:
        return KeyUint(d)
    if t is int:
        return KeyInt(d)
    if t is bytes:
        if col.binary:
            return KeyBytes(d)
        coll = col.type.collate.lower()
        if coll not in _BIN_COLLATIONS and coll != "utf8mb4_0900_bin":
            raise UnsupportedSQL(f"clustered primary key on column {col.name} with collation {coll}")
        return KeyBytes(d if coll in ("binary", "utf8mb4_0900_bin") else d.rstrip(b" "))
    if t is float or t is DecimalDatum:
        return d
    raise UnsupportedSQL(f"clustered primary key on a {mt.type_to_str(col.tp, col.type.charset)} column")


def common_handle_bytes(table: TableInfo, values: Sequence[Any]) -> bytes:
    """Memcomparable encoding of the clustered PK values (in PRIMARY index order)."""
    return b"".join(encode_datum(_key_datum(c, v)) for (c, _), v in zip(table.common_handle_columns, values))


def record_key(table: TableInfo, handle: Any) -> bytes:
    """The record key of ``handle`` in ``table``: an int, or for clustered tables a tuple of PK values."""
    if table.is_common_handle:
        return record_prefix(table.id) + common_handle_bytes(table, handle)
    return int_record_key(table.id, handle)


def ddl_history_key(job_id: int) -> bytes:
    """``m`` + EncodeBytes("DDLJobHistory") + EncodeUint('h') + EncodeBytes(job id, 8 bytes BE):
    the meta key holding a finished job (the primary key of the DDL's transaction here)."""
    return (b"m" + encode_memcmp_bytes(b"DDLJobHistory") + struct.pack(">Q", ord("h"))
            + encode_memcmp_bytes(struct.pack(">Q", job_id)))
