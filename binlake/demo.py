"""``binlake demo``: a PD-compatible TSO and two pumps on loopback, some transactions, their status.

This is the Pump part of the demo; the Drainer (Spark → Iceberg) joins it with its own issue.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from binlake.local import LocalTSO, PumpProcess, PumpWriter
from ingest import binlog as bl
from ingest import ctl
from ingest.registry import load_registry
from ingest.registry.base import PUMP
from ingest.scan_client import ScanClient
from ingest.tso import TSOClient
from schemas import binlog_pb2

TRANSACTIONS = 200


def _say(text: str) -> None:
    print(f"==> {text}", flush=True)


def run_demo(directory: Path, transactions: int = TRANSACTIONS) -> int:
    """Run the demo in ``directory`` (wiped first); return 0 when every check passed."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    registry_uri = f"file://{directory.resolve() / 'registry.json'}"
    tso = LocalTSO()
    _say(f"PD-compatible TSO on {tso.url} (cluster id {tso.cluster_id})")
    pumps = [PumpProcess(data_dir=directory / f"pump-{i}", pd_url=tso.url, registry=registry_uri,
                         node_id=f"pump-{i}", extra_args=["--gen-binlog-interval", "1"]) for i in (1, 2)]
    clock = TSOClient(tso.url)
    writers: list[PumpWriter] = []
    try:
        for p in pumps:
            p.start()
            _say(f"{p.node_id}: gRPC {p.addr}, HTTP {p.status_url}, data {p.data_dir}, log {p.log_path}")
        writers = [PumpWriter(p.addr, tso.cluster_id) for p in pumps]
        _say(f"writing {transactions} transactions the way TiDB does (prewrite, then commit to the same pump)")
        last_commit = 0
        for i in range(transactions):
            w = writers[i % 2]
            start = clock.get_ts()
            w.write(bl.marshal_gogo(binlog_pb2.Binlog(
                tp=bl.PREWRITE, start_ts=start, prewrite_key=b"t\x80demo%d" % i,
                prewrite_value=binlog_pb2.PrewriteValue(schema_version=1).SerializeToString())))
            last_commit = clock.get_ts()
            w.write(bl.marshal_gogo(binlog_pb2.Binlog(tp=bl.COMMIT, start_ts=start, commit_ts=last_commit,
                                                      prewrite_key=b"t\x80demo%d" % i)))
        _say("waiting for both watermarks to pass the last commit")
        ok = True
        for p in pumps:
            with ScanClient(p.addr, tso.cluster_id) as client:
                deadline = time.monotonic() + 30
                while client.watermark().max_commit_ts < last_commit and time.monotonic() < deadline:
                    time.sleep(0.1)
                wm = client.watermark()
                records = list(client.scan(0, wm.max_commit_ts))
            commits = sum(1 for r in records if r.tp == bl.COMMIT)
            fakes = sum(1 for r in records if bl.is_fake(r.tp, r.start_ts, r.commit_ts))
            print(f"    {p.node_id}: watermark {wm.max_commit_ts}, state {wm.state}, "
                  f"{commits} commits, {fakes} fake binlogs in range (0, watermark]")
            ok = ok and wm.max_commit_ts >= last_commit and commits == transactions // 2
        registry = load_registry(registry_uri)
        _say("binlake ctl pumps")
        print(ctl.format_nodes(ctl.list_nodes(registry, PUMP)))
        for p in pumps:
            p.terminate()
        _say("pumps stopped with SIGTERM (state paused):")
        print(ctl.format_nodes(ctl.list_nodes(registry, PUMP)))
        registry.close()
        _say("PASS: every transaction is stored and below its pump's watermark" if ok
             else "FAIL: a pump is missing transactions")
        print(f"Look further: the pumps' logs in {directory}/*.log; restart one with\n"
              f"  binlake pump --data-dir {directory}/pump-1 --pd-urls <a PD> --registry {registry_uri}\n"
              f"and query it with curl http://<status-addr>/status or `binlake ctl pumps --registry {registry_uri}`.")
        return 0 if ok else 1
    finally:
        for w in writers:
            w.close()
        for p in pumps:
            p.kill()
        clock.close()
        tso.stop()
