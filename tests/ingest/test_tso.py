"""PD's cluster id and timestamps: binlake's TSO client against PD-like servers, and real Go PD clients
against binlake's emulated PD."""
from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.errors import TSOError
from ingest.tso import TSOClient
from tests.realtidb.peers import PDEtcd, peer
from upstream.tso import serve_tso


@pytest.fixture(scope="module")
def pd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PDEtcd]:
    """pdetcd: PD's GetMembers/Tso as PD answers them (cluster id 0 refused)."""
    with PDEtcd(tmp_path_factory.mktemp("pd"), cluster_id=6_900_000_000_000_000_042) as server:
        yield server


def test_the_cluster_id_is_learned_from_get_members_as_pds_client_does(pd: PDEtcd) -> None:
    client = TSOClient(pd.url)
    try:
        assert client.learn_cluster_id() == pd.cluster_id
        first, second = client.get_ts(), client.get_ts()
        assert 0 < first < second
    finally:
        client.close()


def test_a_tso_request_for_another_cluster_is_refused_with_pds_words(pd: PDEtcd) -> None:
    client = TSOClient(pd.url, cluster_id=pd.cluster_id + 1, timeout=3)
    with pytest.raises(TSOError, match=f"mismatch cluster id, need {pd.cluster_id} but got {pd.cluster_id + 1}"):
        client.get_ts()
    client.close()


def test_pd_urls_of_two_clusters_are_refused(pd: PDEtcd) -> None:
    server, port = serve_tso("127.0.0.1:0", 77)
    try:
        with pytest.raises(TSOError, match="different clusters"):
            TSOClient(f"{pd.url},http://127.0.0.1:{port}", timeout=3).learn_cluster_id()
    finally:
        server.stop(0)


def test_an_unreachable_pd_names_every_url() -> None:
    with pytest.raises(TSOError, match="cannot learn the cluster id from PD.*127.0.0.1:1"):
        TSOClient("http://127.0.0.1:1", timeout=1).get_ts()


def test_the_emulated_pd_answers_like_pd(tmp_path: Path) -> None:
    """Go's PD client (TiDB's, binlogctl's) learns the cluster id and gets timestamps from the emulator's
    TSO, and the emulator refuses cluster id 0 in a TSO request as PD does."""
    server, port = serve_tso("127.0.0.1:0", 4242)
    try:
        done = subprocess.run([str(peer("pdts")), "-pd", f"127.0.0.1:{port}"], capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        (answer,) = [line for line in done.stdout.splitlines() if line.startswith("cluster-id ")]
        words = answer.split()
        assert words[:2] == ["cluster-id", "4242"] and int(words[3]) > 0
        with pytest.raises(TSOError, match="need 4242 but got 7"):
            TSOClient(f"http://127.0.0.1:{port}", cluster_id=7, timeout=3).get_ts()
    finally:
        server.stop(0)
