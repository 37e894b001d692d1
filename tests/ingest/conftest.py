"""Fixtures of the pump tests: a TiDB status API stand-in serving the MVCC contract."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from tests.ingest.helpers import MVCCHandler


@pytest.fixture
def mvcc_server() -> Iterator[tuple[str, type[MVCCHandler]]]:
    """A TiDB status API stand-in serving the MVCC-by-key contract; yields (base url, handler class)."""
    handler = type("MVCC", (MVCCHandler,), {"answers": {}, "asked": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()
