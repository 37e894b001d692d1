"""What a retry wrapper costs where nothing fails: ``schemas.retry.retry`` against a hand-written
loop and tenacity (the one pinned in constraints.txt, a dependency of pyiceberg only).

The hot-path retries are the MySQL sink's per-transaction ``Worker._run`` (one call per downstream
transaction, thousands per second across 16 worker threads sharing the GIL) and the pump's
``Storage._index`` (one call per index batch, ~100 per second): both almost never fail, so the
figure that matters is the overhead of a first attempt that succeeds. Also measured: one failure
then success (the sleep a no-op in every variant, so the retry path's own cost), and the import
time of each (a fresh interpreter, ``-X importtime``'s cumulative microseconds of the module).

    .venv/bin/python bench/retry_overhead.py            # 200,000 calls per variant, best of 5
    .venv/bin/python bench/retry_overhead.py --calls 20000

Baseline: the hand-written loop (what the code had). Ratio: each variant's ns per call over it.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tenacity

from schemas.retry import retry


class Flaky(Exception):
    pass


def work() -> int:
    return 1


def nap(seconds: float) -> None:
    """Every variant's sleep: nothing, so that the figures are the wrappers' own cost."""


def loop(call: Callable[[], int], retries: int = 10, backoff: float = 0.0) -> int:
    """The shape of ``Worker._run`` before: a for loop around try/except."""
    for attempt in range(retries + 1):
        try:
            return call()
        except Flaky:
            if attempt < retries:
                nap(backoff * 2 ** min(attempt, 5))
                continue
            raise
    raise AssertionError("unreachable")


def helper(call: Callable[[], int], backoff: float = 0.0) -> int:
    """The shape of ``Worker._run`` now: closures per call, as there."""
    return retry(call, attempts=11, wait=lambda i: backoff * 2 ** min(i, 5), on=Flaky, retry_if=lambda e: True,
                 sleep=nap)


_RETRYING = tenacity.Retrying(stop=tenacity.stop_after_attempt(11), wait=tenacity.wait_exponential(0, max=0),
                              retry=tenacity.retry_if_exception_type(Flaky), reraise=True, sleep=nap)


def tenacity_object(call: Callable[[], int]) -> int:
    """A module-level ``Retrying`` reused (``Retrying.__call__`` copies it per call)."""
    return _RETRYING(call)


def tenacity_loop(call: Callable[[], int]) -> int:
    """``for attempt in Retrying(...): with attempt: ...`` (the form that keeps the body inline)."""
    for attempt in _RETRYING:
        with attempt:
            return call()
    raise AssertionError("unreachable")


@tenacity.retry(stop=tenacity.stop_after_attempt(11), retry=tenacity.retry_if_exception_type(Flaky),
                reraise=True, sleep=nap)
def tenacity_decorated() -> int:
    return work()


def once_flaky() -> Callable[[], int]:
    state = [0]

    def call() -> int:
        state[0] += 1
        if state[0] % 2:
            raise Flaky()
        return 1
    return call


def per_call_ns(fn: Callable[[], object], calls: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / calls)
    return best


def import_us(module: str, pycache: str) -> int:
    """Cumulative import microseconds of ``module`` in a fresh interpreter that has already imported
    what ``binlake.cli`` imports first (argparse, logging, typing), median of 9 after a warm-up run;
    bytecode cached under ``pycache`` (as an installed package has it, whatever
    PYTHONDONTWRITEBYTECODE says)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    samples = []
    for _ in range(10):
        code = f"import argparse, logging, typing; import {module}"
        out = subprocess.run([sys.executable, "-X", "importtime", "-X", f"pycache_prefix={pycache}", "-c", code],
                             capture_output=True, text=True, cwd=ROOT, env=env, check=True)
        rows = [ln for ln in out.stderr.splitlines() if re.search(rf"\|\s*{re.escape(module)}$", ln)]
        samples.append(int(rows[-1].split("|")[1]))
    return sorted(samples[1:])[4]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    bare = per_call_ns(work, a.calls, a.repeats)
    print(f"bare call: {bare:.0f} ns")
    print(f"{'variant':<34}{'success ns/call':>16}{'ratio':>8}{'1 failure ns/call':>19}{'ratio':>8}")
    variants: list[tuple[str, Callable[[Callable[[], int]], int]]] = [
        ("hand-written loop (baseline)", loop), ("schemas.retry.retry", helper),
        ("tenacity Retrying object", tenacity_object), ("tenacity for-attempt loop", tenacity_loop)]
    base_ok = base_fail = 0.0
    for name, wrap in variants:
        ok = per_call_ns(lambda wrap=wrap: wrap(work), a.calls, a.repeats)   # type: ignore[misc]
        flaky = once_flaky()
        fail = per_call_ns(lambda wrap=wrap, flaky=flaky: wrap(flaky), a.calls // 2, a.repeats)  # type: ignore[misc]
        if not base_ok:
            base_ok, base_fail = ok, fail
        print(f"{name:<34}{ok:>16.0f}{ok / base_ok:>8.1f}{fail:>19.0f}{fail / base_fail:>8.1f}")
    dec = per_call_ns(tenacity_decorated, a.calls, a.repeats)
    print(f"{'tenacity @retry decorator':<34}{dec:>16.0f}{dec / base_ok:>8.1f}")
    with tempfile.TemporaryDirectory(prefix="retry-pyc-") as pycache:
        ours, theirs = import_us("schemas.retry", pycache), import_us("tenacity", pycache)
    print(f"import: schemas.retry {ours} us, tenacity {theirs} us (cumulative, after argparse/logging/typing, "
          f"bytecode cached, median of 9 fresh interpreters)")


if __name__ == "__main__":
    main()
