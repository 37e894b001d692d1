"""``PUT /state/<node-id>/<action>``: how TiDB's ``binlogctl`` (``pause-pump``, ``offline-pump``,
``pause-drainer``, ``offline-drainer``) and ``binlake ctl`` change a node's state, one route for the
pump's HTTP API (``ingest.pump.http_api``) and the following drainer's (``binlake.follow``).

The request has no body. The answer is TiDB Binlog's ``util.Response`` JSON (``message``, ``code``,
``data``): ``200`` with code 200 once the change is under way, ``400`` with code 3 for another
node's id, an action other than ``pause``/``close``, or a node that refuses the change now. The
node id is compared URL-decoded (``binlake ctl`` quotes it; a default id is ``host:port``).
"""
from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable

from ingest.httpserver import GuardedHandler

PAUSE = "pause"
CLOSE = "close"
ACTIONS = (PAUSE, CLOSE)

STATE_ROUTE = re.compile(r"^/state/(?P<node>[^/]+)/(?P<action>[^/]+)$")

ERROR_CODE = 3        # TiDB Binlog's util.ErrResponsef code
SUCCESS_CODE = 200


def state_change(path: str, kind: str, node_id: str,
                 apply: Callable[[str], str | None]) -> tuple[int, bytes] | None:
    """The answer (HTTP status, JSON body) to ``PUT path``, or None when ``path`` is not
    ``/state/<id>/<action>`` (the caller's 404).

    ``kind`` names the node in messages (``pump``, ``drainer``). ``apply(action)`` is called for this
    node's id and a known action: it starts the change without waiting for it and returns None, or
    returns why the node refuses it now.
    """
    m = STATE_ROUTE.match(path.split("?", 1)[0])
    if m is None:
        return None
    node, action = urllib.parse.unquote(m["node"]), m["action"]
    if node != node_id:
        return _answer(400, ERROR_CODE, f"invalid nodeID {node}, this {kind} is {node_id}")
    if action not in ACTIONS:
        return _answer(400, ERROR_CODE, f"invalid action {action}, expected {' or '.join(ACTIONS)}")
    refused = apply(action)
    if refused is not None:
        return _answer(400, ERROR_CODE, refused)
    return _answer(200, SUCCESS_CODE, f"apply state {action} success")


def serve_state_change(handler: GuardedHandler, kind: str, node_id: str, apply: Callable[[str], str | None]) -> bool:
    """Answer ``handler``'s PUT with :func:`state_change`; False (nothing sent) when its path is not
    a state route."""
    answer = state_change(handler.path, kind, node_id, apply)
    if answer is None:
        return False
    handler.send_body(answer[0], answer[1], "application/json")
    return True


def _answer(status: int, code: int, message: str) -> tuple[int, bytes]:
    return status, json.dumps({"message": message, "code": code, "data": None}, indent=1).encode()
