"""A small seeded fault campaign (``bench/faults.py``) in the suite: one run of each of four cheap kinds
(a pump killed under load, lost commit binlogs, aborts after prewrite, a prewrite on both pumps),
each checked end to end (pumps, an Iceberg drain, verify, changelog replay), nothing lost or duplicated."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
KINDS = ["pump-kill", "lost-commit", "abort-after-prewrite", "duplicate-prewrite"]


def table_rows(stdout: str) -> dict[str, list[str]]:
    """The campaign's final table: kind -> [runs, passed, lost, duplicated, detail words...]."""
    lines = stdout[stdout.rindex("\nfault "):].strip().splitlines()[1:]
    return {line.split()[0]: line.split()[1:] for line in lines}


@pytest.mark.timeout(900)
def test_a_small_seeded_fault_campaign_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "faults.py"), "--runs", str(len(KINDS)), "--seed", "7",
                        "--kinds", ",".join(KINDS)], capture_output=True, text=True, timeout=900, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-3000:]
    assert "machine: " in r.stdout
    rows = table_rows(r.stdout)
    for kind in [*KINDS, "all"]:
        runs, passed, lost, duplicated = rows[kind][:4]
        assert (passed, lost, duplicated) == (runs, "0", "0"), (kind, r.stdout[-5000:])
    assert rows["all"][0] == str(len(KINDS))
