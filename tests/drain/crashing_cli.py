"""``binlake`` with failpoints enabled, for crash tests: ``python -m tests.drain.crashing_cli
NAME=V [NAME=V …] -- ARGS…`` runs ``binlake ARGS…`` and exits the process with status 86, as
``kill -9`` would (no cleanup), when failpoint NAME fires with V as its first argument (a count such
as ``sink-commit=3``, or a name such as ``drain-stage=decode``)."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable

from binlake import cli
from transform import failpoints

CRASH_STATUS = 86


def _crash_at(value: str) -> Callable[..., None]:
    def action(first: object, *_: object) -> None:
        if str(first) == value:
            os._exit(CRASH_STATUS)
    return action


def main(argv: list[str]) -> int:
    """Enable the ``NAME=V`` failpoints before ``--``, then run the CLI on the rest."""
    split = argv.index("--")
    for spec in argv[:split]:
        name, _, value = spec.partition("=")
        failpoints.enable(name, _crash_at(value))
    return cli.main(argv[split + 1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
