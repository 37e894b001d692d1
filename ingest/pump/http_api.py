"""The pump's HTTP status API (TiDB Binlog's routes), served by the front door on the pump's gRPC
address (and ``status-addr``); HTTPS under ``[security]``."""
from __future__ import annotations

import json
import logging
import re
import threading
from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError

from ingest import binlog as bl
from ingest.errors import IngestError, TSOError
from ingest.httpserver import GuardedHandler
from ingest.registry.base import DRAINER, ONLINE, PUMP
from ingest.state_route import PAUSE, serve_state_change
from schemas import binlog_pb2

if TYPE_CHECKING:
    from ingest.pump.pump import Pump

log = logging.getLogger(__name__)

_DEBUG_BINLOG_ROUTE = re.compile(r"^/debug/binlog/(?P<ts>-?\d+)$")


class StatusHandler(GuardedHandler):
    """``/status``, ``/state/{id}/{pause|close}``, ``/drainers``, ``/debug/…`` and ``/metrics`` of ``pump``."""

    pump: Pump

    def _json(self, obj: Any, status: int = 200) -> None:
        self.send_body(status, json.dumps(obj, indent=1).encode(), "application/json")

    def _text(self, text: str, status: int = 200) -> None:
        self.send_body(status, text.encode(), "text/plain; charset=utf-8")

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/status":
            self._status()
        elif path == "/drainers":
            self._json([json.loads(d.to_json()) for d in self.pump.registry.list_nodes(DRAINER)])
        elif path == "/metrics":
            self.send_body(200, self.pump.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
        elif m := _DEBUG_BINLOG_ROUTE.match(path):
            self._debug_binlog(int(m["ts"]))
        else:
            self._text("404 page not found\n", 404)

    def do_PUT(self) -> None:
        if not serve_state_change(self, "pump", self.pump.node_id, self._change_state):
            self._text("404 page not found\n", 404)

    def _change_state(self, action: str) -> str | None:
        """Start ``pause`` or ``close`` (offline) on a thread; refused unless the pump is online."""
        pump = self.pump
        if pump.state != ONLINE or pump.stopping:
            return f"pump {pump.node_id} is {pump.state}, state can only change when online"
        stop = pump.pause if action == PAUSE else pump.offline
        threading.Thread(target=_run_logged, args=(stop,), name=f"pump-{action}", daemon=True).start()
        return None

    def do_POST(self) -> None:
        if self.path == "/debug/gc/trigger":
            self._text("trigger gc success" if self.pump.trigger_gc() else "gc is working")
        else:
            self._text("404 page not found\n", 404)

    def _status(self) -> None:
        pump = self.pump
        nodes = {n.node_id: json.loads(n.to_json()) for n in pump.registry.list_nodes(PUMP)}
        nodes[pump.node_id] = json.loads(pump.node.status().to_json())
        try:
            commit_ts = pump.tso.get_ts()
            err = ""
        except TSOError as exc:
            commit_ts, err = 0, str(exc)
        s = pump.storage
        self._json({"status": nodes, "CommitTS": commit_ts, "Checkpoint": {"suffix": 0, "offset": 0},
                    "ErrMsg": err,
                    "binlake": {"max_commit_ts": s.max_commit_ts, "gc_ts": s.gc_ts,
                                "oldest_unresolved_ts": s.oldest_unresolved(), "state": pump.state,
                                "cluster_id": pump.cluster_id}})

    def _debug_binlog(self, ts: int) -> None:
        found = self.pump.storage.get(ts)
        if found is None:
            self._text(f"no binlog is stored at ts {ts}\n", 404)
            return
        entry, payload = found
        b = bl.parse(payload)
        lines = [f"key ts: {ts}", f"pointer: fid={entry.pointer.fid} offset={entry.pointer.offset}",
                 f"payload bytes: {len(payload)}", str(b).strip()]
        if b.prewrite_value:
            pv = binlog_pb2.PrewriteValue()
            try:
                pv.ParseFromString(b.prewrite_value)
                lines.append(f"prewrite value: schema_version={pv.schema_version}")
                for m in pv.mutations:
                    lines.append(f"  table {m.table_id}: {len(m.inserted_rows)} inserted, "
                                 f"{len(m.updated_rows)} updated, {len(m.deleted_rows)} deleted rows")
            except DecodeError as exc:
                lines.append(f"prewrite value does not decode: {exc}")
        if b.prewrite_key and self.pump.resolver.status_url:
            decision = self.pump.resolver.query(b.prewrite_key, b.start_ts)
            lines.append(f"upstream MVCC of the primary key: {decision.fate.value} {decision.commit_ts or ''}")
        self._text("\n".join(lines) + "\n")


def _run_logged(fn: Any) -> None:
    try:
        fn()
    except IngestError as exc:
        log.error("state change failed: %s", exc)
    except Exception:
        log.exception("state change failed")

