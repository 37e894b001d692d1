"""The logic of ``binlake ctl``: binlogctl's node commands over a ``Registry``.

- ``pumps`` / ``drainers``             → ``list_nodes`` + ``format_nodes``
- ``update-pump`` / ``update-drainer`` → ``update_state`` (rewrites the registry only)
- ``pause-*`` / ``offline-*``          → ``request_state`` (asks the node over HTTP)
``run_command`` dispatches binlogctl's ``-cmd`` names to these.

Two commands need no registry: ``encrypt`` (:func:`encrypt_line`, ``ingest.encrypt``) and
``generate_meta`` (:func:`generate_meta`: PD's current ts in ``DATA_DIR/savepoint``, TOML
``commitTS = <ts>``, with the time in UTC and in ``-time-zone`` after it when one is given).
"""
from __future__ import annotations

import urllib.parse
from dataclasses import replace
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import requests

from ingest.atomic import replace_file
from ingest.encrypt import encrypt
from ingest.errors import CtlError, NodeNotFound, RegistryError
from ingest.registry.base import DRAINER, KINDS, OFFLINE, PUMP, STATES, NodeStatus, Registry
from ingest.security import SecurityConfig
from ingest.tso import TSOClient, physical_ms

PAUSE = "pause"
CLOSE = "close"
ACTIONS = (PAUSE, CLOSE)
HTTP_TIMEOUT = 10.0

# binlogctl -cmd name → (kind, what)
COMMANDS: dict[str, tuple[str, str]] = {
    "pumps": (PUMP, "list"),
    "drainers": (DRAINER, "list"),
    "update-pump": (PUMP, "update"),
    "update-drainer": (DRAINER, "update"),
    "pause-pump": (PUMP, PAUSE),
    "pause-drainer": (DRAINER, PAUSE),
    "offline-pump": (PUMP, CLOSE),
    "offline-drainer": (DRAINER, CLOSE),
}


ENCRYPT = "encrypt"
GENERATE_META = "generate_meta"
LOCAL_COMMANDS = (GENERATE_META, ENCRYPT)   # binlogctl's commands that need no registry
SAVEPOINT = "savepoint"
DEFAULT_META_DIR = "binlog_position"        # binlogctl's -data-dir default


def log_line(caller: str, message: str, now: datetime | None = None, **fields: str) -> str:
    """A line in TiDB's log format (``[time] [INFO] [caller] [message] [key=value]…``), values
    double-quoted where TiDB's logger quotes them (a space, control byte, ``\\ " [ ] =``)."""
    def quoted(text: str) -> str:
        if any(b <= 0x20 or chr(b) in '\\"[]=' for b in text.encode()):
            return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return text
    moment = (now or datetime.now().astimezone())
    stamp = moment.strftime("%Y/%m/%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} " + \
        moment.strftime("%z")[:3] + ":" + moment.strftime("%z")[3:]
    parts = [f"[{stamp}]", "[INFO]", f"[{caller}]", f"[{quoted(message)}]"]
    parts += [f"[{k}={quoted(v)}]" for k, v in fields.items()]
    return " ".join(parts)


def encrypt_line(text: str) -> str:
    """binlogctl ``-cmd encrypt -text TEXT``: the log line carrying ``text`` encrypted (``ingest.encrypt``)."""
    if not text:
        raise CtlError("need to specify the text to be encrypt (--text)")
    return log_line("encrypt.go:16", "encrypt text", encrypted=encrypt(text))


def time_zone(name: str) -> tzinfo | None:
    """binlogctl's ``-time-zone``: "" → None, ``Local`` → this machine's zone, else an IANA name."""
    if not name:
        return None
    if name == "Local":
        return datetime.now().astimezone().tzinfo
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise CtlError(f"unknown time zone {name!r}") from None


def generate_meta(pd_urls: str, data_dir: str = DEFAULT_META_DIR, tz: tzinfo | None = None,
                  security: SecurityConfig | None = None) -> str:
    """binlogctl ``-cmd generate_meta``: PD's current ts written to ``data_dir/savepoint`` as binlogctl
    writes it (atomically); the log line that says so."""
    security = security or SecurityConfig()
    client = TSOClient(pd_urls, credentials=security.pd_credentials(pd_urls))
    try:
        ts = client.get_ts()
    finally:
        client.close()
    text = f"commitTS = {ts}\n"
    if tz is not None:
        text += format_update_time(ts, UTC) + "\n" + format_update_time(ts, tz)
    replace_file(Path(data_dir) / SAVEPOINT, text.encode())
    return log_line("meta.go:110", "save meta", meta=f"commitTS: {ts}")


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise CtlError(f"unknown node kind {kind!r}; expected one of {KINDS}")


def _singular(kind: str) -> str:
    return "pump" if kind == PUMP else "drainer"


def list_nodes(registry: Registry, kind: str, show_offline: bool = False) -> list[NodeStatus]:
    """Return the registered nodes of ``kind`` sorted by node id; ``offline`` ones only if ``show_offline``."""
    _check_kind(kind)
    nodes = registry.list_nodes(kind)
    return nodes if show_offline else [n for n in nodes if n.state != OFFLINE]


def format_update_time(update_ts: int, tz: tzinfo | None = None) -> str:
    """Render a TSO as binlogctl does (``TSOToRoughTime``): its physical part cut to the second, in
    ``tz`` (local time if None), as ``YYYY-MM-DD HH:MM:SS -0700 MST``; 0 → ``-``."""
    if update_ts <= 0:
        return "-"
    moment = datetime.fromtimestamp(physical_ms(update_ts) // 1000, tz=tz)
    if tz is None:
        moment = moment.astimezone()
    offset = moment.strftime("%z")
    name = moment.tzname() or ""
    if not name or name.startswith(("UTC+", "UTC-")):   # a zone without a name: Go prints the offset
        name = offset
    return f"{moment.strftime('%Y-%m-%d %H:%M:%S')} {offset} {name}".strip()


def format_nodes(nodes: list[NodeStatus], tz: tzinfo | None = None) -> str:
    """Return a text table with columns NodeID, Addr, State, MaxCommitTS, UpdateTime (one node per row)."""
    header = ("NodeID", "Addr", "State", "MaxCommitTS", "UpdateTime")
    rows = [header] + [(n.node_id, n.host, n.state, str(n.max_commit_ts),
                        format_update_time(n.update_ts, tz)) for n in nodes]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def get_node(registry: Registry, kind: str, node_id: str) -> NodeStatus:
    """Return the node's status; ``NodeNotFound`` names the kind, id and registry when absent."""
    _check_kind(kind)
    status = registry.get_node(kind, node_id)
    if status is None:
        raise NodeNotFound(f"no {_singular(kind)} with node id {node_id!r} in {registry!r}")
    return status


def update_state(registry: Registry, kind: str, node_id: str, state: str) -> NodeStatus:
    """Rewrite only the ``state`` of a registered node and return the new status.

    ``RegistryError`` for an unknown state, ``NodeNotFound`` if the node is absent. The node process
    is not contacted (binlogctl's update-pump/update-drainer: repairing stale state after a crash).
    """
    if state not in STATES:
        raise RegistryError(f"unknown state {state!r}; expected one of {', '.join(STATES)}")
    status = replace(get_node(registry, kind, node_id), state=state)
    registry.put_node(kind, status)
    return status


def _state_url(status_addr: str, node_id: str, action: str, scheme: str = "http") -> str:
    base = status_addr if "://" in status_addr else f"{scheme}://{status_addr}"
    return f"{base.rstrip('/')}/state/{urllib.parse.quote(node_id, safe='')}/{action}"


def request_state(registry: Registry, kind: str, node_id: str, action: str,
                  timeout: float = HTTP_TIMEOUT, security: SecurityConfig | None = None) -> str:
    """Ask a node to ``pause`` or ``close`` via ``PUT http://<status_addr>/state/<node_id>/<action>``
    (``https`` presenting ``security``'s certificate when it is set).

    Returns the node's message when it answers code 200. Raises ``NodeNotFound`` when the node is not
    registered, and ``CtlError`` for a bad action, an unreachable address (named), a non-JSON answer or
    any other code (with the node's message).
    """
    if action not in ACTIONS:
        raise CtlError(f"unknown action {action!r}; expected one of {ACTIONS}")
    status = get_node(registry, kind, node_id)
    addr = status.status_addr
    what = f"{_singular(kind)} {node_id!r} at {addr} (registry state {status.state})"
    if not addr:
        raise CtlError(f"{_singular(kind)} {node_id!r} has no address in the registry")
    tls = security is not None and security.enabled
    url = _state_url(addr, node_id, action, "https" if tls else "http")
    auth: dict[str, object] = {}
    if security is not None and tls:
        auth = {"cert": (security.ssl_cert, security.ssl_key), "verify": security.ssl_ca or True}
    try:
        resp = requests.put(url, timeout=timeout, **auth)  # type: ignore[arg-type]
    except requests.RequestException as exc:
        raise CtlError(f"cannot reach {what}: {type(exc).__name__}: {exc}") from exc
    try:
        body = resp.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or "code" not in body:
        raise CtlError(f"{what} answered HTTP {resp.status_code} without a JSON code: {resp.text[:200]!r}")
    message = str(body.get("message", ""))
    if body.get("code") != 200:
        raise CtlError(f"{what} refused {action}: code {body.get('code')}: {message}")
    return message


def run_command(registry: Registry, cmd: str, node_id: str = "", state: str = "",
                show_offline: bool = False, tz: tzinfo | None = None, security: SecurityConfig | None = None) -> str:
    """Run binlogctl's ``-cmd`` (``pumps``, ``update-pump``, ``pause-drainer``, …) and return text to print;
    ``security`` (binlogctl's ``-ssl-*``) makes the node requests HTTPS."""
    if cmd not in COMMANDS:
        raise CtlError(f"unknown command {cmd!r}; expected one of {', '.join(COMMANDS)}")
    kind, what = COMMANDS[cmd]
    if what == "list":
        return format_nodes(list_nodes(registry, kind, show_offline=show_offline), tz=tz)
    if not node_id:
        raise CtlError(f"{cmd} needs a node id")
    if what == "update":
        if not state:
            raise CtlError(f"{cmd} needs a state ({', '.join(STATES)})")
        new = update_state(registry, kind, node_id, state)
        return f"{_singular(kind)} {new.node_id} state set to {new.state}"
    message = request_state(registry, kind, node_id, what, security=security)
    return f"{_singular(kind)} {node_id}: {message}" if message else f"{_singular(kind)} {node_id}: {what} requested"


def status_json(nodes: list[NodeStatus]) -> str:
    """Return the nodes as a JSON array of TiDB Status objects (for scripts)."""
    return "[" + ",".join(n.to_json() for n in nodes) + "]"


__all__ = [
    "ACTIONS", "CLOSE", "COMMANDS", "LOCAL_COMMANDS", "PAUSE", "encrypt_line", "format_nodes", "format_update_time",
    "generate_meta", "get_node", "list_nodes", "log_line", "request_state", "run_command", "status_json",
    "time_zone", "update_state",
]
