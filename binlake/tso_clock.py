"""The drainer's registry entry's ``updateTS``: a TSO, as TiDB Binlog writes it, never a Unix time.

TiDB Binlog's drainer takes one TSO from PD at start and registers that TSO plus the whole seconds
elapsed since (its ``GetApproachTS``); ``binlogctl`` and ``SHOW DRAINER STATUS`` render the physical
part as a time. binlake does the same: a TSO from PD when ``pd-urls`` are configured and PD answers,
else one composed from the local clock (an approximation, which is all ``updateTS`` ever is). The
entry itself is written by ``ingest.registry.presence``, as the pumps write theirs.
"""
from __future__ import annotations

import logging
import time

from binlake.drain_config import DrainerConfig
from ingest.errors import TSOError
from ingest.tso import PHYSICAL_SHIFT_BITS, TSOClient, compose_ts

log = logging.getLogger(__name__)

PD_TIMEOUT = 3.0  # seconds: PD is asked only for a display time, a slow PD falls back to the clock


def clock_ts() -> int:
    """A TSO composed from the local clock (logical 0)."""
    return compose_ts(int(time.time() * 1000), 0)


def approximate_ts(options: DrainerConfig) -> int:
    """A fresh TSO from PD when ``pd-urls`` are configured and PD answers, else :func:`clock_ts`."""
    if not options.pd_urls:
        return clock_ts()
    client = TSOClient(options.pd_urls, cluster_id=options.cluster_id, timeout=PD_TIMEOUT,
                       credentials=options.security.pd_credentials(options.pd_urls))
    try:
        return client.get_ts()
    except TSOError as e:
        log.warning("updateTS from the local clock: %s", e)
        return clock_ts()
    finally:
        client.close()


class UpdateClock:
    """``updateTS`` values that move with time: a base TSO plus the whole seconds since it was taken."""

    def __init__(self, base_ts: int) -> None:
        self.base_ts = base_ts
        self._taken = time.monotonic()

    @classmethod
    def start(cls, options: DrainerConfig) -> UpdateClock:
        """A clock based on :func:`approximate_ts`."""
        return cls(approximate_ts(options))

    def now(self) -> int:
        """The base TSO advanced by the whole seconds elapsed since it was taken."""
        seconds = int(time.monotonic() - self._taken)
        return self.base_ts + (seconds * 1000 << PHYSICAL_SHIFT_BITS)
