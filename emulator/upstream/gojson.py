"""TiDB's JSON output: Go ``json.MarshalIndent(v, "", " ")`` bytes, and TiDB v8.1's key order for
TableInfo / IndexInfo / DBInfo / Job, which is the field order of their Go structs (pingcap/tidb
``pkg/meta/model/table.go``, ``index.go``, ``db.go``, ``job.go``; ``pkg/parser/model/`` in older releases)."""
from __future__ import annotations

import json
from typing import Any

from transform.codec.model import Job, TableInfo

JSONDict = dict[str, Any]

DEFAULT_SQL_MODE = 1436549152  # ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,…,NO_ENGINE_SUBSTITUTION

_TABLE_KEYS = (
    "id", "name", "charset", "collate", "cols", "index_info", "constraint_info", "fk_info", "state",
    "pk_is_handle", "is_common_handle", "common_handle_version", "comment", "auto_inc_id",
    "auto_id_cache", "auto_rand_id", "max_col_id", "max_idx_id", "max_fk_id", "max_cst_id",
    "update_timestamp", "old_schema_id", "ShardRowIDBits", "max_shard_row_id_bits", "auto_random_bits",
    "auto_random_range_bits", "pre_split_regions", "partition", "compression", "view", "sequence", "Lock",
    "version", "tiflash_replica", "is_columnar", "temp_table_type", "cache_table_status",
    "policy_ref_info", "stats_options", "exchange_partition_info", "ttl_info",
)
_TABLE_ZERO: JSONDict = {"max_fk_id": 0, "auto_random_range_bits": 0, "exchange_partition_info": None,
                         "ttl_info": None}
_INDEX_KEYS = ("id", "idx_name", "tbl_name", "idx_cols", "state", "backfill_state", "comment",
               "index_type", "is_unique", "is_primary", "is_invisible", "is_global", "mv_index")
_INDEX_ZERO: JSONDict = {"backfill_state": 0, "mv_index": False}
_JOB_KEYS = (
    "id", "type", "schema_id", "table_id", "schema_name", "table_name", "state", "warning", "err",
    "err_count", "row_count", "raw_args", "schema_state", "snapshot_ver", "real_start_ts", "start_ts",
    "dependency_id", "query", "binlog", "version", "reorg_meta", "multi_schema_info", "priority",
    "seq_num", "charset", "collate", "admin_operator", "trace_info", "bdr_role", "cdc_write_source",
    "local_mode", "sql_mode",
)
_JOB_ZERO: JSONDict = {"warning": None, "seq_num": 0, "charset": "utf8mb4", "collate": "utf8mb4_bin",
                       "admin_operator": 0, "trace_info": {"connection_id": 0, "session_alias": ""},
                       "bdr_role": "", "cdc_write_source": 0, "local_mode": False,
                       "sql_mode": DEFAULT_SQL_MODE}


def marshal_indent(value: Any) -> bytes:
    """Go's ``json.MarshalIndent(value, "", " ")``: one-space indent, HTML escapes, no trailing newline."""
    text = json.dumps(value, indent=1, ensure_ascii=False)
    text = (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
    return text.encode("utf-8")


def _ordered(obj: JSONDict, keys: tuple[str, ...], zero: JSONDict, omit_zero: tuple[str, ...] = ()) -> JSONDict:
    out: JSONDict = {}
    for k in keys:
        if k in obj:
            v = obj[k]
        elif k in zero:
            v = zero[k]
        else:
            continue
        if k in omit_zero and not v:
            continue
        out[k] = v
    for k, v in obj.items():  # keys this release list does not know go last, unchanged
        if k not in out and k not in keys:
            out[k] = v
    return out


def table_json(table: TableInfo) -> JSONDict:
    """A TableInfo as TiDB v8.1 serialises it (key order of Go's ``TableInfo``; ``old_schema_id`` omitted when 0)."""
    obj = table.to_json()
    if obj.get("index_info"):
        obj["index_info"] = [_ordered(i, _INDEX_KEYS, _INDEX_ZERO) for i in obj["index_info"]]
    return _ordered(obj, _TABLE_KEYS, _TABLE_ZERO, omit_zero=("old_schema_id",))


def job_json(job: Job) -> JSONDict:
    """A history Job as TiDB v8.1 serialises it (key order of Go's ``Job``, ``binlog`` with capitalised keys)."""
    obj = job.to_json()
    binlog = dict(obj["binlog"])
    if job.binlog.table_info is not None:
        binlog["TableInfo"] = table_json(job.binlog.table_info)
    if job.binlog.multiple_table_infos:
        binlog["MultipleTableInfos"] = [table_json(t) for t in job.binlog.multiple_table_infos]
    obj["binlog"] = binlog
    return _ordered(obj, _JOB_KEYS, _JOB_ZERO)
