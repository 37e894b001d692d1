"""``encrypted_password`` as TiDB Binlog encrypts it: binlake reads what Go's AES-CFB wrote and Go
reads what binlake wrote (``.peers/gocheck``), under the default key and ``BINLOG_SECRET_KEY``; and
binlogctl's ``encrypt`` and ``generate_meta`` as ``binlake ctl`` commands."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.config import ConfigError, load_config
from ingest.encrypt import DEFAULT_KEY, KEY_ENV, decrypt, encrypt
from ingest.tso import physical_ms
from sink.mysql.config import MySQLSettings
from tests.realtidb.peers import peer
from upstream.local import LocalTSO

KEY16 = "00112233445566778899aabbccddeeff"
TEXTS = ["", "secret", "pässwörd with spaces = [brackets]", "x" * 100]


def _go(*args: str) -> str:
    return subprocess.run([str(peer("gocheck")), *args], capture_output=True, text=True, check=True).stdout.rstrip("\n")


@pytest.mark.parametrize("key_hex", [DEFAULT_KEY.hex(), KEY16])
def test_binlake_and_go_read_each_others_ciphertext(key_hex: str) -> None:
    key = bytes.fromhex(key_hex)
    for text in TEXTS:
        assert decrypt(_go("encrypt", key_hex, text), key) == text
        assert _go("decrypt", key_hex, encrypt(text, key)) == text
    assert encrypt("a", key) != encrypt("a", key)            # a fresh IV each time


def test_the_key_comes_from_binlog_secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY16)
    assert decrypt(_go("encrypt", KEY16, "pw")) == "pw"
    monkeypatch.setenv(KEY_ENV, "not hex")
    with pytest.raises(ConfigError, match="BINLOG_SECRET_KEY is not hex"):
        encrypt("pw")
    monkeypatch.setenv(KEY_ENV, "0011")
    with pytest.raises(ConfigError, match="holds 2 bytes: an AES key has 16, 24 or 32"):
        encrypt("pw")


def test_encrypted_password_wins_over_password_and_bad_ones_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    value = _go("encrypt", DEFAULT_KEY.hex(), "s3cret")
    to = load_config(MySQLSettings, None, {"to.password": "ignored", "to.encrypted_password": value}).to
    assert to.secret() == "s3cret" and value not in repr(to)
    with pytest.raises(ConfigError, match="encrypted_password is not base64"):
        load_config(MySQLSettings, None, {"to.encrypted_password": "%%%"}).to.secret()
    with pytest.raises(ConfigError, match="not a TiDB Binlog ciphertext"):
        load_config(MySQLSettings, None, {"to.encrypted_password": "c2VjcmV0"}).to.secret()
    with pytest.raises(ConfigError, match="password-file and password/encrypted_password are both set"):
        load_config(MySQLSettings, None, {"to.encrypted_password": value, "to.password-file": "/x"})


def _ctl(*args: str, env: dict[str, str] | None = None) -> str:
    run = subprocess.run([str(Path(sys.executable).parent / "binlake"), "ctl", *args], capture_output=True, text=True,
                         env={**os.environ, **(env or {})}, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_ctl_encrypt_prints_binlogctls_line() -> None:
    line = _ctl("encrypt", "--text", "s3cret", env={KEY_ENV: KEY16})
    m = re.fullmatch(r'\[\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3} [+-]\d\d:\d\d\] \[INFO\] \[encrypt\.go:16\] '
                     r'\["encrypt text"\] \[encrypted=("?)([A-Za-z0-9+/=]+)\1\]', line)
    assert m, line
    assert (m.group(1) == '"') == ("=" in m.group(2))        # quoted as TiDB's logger quotes a value with '='
    assert _go("decrypt", KEY16, m.group(2)) == "s3cret"


def test_ctl_generate_meta_writes_binlogctls_savepoint(tmp_path: Path) -> None:
    tso = LocalTSO()
    try:
        line = _ctl("generate_meta", "--pd-urls", tso.url, "--data-dir", str(tmp_path / "meta"),
                    "--time-zone", "Asia/Shanghai")
    finally:
        tso.stop()
    text = (tmp_path / "meta" / "savepoint").read_text()
    first, utc, local = text.split("\n")
    ts = int(first.removeprefix("commitTS = "))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+0000 UTC", utc)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+0800 CST", local)
    assert abs(physical_ms(ts) / 1000 - os.path.getmtime(tmp_path / "meta" / "savepoint")) < 60
    assert line.endswith(f'[INFO] [meta.go:110] ["save meta"] [meta="commitTS: {ts}"]')
