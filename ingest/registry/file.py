"""FileRegistry: every registry key in one JSON file, shared safely by processes on one machine.

File layout: ``{"version": 1, "keys": {"<key>": "<value>", ...}}``. Values are stored as text
(UTF-8; bytes that are not UTF-8 survive via surrogate escapes), so the file stays readable.
Writers serialise on an ``fcntl.flock`` of the sibling ``<name>.lock`` file and replace the data
file atomically (temp file, fsync, rename, fsync of the directory); readers need no lock because
they always see either the old or the new file whole.
"""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from ingest.errors import RegistryError
from ingest.registry.base import Registry

FORMAT_VERSION = 1


def _to_text(value: bytes) -> str:
    return value.decode("utf-8", "surrogateescape")


def _to_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


class FileRegistry(Registry):
    """A registry kept in one JSON file at ``path``; parent directories are created."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RegistryError(f"cannot create registry directory {self.path.parent}: {exc}") from exc

    @property
    def uri(self) -> str:
        """The ``file://`` URI of this registry."""
        return f"file://{self.path.absolute()}"

    def __repr__(self) -> str:
        return f"FileRegistry({str(self.path)!r})"

    # Reading and writing the whole file.

    def _load(self) -> dict[str, str]:
        """Return the key map, {} when the file does not exist; RegistryError naming the path if corrupt."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise RegistryError(f"cannot read registry file {self.path}: {exc}") from exc
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise RegistryError(f"registry file {self.path} is corrupt (not JSON): {exc}") from exc
        if (not isinstance(doc, dict) or not isinstance(doc.get("keys"), dict)
                or not all(isinstance(v, str) for v in doc["keys"].values())):
            raise RegistryError(f"registry file {self.path} is corrupt: expected "
                                '{"version": 1, "keys": {key: string}}')
        if doc.get("version") != FORMAT_VERSION:
            raise RegistryError(f"registry file {self.path} has unsupported version {doc.get('version')!r}")
        return dict(doc["keys"])

    def _store(self, keys: dict[str, str]) -> None:
        """Durably replace the file with ``keys`` (caller holds the write lock)."""
        data = json.dumps({"version": FORMAT_VERSION, "keys": dict(sorted(keys.items()))},
                          indent=1).encode("utf-8", "surrogateescape")
        directory = self.path.parent
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise RegistryError(f"cannot write registry file {self.path}: {exc}") from exc
        try:
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise RegistryError(f"cannot fsync registry directory {directory}: {exc}") from exc

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the exclusive write lock (one open file description per call, so threads exclude too)."""
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RegistryError(f"cannot open registry lock {self.lock_path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def update(self, fn: Callable[[dict[str, bytes]], dict[str, bytes | None]]) -> None:
        """Atomic read-modify-write: ``fn`` gets all keys and returns changes (None value = delete)."""
        with self._locked():
            keys = self._load()
            changes = fn({k: _to_bytes(v) for k, v in keys.items()})
            for key, value in changes.items():
                if value is None:
                    keys.pop(key, None)
                else:
                    keys[key] = _to_text(value)
            self._store(keys)

    # Registry API.

    def get(self, key: str) -> bytes | None:
        """Return the value at ``key`` or None."""
        value = self._load().get(key)
        return _to_bytes(value) if value is not None else None

    def put(self, key: str, value: bytes) -> None:
        """Store ``value`` at ``key``; the file is fsynced and renamed into place before returning."""
        with self._locked():
            keys = self._load()
            keys[key] = _to_text(bytes(value))
            self._store(keys)

    def delete(self, key: str) -> None:
        """Remove ``key`` if present (the file is only rewritten when it was)."""
        with self._locked():
            keys = self._load()
            if keys.pop(key, None) is not None:
                self._store(keys)

    def get_prefix(self, prefix: str) -> dict[str, bytes]:
        """Return every key starting with ``prefix`` and its value, in key order."""
        return {k: _to_bytes(v) for k, v in sorted(self._load().items()) if k.startswith(prefix)}

    def close(self) -> None:
        """Nothing to release: no descriptor is kept open between calls."""

    def __enter__(self) -> FileRegistry:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
