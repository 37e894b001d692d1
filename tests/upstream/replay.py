"""Replaying decoded binlogs into table states, to compare with ``/binlake/snapshot``."""
from __future__ import annotations

import json
from typing import Any

from schemas import binlog_pb2
from tests.upstream.binlogs import SchemaTracker, Txn, decoded_changes
from transform.codec import mysqltypes as mt
from transform.codec.model import TableInfo
from transform.codec.rows import DELETE, INSERT
from transform.codec.values import json_value, missing_value


def replay(txns: list[Txn], tracker: SchemaTracker, upto: int) -> dict[int, dict[Any, dict[int, Any]]]:
    """table id -> handle -> row keyed by column id, after every txn with commit_ts ≤ ``upto``."""
    state: dict[int, dict[Any, dict[int, Any]]] = {}
    for t in txns:
        if t.commit_ts > upto or t.prewrite.ddl_job_id:
            continue
        for tid, kind, ch in decoded_changes(t, tracker):
            table = tracker.table(tid, _version(t))
            rows = state.setdefault(tid, {})
            if kind == INSERT:
                rows[ch.handle] = {c.id: ch.after[c.name] for c in table.columns}
            elif kind == DELETE:
                rows.pop(ch.handle, None)
            else:
                rows.pop(ch.old_handle, None)
                rows[ch.handle] = {c.id: ch.after[c.name] for c in table.columns}
    return state


def _version(t: Txn) -> int:
    return binlog_pb2.PrewriteValue.FromString(t.prewrite.prewrite_value).schema_version


def canonical(table: TableInfo, rows: dict[Any, dict[int, Any]]) -> list[str]:
    """Rows projected on ``table``'s columns (missing ones get their origin default), rendered, sorted."""
    out = []
    for handle, row in rows.items():
        obj = {c.name: json_value(row[c.id] if c.id in row else missing_value(c)) for c in table.columns}
        if table.has_extra_handle:
            obj[mt.EXTRA_HANDLE_NAME] = handle
        out.append(json.dumps(obj, sort_keys=True))
    return sorted(out)


def canonical_snapshot(rows: list[dict[str, Any]]) -> list[str]:
    """Snapshot rows (already rendered) in the same canonical form."""
    return sorted(json.dumps(r, sort_keys=True) for r in rows)
