"""The one configuration mechanism of every binlake component (pump, drainer, upstream emulator).

A component's configuration is a :class:`TomlModel`: a pydantic model whose field aliases are the
TOML keys (TiDB Binlog's names where the option exists) and whose nested models are TOML tables.
:func:`load_config` reads a TOML file, lays command-line overrides over it, and validates the
result: unknown keys are refused with the list of known ones, every value is checked by type
(the value types below parse Go durations and byte sizes as TiDB does), and the model's own
``validate`` hook checks what spans several keys. Every problem is one :class:`ConfigError`
naming the source (file or command line), the key and what was wrong.

Code builds models by field name (``PumpConfig(addr=...)``); files and flags use the TOML keys.
"""
from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TextIO, TypeVar, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from schemas.errors import BinlakeError

__all__ = ["Bool", "ByteSize", "ConfigError", "Duration", "GCRetention", "Int", "Interval", "Seconds", "Str",
           "StringList", "TomlModel", "UrlList", "load_config", "nested", "noted", "parse_bytes", "parse_duration",
           "parse_gc", "print_warnings", "refused", "settings_table"]


class ConfigError(BinlakeError):
    """A configuration value is missing, malformed or out of range (the message names the key); terminal."""


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_BYTE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "m": 1000**2, "mb": 1000**2,
               "mib": 1 << 20, "g": 1000**3, "gb": 1000**3, "gib": 1 << 30, "t": 1000**4, "tb": 1000**4,
               "tib": 1 << 40}


def parse_duration(text: str) -> float:
    """Parse a Go duration (``"1h30m"``, ``"300ms"``, ``"12h"``) into seconds."""
    s = text.strip()
    if not s:
        raise ValueError("empty duration")
    pos, total = 0, 0.0
    for m in _DURATION_PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s):
        raise ValueError(f"invalid duration {text!r}: expected Go syntax like '12h' or '1h30m'")
    return total


def parse_gc(value: Any) -> float:
    """TiDB's ``gc``: an integer number of days, or a Go duration string; must be > 0. Seconds."""
    if isinstance(value, bool):
        raise ValueError(f"gc must be days or a duration, not {value!r}")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        seconds = int(value) * 86400.0
    elif isinstance(value, str):
        seconds = parse_duration(value)
    else:
        raise ValueError(f"gc must be days (integer) or a duration string, not {value!r}")
    if seconds <= 0:
        raise ValueError(f"gc must be greater than 0, got {value!r}")
    return seconds


def parse_bytes(value: Any) -> int:
    """A size like ``"10 gib"``, ``"512MiB"`` or a plain integer of bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _BYTE_UNITS:
        raise ValueError(f"invalid size {value!r}: expected e.g. '10 gib', '500 MiB' or bytes")
    return int(float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()])


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number of seconds, got {value!r}")
    if value <= 0:
        raise ValueError(f"expected a positive number of seconds, got {value!r}")
    return float(value)


def _interval(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like '2ms' or a number of seconds >= 0, got {value!r}")
    seconds = parse_duration(value) if isinstance(value, str) else _seconds(value) if value else 0.0
    if seconds < 0:
        raise ValueError(f"expected a duration like '2ms' or a number of seconds >= 0, got {value!r}")
    return seconds


def _duration(value: Any) -> float:
    if isinstance(value, str):
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError(f"expected a positive duration, got {value!r}")
        return seconds
    return _seconds(value)


def _string_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError(f"expected a list of strings, got {value!r}")


# Value types: the annotation a field uses says how its TOML value is parsed.
Str = Annotated[str, BeforeValidator(_string)]
Int = Annotated[int, BeforeValidator(_int)]
Bool = Annotated[bool, BeforeValidator(_bool)]
Seconds = Annotated[float, BeforeValidator(_seconds)]             # a number > 0
Interval = Annotated[float, BeforeValidator(_interval)]           # a Go duration or seconds, >= 0
Duration = Annotated[float, BeforeValidator(_duration)]           # a Go duration ("1m") or seconds, > 0
GCRetention = Annotated[float, BeforeValidator(parse_gc)]         # days or a Go duration
ByteSize = Annotated[int, BeforeValidator(parse_bytes)]           # "10 gib" or bytes
StringList = Annotated[list[str], BeforeValidator(_string_list)]  # a list, or a comma-separated string
UrlList = Annotated[str, BeforeValidator(lambda v: ",".join(_string_list(v)))]  # normalized to "a,b"


_COMPAT = "binlake-compat"   # a field's json_schema_extra key: (kind, why, the value binlake matches)
_MATCHES_NONE = object()


def noted(alias: str, why: str, default: Any = None, matches: Any = _MATCHES_NONE) -> Any:
    """A key of TiDB Binlog's files binlake accepts without doing what TiDB Binlog does with it: set to
    anything but ``matches`` (what binlake does anyway; any value when not given), it is reported by
    :meth:`TomlModel.warnings` as one line saying ``why``."""
    return Field(default=default, alias=alias, json_schema_extra={_COMPAT: ("warn", why, matches)})  # type: ignore[dict-item]


def refused(alias: str, why: str, default: Any = None, matches: Any = _MATCHES_NONE) -> Any:
    """A key of TiDB Binlog's files binlake would get wrong: set to anything but ``matches``, the
    configuration is refused with ``why``."""
    return Field(default=default, alias=alias, json_schema_extra={_COMPAT: ("refuse", why, matches)})  # type: ignore[dict-item]


class TomlModel(BaseModel):
    """Base of every configuration model: aliases are TOML keys, unknown keys are refused, and
    :meth:`validate_config` (overridable) checks rules that span keys after the fields parsed. Keys
    declared with :func:`noted` or :func:`refused` are TiDB Binlog's that binlake does not honour as
    it does."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True,
                              validate_assignment=True)

    def validate_config(self) -> None:
        """Raise ``ValueError`` naming the rule a valid set of fields still breaks (default: none)."""

    def notes(self) -> list[tuple[str, Any, str]]:
        """(key, value, why) of keys set that binlake accepts without honouring them, where that
        depends on other keys (:meth:`warnings` reports them with the :func:`noted` ones; default: none)."""
        return []

    def _compat(self, kind: str) -> list[tuple[str, Any, str]]:
        out = []
        for name in sorted(self.model_fields_set):
            info = type(self).model_fields[name]
            extra = info.json_schema_extra
            if isinstance(extra, dict) and _COMPAT in extra:
                k, why, matches = cast(tuple[str, str, Any], extra[_COMPAT])
                value = getattr(self, name)
                if k == kind and (matches is _MATCHES_NONE or value != matches):
                    out.append((info.alias or name, value, why))
        return out

    def warnings(self, prefix: str = "") -> list[str]:
        """One line per key set that binlake accepts and does not honour as TiDB Binlog does
        (:func:`noted`), saying what binlake does instead; nested tables' included."""
        out = [f"{prefix}{key} = {value!r}: {why}" for key, value, why in self._compat("warn") + self.notes()]
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, TomlModel):
                info = type(self).model_fields[name]
                out.extend(value.warnings(f"{prefix}{info.alias or name}."))
        return out

    @model_validator(mode="after")
    def _cross_checks(self) -> TomlModel:
        for key, value, why in self._compat("refuse"):
            raise ValueError(f"{key} = {value!r} is not supported: {why}")
        self.validate_config()
        return self


M = TypeVar("M", bound=TomlModel)


def toml_keys(model: type[TomlModel], prefix: str = "") -> list[str]:
    """Every TOML key ``model`` accepts, dotted (``storage.sync-log``), tables included by name."""
    keys = []
    for name, info in model.model_fields.items():
        key = prefix + (info.alias or name)
        sub = info.annotation
        if isinstance(sub, type) and issubclass(sub, TomlModel):
            keys.extend(toml_keys(sub, key + "."))
        else:
            keys.append(key)
    return keys


def nested(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """``{"storage.sync-log": False}`` → ``{"storage": {"sync-log": False}}``; None values are dropped
    (an unset flag overrides nothing). A mapping value is a whole table; its own keys are not split."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        if value is None:
            continue
        *tables, last = key.split(".")
        node = out
        for t in tables:
            node = node.setdefault(t, {})
        node[last] = value
    return out


def _merge(base: dict[str, Any], over: Mapping[str, Any], origin: dict[tuple[str, ...], str],
           source: str, path: tuple[str, ...] = ()) -> None:
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value, origin, source, path + (key,))
        else:
            base[key] = dict(value) if isinstance(value, Mapping) else value
            origin[path + (key,)] = source


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _message(model: type[TomlModel], error: Any, origin: dict[tuple[str, ...], str], default: str) -> str:
    loc = tuple(str(p) for p in error["loc"])
    source = next((origin[loc[:i]] for i in range(len(loc), 0, -1) if loc[:i] in origin), default)
    key = ".".join(loc)
    if error["type"] == "extra_forbidden":
        known = ", ".join(k for k in toml_keys(model) if not k.startswith("storage.kv."))
        return f"{source}: unknown configuration key {key!r} (known keys: {known})"
    text = str(error["msg"]).removeprefix("Value error, ")
    return f"{source}: {key}: {text}" if key else f"{source}: {text}"


def load_config(model: type[M], path: str | Path | None = None,
                overrides: Mapping[str, Any] | None = None) -> M:
    """The configuration of ``model``: its defaults, then the TOML file at ``path``, then
    ``overrides`` (TOML keys, dotted or nested; None values ignored). Raises :class:`ConfigError`."""
    doc: dict[str, Any] = {}
    origin: dict[tuple[str, ...], str] = {}
    if path:
        _merge(doc, _read_toml(Path(path)), origin, str(path))
    _merge(doc, nested(overrides or {}), origin, "command line")
    try:
        return model.model_validate(doc, by_alias=True, by_name=False)
    except ValidationError as exc:
        default = str(path) if path else "command line"
        raise ConfigError(_message(model, exc.errors()[0], origin, default)) from None


def print_warnings(config: TomlModel, path: str | Path | None, out: TextIO | None = None) -> None:
    """One line on stderr per key of TiDB Binlog's that ``config`` accepts and does not honour as
    TiDB Binlog does (:meth:`TomlModel.warnings`), naming the file: what a component prints as it starts."""
    for line in config.warnings():
        print(f"binlake: warning: {path or 'command line'}: {line}", file=out or sys.stderr, flush=True)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML reads an unquoted ``s3.endpoint = …`` as nested tables: join their keys back with dots."""
    out: dict[str, Any] = {}
    for key, v in table.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = v
    return out


def settings_table(value: Any, what: str, prefix: str = "") -> dict[str, str]:
    """A TOML table of scalar settings as strings (booleans lower-case), keys starting with ``prefix``
    (nested tables joined with dots); ``ValueError`` naming ``what`` for anything else."""
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a table of {what}, got {value!r}")
    out = {}
    for key, v in _flatten(value).items():
        if not key.startswith(prefix):
            raise ValueError(f"{key!r} is not a {what[:-1]} (keys start with {prefix!r})")
        if isinstance(v, list) or v is None:
            raise ValueError(f"{key}: expected a string, number or boolean, got {v!r}")
        out[str(key)] = str(v).lower() if isinstance(v, bool) else str(v)
    return out
