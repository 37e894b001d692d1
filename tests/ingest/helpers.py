"""Binlogs as TiDB writes them, for tests that talk to real pumps."""
from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from ingest import binlog as bl
from schemas import binlog_pb2
from upstream.local import PumpProcess, PumpWriter


def read_frame(sock: socket.socket, buf: bytes) -> tuple[tuple[int, int, int, bytes] | None, bytes]:
    """The next HTTP/2 frame on ``sock`` (type, flags, stream, payload) after the bytes ``buf`` already
    read, and the bytes left over; None once the server closed the connection (or went silent past the
    socket's timeout)."""
    while True:
        if len(buf) >= 9:
            n = int.from_bytes(buf[:3], "big")
            if len(buf) >= 9 + n:
                sid = int.from_bytes(buf[5:9], "big") & 0x7fffffff
                return (buf[3], buf[4], sid, buf[9:9 + n]), buf[9 + n:]
        try:
            chunk = sock.recv(1 << 16)
        except (ConnectionResetError, TimeoutError):
            return None, buf
        if not chunk:
            return None, buf
        buf += chunk


def prewrite(start_ts: int, value: bytes = b"rows", key: bytes = b"t\x80pk") -> bytes:
    """A Go-style prewrite binlog."""
    return bl.marshal_gogo(binlog_pb2.Binlog(tp=bl.PREWRITE, start_ts=start_ts, prewrite_key=key,
                                             prewrite_value=value))


def commit(start_ts: int, commit_ts: int, key: bytes = b"t\x80pk") -> bytes:
    """A Go-style commit binlog (prewrite_value cleared, as TiDB sends it)."""
    return bl.marshal_gogo(binlog_pb2.Binlog(tp=bl.COMMIT, start_ts=start_ts, commit_ts=commit_ts,
                                             prewrite_key=key))


def writer(pump: PumpProcess, cluster_id: int) -> PumpWriter:
    """A WriteBinlog client for ``pump``."""
    return PumpWriter(pump.addr, cluster_id)


class MVCCHandler(BaseHTTPRequestHandler):
    """TiDB's ``GET /mvcc/hex/{key}`` contract: canned answers per upper-case hex key.

    Keys not in ``answers`` get an empty ``info`` (nothing known), or, with ``rollback_unknown``, a
    rollback record for the start ts spelled in decimal after the key's ``t\\x80`` prefix.
    """

    answers: dict[str, dict[str, Any]] = {}
    asked: list[str] = []
    rollback_unknown = False

    def do_GET(self) -> None:
        key = self.path.rsplit("/", 1)[-1].upper()
        self.asked.append(key)
        answer = self.answers.get(key)
        if answer is None:
            info: dict[str, Any] = {}
            raw = bytes.fromhex(key)
            if self.rollback_unknown and raw[2:].isdigit():
                start = int(raw[2:])
                info = {"writes": [{"type": 3, "start_ts": start, "commit_ts": start, "short_value": "cA=="}]}
            answer = {"key": key, "region_id": 1, "value": {"info": info}}
        body = json.dumps(answer, indent=1).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``mount -o size=``, e.g. ``4m``) mounted at ``path`` (created), lazily
    unmounted on exit. Mounting needs root, which the suite has on this machine type."""
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)
