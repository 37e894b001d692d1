"""A ``BINLAKE_BIN`` for the backfill test: ``python crash_once.py MARKER FROM_TS ARGS…`` runs
``binlake ARGS…``; while MARKER exists, the first drain that does not start at FROM_TS (a later
chunk) removes it and dies after its first Iceberg table commit (``tests/drain/crashing_cli``)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository: tests.drain.crashing_cli

from binlake import cli
from tests.drain import crashing_cli


def main(argv: list[str]) -> int:
    marker, first, args = Path(argv[0]), argv[1], argv[2:]
    later = "--from-ts" in args and args[args.index("--from-ts") + 1] != first
    if marker.exists() and later and "--dry-run" not in args:
        marker.unlink()
        return crashing_cli.main(["sink-commit=1", "--", *args])
    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
