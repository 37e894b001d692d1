"""TiDB Binlog's ``encrypted_password`` (``pkg/encrypt``): AES-CFB under the key in the environment
variable ``BINLOG_SECRET_KEY`` (hex, 16, 24 or 32 bytes), else TiDB Binlog's built-in default key;
the text is base64 of ``IV (16 bytes) + "@" + ciphertext``. A password ``binlake ctl -cmd encrypt``
(or binlogctl) encrypted is read by either drainer."""
from __future__ import annotations

import base64
import binascii
import os

from cryptography.hazmat.decrepit.ciphers.modes import CFB  # TiDB Binlog's mode (kept by cryptography as decrepit)
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from ingest.config import ConfigError

KEY_ENV = "BINLOG_SECRET_KEY"
# TiDB Binlog's default secret key (a published constant, so it hides a password from a glance only)
DEFAULT_KEY = bytes.fromhex("a529b7665997f043a30ac8fadcb51d6aa032c226ab5b7750530b12b8c1a16a48")
_IV_SEP = b"@"
_BLOCK = 16


def secret_key() -> bytes:
    """The key: ``BINLOG_SECRET_KEY`` decoded from hex, else :data:`DEFAULT_KEY`; :class:`ConfigError`
    when it is not hex or not an AES key length."""
    text = os.environ.get(KEY_ENV, "")
    if not text:
        return DEFAULT_KEY
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise ConfigError(f"{KEY_ENV} is not hex") from None
    if len(key) not in (16, 24, 32):
        raise ConfigError(f"{KEY_ENV} holds {len(key)} bytes: an AES key has 16, 24 or 32")
    return key


def encrypt(plaintext: str, key: bytes | None = None) -> str:
    """``plaintext`` encrypted as TiDB Binlog encrypts it (a fresh random IV each time)."""
    iv = os.urandom(_BLOCK)
    enc = Cipher(algorithms.AES(key or secret_key()), CFB(iv)).encryptor()
    body = enc.update(plaintext.encode()) + enc.finalize()
    return base64.b64encode(iv + _IV_SEP + body).decode()


def decrypt(text: str, key: bytes | None = None) -> str:
    """The password ``text`` (:func:`encrypt`'s form) holds; :class:`ConfigError` when it is not that form."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError("encrypted_password is not base64") from None
    if len(raw) < _BLOCK + len(_IV_SEP) or raw[_BLOCK:_BLOCK + len(_IV_SEP)] != _IV_SEP:
        raise ConfigError("encrypted_password is not a TiDB Binlog ciphertext (base64 of IV + '@' + text)")
    iv, body = raw[:_BLOCK], raw[_BLOCK + len(_IV_SEP):]
    dec = Cipher(algorithms.AES(key or secret_key()), CFB(iv)).decryptor()
    plain = dec.update(body) + dec.finalize()
    try:
        return plain.decode()
    except UnicodeDecodeError:
        raise ConfigError(f"encrypted_password does not decrypt to text: was it encrypted with another "
                          f"{KEY_ENV}?") from None
