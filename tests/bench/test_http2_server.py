"""``bench/http2_server.py`` at a tiny size in the suite: both servers start, answer every WriteBinlog and
the whole scan, and the benchmark prints its ratio lines."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_the_server_benchmark_runs_and_prints_its_ratios(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "http2_server.py"), "--calls", "400", "--threads", "4",
                        "--scan", "8MiB", "--batch", "1MiB", "--rounds", "1"], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"^unary  ratio ours/h2: \d+\.\d+x calls/s", r.stdout, re.M), r.stdout
    assert re.search(r"^scan   ratio ours/h2: \d+\.\d+x MiB/s", r.stdout, re.M), r.stdout
    assert "SUMMARY http2_server" in r.stdout
