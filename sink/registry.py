"""The sinks binlake knows, one registration line each, and lookups by name.

A spec is named ``module:ATTRIBUTE`` and imported on first use; spec modules import only their
configuration models at module level, so listing the sinks (for ``--sink`` choices and drainer.toml
keys) loads no Spark, pyiceberg or MySQL driver.
"""
from __future__ import annotations

import importlib
from typing import Any

from sink.errors import SinkError
from sink.plugin import SinkSpec

_REGISTERED: list[str] = [
    "sink.iceberg.plugin:SPEC",
    "sink.parquet.plugin:SPEC",
    "sink.mysql.plugin:SPEC",
    "sink.kafka.plugin:SPEC",
    "sink.pbfile.plugin:SPEC",
]
_loaded: dict[str, SinkSpec[Any]] = {}


class UnknownSinkError(SinkError):
    """A sink name no registered spec answers to."""


def register(path: str) -> None:
    """Add the spec at ``module:ATTRIBUTE`` (a sink outside this package, or a test's)."""
    if path not in _REGISTERED:
        _REGISTERED.append(path)


def specs() -> list[SinkSpec[Any]]:
    """Every registered spec, in registration order."""
    out = []
    for path in _REGISTERED:
        if path not in _loaded:
            module, _, attr = path.partition(":")
            spec = getattr(importlib.import_module(module), attr)
            if not isinstance(spec, SinkSpec) or not spec.names:
                raise TypeError(f"{path} is not a SinkSpec with names")
            _loaded[path] = spec
        out.append(_loaded[path])
    return out


def names() -> list[str]:
    """Every sink name, in registration order."""
    return [n for s in specs() for n in s.names]


def canonical(name: str) -> str:
    """``name`` (any case) as the sink name it means; :class:`UnknownSinkError` otherwise."""
    text = name.lower()
    if text not in names():
        raise UnknownSinkError(f"sink {name!r} is not one of {', '.join(names())}")
    return text


def spec_for(name: str) -> SinkSpec[Any]:
    """The spec of the sink ``name`` (or alias)."""
    text = canonical(name)
    return next(s for s in specs() if text in s.names)


def spec_for_uri(uri: str) -> SinkSpec[Any]:
    """The spec whose ``against_schemes`` include the scheme of ``uri`` (``verify --against``)."""
    scheme = uri.partition("://")[0].lower()
    for s in specs():
        if scheme in s.against_schemes:
            return s
    known = sorted({sch for s in specs() for sch in s.against_schemes})
    raise UnknownSinkError(f"--against {uri.split('@')[-1]!r}: no sink compares a {scheme}:// target "
                           f"(known: {', '.join(known) or 'none'})")


def spec_for_restore(uri: str) -> SinkSpec[Any] | None:
    """The spec whose ``restore_schemes`` include the scheme of ``uri`` (``restore --into``); None when none."""
    scheme = uri.partition("://")[0].lower()
    return next((s for s in specs() if scheme in s.restore_schemes), None)


def restore_schemes() -> list[str]:
    """Every ``restore --into`` scheme, in registration order."""
    return [sch for s in specs() for sch in s.restore_schemes]
