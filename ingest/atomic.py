"""Replacing a small file so that a reader (or a restart after a crash) sees the old contents or
the new ones, never a part: write a temporary file beside it, fsync, rename over it, fsync the
directory."""
from __future__ import annotations

import os
from pathlib import Path


def replace_file(path: Path, data: bytes) -> None:
    """Make ``path`` hold ``data`` atomically and durably (its directory is created when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
