"""TLS on every link, link by link: a good certificate is accepted; no certificate, a certificate of
another CA, and a certificate whose CN ``cert-allowed-cn`` does not list are refused.

Links: TiDB → pump (gRPC WriteBinlog), drainer → pump (the scan API through ``ScanClient``'s HTTP/2
reader over TLS, ``make_plan``), anyone → the pump's HTTP API (and ``binlake ctl`` through it), pump →
drainer (``Cistern/Notify``) and the following drainer's HTTP API, every component → etcd (the
registry).
"""
from __future__ import annotations

import io
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from binlake.drain_config import DrainerConfig
from binlake.follow import Follower
from ingest import binlog as bl
from ingest import ctl
from ingest.errors import CtlError, RegistryError
from ingest.http2 import HANDSHAKE_TIMEOUT, WireRpcError
from ingest.http2 import stream as stream_module  # the handshake's limit, shortened for a test
from ingest.pump.node import Node, NotifyError
from ingest.registry import EtcdRegistry, FileRegistry, load_registry
from ingest.registry.base import DRAINER, ONLINE, PUMP, NodeStatus
from ingest.scan_client import ScanClient, records
from ingest.security import SecurityConfig
from schemas import pump_pb2, pump_pb2_grpc
from tests.certs import Authority, TLSWorld, security_toml, tls_world
from tests.ingest.helpers import commit, prewrite
from tests.waiting import wait_for
from transform.plan import PlanError, PumpUnreachableError, make_plan
from upstream.local import PumpProcess, free_port, http

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> TLSWorld:
    return tls_world(tmp_path_factory.mktemp("certs"))


def _channel_credentials(sec: SecurityConfig) -> grpc.ChannelCredentials:
    creds = sec.grpc_channel_credentials()
    if creds is None:   # only ssl-ca: a client that trusts the server but presents no certificate
        creds = grpc.ssl_channel_credentials(Path(sec.ssl_ca).read_bytes())
    return creds


def _h2_context(sec: SecurityConfig) -> ssl.SSLContext:
    """``ScanClient``'s TLS for ``sec`` (only ssl-ca: trusts the server, presents no certificate)."""
    ctx = sec.h2_client_context()
    if ctx is None:
        ctx = ssl.create_default_context(cafile=sec.ssl_ca)
        ctx.set_alpn_protocols(["h2"])
    return ctx


def _write(addr: str, sec: SecurityConfig | None, cluster_id: int, payload: bytes) -> grpc.StatusCode:
    """WriteBinlog as TiDB sends it; the status code it got."""
    channel = grpc.secure_channel(addr, _channel_credentials(sec)) if sec else grpc.insecure_channel(addr)
    try:
        resp = pump_pb2_grpc.PumpStub(channel).WriteBinlog(
            pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=payload), timeout=5)
        assert resp.errmsg == ""
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()
    finally:
        channel.close()


REFUSED = "refused"


def _https(url: str, sec: SecurityConfig | None, method: str = "GET") -> int | str:
    """The status code of one request, or ``REFUSED`` when the connection gave no answer."""
    ctx: ssl.SSLContext | None = None
    if sec is not None:
        ctx = sec.client_context() or ssl.create_default_context(cafile=sec.ssl_ca)
    try:
        return http(method, url, timeout=5, tls=ctx)[0]
    except (urllib.error.URLError, ssl.SSLError, ConnectionError):
        return REFUSED


@pytest.fixture
def tls_pump(pumps: Callable[..., PumpProcess], world: TLSWorld) -> PumpProcess:
    return pumps("pump-tls", config_text=security_toml(world.server), client_tls=world.client.client_context())


def test_pump_grpc_admits_only_allowed_certificates(tls_pump: PumpProcess, tso: Any, ts: Callable[[], int],
                                                   world: TLSWorld) -> None:
    cid = tso.cluster_id
    assert _write(tls_pump.addr, world.client, cid, prewrite(ts())) == grpc.StatusCode.OK
    assert _write(tls_pump.addr, world.intruder, cid, prewrite(ts())) == grpc.StatusCode.PERMISSION_DENIED
    assert _write(tls_pump.addr, world.stranger, cid, prewrite(ts())) == grpc.StatusCode.UNAVAILABLE
    assert _write(tls_pump.addr, world.no_cert, cid, prewrite(ts())) == grpc.StatusCode.UNAVAILABLE
    assert _write(tls_pump.addr, None, cid, prewrite(ts())) == grpc.StatusCode.UNAVAILABLE
    assert "PERMISSION_DENIED" not in tls_pump.log_tail() and "intruder" in tls_pump.log_tail()

    # the drainer's link: the scan API and the run's plan
    with ScanClient(tls_pump.addr, cid, timeout=5, tls=_h2_context(world.client)) as c:
        assert c.watermark().node_id == "pump-tls"
    for bad, code in ((world.intruder, grpc.StatusCode.PERMISSION_DENIED),
                      (world.stranger, grpc.StatusCode.UNAVAILABLE), (world.no_cert, grpc.StatusCode.UNAVAILABLE)):
        with ScanClient(tls_pump.addr, cid, timeout=5, tls=_h2_context(bad)) as c:
            with pytest.raises(grpc.RpcError) as err:
                c.watermark()
            assert err.value.code() == code, err.value
    registry = tls_pump.registry
    plan = make_plan(registry, cid, 0, security=world.client)
    assert [p.node_id for p in plan.pumps] == ["pump-tls"]
    with pytest.raises(PlanError, match="refused its watermark: PERMISSION_DENIED") as refused:
        make_plan(registry, cid, 0, security=world.intruder)
    assert not isinstance(refused.value, PumpUnreachableError)   # it answered: no relay-log recovery


def _wait_watermark(client: ScanClient, ts: int) -> None:
    wait_for(lambda: client.watermark().max_commit_ts >= ts, 20, f"the watermark to reach {ts}")


def test_scan_client_reads_a_tls_pump_as_written(tls_pump: PumpProcess, tso: Any, ts: Callable[[], int],
                                                 world: TLSWorld) -> None:
    """ScanClient's HTTP/2 reader over TLS (ALPN h2, mutual TLS): Scan in one batch and in many, and
    LookupPrewrites, return exactly the binlogs written."""
    cid = tso.cluster_id
    written: dict[int, tuple[int, bytes]] = {}   # start ts -> (commit ts, prewrite value)
    with grpc.secure_channel(tls_pump.addr, _channel_credentials(world.client)) as channel:
        stub = pump_pb2_grpc.PumpStub(channel)
        for i in range(30):
            start, value = ts(), bytes([i]) * (300 * i + 1)
            stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=cid, payload=prewrite(start, value)), timeout=5)
            commit_ts = ts()
            stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=cid, payload=commit(start, commit_ts)), timeout=5)
            written[start] = (commit_ts, value)
    last = max(c for c, _ in written.values())
    with ScanClient(tls_pump.addr, cid, timeout=5, tls=_h2_context(world.client)) as client:
        _wait_watermark(client, last)
        for limit, at_least in ((0, 1), (2000, 5)):
            batches = list(client.scan_batches(0, last, limit))
            assert len(batches) >= at_least
            got = [r for b in batches for r in records(b) if r.start_ts in written]
            assert {r.start_ts: bl.parse(r.payload).prewrite_value for r in got if r.tp == bl.PREWRITE} == \
                {s: v for s, (_, v) in written.items()}
            assert {r.start_ts: r.commit_ts for r in got if r.tp == bl.COMMIT} == \
                {s: c for s, (c, _) in written.items()}
        some = sorted(written)[::7]
        assert {r.start_ts: bl.parse(r.payload).prewrite_value for r in client.lookup_prewrites([*some, 12345])} \
            == {s: written[s][1] for s in some}


def _tls_only_server(pair_cert: str, pair_key: str) -> tuple[str, threading.Thread]:
    """A one-connection TLS server on 127.0.0.1 presenting ``pair_cert``; it only handshakes."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pair_cert, pair_key)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            try:
                with ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"127.0.0.1:{listener.getsockname()[1]}", thread


def test_scan_client_tls_failures_are_unavailable_with_the_reason(
        tls_pump: PumpProcess, pumps: Callable[..., PumpProcess], tso: Any, world: TLSWorld, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A TLS handshake that cannot succeed fails as a plain-text connection failure does
    (``WireRpcError`` UNAVAILABLE, the reason in its details), at once for a server certificate of a
    CA the client does not trust, one not issued for the address dialled, and a pump without TLS; after
    the handshake's limit for a server that never answers it."""
    cid = tso.cluster_id
    wrong_ca = SecurityConfig(ssl_ca=str(Authority(tmp_path, "wrong-ca").pem), ssl_cert=world.client.ssl_cert,
                              ssl_key=world.client.ssl_key)
    other_name = world.ca.issue("elsewhere", ip=False)        # valid for localhost only
    named_addr, named = _tls_only_server(str(other_name.cert), str(other_name.key))
    plain = pumps("pump-plain")
    cases = ((tls_pump.addr, wrong_ca, "certificate verify failed"),
             (named_addr, world.client, "certificate verify failed: IP address mismatch"),
             (plain.addr, world.client, "the server closed the connection (a server without TLS"))
    for addr, sec, reason in cases:
        began = time.monotonic()
        with ScanClient(addr, cid, timeout=60, tls=_h2_context(sec)) as c:
            with pytest.raises(WireRpcError) as err:
                list(c.scan(0))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and reason in err.value.details(), err.value
        took = time.monotonic() - began   # at once: no wait for a timeout
        assert took < HANDSHAKE_TIMEOUT / 2, f"{addr}: {err.value} after {took:.1f}s"
    named.join(5)
    # a server that never answers the handshake: UNAVAILABLE after the handshake's limit, not the silence's
    monkeypatch.setattr(stream_module, "HANDSHAKE_TIMEOUT", 0.5)
    with socket.create_server(("127.0.0.1", 0)) as mute:
        with ScanClient(f"127.0.0.1:{mute.getsockname()[1]}", cid, timeout=60, tls=_h2_context(world.client)) as c:
            with pytest.raises(WireRpcError) as err:
                c.watermark()
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "did not finish in 0.5s" in err.value.details()
    with ScanClient(plain.addr, cid, timeout=5) as c:   # the same pump in plain text is fine
        assert c.watermark().node_id == "pump-plain"
    with ScanClient(f"127.0.0.1:{free_port()}", cid, timeout=5, tls=_h2_context(world.client)) as c:
        with pytest.raises(WireRpcError) as err:   # nothing listening: the same error as in plain text
            c.watermark()
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "failed to connect" in err.value.details()


def test_pump_http_api_is_https_with_the_same_rules(tls_pump: PumpProcess, world: TLSWorld) -> None:
    for addr in (tls_pump.status_addr, tls_pump.addr):   # the gRPC port serves the HTTP API too
        url = f"https://{addr}/status"
        assert _https(url, world.client) == 200
        assert _https(url, world.intruder) == 403
        assert _https(url, world.stranger) == REFUSED
        assert _https(url, world.no_cert) == REFUSED
        assert _https(f"http://{addr}/status", None) == REFUSED
    # a client offering h2 and http/1.1 (curl, browsers) gets HTTP/1.1 on the gRPC port
    ctx = world.client.client_context()
    assert ctx is not None
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    host, port = tls_pump.addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as tls:
        assert tls.selected_alpn_protocol() == "http/1.1"
        tls.sendall(b"GET /status HTTP/1.1\r\nHost: pump\r\nConnection: close\r\n\r\n")
        assert tls.recv(64).startswith(b"HTTP/1.1 200")
    # binlogctl's pause/close go through the HTTP API: refused for the intruder, done for the client
    registry = load_registry(tls_pump.registry)
    try:
        with pytest.raises(CtlError, match="403"):
            ctl.request_state(registry, PUMP, "pump-tls", ctl.PAUSE, security=world.intruder)
        with pytest.raises(CtlError, match="cannot reach"):
            ctl.request_state(registry, PUMP, "pump-tls", ctl.PAUSE)   # plain HTTP
        assert "success" in ctl.request_state(registry, PUMP, "pump-tls", ctl.PAUSE, security=world.client)
    finally:
        registry.close()


def test_drainer_notify_and_status_under_tls(tmp_path: Path, world: TLSWorld) -> None:
    options = DrainerConfig(registry=f"file://{tmp_path / 'registry.json'}", node_id="d-tls",
                            addr=f"127.0.0.1:{free_port()}", status_addr=f"127.0.0.1:{free_port()}",
                            security=world.server)
    follower = Follower(options, 1.0, io.StringIO())
    follower._start_servers()
    registry = FileRegistry(tmp_path / "registry.json")
    try:
        registry.put_node(DRAINER, NodeStatus("d-tls", follower.advertise, ONLINE))
        node = Node(registry, "pump-x", "127.0.0.1:1", "127.0.0.1:2", lambda: 0, lambda: 0)
        node.notify_drainers(timeout=10, credentials=world.client.grpc_channel_credentials())
        for bad in (world.intruder, world.stranger):
            with pytest.raises(NotifyError):
                node.notify_drainers(timeout=2, credentials=bad.grpc_channel_credentials())
        with pytest.raises(NotifyError):
            node.notify_drainers(timeout=2)   # plain gRPC
        for addr in (follower.status_addr, follower.advertise):   # the Cistern port answers HTTPS too
            url = f"https://{addr}/status"
            assert _https(url, world.client) == 200
            assert _https(url, world.intruder) == 403
            assert _https(url, world.no_cert) == REFUSED
    finally:
        follower.stop.set()
        assert follower.door is not None
        follower.door.stop(0)
        registry.close()


def test_etcd_registry_over_tls(world: TLSWorld, tmp_path: Path) -> None:
    from tests.servers import EtcdServer

    server = world.ca.issue("etcd")
    with EtcdServer(tls=(world.ca.pem, server.cert, server.key)) as etcd:
        good = load_registry(f"https://{etcd.endpoint}", security=world.client)
        try:
            good.put_node(PUMP, NodeStatus("p-tls", "127.0.0.1:8250", ONLINE))
            assert [n.node_id for n in good.list_nodes(PUMP)] == ["p-tls"]
        finally:
            good.close()
        for bad in (world.stranger, SecurityConfig()):
            registry = EtcdRegistry.from_spec(etcd.endpoint, timeout=2, security=bad)
            try:
                with pytest.raises(RegistryError):
                    registry.list_nodes(PUMP)
            finally:
                registry.close()
        with pytest.raises(Exception, match=r"\[security\]"):
            load_registry(f"https://{etcd.endpoint}")


def test_a_drainer_plans_over_tls_and_prints_no_secret(tls_pump: PumpProcess, tso: Any, world: TLSWorld,
                                                        tmp_path: Path) -> None:
    """``binlake drain --dry-run`` as its own process: the plan reads the TLS pump with drainer.toml's
    certificate; neither the output nor the report shows a key path, an S3 key or a password."""
    import json
    import subprocess
    import sys

    secret_key, password = "S3-SECRET-do-not-print-91", "pw-do-not-print-37"

    def dry_run(sec: SecurityConfig, name: str) -> tuple[subprocess.CompletedProcess[str], str]:
        conf = tmp_path / f"{name}.toml"
        conf.write_text(security_toml(sec) + f'[upstream]\ndsn = "mysql://root:{password}@127.0.0.1:4000"\n')
        report = tmp_path / f"{name}.json"
        r = subprocess.run([sys.executable, "-m", "binlake.cli", "drain", "--config", str(conf), "--dry-run",
                            "--registry", tls_pump.registry, "--pd-urls", tso.url,
                            "--warehouse", str(tmp_path / "wh"), "--report", str(report),
                            "--catalog-property", f"s3.secret-access-key={secret_key}"],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
        shown = r.stdout + r.stderr + (report.read_text() if report.exists() else "")
        for secret in (secret_key, password, sec.ssl_key, Path(sec.ssl_key).name):
            assert secret not in shown, f"{secret!r} shown by the {name} run"
        return r, shown

    good, shown = dry_run(world.client, "client")
    assert good.returncode == 0, good.stderr[-2000:]
    assert "pump-tls" in shown and json.loads((tmp_path / "client.json").read_text())["dry_run"] is True
    bad, shown = dry_run(world.intruder, "intruder")
    assert bad.returncode == 1 and "PERMISSION_DENIED" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_pd_over_tls_when_pd_urls_are_https(world: TLSWorld) -> None:
    from ingest.config import ConfigError
    from ingest.errors import TSOError
    from ingest.tso import TSOClient
    from upstream.tso import serve_tso

    server, port = serve_tso("127.0.0.1:0", 77, credentials=world.server.grpc_server_credentials())
    try:
        url = f"https://127.0.0.1:{port}"
        assert TSOClient(url, credentials=world.client.pd_credentials(url)).get_ts() > 0
        with pytest.raises(TSOError):
            TSOClient(url, timeout=2, credentials=world.stranger.pd_credentials(url)).get_ts()
        with pytest.raises(ConfigError, match="pd-urls .* are https"):
            SecurityConfig().pd_credentials(url)
        assert world.client.pd_credentials(f"http://127.0.0.1:{port}") is None   # plain PD stays plain
    finally:
        server.stop(0)


def test_a_plain_status_api_beyond_loopback_is_warned_about(caplog: pytest.LogCaptureFixture,
                                                           world: TLSWorld) -> None:
    from ingest.httpserver import warn_if_plain
    from ingest.security import SecurityConfig

    for addr, sec, warned in (("0.0.0.0:0", SecurityConfig(), True), ("127.0.0.1:0", SecurityConfig(), False),
                              ("0.0.0.0:0", world.server, False)):
        caplog.clear()
        with caplog.at_level("WARNING", logger="ingest.httpserver"):
            warn_if_plain(addr, sec, "the test's status API")
        assert ("plain HTTP without authentication" in caplog.text) == warned, (addr, caplog.text)


def test_peer_log_holds_back_repeats_per_client(caplog: pytest.LogCaptureFixture,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from ingest import peerlog

    now = [100.0]
    monkeypatch.setattr(peerlog.time, "monotonic", lambda: now[0])
    plog = peerlog.PeerLog(logging.getLogger("test.peerlog"), interval=60.0)
    with caplog.at_level("WARNING", logger="test.peerlog"):
        assert plog.warn("10.0.0.1", "bad") and plog.warn("10.0.0.2", "bad")   # one line per client
        assert not any(plog.warn("10.0.0.1", "bad") for _ in range(5))
        now[0] += 61
        assert plog.warn("10.0.0.1", "bad again")
    assert len(caplog.records) == 3
    assert caplog.records[-1].getMessage() == "10.0.0.1: bad again (5 more from this client held back)"
