"""The tidb-server builds the real-TiDB tier runs against: one per TiDB line that writes binlogs, each
built by ``make peers`` from the ``github.com/pingcap/tidb`` module version the Go module proxy
serves for it (``tests/peers/<dir>/go.mod``), stamped with the release string it reports in
``SELECT VERSION()``.

``full`` builds run every test of the tier; the others run the tests marked ``every_tidb`` (every
type and key layout, the DDL history, and the DDL kinds of ``test_real_tidb_ddl.py`` the build
reaches)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TiDBBuild:
    """One tidb-server build: ``line`` names it (``v7.5``), ``release`` is what it reports, ``source``
    says which commit it is and why that one."""

    line: str
    release: str
    source: str
    full: bool = False

    @property
    def binary(self) -> str:
        """The file name under ``.peers/`` (``make .peers/<binary>`` builds it)."""
        return f"tidb-server-{self.line}"

    def reaches(self, since: str) -> bool:
        """True when this build is of line ``since`` (``"v7.1"``) or newer."""
        def key(line: str) -> tuple[int, ...]:
            return tuple(int(p) for p in line.lstrip("v").split("."))
        return key(self.line) >= key(since)


BUILDS = (
    TiDBBuild("v6.4", "v6.4.0-alpha", "master of 2022-09-16 (ed9a0cdd7f4b): the tidb TiDB Binlog v6.5.x pins"),
    TiDBBuild("v7.0", "v7.0.0-alpha", "master of 2023-03-03 (ad01574a71b3): the tidb TiDB Binlog v7.1-v8.3 pin"),
    TiDBBuild("v7.5", "v7.5.0", "the v7.5.0 tag commit (069631e2ecfe)", full=True),
    TiDBBuild("v8.3", "v8.3.0-alpha", "master of 2024-07-22 (504960d51b2a), v8.3 development", full=True),
)
NEWEST = BUILDS[-1]
BY_LINE = {b.line: b for b in BUILDS}
