"""Go's regular expressions (``regexp.Compile``, RE2 syntax) for the configuration binlake shares
with TiDB Binlog's Go drainer: compiled by RE2 itself (Google's ``re2`` binding), the engine Go's
``regexp`` reimplements, so the syntax, the refusals (backreferences, look-arounds, counts over
1000) and the matches are Go's (the two constructs RE2 takes and Go does not are refused first); the
tests compare both on a corpus of patterns and texts."""
from __future__ import annotations

from typing import Protocol

import re2

from transform.errors import GoRegexError

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False   # a refused pattern is reported by the caller, not logged to stderr


class GoPattern(Protocol):
    """What binlake uses of a compiled pattern."""

    def search(self, text: str) -> object:
        """A match found anywhere in ``text`` (None when there is none)."""


def _go_only_refusals(go: str) -> str:
    """What Go's parser (Go 1.21, TiDB Binlog's) refuses and RE2's accepts: ``\\C`` (any byte) and
    ``(?<name>…)`` groups (Go takes ``(?P<name>…)`` only); "" when neither is there."""
    i, in_class = 0, False
    while i < len(go):
        c = go[i]
        if c == "\\":
            if go[i + 1:i + 2] == "C" and not in_class:
                return "invalid escape sequence: \\C"
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            i += 1
            if go[i:i + 1] == "^":
                i += 1
            if go[i:i + 1] == "]":   # a leading ] is itself
                i += 1
            continue
        elif go.startswith("(?<", i) and go[i + 3:i + 4] not in ("=", "!"):
            return f"invalid or unsupported Perl syntax: {go[i:i + 3]!r}"
        i += 1
    return ""


def compile_go(go: str) -> GoPattern:
    """``go`` compiled with Go's syntax and meaning (picklable: it travels to Spark tasks);
    :class:`GoRegexError` with RE2's reason when Go would refuse it."""
    refused = _go_only_refusals(go)
    if refused:
        raise GoRegexError(refused)
    try:
        pattern: GoPattern = re2.compile(go, _OPTIONS)
    except re2.error as e:
        reason = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise GoRegexError(reason) from None
    return pattern
