"""Warnings about a client, at most one line per client per interval: hostile or broken traffic
cannot fill the log disk (the pump's gRPC guard and every HTTP status API use it)."""
from __future__ import annotations

import logging
import threading
import time

LOG_INTERVAL = 60.0   # seconds between two log lines about one client
_MAX_PEERS = 4096     # clients remembered (the oldest are forgotten)


class PeerLog:
    """Logs a warning about a client at most once per ``interval`` seconds; the next line says how
    many were held back."""

    def __init__(self, logger: logging.Logger, interval: float = LOG_INTERVAL) -> None:
        self.logger = logger
        self.interval = interval
        self._last: dict[str, tuple[float, int]] = {}   # client → (time of its last line, lines held back)
        self._lock = threading.Lock()

    def warn(self, client: str, message: str) -> bool:
        """Log ``message`` about ``client`` unless one was logged within the interval; True if logged."""
        now = time.monotonic()
        with self._lock:
            last, held = self._last.get(client, (-self.interval, 0))
            if now - last < self.interval:
                self._last[client] = (last, held + 1)
                return False
            if len(self._last) >= _MAX_PEERS:
                self._last.pop(next(iter(self._last)))
            self._last[client] = (now, 0)
        more = f" ({held} more from this client held back)" if held else ""
        self.logger.warning("%s: %s%s", client, message, more)
        return True
