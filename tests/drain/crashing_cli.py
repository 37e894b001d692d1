"""``binlake`` with failpoints enabled, for crash tests: ``python -m tests.drain.crashing_cli
NAME=N [NAME=N …] -- ARGS…`` runs ``binlake ARGS…`` and exits the process with status 86, as
``kill -9`` would (no cleanup), when failpoint NAME fires with N as its first argument."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable

from binlake import cli
from transform import failpoints

CRASH_STATUS = 86


def _crash_at(n: int) -> Callable[..., None]:
    def action(count: int, *_: object) -> None:
        if count == n:
            os._exit(CRASH_STATUS)
    return action


def main(argv: list[str]) -> int:
    """Enable the ``NAME=N`` failpoints before ``--``, then run the CLI on the rest."""
    split = argv.index("--")
    for spec in argv[:split]:
        name, _, n = spec.partition("=")
        failpoints.enable(name, _crash_at(int(n)))
    return cli.main(argv[split + 1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
