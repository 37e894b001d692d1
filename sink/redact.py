"""Keep secrets out of what binlake prints: URIs with their password replaced by ``***``."""
from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_uri(uri: str) -> str:
    """``uri`` with the password of its user part (``scheme://user:password@host``) replaced by ``***``."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
