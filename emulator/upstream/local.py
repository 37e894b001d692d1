"""A local cluster on loopback: a PD-compatible TSO, ``binlake pump`` processes and a throwaway MariaDB
(for the demo, tests, benches; part of the emulator's distribution, not of binlake's)."""
from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from ingest.errors import IngestError
from schemas import pump_pb2, pump_pb2_grpc
from schemas.errors import BinlakeError
from upstream.tso import serve_tso

DEFAULT_CLUSTER_ID = 6_000_000_000_000_000_001


_HANDED_OUT: set[int] = set()
_HANDED_LOCK = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``host`` and that this process has not handed out before:
    callers that bind later (a pump's gRPC and status ports, chosen before either starts) never get
    the same one, which the kernel would otherwise give twice while nobody holds it."""
    with _HANDED_LOCK:
        for _ in range(1000):
            with socket.socket() as s:
                s.bind((host, 0))
                port = int(s.getsockname()[1])
            if port not in _HANDED_OUT:
                break
        else:
            _HANDED_OUT.clear()
        _HANDED_OUT.add(port)
        return port


class LocalTSO:
    """An in-process PD-compatible TSO on 127.0.0.1."""

    def __init__(self, cluster_id: int = DEFAULT_CLUSTER_ID, port: int = 0) -> None:
        self.cluster_id = cluster_id
        self.server, self.port = serve_tso(f"127.0.0.1:{port}", cluster_id)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop serving."""
        self.server.stop(grace=0.5).wait()


@dataclass
class PumpProcess:
    """A ``binlake pump`` child process with its own ports and data directory."""

    data_dir: Path
    pd_url: str
    registry: str
    node_id: str
    extra_args: list[str] = field(default_factory=list)
    config: Path | None = None
    addr: str = ""
    status_addr: str = ""
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    client_tls: ssl.SSLContext | None = None   # how this helper reaches an HTTPS status API

    def __post_init__(self) -> None:
        self.addr = self.addr or f"127.0.0.1:{free_port()}"
        self.status_addr = self.status_addr or f"127.0.0.1:{free_port()}"
        self.log_path = self.log_path or self.data_dir.parent / f"{self.node_id}.log"

    @property
    def status_url(self) -> str:
        """Base URL of the pump's HTTP API."""
        return f"{'https' if self.client_tls else 'http'}://{self.status_addr}"

    def start(self, wait: bool = True, timeout: float = 30.0) -> PumpProcess:
        """Launch the process; with ``wait``, return once its HTTP API reports it online."""
        args = [sys.executable, "-m", "binlake.cli", "pump", "--addr", self.addr,
                "--status-addr", self.status_addr, "--data-dir", str(self.data_dir),
                "--pd-urls", self.pd_url, "--registry", self.registry, "--node-id", self.node_id]
        if self.config is not None:
            args += ["--config", str(self.config)]
        args += self.extra_args
        assert self.log_path is not None
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        if wait:
            self.wait_online(timeout)
        return self

    def wait_online(self, timeout: float = 30.0) -> None:
        """Wait until ``/status`` answers with this pump online; raise with the log tail if it died."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise IngestError(f"pump {self.node_id} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self.status().get("binlake", {}).get("state") == "online":
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise IngestError(f"pump {self.node_id} not online after {timeout}s:\n{self.log_tail()}")

    def status(self) -> dict[str, Any]:
        """The pump's ``/status`` JSON."""
        with urllib.request.urlopen(f"{self.status_url}/status", timeout=5, context=self.client_tls) as resp:
            status: dict[str, Any] = json.loads(resp.read())  # /status answers a JSON object
            return status

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the pump's log."""
        try:
            assert self.log_path is not None
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """``kill -9`` the process and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM (the pump pauses) and wait; SIGKILL if it does not exit in time."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def wait_exit(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit by itself; return its exit status."""
        assert self.proc is not None
        return self.proc.wait(timeout)


class PumpWriter:
    """A minimal TiDB-side writer: WriteBinlog calls to one pump."""

    def __init__(self, addr: str, cluster_id: int, max_message: int = (1 << 31) - 1) -> None:
        self.channel = grpc.insecure_channel(addr, [("grpc.max_send_message_length", max_message)])
        self.stub = pump_pb2_grpc.PumpStub(self.channel)
        self.cluster_id = cluster_id

    def write(self, payload: bytes, timeout: float = 15.0, cluster_id: int | None = None) -> None:
        """Send one marshalled binlog; raise ``grpc.RpcError`` or ``IngestError`` on refusal."""
        resp = self.stub.WriteBinlog(pump_pb2.WriteBinlogReq(
            clusterID=self.cluster_id if cluster_id is None else cluster_id, payload=payload), timeout=timeout)
        if resp.errmsg:
            raise IngestError(resp.errmsg)

    def close(self) -> None:
        """Close the channel."""
        self.channel.close()


def http(method: str, url: str, timeout: float = 10.0, tls: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """One HTTP(S) request; return (status, body) for any status."""
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=tls) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def stop_group(proc: subprocess.Popen[bytes] | None, timeout: float = 20.0) -> None:
    """SIGTERM ``proc``'s process group (started with ``start_new_session``), SIGKILL if it has not
    exited within ``timeout`` s; nothing when it is not running."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class MariaDBError(BinlakeError, RuntimeError):
    """A local MariaDB could not be initialised or did not come up (the message carries its log tail)."""


class MariaDBProcess:
    """A throwaway MariaDB (Debian's ``mariadbd``) on 127.0.0.1 with its data under ``directory``, run as
    root with ``--user=root``, and a password-authenticated ``user`` that may do anything. ``start`` /
    ``stop``, or use it as a context manager; ``dsn`` is what ``--to-dsn`` takes."""

    def __init__(self, directory: Path, user: str = "binlake", password: str = "binlake-demo",
                 port: int = 0, options: tuple[str, ...] = ()) -> None:
        self.dir = directory
        self.user, self.password = user, password
        self.port = port or free_port()
        self.options = options      # more mariadbd options (--ssl-cert=…)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        """``mysql://USER:PASS@127.0.0.1:PORT``."""
        return f"mysql://{self.user}:{self.password}@127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's log."""
        return self.dir / "mariadb.log"

    def start(self, timeout: float = 60.0) -> MariaDBProcess:
        """Initialise the data directory, start the server, create the user; ``MariaDBError`` on failure."""
        import shutil

        server = shutil.which("mariadbd")
        if server is None:
            raise MariaDBError("mariadbd is not installed (apt-get install mariadb-server mariadb-client)")
        self.dir.mkdir(parents=True, exist_ok=True)
        data, sock = self.dir / "data", self.dir / "mysqld.sock"
        init = subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                               "--auth-root-authentication-method=normal", "--skip-test-db"],
                              capture_output=True, text=True, check=False)
        if init.returncode != 0:
            raise MariaDBError(f"mariadb-install-db failed: {init.stdout[-1500:]}{init.stderr[-1500:]}")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [server, "--no-defaults", f"--datadir={data}", f"--socket={sock}", f"--port={self.port}",
                 "--bind-address=127.0.0.1", "--user=root", f"--pid-file={self.dir / 'mysqld.pid'}",
                 "--innodb-buffer-pool-size=128M", "--skip-name-resolve", "--max-connections=500", *self.options],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            ping = subprocess.run(["mariadb", "--no-defaults", f"--socket={sock}", "-uroot", "-e",
                                   f"CREATE USER IF NOT EXISTS '{self.user}'@'%' IDENTIFIED BY '{self.password}'; "
                                   f"GRANT ALL ON *.* TO '{self.user}'@'%' WITH GRANT OPTION"],
                                  capture_output=True, text=True, check=False)
            if ping.returncode == 0:
                return self
            if time.monotonic() > deadline or self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                self.stop()
                raise MariaDBError(f"MariaDB not up on 127.0.0.1:{self.port}: {ping.stderr}\n{tail}")
            time.sleep(0.2)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the server's process group (SIGKILL after ``timeout``); nothing if it is not running."""
        stop_group(self.proc, timeout)

    def __enter__(self) -> MariaDBProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
