"""The emulator's status HTTP API: TiDB's routes with TiDB's exact JSON (``MarshalIndent`` one-space,
no trailing newline; errors HTTP 400 plain text), impersonating TiDB v8.1, plus binlake routes.

TiDB routes: ``GET /status``, ``/ddl/history[?limit=N[&start_job_id=J]]``, ``/schema``,
``/schema/{db}``, ``/schema/{db}/{table}``, ``/schema?table_id=N``, ``/db-table/{id}``,
``/mvcc/hex/{hexKey}``. binlake routes: ``POST /binlake/sql[?server=i&db=name]`` (body = SQL script,
one session), ``GET /binlake/snapshot?ts=T`` (``{"db.table": [rows…]}``, values rendered by
``transform.codec.values.json_value``),
``GET /binlake/ts`` (a fresh TSO).
"""
from __future__ import annotations

import json
import logging
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from transform.codec.values import json_value
from upstream import gojson
from upstream.errors import ServerCrashed, UpstreamError

if TYPE_CHECKING:
    from upstream.cluster import Cluster

log = logging.getLogger(__name__)

REGION_ID = 14
VERSION = "8.0.11-TiDB-v8.1.0-binlake"
GIT_HASH = "0" * 40



def render_rows(snapshot: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """A snapshot (table → rows of column values) with every value in JSON-friendly form."""
    return {t: [{k: json_value(v) for k, v in row.items()} for row in rows] for t, rows in snapshot.items()}

class _HTTPError(Exception):
    def __init__(self, status: int, text: str) -> None:
        self.status = status
        self.text = text
        super().__init__(text)


def _bad(text: str) -> _HTTPError:
    return _HTTPError(400, text)


def _atoi(v: str) -> int:
    try:
        return int(v, 10)
    except ValueError:
        raise _bad(f'strconv.Atoi: parsing "{v}": invalid syntax') from None


class _Handler(BaseHTTPRequestHandler):
    cluster: Cluster
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("status api: " + fmt, *args)

    def _send(self, status: int, body: bytes, ctype: str | None) -> None:
        self.send_response(status)
        if ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        body = b""
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            body = self.rfile.read(n)
        parts = [unquote(p) for p in url.path.split("/")[1:]]
        try:
            status, payload, ctype = self._route(method, parts, query, body)
        except _HTTPError as e:
            self._send(e.status, e.text.encode(), "text/plain; charset=utf-8")
            return
        except UpstreamError as e:
            self._send(400, str(e).encode(), "text/plain; charset=utf-8")
            return
        except Exception as e:  # noqa: BLE001 - a handler bug must not kill the server
            log.error("status api %s %s failed: %s", method, self.path, traceback.format_exc())
            self._send(500, f"internal error: {e}".encode(), "text/plain; charset=utf-8")
            return
        self._send(status, payload, ctype)

    def _route(self, method: str, parts: list[str], q: dict[str, str], body: bytes) -> tuple[int, bytes, str | None]:
        c = self.cluster
        json_ct = "application/json"
        if parts == ["status"]:
            doc = {"connections": 0, "version": VERSION, "git_hash": GIT_HASH}
            return 200, json.dumps(doc, separators=(",", ":")).encode(), json_ct
        if parts == ["ddl", "history"]:
            return 200, gojson.marshal_indent([gojson.job_json(j) for j in self._history(q)]), json_ct
        if parts and parts[0] == "schema":
            return 200, self._schema(parts[1:], q), json_ct
        if len(parts) == 2 and parts[0] == "db-table":
            try:
                tid = int(parts[1])
            except ValueError:
                raise _bad(f"Wrong tableID: {parts[1]}") from None
            schema = c.catalog.current()
            e = schema.tables.get(tid)
            if e is None:
                raise _bad(f"[schema:1146]Table which ID = {tid} does not exist.")
            doc = {"db_info": e.db.to_json(), "table_info": gojson.table_json(e.info), "schema_version": schema.version}
            return 200, gojson.marshal_indent(doc), json_ct
        if len(parts) == 3 and parts[:2] == ["mvcc", "hex"] and parts[2]:
            try:
                key = bytes.fromhex(parts[2])
            except ValueError:
                raise _bad("encoding/hex: invalid byte or odd length hex string") from None
            doc = {"key": parts[2].upper(), "region_id": REGION_ID, "value": {"info": c.kv.mvcc_info(key)}}
            return 200, gojson.marshal_indent(doc), json_ct
        if parts == ["binlake", "ts"]:
            return 200, json.dumps({"ts": c.ts()}).encode(), json_ct
        if parts == ["binlake", "snapshot"]:
            ts = _atoi(q["ts"]) if q.get("ts") else None
            return 200, json.dumps(render_rows(c.snapshot(ts)), ensure_ascii=False).encode(), json_ct
        if parts == ["binlake", "sql"]:
            if method != "POST":
                raise _HTTPError(405, "POST the SQL script as the request body")
            return self._sql(body.decode("utf-8"), q)
        raise _HTTPError(404, "404 page not found\n")

    def _history(self, q: dict[str, str]) -> list[Any]:
        jobs = self.cluster.catalog.jobs()
        if "start_job_id" in q:
            start = _atoi(q["start_job_id"])
            if start < 1:
                raise _bad("ddl history start_job_id must be greater than 0")
            if "limit" not in q:
                raise _bad("when 'start_job_id' is specified, it must work with a 'limit'")
            limit = _atoi(q["limit"])
            if limit < 1:
                raise _bad("ddl history limit must be greater than 0")
            return [j for j in reversed(jobs) if j.id <= start][:limit]
        if "limit" in q:
            limit = _atoi(q["limit"])
            if limit < 1:
                raise _bad("ddl history limit must be greater than 0")
            return list(reversed(jobs))[:limit]
        return jobs

    def _schema(self, rest: list[str], q: dict[str, str]) -> bytes:
        schema = self.cluster.catalog.current()
        if not rest or rest == [""]:
            if "table_id" in q:
                raw = q["table_id"]
                tid = _atoi(raw)
                e = schema.tables.get(tid) if tid >= 0 else None
                if e is None:
                    raise _bad(f"[schema:1146]Table which ID = {raw} does not exist.")
                return gojson.marshal_indent(gojson.table_json(e.info))
            return gojson.marshal_indent([d.to_json() for d in sorted(schema.dbs.values(), key=lambda d: d.id)])
        if len(rest) == 1:
            db = schema.dbs.get(rest[0].lower())
            if db is None:
                raise _bad(f"[schema:1049]Unknown database '{rest[0]}'")
            docs = [gojson.marshal_indent(gojson.table_json(e.info)) for e in schema.tables_of(db.id)]
            if not docs:
                return b"[]"
            return b"[\n" + b",\n".join(docs) + b"\n]"
        if len(rest) == 2:
            e = schema.find(rest[0], rest[1])
            if e is None:
                raise _bad(f"[schema:1146]Table '{rest[0]}.{rest[1]}' doesn't exist")
            return gojson.marshal_indent(gojson.table_json(e.info))
        raise _HTTPError(404, "404 page not found\n")

    def _sql(self, script: str, q: dict[str, str]) -> tuple[int, bytes, str]:
        c = self.cluster
        idx = int(q.get("server") or 0)
        if not 0 <= idx < len(c.servers):
            raise _bad(f"no server {idx} (the cluster has {len(c.servers)})")
        session = c.servers[idx].session(q.get("db") or "test")
        results = []
        error = None
        from upstream import sql as sqlmod
        try:
            for i, text in enumerate(sqlmod.split(script)):
                try:
                    results.append(session.run(sqlmod.parse(text)).to_json())
                except UpstreamError as e:
                    error = {"statement": i, "sql": text, "type": type(e).__name__, "message": str(e)}
                    if isinstance(e, ServerCrashed):
                        error["start_ts"], error["commit_ts"] = e.start_ts, e.commit_ts
                    break
        finally:
            open_txn = session.txn is not None
            session.close()
        txns = [{"start_ts": r["start_ts"], "commit_ts": r["commit_ts"], "statement": i}
                for i, r in enumerate(results) if r["commit_ts"]]
        doc = {"results": results, "transactions": txns, "error": error,
               "rolled_back_open_transaction": open_txn}
        return (200 if error is None else 400), json.dumps(doc, ensure_ascii=False).encode(), "application/json"


class StatusServer:
    """The HTTP server thread."""

    def __init__(self, cluster: Cluster, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        handler = type("StatusHandler", (_Handler,), {"cluster": cluster})
        self.httpd = ThreadingHTTPServer((host, int(port)), handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="status-api", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()
