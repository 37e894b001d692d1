"""Polling for conditions that real processes reach asynchronously (a timeout, not a performance check)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 15.0,
             what: str | Callable[[], str] = "the condition", interval: float = 0.05) -> T:
    """Poll ``condition`` every ``interval`` s until it returns something truthy and return that; fail
    the test naming ``what`` (a string, or a function giving one, e.g. a process log tail) after
    ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)
