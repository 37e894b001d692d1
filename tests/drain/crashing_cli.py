"""``binlake`` with failpoints enabled, for crash and fault tests: ``python -m tests.drain.crashing_cli
SPEC [SPEC …] -- ARGS…`` runs ``binlake ARGS…`` with each SPEC's failpoint enabled. A SPEC matches the
failpoint's first argument as text (a count such as ``sink-commit=3``, or a name such as
``drain-stage=decode``):

- ``NAME=V``: the process exits with status 86, as ``kill -9`` would (no cleanup), when NAME fires
  with V;
- ``NAME=V@PATH``: when NAME fires with V, the process creates PATH and holds there until someone
  removes it (at most ``HOLD_SECONDS``), then goes on: a harness injects a fault at that exact point
  of the run (the MariaDB a MySQL drain applies to killed between two of its batches)."""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from binlake import cli
from transform import failpoints

CRASH_STATUS = 86
HOLD_SECONDS = 300.0


def _crash_at(value: str) -> Callable[..., None]:
    def action(first: object, *_: object) -> None:
        if str(first) == value:
            os._exit(CRASH_STATUS)
    return action


def _hold_at(value: str, path: Path) -> Callable[..., None]:
    def action(first: object, *_: object) -> None:
        if str(first) != value:
            return
        path.touch()
        deadline = time.monotonic() + HOLD_SECONDS
        while path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return action


def main(argv: list[str]) -> int:
    """Enable the SPECs before ``--``, then run the CLI on the rest."""
    split = argv.index("--")
    for spec in argv[:split]:
        name, _, value = spec.partition("=")
        value, at, path = value.partition("@")
        failpoints.enable(name, _hold_at(value, Path(path)) if at else _crash_at(value))
    return cli.main(argv[split + 1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
