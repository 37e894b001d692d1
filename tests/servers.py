"""Real servers for integration tests: a throwaway single-node etcd (Debian's, installed on first
use), PostgreSQL and MariaDB (Debian's, likewise), a Spark standalone cluster started from the pyspark package,
an S3 endpoint (``moto_server``), Apache Iceberg's REST catalog server (the jars ``make iceberg-rest``
downloads), an Apache Kafka broker (the jars ``make kafka`` downloads).

Generic on purpose: any test folder may ``from tests.servers import EtcdServer, SparkStandalone``.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from upstream.local import MariaDBError, MariaDBProcess, free_port, stop_group

_INSTALL_LOCK = threading.Lock()


class ServerError(RuntimeError):
    """A test server could not be installed, started or reached."""


def apt_install(packages: list[str], binaries: list[str]) -> None:
    """Install Debian ``packages`` with apt-get (after ``apt-get update``) unless ``binaries`` are on PATH.

    A non-zero exit of the install step is tolerated when the binaries are there afterwards
    (``policy-rc.d`` may refuse to start a packaged service; we run the binaries ourselves).
    Raises ``ServerError`` with apt's output otherwise.
    """
    if all(shutil.which(b) for b in binaries):
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    lock_wait = ["-o", "DPkg::Lock::Timeout=300"]  # another test process may be installing too
    for cmd in (["apt-get", *lock_wait, "update"],
                ["apt-get", *lock_wait, "install", "-y", "--no-install-recommends", *packages]):
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, check=False)
        if proc.returncode != 0 and (cmd[-1] == "update" or not all(shutil.which(b) for b in binaries)):
            raise ServerError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}")
    missing = [b for b in binaries if shutil.which(b) is None]
    if missing:
        raise ServerError(f"{', '.join(missing)} still not on PATH after installing {', '.join(packages)}")


def ensure_etcd_installed() -> str:
    """Return the path of the ``etcd`` binary, installing Debian's etcd-server/etcd-client if absent."""
    with _INSTALL_LOCK:
        apt_install(["etcd-server", "etcd-client"], ["etcd", "etcdctl"])
    path = shutil.which("etcd")
    assert path is not None
    return path


class EtcdServer:
    """A single-node etcd on 127.0.0.1 with free ports and a temporary data dir.

    Use as a context manager: on entry etcd is installed if needed, started and answering
    ``/health``; on exit it is stopped (terminate, then kill) and its data dir removed.
    ``stop()``/``start()`` may also be called directly (restart keeps the data and ports).
    """

    def __init__(self, startup_timeout: float = 30.0, name: str = "binlake-test",
                 tls: tuple[Path, Path, Path] | None = None) -> None:
        self.name = name
        self.startup_timeout = startup_timeout
        self.tls = tls   # (CA, certificate, key): clients must present a certificate the CA signed
        self.client_port = free_port()
        self.peer_port = free_port()
        self.metrics_port = free_port()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.data_dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:<client port>``."""
        return f"127.0.0.1:{self.client_port}"

    @property
    def uri(self) -> str:
        """``etcd://127.0.0.1:<client port>``, accepted by ``ingest.registry.load_registry``."""
        return f"etcd://{self.endpoint}"

    @property
    def client_url(self) -> str:
        """``http(s)://127.0.0.1:<client port>`` (what etcdctl's ``--endpoints`` and pd-urls look like)."""
        return f"{'https' if self.tls else 'http'}://{self.endpoint}"

    def command(self) -> list[str]:
        """The etcd command line this server runs."""
        assert self.data_dir is not None
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            ensure_etcd_installed(), "--name", self.name, "--data-dir", str(self.data_dir / "etcd"),
            "--listen-client-urls", self.client_url, "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{self.name}={peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{self.metrics_port}",
        ] + ([] if self.tls is None else [
            "--trusted-ca-file", str(self.tls[0]), "--cert-file", str(self.tls[1]), "--key-file", str(self.tls[2]),
            "--client-cert-auth"])

    def start(self) -> EtcdServer:
        """Start etcd (creating the data dir on first start) and wait until it is healthy."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="binlake-etcd-")
            self.data_dir = Path(self._tmp.name)
            self._log = self.data_dir / "etcd.log"
        assert self._log is not None
        with open(self._log, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"etcd exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                url = f"http://127.0.0.1:{self.metrics_port}/health" if self.tls else f"{self.client_url}/health"
                with urllib.request.urlopen(url, timeout=1.0) as resp:
                    if resp.status == 200 and b"true" in resp.read():
                        return
            except (OSError, urllib.error.URLError) as exc:
                last = str(exc)
            time.sleep(0.05)
        self.stop()
        raise ServerError(f"etcd on {self.endpoint} not healthy after {self.startup_timeout}s ({last}):\n"
                          f"{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        """The last ``chars`` characters of etcd's log."""
        if self._log is None or not self._log.exists():
            return ""
        return self._log.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        """Stop etcd: SIGTERM, then SIGKILL if it has not exited within 10 s. Keeps the data dir."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def cleanup(self) -> None:
        """Stop etcd and delete its data dir."""
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self.data_dir = None

    def etcdctl(self, *args: str, timeout: float = 30.0) -> str:
        """Run ``etcdctl`` (API v3) against this server and return its stdout; raise on failure."""
        ensure_etcd_installed()
        env = dict(os.environ, ETCDCTL_API="3")
        proc = subprocess.run(["etcdctl", "--endpoints", self.client_url, *args], env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise ServerError(f"etcdctl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc.stdout

    def __enter__(self) -> EtcdServer:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.cleanup()


class SparkStandalone:
    """A Spark standalone cluster on 127.0.0.1 started from the pyspark package: one master and
    ``workers`` workers (``cores`` cores each), and an executor Python that has every library of
    this environment but not binlake's own code (so a drain must ship it). Context manager."""

    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1500m") -> None:
        import pyspark

        self.home = Path(pyspark.__file__).resolve().parent
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port, self.ui_port = free_port(), free_port()
        self._tmp = tempfile.TemporaryDirectory(prefix="binlake-spark-")
        self.dir = Path(self._tmp.name)
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def master(self) -> str:
        """The master URL (``spark://127.0.0.1:PORT``)."""
        return f"spark://127.0.0.1:{self.port}"

    @property
    def executor_python(self) -> Path:
        """A Python seeing this environment's site-packages through a ``.pth`` line: the editable
        install's finder (a ``.pth`` of its own) does not run there, so binlake is not importable."""
        return self.dir / "executor-venv" / "bin" / "python"

    def _make_executor_python(self) -> None:
        venv = self.dir / "executor-venv"
        subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
        (next(venv.glob("lib/python*/site-packages")) / "binlake-deps.pth").write_text(site + "\n")

    def _spawn(self, name: str, args: list[str]) -> None:
        env = {**os.environ, "SPARK_HOME": str(self.home), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_WORKER_DIR": str(self.dir / "work")}
        with open(self.dir / f"{name}.log", "ab") as log:
            self.procs.append(subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], env=env,
                                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               start_new_session=True))

    def alive_workers(self) -> int:
        """Workers the master counts as alive (its web UI's JSON)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as resp:
                return int(json.loads(resp.read()).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def __enter__(self) -> SparkStandalone:
        self._make_executor_python()
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", str(self.ui_port)])
        for i in range(self.workers):
            self._spawn(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                        "--cores", str(self.cores), "--memory", self.memory,
                                        "--webui-port", str(free_port()), "--work-dir", str(self.dir / f"work-{i}"),
                                        self.master])
        deadline = time.monotonic() + 90
        while self.alive_workers() < self.workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                logs = "\n".join((self.dir / f).read_text(errors="replace")[-1500:]
                                 for f in os.listdir(self.dir) if f.endswith(".log"))
                self.__exit__()
                raise ServerError(f"Spark standalone cluster not up with {self.workers} workers:\n{logs}")
            time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self._tmp.cleanup()


class MotoS3:
    """A real HTTP S3 endpoint on 127.0.0.1: moto's ``moto_server`` process (any key pair is
    accepted). ``properties`` are the pyiceberg properties that reach it. Context manager."""

    ACCESS_KEY, SECRET_KEY, REGION = "binlake-test-key", "binlake-test-secret", "us-east-1"

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="binlake-moto-", suffix=".log", delete=False)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties for this endpoint, without the credentials."""
        return {"s3.endpoint": self.endpoint, "s3.region": self.REGION, "s3.force-virtual-addressing": "false"}

    def make_bucket(self, name: str) -> None:
        """Create bucket ``name`` (S3 wants at least 3 characters)."""
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint, region_name=self.REGION, aws_access_key_id=self.ACCESS_KEY,
                     aws_secret_access_key=self.SECRET_KEY).create_bucket(Bucket=name)

    def objects(self, bucket: str) -> list[str]:
        """The keys in ``bucket``."""
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, region_name=self.REGION,
                              aws_access_key_id=self.ACCESS_KEY, aws_secret_access_key=self.SECRET_KEY)
        return [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
                for o in page.get("Contents", [])]

    def __enter__(self) -> MotoS3:
        binary = Path(sys.executable).parent / "moto_server"
        self.proc = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(self.port)], stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2):
                    return self
            except (OSError, urllib.error.URLError) as e:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.__exit__()
                    raise ServerError(f"moto_server not up on {self.endpoint}: {e}\n"
                                      f"{Path(self._log.name).read_text(errors='replace')[-2000:]}") from e
                time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        stop_group(self.proc, 10)
        Path(self._log.name).unlink(missing_ok=True)


def ensure_postgres_installed() -> Path:
    """The directory of Debian's PostgreSQL server binaries (``initdb``, ``postgres``), installing
    the ``postgresql`` package if absent (its binaries live off PATH, under /usr/lib/postgresql)."""
    def found() -> list[Path]:
        return sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    with _INSTALL_LOCK:
        if not found():
            apt_install(["postgresql"], ["pg_ctlcluster"])
    if not found():
        raise ServerError("the postgresql package left no /usr/lib/postgresql/*/bin/postgres")
    return found()[-1].parent


class PostgresServer:
    """A throwaway PostgreSQL on 127.0.0.1 run as the ``postgres`` OS user (it refuses root), with a
    password-authenticated superuser ``binlake`` and a database ``binlake``; :meth:`create_database`
    makes more (one per test keeps catalogs apart). Context manager."""

    USER, PASSWORD, DATABASE = "binlake", "pg-test-Secret-41", "binlake"

    def __init__(self) -> None:
        self.bin = ensure_postgres_installed()
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="binlake-pg-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def uri(self, database: str | None = None) -> str:
        """The SQLAlchemy URI (psycopg2 driver) of ``database`` (default ``binlake``)."""
        return (f"postgresql+psycopg2://{self.USER}:{self.PASSWORD}@127.0.0.1:{self.port}/"
                f"{database or self.DATABASE}")

    def create_database(self, name: str) -> str:
        """Create database ``name``; returns its URI."""
        import psycopg2

        con = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.USER, password=self.PASSWORD,
                               dbname=self.DATABASE)
        try:
            con.autocommit = True
            with con.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            con.close()
        return self.uri(name)

    def _as_postgres(self, *args: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *args]

    def __enter__(self) -> PostgresServer:
        shutil.chown(self.dir, "postgres")
        pwfile = self.dir / "pw"
        pwfile.write_text(self.PASSWORD + "\n")
        shutil.chown(pwfile, "postgres")
        init = subprocess.run(self._as_postgres(str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-U",
                                                self.USER, "--auth=scram-sha-256", f"--pwfile={pwfile}"),
                              capture_output=True, text=True, check=False)
        if init.returncode != 0:
            raise ServerError(f"initdb failed: {init.stdout[-1500:]}{init.stderr[-1500:]}")
        with open(self.dir / "postgres.log", "ab") as log:
            serve = [str(self.bin / "postgres"), "-D", str(self.dir / "data"), "-h", "127.0.0.1",
                     "-p", str(self.port), "-k", str(self.dir)]
            self.proc = subprocess.Popen(self._as_postgres(*serve), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while not self._accepts():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                log_text = (self.dir / "postgres.log").read_text(errors="replace")[-2000:]
                self.__exit__()
                raise ServerError(f"PostgreSQL not up on 127.0.0.1:{self.port}:\n{log_text}")
            time.sleep(0.2)
        created = subprocess.run(self._as_postgres(str(self.bin / "createdb"), "-h", str(self.dir), "-p",
                                                   str(self.port), "-U", self.USER, self.DATABASE),
                                 capture_output=True, text=True, check=False, env={**os.environ,
                                                                                   "PGPASSWORD": self.PASSWORD})
        if created.returncode != 0:
            self.__exit__()
            raise ServerError(f"createdb failed: {created.stderr[-1500:]}")
        return self

    def _accepts(self) -> bool:
        ready = subprocess.run([str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                               capture_output=True, check=False)
        return ready.returncode == 0

    def __exit__(self, *exc: object) -> None:
        stop_group(self.proc, 20)   # PostgreSQL's smart shutdown
        shutil.rmtree(self.dir, ignore_errors=True)


def ensure_mariadb_installed() -> str:
    """The path of Debian's ``mariadbd``, installing mariadb-server/mariadb-client if absent."""
    with _INSTALL_LOCK:
        apt_install(["mariadb-server", "mariadb-client"], ["mariadbd", "mariadb-install-db", "mariadb"])
    path = shutil.which("mariadbd")
    assert path is not None
    return path


class MariaDBServer(MariaDBProcess):
    """A throwaway MariaDB (``upstream.local.MariaDBProcess``, installed from Debian if absent) in a fresh
    temporary directory, with a password-authenticated user ``binlake`` that may do anything;
    :meth:`connect` / :meth:`reset`. Context manager (removes the directory)."""

    USER, PASSWORD = "binlake", "maria-test-Secret-73"

    def __init__(self, options: tuple[str, ...] = ()) -> None:
        ensure_mariadb_installed()
        super().__init__(Path(tempfile.mkdtemp(prefix="binlake-maria-")), self.USER, self.PASSWORD, options=options)

    def connect(self, database: str | None = None) -> object:
        """A pymysql connection as ``binlake`` (autocommit on)."""
        import pymysql

        return pymysql.connect(host="127.0.0.1", port=self.port, user=self.USER, password=self.PASSWORD,
                               database=database, autocommit=True, charset="utf8mb4")

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of one statement, on a fresh connection."""
        conn: Any = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())
        finally:
            conn.close()

    def reset(self, *databases: str) -> None:
        """Drop ``databases`` (and the checkpoint schema) so a test starts from an empty downstream."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:  # type: ignore[attr-defined]
                for db in (*databases, "tidb_binlog"):
                    cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        finally:
            conn.close()  # type: ignore[attr-defined]

    def kill(self) -> None:
        """SIGKILL the server, as a crash; :meth:`start` brings it back on its data (InnoDB recovers)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> MariaDBServer:
        try:
            self.start()
        except MariaDBError as e:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise ServerError(str(e)) from None
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


_ROOT = Path(__file__).resolve().parent.parent
ICEBERG_REST_CLASSPATH = _ROOT / ".peers" / "iceberg-rest" / "classpath"


KAFKA_CLASSPATH = _ROOT / ".peers" / "kafka" / "classpath"


ICEBERG_SPARK_CLASSPATH = _ROOT / ".peers" / "iceberg-spark" / "classpath"
ICEBERG_SPARK_PYTHON = _ROOT / ".peers" / "iceberg-spark" / "venv" / "bin" / "python"


def _listed_jars(listing: Path) -> list[Path] | None:
    """The jars a Makefile ``classpath`` file lists, in its order, or None when it is missing or a
    listed jar is gone."""
    if not listing.exists():
        return None
    jars = [_ROOT / line for line in listing.read_text().split()]
    return jars if jars and all(j.is_file() for j in jars) else None


def file_tail(path: Path, chars: int = 3000) -> str:
    """The last ``chars`` characters of a log file ("" when it cannot be read)."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def iceberg_rest_classpath() -> list[Path] | None:
    """The jars of the Iceberg REST catalog server, in the order ``make iceberg-rest`` listed them
    (``.peers/iceberg-rest/classpath``), or None when that has not run or a listed jar is gone."""
    return _listed_jars(ICEBERG_REST_CLASSPATH)


def kafka_classpath() -> list[Path] | None:
    """The jars of Apache Kafka's broker, in the order ``make kafka`` listed them
    (``.peers/kafka/classpath``), or None when that has not run or a listed jar is gone."""
    return _listed_jars(KAFKA_CLASSPATH)


def iceberg_spark() -> tuple[Path, list[Path]] | None:
    """The Python of the Spark with Iceberg's Java runtime and that runtime's jars, as ``make iceberg-spark``
    installed them (``.peers/iceberg-spark/venv``, ``.peers/iceberg-spark/classpath``), or None when
    that has not run or a part of it is gone."""
    jars = _listed_jars(ICEBERG_SPARK_CLASSPATH)
    stamp = ICEBERG_SPARK_PYTHON.parent.parent / ".installed"
    return (ICEBERG_SPARK_PYTHON, jars) if jars and stamp.exists() and ICEBERG_SPARK_PYTHON.exists() else None


class RestCatalogServer:
    """Apache Iceberg's REST catalog server (``org.apache.iceberg.rest.RESTCatalogServer``, the server
    of the apache/iceberg-rest-fixture image, on the classpath ``make iceberg-rest`` downloads) on a
    free port: a ``JdbcCatalog`` in a SQLite file behind it, configured as the image configures it
    (``CATALOG_*`` environment variables become catalog properties: ``CATALOG_URI`` → ``uri``,
    ``CATALOG_REST_PORT`` → ``rest.port``, ``CATALOG_CATALOG__IMPL`` → ``catalog-impl``), and a
    local warehouse directory it creates tables in (its HadoopFileIO writes the metadata files there).
    Jetty listens on every interface at the port (the server has no host setting); clients use
    127.0.0.1. Context manager: on entry it is started and answering ``GET /v1/config``; on exit it
    is stopped and its directory removed."""

    MAIN_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"

    def __init__(self, classpath: list[Path], startup_timeout: float = 90.0) -> None:
        self.classpath = classpath
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="binlake-iceberg-rest-"))
        self.warehouse_dir = self.dir / "warehouse"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = self.dir / "server.log"

    @property
    def uri(self) -> str:
        """``http://127.0.0.1:<port>``: the catalog URI (``--catalog-uri``, pyiceberg's ``uri``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def warehouse(self) -> str:
        """``file://<dir>``: the warehouse the server puts new tables under."""
        return f"file://{self.warehouse_dir}"

    def environment(self) -> dict[str, str]:
        """The server process's environment: this one without ``CATALOG_*`` variables, plus ours."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
        return {**env,
                "CATALOG_CATALOG__IMPL": "org.apache.iceberg.jdbc.JdbcCatalog",
                "CATALOG_URI": f"jdbc:sqlite:file:{self.dir / 'catalog.db'}",
                "CATALOG_JDBC_USER": "user", "CATALOG_JDBC_PASSWORD": "password",
                "CATALOG_WAREHOUSE": self.warehouse,
                "CATALOG_REST_PORT": str(self.port)}

    def log_tail(self, chars: int = 3000) -> str:
        """The last ``chars`` characters of the server's log (stdout and stderr)."""
        return file_tail(self._log, chars)

    def __enter__(self) -> RestCatalogServer:
        java = shutil.which("java")
        if java is None:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise ServerError("no java on PATH for the Iceberg REST catalog server (Java 17 expected)")
        self.warehouse_dir.mkdir()
        with open(self._log, "ab") as log:
            self.proc = subprocess.Popen(
                [java, "-Xmx512m", "-cp", os.pathsep.join(str(j) for j in self.classpath), self.MAIN_CLASS],
                env=self.environment(), cwd=self.dir, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        last = ""
        while True:
            try:
                with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=2) as resp:
                    if resp.status == 200 and "defaults" in json.loads(resp.read()):
                        return self
            except (OSError, ValueError) as e:   # URLError is an OSError
                last = str(e)
            if time.monotonic() > deadline or self.proc.poll() is not None:
                exited = self.proc.poll()
                tail = self.log_tail()
                self.__exit__()
                state = (f"exited with {exited}" if exited is not None
                         else f"not answering after {self.startup_timeout}s")
                raise ServerError(f"Iceberg REST catalog server on {self.uri} {state} ({last}):\n{tail}")
            time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        stop_group(self.proc, 10)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


class KafkaServer:
    """A one-node Apache Kafka broker in KRaft mode (``kafka.Kafka`` as broker and controller in one
    JVM, on the classpath ``make kafka`` downloads) on free 127.0.0.1 ports, its log dir in a temporary
    directory. The internal topics have one partition and replication factor 1 with min ISR 1, so
    transactions and consumer groups work on one node. ``extra`` adds or overrides server properties
    (``{"auto.create.topics.enable": "false"}``).

    Context manager: on entry the storage is formatted, the broker started and ready (a client has
    created and deleted a topic); on exit it is stopped and its directory removed. ``stop()`` and
    ``start()`` may also be called directly: a restart keeps the data, the ports and the cluster id."""

    MAIN_CLASS = "kafka.Kafka"
    STORAGE_TOOL = "kafka.tools.StorageTool"   # what the release's kafka-storage.sh runs
    # small for a 2-core machine: ready in about 5 s using 3-4 CPU s, about 280 MiB resident; the C1
    # compiler only (TieredStopAtLevel=1) starts a second sooner with about half the CPU, and
    # bench/kafka_clients.py measured no lower produce rates with it
    JVM_OPTIONS = ("-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")

    def __init__(self, classpath: list[Path], startup_timeout: float = 90.0,
                 extra: dict[str, str] | None = None) -> None:
        self.classpath = classpath
        self.startup_timeout = startup_timeout
        self.extra = dict(extra or {})
        self.port, self.controller_port = free_port(), free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="binlake-kafka-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = self.dir / "server.log"
        self._java: str | None = None

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``: a client's ``bootstrap.servers``."""
        return f"127.0.0.1:{self.port}"

    def properties(self) -> dict[str, str]:
        """The broker's server.properties."""
        controller = f"127.0.0.1:{self.controller_port}"
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{controller}",
            "listeners": f"PLAINTEXT://{self.bootstrap},CONTROLLER://{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.dir / "data"),
            "num.partitions": "1",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            **self.extra,
        }

    def _java_command(self, main: str, *args: str) -> list[str]:
        assert self._java is not None
        return [self._java, *self.JVM_OPTIONS, "-cp", os.pathsep.join(str(j) for j in self.classpath),
                main, *args]

    def _format(self) -> None:
        """Write server.properties and format the log dir with a new cluster id (a no-op once formatted)."""
        config = self.dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        if (self.dir / "data" / "meta.properties").exists():
            return
        cluster_id = "-"
        while cluster_id.startswith("-"):   # Kafka's Uuid text, never an option's dash (as Uuid.randomUuid)
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        done = subprocess.run(self._java_command(self.STORAGE_TOOL, "format", "-t", cluster_id, "-c", str(config)),
                              capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise ServerError(f"kafka storage format failed ({done.returncode}):\n"
                              f"{done.stdout[-1500:]}{done.stderr[-1500:]}")

    def start(self) -> KafkaServer:
        """Format the storage on first start, start the broker and wait until it is ready."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        self._java = shutil.which("java")
        if self._java is None:
            raise ServerError("no java on PATH for the Kafka broker (Java 17 expected)")
        self._format()
        with open(self._log, "ab") as log:
            self.proc = subprocess.Popen(self._java_command(self.MAIN_CLASS, str(self.dir / "server.properties")),
                                         cwd=self.dir, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """Until a client creates (and deletes) a topic; stops the broker and raises on a timeout or exit."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout
        # log_level 0: no line per refused connection while the broker starts; the last error is reported
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        last = ""
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                exited = self.proc.poll()
                self.stop()
                state = f"exited with {exited}" if exited is not None else f"not ready after {self.startup_timeout}s"
                raise ServerError(f"Kafka broker on {self.bootstrap} {state} ({last}):\n{self.log_tail()}")
            probe = f"binlake-ready-{uuid.uuid4().hex[:8]}"   # a new name: an earlier try may have created its own
            try:
                admin.create_topics([NewTopic(probe, 1, 1)], request_timeout=5)[probe].result(timeout=10)
                admin.delete_topics([probe], request_timeout=5)[probe].result(timeout=10)
                return
            except KafkaException as e:
                last = str(e)
            time.sleep(0.2)

    def log_tail(self, chars: int = 3000) -> str:
        """The last ``chars`` characters of the broker's log (stdout and stderr)."""
        return file_tail(self._log, chars)

    def stop(self) -> None:
        """Stop the broker (SIGTERM: a controlled shutdown; SIGKILL after 30 s). Keeps the data."""
        stop_group(self.proc, 30)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL the broker, as a crash (no controlled shutdown). Keeps the data."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def messages(self, topic: str, isolation: str = "read_committed", timeout: float = 60) -> list[bytes]:
        """The value of every message of partition 0 of ``topic`` a consumer at ``isolation`` reads,
        in offset order; ``ServerError`` when they are not all read within ``timeout`` seconds."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"test-{time.monotonic_ns()}",
                             "isolation.level": isolation, "enable.auto.commit": False})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            out: list[bytes] = []
            deadline = time.monotonic() + timeout
            position = low
            while position < high and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    [tp] = consumer.position([TopicPartition(topic, 0)])
                    position = max(position, tp.offset)    # past the control records and aborted batches
                    continue
                if msg.error() is not None:
                    raise ServerError(f"reading {topic}: {msg.error()}")
                out.append(msg.value())
                position = msg.offset() + 1
            if position < high:
                raise ServerError(f"read {topic} up to offset {position} of {high} within {timeout} s")
            return out
        finally:
            consumer.close()

    def __enter__(self) -> KafkaServer:
        try:
            return self.start()
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
