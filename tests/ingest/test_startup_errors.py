"""A pump that cannot use its data directory says so in one line with what to do, and exits 1: a full
disk (a small tmpfs, mounted here as root), a directory it cannot write, another cluster's data dir, a
corrupted LevelDB index. Moving the corrupted index aside, as the message says, gets every binlog back."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.scan_client import ScanClient
from tests.ingest.helpers import commit, prewrite, tmpfs, writer
from tests.waiting import wait_for
from upstream.local import PumpProcess

pytestmark = pytest.mark.integration


def _fails_with(p: PumpProcess, *expected: str) -> str:
    """Start ``p``, expect exit status 1 and a log without a traceback whose error line holds ``expected``."""
    p.start(wait=False)
    assert p.wait_exit(60) == 1, p.log_tail()
    log = p.log_tail(200)
    assert "Traceback" not in log, log
    errors = [line for line in log.splitlines() if line.startswith("binlake pump: error:")]
    assert len(errors) == 1, log
    for text in expected:
        assert text in errors[0], errors[0]
    return errors[0]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs."""
    with tmpfs(tmp_path / "small", "4m") as mnt:
        yield mnt


def _pump(tmp_path: Path, tso: Any, registry_uri: str, data_dir: Path) -> PumpProcess:
    log = tmp_path / f"start-{os.urandom(3).hex()}.log"
    return PumpProcess(data_dir=data_dir, pd_url=tso.url, registry=registry_uri, node_id="pump-start",
                       extra_args=["--gen-binlog-interval", "0.5"], log_path=log)


def test_a_full_disk_at_start(tmp_path: Path, tso: Any, registry_uri: str, small_disk: Path) -> None:
    filler = small_disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    _fails_with(_pump(tmp_path, tso, registry_uri, small_disk / "pump"), "the disk is full", "free space")


def test_an_unwritable_data_dir(tmp_path: Path, tso: Any, registry_uri: str) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    _fails_with(_pump(tmp_path, tso, registry_uri, tmp_path / "a-file" / "pump"), "is not writable", "data-dir")


def test_another_clusters_data_dir(tmp_path: Path, tso: Any, registry_uri: str) -> None:
    p = _pump(tmp_path, tso, registry_uri, tmp_path / "pump").start()
    p.terminate()
    assert (tmp_path / "pump" / ".cluster").read_text().strip() == str(tso.cluster_id)
    (tmp_path / "pump" / ".cluster").write_text("42\n")
    _fails_with(_pump(tmp_path, tso, registry_uri, tmp_path / "pump"), "holds binlogs of cluster 42",
                f"this is cluster {tso.cluster_id}")


def test_a_corrupted_index_and_its_rebuild_from_the_value_log(tmp_path: Path, tso: Any, registry_uri: str,
                                                              ts: Callable[[], int]) -> None:
    data = tmp_path / "pump"
    p = _pump(tmp_path, tso, registry_uri, data).start()
    w = writer(p, tso.cluster_id)
    starts = []
    for _ in range(20):
        start = ts()
        w.write(prewrite(start))
        w.write(commit(start, ts()))
        starts.append(start)
    w.close()
    p.terminate()
    (data / "kv" / "CURRENT").write_bytes(b"\x00garbage")   # LevelDB's pointer to its manifest
    line = _fails_with(_pump(tmp_path, tso, registry_uri, data), "is corrupted", "move it aside")
    assert f"mv {data / 'kv'}" in line
    (data / "kv").rename(data / "kv.corrupt")
    p = _pump(tmp_path, tso, registry_uri, data).start()
    with ScanClient(p.addr, tso.cluster_id) as client:
        def found() -> list[int]:
            return sorted(r.start_ts for r in client.lookup_prewrites(starts))
        wait_for(lambda: found() == starts, what=lambda: f"the rebuilt index to hold every prewrite\n{p.log_tail()}")
    p.terminate()
