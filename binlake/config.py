"""TOML configuration with TiDB Binlog's key names; unknown keys are errors; flags override the file."""
from __future__ import annotations

import logging
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ingest.errors import ConfigError
from ingest.pump.options import PumpOptions

log = logging.getLogger(__name__)

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_BYTE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "m": 1000**2, "mb": 1000**2,
               "mib": 1 << 20, "g": 1000**3, "gb": 1000**3, "gib": 1 << 30, "t": 1000**4, "tb": 1000**4,
               "tib": 1 << 40}


def parse_duration(text: str) -> float:
    """Parse a Go duration (``"1h30m"``, ``"300ms"``, ``"12h"``) into seconds."""
    s = text.strip()
    if not s:
        raise ConfigError("empty duration")
    pos, total = 0, 0.0
    for m in _DURATION_PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s):
        raise ConfigError(f"invalid duration {text!r}: expected Go syntax like '12h' or '1h30m'")
    return total


def parse_gc(value: Any) -> float:
    """TiDB's ``gc``: an integer number of days, or a Go duration string; must be > 0. Seconds."""
    if isinstance(value, bool):
        raise ConfigError(f"gc must be days or a duration, not {value!r}")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        seconds = int(value) * 86400.0
    elif isinstance(value, str):
        seconds = parse_duration(value)
    else:
        raise ConfigError(f"gc must be days (integer) or a duration string, not {value!r}")
    if seconds <= 0:
        raise ConfigError(f"gc must be greater than 0, got {value!r}")
    return seconds


def parse_bytes(value: Any) -> int:
    """A size like ``"10 gib"``, ``"512MiB"`` or a plain integer of bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _BYTE_UNITS:
        raise ConfigError(f"invalid size {value!r}: expected e.g. '10 gib', '500 MiB' or bytes")
    return int(float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()])


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"expected a number of seconds, got {value!r}")
    if value <= 0:
        raise ConfigError(f"expected a positive number of seconds, got {value!r}")
    return float(value)


def _interval(value: Any) -> float:
    """Seconds as a number or a Go duration (``"2ms"``); 0 is allowed (off)."""
    seconds = parse_duration(value) if isinstance(value, str) else _seconds(value) if value else 0.0
    if isinstance(value, bool) or seconds < 0:
        raise ConfigError(f"expected a duration like '2ms' or a number of seconds >= 0, got {value!r}")
    return seconds


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"expected a string, got {value!r}")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"expected an integer, got {value!r}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"expected true or false, got {value!r}")
    return value


def _string_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConfigError(f"expected a list of strings, got {value!r}")


def _url_list(value: Any) -> str:
    return ",".join(_string_list(value))


@dataclass(frozen=True)
class Key:
    """One TOML key: where it goes in the options and how its value is parsed."""

    attr: str
    parse: Callable[[Any], Any]


# TiDB Binlog's goleveldb tuning keys: accepted so existing pump.toml files load; LevelDB
# (plyvel) keeps its own defaults.
_KV_KEYS = ("block-cache-capacity", "block-restart-interval", "block-size", "compaction-L0-trigger",
            "compaction-table-size", "compaction-total-size", "compaction-total-size-multiplier",
            "write-buffer", "write-L0-pause-trigger", "write-L0-slowdown-trigger")

PUMP_KEYS: dict[str, Key] = {
    "addr": Key("addr", _string),
    "advertise-addr": Key("advertise_addr", _string),
    "status-addr": Key("status_addr", _string),
    "data-dir": Key("data_dir", _string),
    "pd-urls": Key("pd_urls", _url_list),
    "registry": Key("registry", _string),
    "node-id": Key("node_id", _string),
    "cluster-id": Key("cluster_id", _int),
    "heartbeat-interval": Key("heartbeat_interval", _seconds),
    "gen-binlog-interval": Key("gen_binlog_interval", _seconds),
    "gc": Key("gc_retention", parse_gc),
    "upstream-status-url": Key("upstream_status_url", _string),
    "max-txn-timeout": Key("max_txn_timeout", _seconds),
    "max-message-size": Key("max_message_size", _int),
    "log-file": Key("log_file", _string),
    "log-level": Key("log_level", _string),
    "security.ssl-ca": Key("security.ssl_ca", _string),
    "security.ssl-cert": Key("security.ssl_cert", _string),
    "security.ssl-key": Key("security.ssl_key", _string),
    "security.cert-allowed-cn": Key("security.cert_allowed_cn", _string_list),
    "storage.sync-log": Key("storage.sync_log", _bool),
    "storage.kv_chan_cap": Key("storage.index_queue_size", _int),
    "storage.slow_write_threshold": Key("storage.slow_write_threshold", _seconds),
    "storage.stop-write-at-available-space": Key("storage.stop_write_at_available_space", parse_bytes),
    "storage.group-commit-interval": Key("storage.group_commit_interval", _interval),   # binlake's own
    "storage.scan-cache-entries": Key("storage.scan_cache_entries", _int),              # binlake's own
    **{f"storage.kv.{k}": Key("", lambda v: v) for k in _KV_KEYS},
}


def _flatten(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in doc.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{full}."))
        else:
            out[full] = value
    return out


def _assign(options: Any, attr: str, value: Any) -> None:
    target = options
    *path, last = attr.split(".")
    for part in path:
        target = getattr(target, part)
    setattr(target, last, value)


def apply_settings(options: Any, settings: Mapping[str, Any], keys: Mapping[str, Key], source: str) -> None:
    """Set every ``settings`` entry (TOML key → raw value) on ``options``; unknown keys are errors."""
    for name, raw in settings.items():
        key = keys.get(name)
        if key is None:
            known = ", ".join(sorted(k for k in keys if not k.startswith("storage.kv.")))
            raise ConfigError(f"{source}: unknown configuration key {name!r} (known keys: {known})")
        if not key.attr:
            log.info("%s: %s is accepted for compatibility and not used by binlake", source, name)
            continue
        try:
            _assign(options, key.attr, key.parse(raw))
        except ConfigError as exc:
            raise ConfigError(f"{source}: {name}: {exc}") from None


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file into flat dotted keys; raise ``ConfigError`` naming the file and problem."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            return _flatten(tomllib.load(f))
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p} is not valid TOML: {exc}") from None


def load_pump_options(config: str | Path | None, overrides: Mapping[str, Any]) -> PumpOptions:
    """Build PumpOptions: defaults, then the TOML file, then non-None flag ``overrides`` (TOML key names)."""
    options = PumpOptions()
    if config:
        apply_settings(options, load_toml(config), PUMP_KEYS, str(config))
    apply_settings(options, {k: v for k, v in overrides.items() if v is not None}, PUMP_KEYS, "command line")
    if options.advertise.split(":")[0] in ("", "0.0.0.0"):
        raise ConfigError(f"advertise-addr {options.advertise!r} must name a reachable host, not 0.0.0.0")
    return options
