"""Real TiDB peers for tests: the Go binaries `make peers` builds into ``.peers/`` (a tidb-server per
TiDB line from TiDB's Go module, ``tests/realtidb/versions.py``; ``pdetcd`` the PD + etcd stand-in,
``pdts`` PD's own Go client), built on first use when a test runs without the Makefile, and started
on loopback with free ports."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import pymysql

from ingest.registry import load_registry
from ingest.registry.base import PUMP
from tests.realtidb.versions import NEWEST, TiDBBuild
from upstream.local import free_port

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / ".peers"


def peer(name: str) -> Path:
    """The path of a built peer binary, running `make` for it first when it is missing."""
    path = PEERS / name
    if not path.exists():
        subprocess.run(["make", "-s", f".peers/{name}"], cwd=ROOT, check=True)
    return path


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class PDEtcd:
    """``pdetcd``: etcd's KV/Watch API and PD's GetMembers/Tso on one loopback address."""

    def __init__(self, root: Path, cluster_id: int = 6_900_000_000_000_000_001, offset_ms: int = -1) -> None:
        self.root = root
        self.cluster_id = cluster_id
        self.offset_ms = offset_ms   # its TSO's distance from the wall clock (tidb-server on unistore stamps by it)
        self.addr = f"127.0.0.1:{free_port()}"
        self.peer_addr = f"127.0.0.1:{free_port()}"   # kept, so a stopped pdetcd restarts on its data dir
        self.log = root / "pdetcd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``http://host:port``: what TiDB's ``-path``, pd-urls and the etcd registry point at."""
        return f"http://{self.addr}"

    def __enter__(self) -> PDEtcd:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(peer("pdetcd")), "-addr", self.addr, "-peer-addr", self.peer_addr,
                 "-data-dir", str(self.root / "pdetcd.data"), "-cluster-id", str(self.cluster_id),
                 "-offset-ms", str(self.offset_ms)],
                stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("ready"):
            self.__exit__(None, None, None)
            raise RuntimeError(f"pdetcd did not start: {line!r}\n{_tail(self.log)}")
        return self

    def pump_state(self, node_id: str) -> str:
        """The registry state of pump ``node_id`` in this etcd ("" when it is not registered)."""
        registry = load_registry(f"etcd://{self.addr}")
        try:
            node = registry.get_node(PUMP, node_id)
        finally:
            registry.close()
        return node.state if node is not None else ""

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


TIDB_CONFIG = """\
[binlog]
enable = true
ignore-error = false
write-timeout = "{write_timeout}"
{socket}
[log]
level = "warn"
[performance]
run-auto-analyze = false
[status]
report-status = true
"""


@dataclass
class TiDBServer:
    """A real ``tidb-server`` of ``build`` on unistore with binlog on, writing to the pumps registered
    in ``pd``'s etcd.

    TiDB refuses to start while no pump is registered, so start the pumps first.
    """

    root: Path
    pd_url: str
    binlog_socket: str = ""
    build: TiDBBuild = NEWEST
    write_timeout: str = "15s"     # the pump client's binlog write timeout: past it, it tries another pump
    store_dir: Path | None = None  # unistore's data dir, kept across restarts (default: a temporary one)
    port: int = field(default_factory=free_port)
    status_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        """tidb-server's log file."""
        return self.root / "tidb.log"

    @property
    def dsn(self) -> str:
        """``mysql://root@127.0.0.1:PORT``: what ``verify --upstream-dsn`` reads."""
        return f"mysql://root@127.0.0.1:{self.port}"

    @property
    def status_url(self) -> str:
        """TiDB's status API (``/ddl/history``, ``/schema``, ``/mvcc/hex``)."""
        return f"http://127.0.0.1:{self.status_port}"

    def __enter__(self) -> TiDBServer:
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "tidb.toml"
        socket = f'binlog-socket = "{self.binlog_socket}"' if self.binlog_socket else ""
        config.write_text(TIDB_CONFIG.format(socket=socket, write_timeout=self.write_timeout))
        host_port = self.pd_url.split("://", 1)[-1]
        path = host_port
        if self.store_dir is not None:
            # ``-path`` is read twice: as the URL ``unistore://<path>`` (whose path part is unistore's
            # data dir, a temporary one when empty) and as the binlog client's comma-separated PD
            # endpoints; a second endpoint carries the dir, and the client reaches PD through the first
            path = f"{host_port},{host_port}{self.store_dir.resolve()}"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(peer(self.build.binary)), "-config", str(config), "-store", "unistore", "-path", path,
                 "-host", "127.0.0.1", "-P", str(self.port), "-status-host", "127.0.0.1",
                 "-status", str(self.status_port), "-socket", "", "-log-file", str(self.log)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.root,
                env={**os.environ, "TMPDIR": str(self.root)})
        self._wait_ready(120)
        # unistore runs no GC worker: snapshot reads (verify's @@tidb_snapshot) need a safe point row
        self.execute("INSERT IGNORE INTO mysql.tidb VALUES ('tikv_gc_safe_point', '20000101-00:00:00.000 +0000', '')")
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"tidb-server exited with {self.proc.returncode}:\n{_tail(self.log)}")
            try:
                self.connect().close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.3)
        raise RuntimeError(f"tidb-server not answering on {self.port} after {timeout}s:\n{_tail(self.log)}")

    def connect(self, database: str | None = None) -> pymysql.connections.Connection:
        """A new autocommit connection to TiDB's MySQL port."""
        return pymysql.connect(host="127.0.0.1", port=self.port, user="root", database=database,
                               autocommit=True, connect_timeout=5, read_timeout=60, write_timeout=60)

    def execute(self, *statements: str, database: str | None = None) -> None:
        """Run statements one by one (autocommit) on a new connection, in ``database`` if given."""
        conn = self.connect(database)
        try:
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
        finally:
            conn.close()

    def query(self, sql: str) -> list[tuple[object, ...]]:
        """The rows of one query."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())
        finally:
            conn.close()

    def current_ts(self) -> int:
        """A fresh TSO of TiDB's (unistore's clock): the start ts of a new transaction, above every
        commit before it (``TIDB_CURRENT_TSO()`` answers 0 outside a transaction)."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute("SELECT @@tidb_current_ts")
                (row,) = cur.fetchall()
                cur.execute("ROLLBACK")
        finally:
            conn.close()
        ts = int(str(row[0]))
        assert ts > 0
        return ts

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def scratch_dir(prefix: str) -> Path:
    """A short temporary directory (unix socket paths must stay under 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    return path


def remove(path: Path) -> None:
    """Remove a scratch directory, ignoring what is already gone."""
    shutil.rmtree(path, ignore_errors=True)


GO_PUMP_ENV = "BINLAKE_GO_PUMP"   # path of TiDB Binlog's pump binary, built by hand (not in CI)


@dataclass
class GoPump:
    """TiDB Binlog's own pump process, registered in ``pd``'s etcd as TiDB's pump client expects.

    The binary cannot be built in CI (the Go module proxy does not serve tidb-binlog); tests that
    need one read its path from ``BINLAKE_GO_PUMP``."""

    binary: Path
    root: Path
    pd: PDEtcd
    node_id: str
    addr: str = field(default_factory=lambda: f"127.0.0.1:{free_port()}")
    extra_args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def registry(self) -> str:
        """Where it registers: PD's etcd."""
        return f"etcd://{self.pd.addr}"

    @property
    def log(self) -> Path:
        """The pump's log file."""
        return self.root / f"{self.node_id}.log"

    def start(self, timeout: float = 60.0) -> GoPump:
        """Start it (heartbeat and fake binlogs every second) and wait until it is registered online."""
        from ingest.registry import load_registry
        from ingest.registry.base import ONLINE, PUMP

        self.root.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [str(self.binary), "-addr", self.addr, "-advertise-addr", self.addr, "-pd-urls", self.pd.url,
             "-data-dir", str(self.root / self.node_id), "-node-id", self.node_id, "-heartbeat-interval", "1",
             "-fake-binlog-interval", "1", "-log-file", str(self.log), *self.extra_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.root)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Go pump exited with {self.proc.returncode}:\n{self.log_tail()}")
            registry = load_registry(self.registry)
            try:
                node = registry.get_node(PUMP, self.node_id)
            finally:
                registry.close()
            if node is not None and node.state == ONLINE and node.max_commit_ts > 0:
                return self
            time.sleep(0.3)
        raise RuntimeError(f"the Go pump is not registered online after {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of its log."""
        return _tail(self.log, lines)

    def kill(self) -> None:
        """``kill -9`` it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
