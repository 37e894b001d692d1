"""The named errors: one root (``schemas.errors.BinlakeError``), a kind for every class, one line
from the command for any of them without loading a stage it does not run, and the retry helper."""
from __future__ import annotations

import ast
import builtins
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.errors import BinlakeError, is_terminal
from schemas.retry import retry

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ingest", "transform", "sink", "binlake")   # upstream, the TiDB stand-in, keeps its own

# module → class → transient? Every named error of PACKAGES is here (test_every_named_error_has_a_kind).
KINDS: dict[str, dict[str, bool]] = {
    "ingest.config": {"ConfigError": False},
    "ingest.errors": {"IngestError": False, "MalformedBinlog": False, "NotOnline": True, "DiskFull": True,
                      "StorageLocked": True, "DataDirError": False, "StorageClosed": True, "IndexUnavailable": True,
                      "CorruptRecord": False, "MalformedBatch": False, "RegistryError": True, "NodeNotFound": False,
                      "TSOError": True, "CtlError": False},
    "ingest.pump.node": {"NotifyError": True},
    "ingest.pull_client": {"PullStreamError": True},
    "transform.errors": {"TransformError": False, "DrainError": True, "UndecodableBinlog": False,
                         "FilterRuleError": False, "GoRegexError": False, "PartitionError": False},
    "transform.plan": {"PlanError": True, "PumpUnreachableError": True},
    "transform.in_process": {"RangeTooLarge": True},
    "transform.history": {"HistoryError": True, "JobNotInHistory": True},
    "transform.ddl": {"UnreplicableDDLError": False},
    "transform.partition_drops": {"RemovalRefused": False},
    "transform.codec.errors": {"CodecError": False, "TruncatedError": False, "UnknownFlagError": False,
                               "VarintOverflowError": False, "DecimalError": False, "JSONBinaryError": False,
                               "RowLayoutError": False, "ColumnValueError": False, "SchemaError": False},
    "transform.codec.convert": {"ConversionError": False},
    "sink.errors": {"SinkError": False, "IncompatibleSchemaChange": False, "CatalogConfigError": True},
    "sink.compare": {"VerifyError": False},
    "sink.changelog": {"ConformError": False},
    "sink.registry": {"UnknownSinkError": False},
    "sink.mysql.loader": {"ApplyError": False},
    "sink.binlogfile": {"BinlogFileError": False},
    "sink.kafka.sink": {"KafkaSinkError": True, "KafkaStateError": False},
    "sink.pbfile.sink": {"FileSinkError": False},
    "sink.mysql.target": {"MySQLTargetError": True, "MySQLTLSError": False},
    "sink.mysql.checkpoint": {"CheckpointFormatError": False},
    "sink.mysql.upstream_reader": {"UpstreamSnapshotError": True},
    "sink.parquet.files": {"ParquetSinkError": False, "CorruptStateError": False, "ClusterMismatchError": False,
                           "SinkBusyError": True},
    "sink.iceberg.maintain": {"MaintainError": False},
    "sink.iceberg.quality": {"QualityError": False},
    "sink.iceberg.checkpoint": {"CheckpointError": False},
    "sink.iceberg.commit": {"ConcurrentRunError": True},
    "sink.iceberg.write_plan": {"TableMovedError": True},
    "sink.iceberg.pit": {"LakeRangeError": False},
    "sink.iceberg.s3_credentials": {"S3CredentialsError": False},
    "sink.restore": {"RestoreError": False},
    "binlake.check": {"GreatExpectationsMissing": False},
}
# named errors outside PACKAGES (the stand-in's own stay outside the root): the local MariaDB harness
OTHER_KINDS = {"upstream.local": {"MariaDBError": False}}
# exceptions of PACKAGES that are not named errors: protocol control flow inside the HTTP/2 server
# and the gRPC client, never shown to a user as such
NOT_NAMED = {"WireRpcError", "HpackError", "HeaderListTooLarge", "RpcAbort", "ConnectionError_"}
# the codec's errors stay ValueErrors (and the filter rules', which the configuration's validation
# catches), the harness's MariaDBError a RuntimeError (callers catch those)
ALSO = {"CodecError": ValueError, "SchemaError": ValueError, "FilterRuleError": ValueError, "GoRegexError": ValueError,
        "MariaDBError": RuntimeError}
BUILTIN_ROOTS = {name for name, obj in vars(builtins).items()
                 if isinstance(obj, type) and issubclass(obj, BaseException)}


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def exception_classes() -> set[tuple[str, str]]:
    """(module, class name) of every class of PACKAGES that derives (by base name, through the tree)
    from an exception: read from the source, so a module needing an optional extra still counts."""
    classes: list[tuple[str, str, list[str]]] = []
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                             for b in node.bases]
                    classes.append((_module_of(path), node.name, bases))
    known = set(BUILTIN_ROOTS) | {"HPACKDecodingError", "RpcError", "BinlakeError"}
    found: set[tuple[str, str]] = set()
    changed = True
    while changed:
        changed = False
        for module, name, bases in classes:
            if (module, name) not in found and any(b in known for b in bases):
                found.add((module, name))
                known.add(name)
                changed = True
    return found


def test_every_named_error_has_a_kind() -> None:
    """A new exception class in ingest/transform/sink/binlake must be given a kind here (or be
    listed as protocol control flow): the follower retries or stops on what this table says."""
    declared = {(module, name) for module, classes in KINDS.items() for name in classes}
    found = {(module, name) for module, name in exception_classes() if name not in NOT_NAMED}
    assert found == declared, f"without a kind: {sorted(found - declared)}; gone: {sorted(declared - found)}"


@pytest.mark.parametrize("module, name, transient",
                         [(m, n, t) for kinds in (KINDS, OTHER_KINDS) for m, classes in kinds.items()
                          for n, t in classes.items()])
def test_each_named_error_is_a_binlake_error_of_its_kind(module: str, name: str, transient: bool) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, BinlakeError)
    assert cls.transient is transient
    if name in ALSO:
        assert issubclass(cls, ALSO[name])
    e = cls("what went wrong")
    assert e.kind == ("transient" if transient else "terminal")
    assert is_terminal(e) is not transient
    assert str(e) == "what went wrong"    # messages stay the raiser's own


def test_the_named_cases_of_the_brief() -> None:
    from ingest.config import ConfigError
    from ingest.errors import CorruptRecord, TSOError
    from sink.errors import IncompatibleSchemaChange
    from sink.iceberg.checkpoint import CheckpointError
    from sink.iceberg.commit import ConcurrentRunError
    from sink.parquet.files import ClusterMismatchError
    from transform.plan import PumpUnreachableError

    for transient in (PumpUnreachableError, TSOError, ConcurrentRunError):
        assert transient.transient, transient
    for terminal in (ClusterMismatchError, CheckpointError, IncompatibleSchemaChange, ConfigError, CorruptRecord):
        assert not terminal.transient, terminal
    assert not is_terminal(RuntimeError("unknown")) and not is_terminal(KeyboardInterrupt())


def test_a_codec_error_keeps_its_offset_message() -> None:
    from transform.codec.errors import TruncatedError

    e = TruncatedError("datum ends early", offset=7, column_id=2)
    assert str(e) == "datum ends early (column id 2, byte offset 7)" and isinstance(e, ValueError)


def _cli(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("argv, message", [
    (["pump", "--config", "/nonexistent/pump.toml"], "binlake pump: error: "),                        # ConfigError
    (["ctl", "update-pump", "--node-id", "nobody", "--state", "paused", "--registry", "file://{tmp}/r.json"],
     "binlake ctl: error: no pump with node id 'nobody'"),                                         # NodeNotFound
])
def test_the_command_prints_a_named_error_as_one_line_without_loading_pyarrow(
        argv: list[str], message: str, tmp_path: Path) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code = ("import sys\nfrom binlake import cli\n"
            f"rc = cli.main({argv!r})\n"
            "heavy = ('transform', 'sink', 'pyarrow', 'pyspark', 'pyiceberg', 'tenacity')\n"
            "print(rc, sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n")
    out = _cli(code)
    assert out.stdout.strip() == "1 []", out.stdout + out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), out.stderr
    assert "Traceback" not in out.stderr


def test_any_other_exception_keeps_its_traceback() -> None:
    code = ("from binlake import cli\nimport argparse\n"
            "def boom(args): raise RuntimeError('a bug')\n"
            "orig = argparse.ArgumentParser.parse_args\n"
            "def parse(self, argv=None, namespace=None):\n"
            "    ns = orig(self, argv, namespace); ns.run = boom; return ns\n"
            "argparse.ArgumentParser.parse_args = parse\n"
            "cli.main(['pump'])\n")
    out = _cli(code)
    assert out.returncode == 1 and "Traceback" in out.stderr and "RuntimeError: a bug" in out.stderr


# ---- retry --------------------------------------------------------------------------------------


class Flaky:
    """Fails ``failures`` times with ``exc``, then returns ``"done"``."""

    def __init__(self, failures: int, exc: type[BaseException] = OSError) -> None:
        self.failures, self.exc, self.calls = failures, exc, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc(f"failure {self.calls}")
        return "done"


def test_retry_backs_off_and_returns_the_result() -> None:
    slept: list[float] = []
    told: list[tuple[str, int, float]] = []
    call = Flaky(3)
    got = retry(call, attempts=5, wait=lambda n: 0.5 * 2 ** min(n, 1), sleep=slept.append,
                before_sleep=lambda e, n, s: told.append((str(e), n, s)))
    assert got == "done" and call.calls == 4
    assert slept == [0.5, 1.0, 1.0]
    assert told == [("failure 1", 1, 0.5), ("failure 2", 2, 1.0), ("failure 3", 3, 1.0)]


def test_retry_gives_up_after_its_attempts_with_the_last_error() -> None:
    slept: list[float] = []
    call = Flaky(9)
    with pytest.raises(OSError, match="failure 3"):
        retry(call, attempts=3, wait=0.2, sleep=slept.append)
    assert call.calls == 3 and slept == [0.2, 0.2]
    with pytest.raises(ValueError):
        retry(call, attempts=0)


def test_retry_lets_other_errors_through_at_once() -> None:
    call = Flaky(1, KeyError)
    with pytest.raises(KeyError):
        retry(call, attempts=5, on=OSError, sleep=lambda s: None)
    assert call.calls == 1
    seen: list[str] = []

    def only_the_first(e: BaseException) -> bool:   # called for every failure, the last one too
        seen.append(str(e))
        return len(seen) == 1

    call = Flaky(5)
    with pytest.raises(OSError, match="failure 2"):
        retry(call, attempts=10, retry_if=only_the_first, sleep=lambda s: None)
    assert seen == ["failure 1", "failure 2"] and call.calls == 2
    call, seen = Flaky(5), []
    with pytest.raises(OSError, match="failure 2"):
        retry(call, attempts=2, retry_if=lambda e: seen.append(str(e)) is None, sleep=lambda s: None)
    assert seen == ["failure 1", "failure 2"]


def test_retry_without_a_limit_retries_until_it_succeeds() -> None:
    call = Flaky(50)
    assert retry(call, wait=1.0, sleep=lambda s: None) == "done" and call.calls == 51


def test_retry_sleeps_with_time_sleep_looked_up_per_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    assert retry(Flaky(2), attempts=3, wait=7.0) == "done" and slept == [7.0, 7.0]


# ---- the loops that moved onto retry keep their attempts, waits and what they retry -----------------


class FakeConnection:
    """A downstream connection whose ``execute`` raises the next scripted error for a statement
    (None: it succeeds); records what happened."""

    def __init__(self, script: dict[str, list[BaseException | None]], trace: list[str]) -> None:
        self.script, self.trace = script, trace

    def cursor(self) -> FakeConnection:
        return self

    def __enter__(self) -> FakeConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, sql: str) -> None:
        self.trace.append(f"execute {sql}")
        queue = self.script.get(sql, [])
        error = queue.pop(0) if queue else None
        if error is not None:
            raise error

    def commit(self) -> None:
        self.trace.append("commit")

    def autocommit(self, on: bool) -> None:
        self.trace.append(f"autocommit {on}")

    def rollback(self) -> None:
        self.trace.append("rollback")

    def close(self) -> None:
        self.trace.append("close")


def _dml(commit_ts: int) -> object:
    from types import SimpleNamespace

    return SimpleNamespace(commit_ts=commit_ts, table=SimpleNamespace(qualified="`d`.`t`"))


def _worker_run(script: dict[str, list[BaseException | None]], retries: int,
                monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[float], str]:
    """Run the MySQL sink's ``Worker._run`` on two statements; (trace, sleeps, ApplyError text or "")."""
    import time

    from sink.mysql.loader import ApplyError, Worker

    trace: list[str] = []
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)

    def connect() -> FakeConnection:
        trace.append("connect")
        return FakeConnection(script, trace)

    worker = Worker(connect, txn_batch=20, retries=retries, backoff=0.5)
    try:
        worker._run(lambda again: [("INSERT 1", _dml(101)), ("INSERT 2", _dml(102))])   # type: ignore[list-item]
    except ApplyError as e:
        return trace, slept, str(e)
    return trace, slept, ""


def test_the_mysql_worker_retries_transient_errors_with_backoff_on_a_new_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pymysql = pytest.importorskip("pymysql")
    deadlock = pymysql.err.OperationalError(1213, "Deadlock found")
    trace, slept, error = _worker_run({"INSERT 2": [deadlock, deadlock]}, 10, monkeypatch)
    assert error == "" and slept == [0.5, 1.0]
    assert trace == ["connect", "execute INSERT 1", "execute INSERT 2", "rollback", "close"] * 2 + [
        "connect", "execute INSERT 1", "execute INSERT 2", "commit"]
    # the backoff doubles up to 2^5 times the first wait; retries + 1 attempts in all
    trace, slept, error = _worker_run({"INSERT 1": [deadlock] * 20}, 8, monkeypatch)
    assert slept == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 16.0, 16.0] and trace.count("connect") == 9
    assert error.startswith("statement of the transaction committed at 101 failed on `d`.`t`: (1213")
    assert error.endswith("statement: INSERT 1")


def test_the_mysql_worker_stops_at_once_on_other_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    pymysql = pytest.importorskip("pymysql")
    trace, slept, error = _worker_run({"INSERT 2": [pymysql.err.IntegrityError(1062, "Duplicate entry")]}, 10,
                                      monkeypatch)
    assert slept == [] and trace == ["connect", "execute INSERT 1", "execute INSERT 2", "rollback", "close"]
    assert error == ("statement of the transaction committed at 102 failed on `d`.`t`: (1062, 'Duplicate entry'); "
                     "statement: INSERT 2")


def _ddl_run(script: dict[str, list[BaseException | None]], monkeypatch: pytest.MonkeyPatch,
             retries: int = 5) -> tuple[list[str], list[float], str]:
    """The MySQL sink's ``_run_ddl`` on a fake connection; (trace, sleeps, ApplyError text or "")."""
    import time
    from types import SimpleNamespace

    from sink.mysql.loader import ApplyError
    from sink.mysql.sink import MySQLSink

    trace: list[str] = []
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    me = SimpleNamespace(conn=FakeConnection(script, trace), options=SimpleNamespace(ddl_retries=retries))
    me._reconnect = lambda: trace.append("reconnect")   # the same fake connection, its script going on
    me._on_control = lambda call: MySQLSink._on_control(me, call)   # type: ignore[arg-type]
    try:
        MySQLSink._run_ddl(me, "d", "ALTER TABLE t ADD c INT", None, 300)   # type: ignore[arg-type]
    except ApplyError as e:
        return trace, slept, str(e)
    return trace, slept, ""


def test_a_ddl_is_retried_a_second_apart_on_operational_errors_only(monkeypatch: pytest.MonkeyPatch) -> None:
    pymysql = pytest.importorskip("pymysql")
    alter = "ALTER TABLE t ADD c INT"
    busy = pymysql.err.OperationalError(1205, "Lock wait timeout exceeded")
    trace, slept, error = _ddl_run({alter: [busy, busy]}, monkeypatch)
    # each attempt in autocommit mode (MariaDB's EXCHANGE PARTITION hangs otherwise), turned off after it
    assert error == "" and slept == [1.0, 1.0] and "reconnect" not in trace
    assert trace.count("autocommit True") == trace.count("autocommit False") == 3
    trace, slept, error = _ddl_run({alter: [busy] * 9}, monkeypatch)
    assert slept == [1.0] * 4 and trace.count(f"execute {alter}") == 5
    assert error.startswith("DDL committed at 300 failed: (1205, 'Lock wait timeout exceeded'); statement: " + alter)
    # a dropped connection (a downstream restart): retried on a new one, with the loader's backoff
    gone = pymysql.err.OperationalError(2013, "Lost connection")
    trace, slept, error = _ddl_run({alter: [gone, gone]}, monkeypatch)
    assert error == "" and slept == [0.5, 1.0] and trace.count("reconnect") == 2
    trace, slept, error = _ddl_run({alter: [gone] * 12}, monkeypatch)
    assert slept == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 16.0, 16.0, 16.0, 16.0] and trace.count(f"execute {alter}") == 11
    assert error.startswith("DDL committed at 300 failed: (2013, 'Lost connection'); statement: " + alter)
    trace, slept, error = _ddl_run({alter: [pymysql.err.ProgrammingError(1064, "syntax")]}, monkeypatch)
    assert slept == [] and trace.count(f"execute {alter}") == 1 and "(1064, 'syntax')" in error
    # already applied (a duplicate column): done, no error
    trace, slept, error = _ddl_run({alter: [pymysql.err.OperationalError(1060, "Duplicate column")]}, monkeypatch)
    assert error == "" and slept == [] and trace == ["commit", "autocommit True", "execute USE `d`",
                                                     f"execute {alter}", "autocommit False"]


def test_the_pump_retries_an_index_write_every_second_until_it_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    import functools
    import time
    from types import SimpleNamespace

    from ingest.pump.storage.storage import Storage

    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    counted: list[str] = []
    done: list[object] = []
    outcomes: list[BaseException | None] = [OSError("leveldb 1"), OSError("leveldb 2"), None]

    def put_entries(entries: list[int], head: int) -> list[bytes]:
        error = outcomes.pop(0)
        if error is not None:
            raise error
        return [b"packed"]

    me = SimpleNamespace(index=SimpleNamespace(put_entries=put_entries), _closed=False,
                         metrics=SimpleNamespace(error_count=SimpleNamespace(
                             labels=lambda what: SimpleNamespace(inc=lambda: counted.append(what)))),
                         recent=SimpleNamespace(add=done.append), sorter=SimpleNamespace(push=done.append))
    me._index_write = functools.partial(Storage._index_write, me)   # type: ignore[arg-type]
    entries = [SimpleNamespace(pointer=1)]
    Storage._index(me, entries)   # type: ignore[arg-type]
    assert slept == [1.0, 1.0] and counted == ["batch_write_kv"] * 2 and done == [[b"packed"], entries]
    outcomes[:] = [OSError("closing")]
    me._closed = True
    with pytest.raises(OSError, match="closing"):
        Storage._index(me, entries)   # type: ignore[arg-type]
    assert slept == [1.0, 1.0] and len(counted) == 3     # counted, not retried


def test_a_pump_going_offline_retries_its_last_fake_binlog_every_second(monkeypatch: pytest.MonkeyPatch) -> None:
    import time
    from types import SimpleNamespace

    from ingest.errors import NotOnline, TSOError
    from ingest.pump.pump import Pump

    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    outcomes: list[BaseException | None] = [TSOError("PD down"), NotOnline("no online"), None]

    def write_fake() -> int:
        error = outcomes.pop(0)
        if error is not None:
            raise error
        return 500

    me = SimpleNamespace(_write_fake=write_fake, storage=SimpleNamespace(max_commit_ts=500, all_matched=lambda: True),
                         registry=SimpleNamespace(list_nodes=lambda kind: []))
    Pump._wait_safe_to_offline(me)   # type: ignore[arg-type]
    assert slept == [1.0, 1.0] and outcomes == []
    outcomes[:] = [KeyError("a bug")]
    with pytest.raises(KeyError):
        Pump._wait_safe_to_offline(me)   # type: ignore[arg-type]
