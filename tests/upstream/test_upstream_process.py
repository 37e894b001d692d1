"""The emulator as its own process (``binlake-emulator serve``) with two pump processes, driven only over
HTTP as a user would (``POST /binlake/sql``): TiDB's classic binlog example reads back from the
pumps' range scans exactly as TiDB writes it, and ``/binlake/snapshot`` agrees with it."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.upstream.binlogs import (
    CLASSIC_CHANGES,
    CLASSIC_STATEMENTS,
    CLASSIC_TABLE,
    SchemaTracker,
    committed,
    decoded_changes,
    wait_watermarks,
)
from tests.waiting import wait_for
from transform.codec.model import Job
from upstream.client import StatusClient
from upstream.cluster import DEFAULT_CLUSTER_ID
from upstream.local import PumpProcess, free_port

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[tuple[str, str, str, subprocess.Popen[bytes]]]:
    """A running ``binlake-emulator serve`` with two servers: (TSO url, status url, registry, process)."""
    tso, status = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    registry = f"file://{tmp_path / 'registry.json'}"
    log = (tmp_path / "upstream.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "upstream.cli", "serve", "--tso-addr", tso,
                             "--status-addr", status, "--mysql-addr", f"127.0.0.1:{free_port()}",
                             "--registry", registry, "--servers", "2"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    status_url = f"http://{status}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{status_url}/ddl/history", timeout=2) as r:
                return r.status == 200
        except OSError:
            assert proc.poll() is None, (tmp_path / "upstream.log").read_text()
            return False
    try:
        wait_for(up, 60, lambda: "the emulator's status API")
        yield f"http://{tso}", status_url, registry, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


def test_classic_example_through_the_emulator_process(tmp_path: Path,
                                                      upstream: tuple[str, str, str, subprocess.Popen[bytes]]) -> None:
    tso_url, status_url, registry, proc = upstream
    pumps = [PumpProcess(data_dir=tmp_path / node, pd_url=tso_url, registry=registry, node_id=node,
                         extra_args=["--gen-binlog-interval", "0.3", "--heartbeat-interval", "0.3",
                                     "--upstream-status-url", status_url]).start()
             for node in ("pump-1", "pump-2")]
    try:
        client = StatusClient(status_url)
        create = client.sql(CLASSIC_TABLE)
        assert not create.get("error"), create
        # the last statement inside BEGIN … COMMIT: a session's explicit transaction over HTTP
        scripts = [*CLASSIC_STATEMENTS[:-1], (CLASSIC_STATEMENTS[-1][0], f"begin; {CLASSIC_STATEMENTS[-1][1]}; commit")]
        commit_ts = []
        for server, script in scripts:
            answer = client.sql(script, server=server)
            assert not answer.get("error"), answer
            commit_ts.append(max(r["commit_ts"] for r in answer["results"]))
        assert commit_ts == sorted(commit_ts)

        wait_watermarks(pumps, DEFAULT_CLUSTER_ID, commit_ts[-1])
        txns = [t for t in committed(pumps, DEFAULT_CLUSTER_ID) if not t.prewrite.ddl_job_id]
        assert [t.commit_ts for t in txns] == commit_ts
        with urllib.request.urlopen(f"{status_url}/ddl/history", timeout=10) as r:
            tracker = SchemaTracker([Job.from_json(j) for j in json.loads(r.read())])
        got = [(kind, ch.before, ch.after) for t in txns for _, kind, ch in decoded_changes(t, tracker)]
        assert got == CLASSIC_CHANGES
        assert client.snapshot(commit_ts[2])["test.test"] == [{"id": 1, "name": "c"}, {"id": 2, "name": "d"}]
        assert client.snapshot()["test.test"] == [{"id": 1, "name": "c"}, {"id": 2, "name": "c"}]
    finally:
        for p in pumps:
            p.kill()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
