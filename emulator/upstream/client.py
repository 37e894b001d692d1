"""Client of the emulator's binlake routes (``binlake-emulator sql`` and its interactive shell)."""
from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from typing import Any, TextIO

from upstream.errors import UpstreamError


class StatusClient:
    """Talks to one emulator's status API."""

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def sql(self, script: str, server: int = 0, db: str = "test") -> dict[str, Any]:
        """POST a script (one session); return the JSON answer (``error`` is set on failure)."""
        req = urllib.request.Request(f"{self.url}/binlake/sql?server={server}&db={db}", data=script.encode(),
                                     method="POST", headers={"Content-Type": "text/plain"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = e.read()
            try:
                return json.loads(body)
            except ValueError:
                raise UpstreamError(f"HTTP {e.code}: {body.decode(errors='replace')}") from None
        except OSError as e:
            raise UpstreamError(f"cannot reach {self.url}: {e}") from None

    def snapshot(self, ts: int | None = None) -> dict[str, list[dict[str, Any]]]:
        """``GET /binlake/snapshot[?ts=]``."""
        q = f"?ts={ts}" if ts else ""
        with urllib.request.urlopen(f"{self.url}/binlake/snapshot{q}", timeout=self.timeout) as r:
            return json.loads(r.read())


def print_answer(answer: dict[str, Any], out: TextIO = sys.stdout) -> bool:
    """Print one answer in a readable form; True when it had no error."""
    for r in answer.get("results", []):
        extra = f" commit_ts={r['commit_ts']}" if r.get("commit_ts") else ""
        extra += f" job={r['ddl_job_id']}" if r.get("ddl_job_id") else ""
        out.write(f"{r['kind']}: {r['affected_rows']} row(s){extra}\n")
    err = answer.get("error")
    if err:
        out.write(f"ERROR ({err['type']}): {err['message']}\n")
        return False
    return True


def shell(client: StatusClient, server: int = 0, db: str = "test", inp: TextIO = sys.stdin,
          out: TextIO = sys.stdout) -> int:
    """Read statements ending with ``;`` from ``inp``; each BEGIN … COMMIT block (or single statement) is
    sent as one session. Returns 0, or 1 if any statement failed."""
    interactive = inp.isatty()
    buf: list[str] = []
    block: list[str] = []
    ok = True
    if interactive:
        out.write("binlake-emulator sql shell; end statements with ';', Ctrl-D to quit\n")
    while True:
        if interactive:
            out.write("tidb> " if not buf else "   -> ")
            out.flush()
        line = inp.readline()
        if not line:
            break
        buf.append(line)
        text = "".join(buf).strip()
        if not text.endswith(";"):
            continue
        buf = []
        block.append(text)
        head = text.lstrip().split(None, 1)[0].upper().rstrip(";") if text.strip(";").strip() else ""
        if head in ("BEGIN", "START") or (len(block) > 1 and head not in ("COMMIT", "ROLLBACK")):
            continue
        if head == "USE":
            db = text.strip().rstrip(";").split()[1].strip("`")
        ok = print_answer(client.sql("\n".join(block), server, db), out) and ok
        block = []
    if block or "".join(buf).strip():
        ok = print_answer(client.sql("\n".join(block + buf), server, db), out) and ok
    return 0 if ok else 1
