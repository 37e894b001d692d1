"""Builders of TiDB TableInfo JSON for the transform tests (shaped like TiDB's own output)."""
from __future__ import annotations

from typing import Any

from transform.codec import mysqltypes as mt
from transform.codec.model import TableInfo


def col(cid: int, name: str, tp: int, *, flag: int = 0, flen: int = -1, decimal: int = -1,
        charset: str | None = None, collate: str | None = None, elems: list[str] | None = None,
        origin_default: Any = None, default: Any = None, offset: int = 0,
        generated: str = "", stored: bool = False) -> dict:
    """One ColumnInfo JSON object."""
    if charset is None:
        charset = "utf8mb4" if tp in mt.STRING_TYPES or tp in (mt.TYPE_ENUM, mt.TYPE_SET) else "binary"
    if collate is None:
        collate = "utf8mb4_bin" if charset == "utf8mb4" else "binary"
    return {
        "id": cid, "name": {"O": name, "L": name.lower()}, "offset": offset,
        "origin_default": origin_default, "origin_default_bit": None, "default": default,
        "default_bit": None, "default_is_expr": False, "generated_expr_string": generated,
        "generated_stored": stored, "dependences": None,
        "type": {"Tp": tp, "Flag": flag, "Flen": flen, "Decimal": decimal, "Charset": charset,
                 "Collate": collate, "Elems": elems, "ElemsIsBinaryLit": None, "Array": False},
        "state": 5, "comment": "", "hidden": False, "change_state_info": None, "version": 2,
    }


def table(tid: int, name: str, cols: list[dict], *, pk_is_handle: bool = False,
          common_pk: list[str] | None = None) -> TableInfo:
    """A TableInfo; ``common_pk`` makes it clustered with that PRIMARY index."""
    for i, c in enumerate(cols):
        c["offset"] = i
    idx = None
    if common_pk:
        offs = {c["name"]["O"]: c["offset"] for c in cols}
        idx = [{"id": 1, "idx_name": {"O": "PRIMARY", "L": "primary"}, "tbl_name": {"O": "", "L": ""},
                "idx_cols": [{"name": {"O": n, "L": n.lower()}, "offset": offs[n], "length": -1}
                             for n in common_pk],
                "state": 5, "comment": "", "index_type": 1, "is_unique": True, "is_primary": True,
                "is_invisible": False, "is_global": False}]
    return TableInfo.from_json({
        "id": tid, "name": {"O": name, "L": name.lower()}, "charset": "utf8mb4",
        "collate": "utf8mb4_bin", "cols": cols, "index_info": idx, "state": 5,
        "pk_is_handle": pk_is_handle, "is_common_handle": bool(common_pk),
        "common_handle_version": 1 if common_pk else 0, "comment": "", "auto_inc_id": 0,
        "max_col_id": max(c["id"] for c in cols), "max_idx_id": 1 if common_pk else 0,
        "update_timestamp": 0, "version": 5,
    })


PK = mt.PRI_KEY_FLAG | mt.NOT_NULL_FLAG
