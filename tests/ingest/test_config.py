"""pump.toml with TiDB's key names: parsing, unknown keys, flag overrides, units."""
from __future__ import annotations

from pathlib import Path

import pytest

from ingest.config import ConfigError, load_config, parse_bytes, parse_duration, parse_gc
from ingest.pump.config import PumpConfig

CONF = Path(__file__).resolve().parents[2] / "conf" / "pump.toml"


def test_example_config_loads() -> None:
    o = load_config(PumpConfig, CONF, {})
    assert o.addr == "127.0.0.1:8250" and o.gc_retention == 7 * 86400 and o.storage.sync_log is True
    assert o.storage.stop_write_at_available_space == 10 << 30


def test_tidb_keys_and_sections(tmp_path: Path) -> None:
    f = tmp_path / "pump.toml"
    f.write_text('addr = "127.0.0.1:9000"\nadvertise-addr = "pump1:9000"\ndata-dir = "d"\n'
                 'pd-urls = "http://a:2379,http://b:2379"\nnode-id = "n1"\ngc = "12h"\n'
                 'heartbeat-interval = 5\ngen-binlog-interval = 1\n'
                 '[security]\nssl-ca = "ca.pem"\nssl-cert = "c.pem"\nssl-key = "k.pem"\n'
                 '[storage]\nsync-log = false\nstop-write-at-available-space = "512 MiB"\n'
                 'group-commit-interval = "5ms"\n'
                 '[storage.kv]\nblock-cache-capacity = 8388608\n')
    o = load_config(PumpConfig, f, {})
    assert (o.addr, o.advertise, o.data_dir, o.node_id) == ("127.0.0.1:9000", "pump1:9000", "d", "n1")
    assert o.pd_urls == "http://a:2379,http://b:2379"
    assert (o.gc_retention, o.heartbeat_interval, o.gen_binlog_interval) == (12 * 3600, 5.0, 1.0)
    assert (o.security.ssl_ca, o.security.enabled) == ("ca.pem", True)
    assert (o.storage.sync_log, o.storage.stop_write_at_available_space) == (False, 512 << 20)
    assert o.storage.group_commit_interval == 0.005


def test_flags_override_file(tmp_path: Path) -> None:
    f = tmp_path / "pump.toml"
    f.write_text('addr = "127.0.0.1:9000"\ngc = 3\n')
    o = load_config(PumpConfig, f, {"addr": "127.0.0.1:9100", "gc": "2h", "node-id": None})
    assert (o.addr, o.gc_retention, o.node_id) == ("127.0.0.1:9100", 7200.0, "")


@pytest.mark.parametrize("text, message", [
    ('adr = "x:1"\n', "unknown configuration key 'adr'"),
    ('[storage]\nsynclog = true\n', "unknown configuration key 'storage.synclog'"),
    ('gc = 0\n', "gc must be greater than 0"),
    ('gc = "7 days"\n', "invalid duration"),
    ('heartbeat-interval = "fast"\n', "heartbeat-interval: expected a number"),
    ('[storage]\nsync-log = "yes"\n', "storage.sync-log: expected true or false"),
    ('[storage]\nstop-write-at-available-space = "lots"\n', "invalid size"),
    ('addr = \n', "not valid TOML"),
    ('advertise-addr = "0.0.0.0:8250"\n', "must name a reachable host"),
])
def test_bad_config_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "pump.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(PumpConfig, f, {})


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(PumpConfig, "/nonexistent/pump.toml", {})


def test_units() -> None:
    parsed = [parse_duration("1h30m"), parse_duration("300ms")]
    assert parsed == [5400, 0.3]
    assert parse_gc(7) == 7 * 86400 and parse_gc("7") == 7 * 86400 and parse_gc("90m") == 5400
    assert parse_bytes("10 gib") == 10 << 30 and parse_bytes("10GB") == 10 * 1000**3 and parse_bytes(42) == 42
