"""Sinks as registered plugins: a dry run of every sink changes nothing anywhere, and a sink from
outside binlake's packages joins with one registration line and drains a real run."""
from __future__ import annotations

import hashlib
import io
import json
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from binlake.drain import run_drain_command
from binlake.drain_config import DrainerConfig, drainer_model
from binlake.restore import run_restore_command
from ingest.config import load_config
from ingest.registry import load_registry
from ingest.registry.base import DRAINER
from sink import registry
from tests.drain.conftest import Env
from tests.drain.test_drain_cli import binlake, cli_args
from tests.servers import MariaDBServer

pytestmark = pytest.mark.integration


def _tree(*roots: Path) -> dict[str, str]:
    """Every file under ``roots`` with a hash of its bytes (directories as ``dir``)."""
    out: dict[str, str] = {}
    for root in roots:
        if not root.exists():
            continue
        out[str(root)] = "dir" if root.is_dir() else hashlib.sha256(root.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*")) if root.is_dir() else []:
            out[str(p)] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _downstream(maria: MariaDBServer) -> dict[str, Any]:
    """Every user table of the MariaDB server with its checksum."""
    rows = maria.query("SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema NOT IN "
                       "('mysql', 'information_schema', 'performance_schema', 'sys')")
    return {f"{db}.{t}": maria.query(f"CHECKSUM TABLE `{db}`.`{t}`")[0][1] for db, t in sorted(rows)}


def _drainers(options: DrainerConfig) -> list[str]:
    """The registry's drainer entries (the pumps' own entries change with every heartbeat)."""
    reg = load_registry(options.registry)
    try:
        return sorted(n.to_json() for n in reg.list_nodes(DRAINER))
    finally:
        reg.close()


def _configure(env: Env, sink: str, maria: MariaDBServer | None) -> tuple[DrainerConfig, Callable[[], Any]]:
    """The env's options switched to ``sink``, and a function returning everything that sink and the
    drainer keep (the sink's storage, the data dir, the registry's drainer entries)."""
    o = env.options.model_copy(deep=True)
    o.syncer.db_type = sink
    watched = [Path(o.data_dir)]
    if sink == "iceberg":
        watched.append(Path(o.iceberg.warehouse))
    elif sink == "parquet":
        o.parquet.dir = str(env.root / "cdc")
        watched.append(Path(o.parquet.dir))
    else:
        assert maria is not None
        o.syncer.to.dsn = maria.dsn
        o.syncer.relay.log_dir = str(env.root / "relay")
        watched.append(env.root / "relay")
    return o, lambda: (_tree(*watched), _downstream(maria) if maria else None, _drainers(o))


@pytest.fixture(params=["iceberg", "parquet", "mysql"])
def sink(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def maybe_maria(sink: str, request: pytest.FixtureRequest) -> MariaDBServer | None:
    if sink != "mysql":
        return None
    maria: MariaDBServer = request.getfixturevalue("mariadb_server")
    maria.reset("test", "other")
    return maria


def test_a_dry_run_changes_nothing_anywhere(env: Env, sink: str, maybe_maria: MariaDBServer | None) -> None:
    options, state = _configure(env, sink, maybe_maria)
    env.sql("create table d (id int primary key, v varchar(8))")
    env.sql("insert into d values (1, 'a'), (2, 'b')")
    env.settle()

    # a sink never written: the dry run creates no directory, table, row or registry entry
    before = state()
    plan = run_drain_command(options, dry_run=True, out=io.StringIO())
    assert plan.kind == "plan" and plan.checkpoint_before is None and plan.to_ts > plan.from_ts
    assert state() == before

    # after a run, with more to drain: the CLI's dry run plans from the checkpoint and changes nothing
    first = env.drain(options)
    assert first["checkpoint_after"] == first["to_ts"]
    env.sql("insert into d values (3, 'c')")
    env.settle()
    before = state()
    args = cli_args(options) + ["--sink", sink]
    if sink == "parquet":
        args += ["--parquet-dir", options.parquet.dir]
    if sink == "mysql":
        args += ["--to-dsn", options.syncer.to.dsn]
    report = env.root / "plan.json"
    r = binlake("drain", "--dry-run", *args, "--report", str(report), cwd=env.root)
    assert r.returncode == 0, r.stderr
    planned = json.loads(report.read_text())
    assert planned["kind"] == "plan" and planned["checkpoint_before"] == first["to_ts"] < planned["to_ts"]
    report.unlink()
    assert state() == before


TOY_PLUGIN = '''
"""A sink outside binlake: it counts each run's row changes per table into a JSON file; as a restore
target (``toy:///PATH``), the rows of each table at the ts; as a reader (``verify --against
toy:///PATH``), those counts compared with the upstream's."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field

from ingest.config import Str, TomlModel
from sink.base import Sink, TableReport
from sink.plugin import Capabilities, Flag, SinkContext, SinkSpec, Verifier
from sink.restore import RestoreTarget, RowWriter, WriterSession
from sink.verify_report import TableResult, VerifyReport


class ToySettings(TomlModel):
    file: Str = Field(default="toy.json")


class ToySink(Sink):
    def __init__(self, path: Path, dry_run: bool) -> None:
        self.path, self.dry_run = path, dry_run

    def _doc(self) -> dict:
        return json.loads(self.path.read_text()) if self.path.exists() else {"checkpoint": None, "rows": {}}

    def checkpoint(self) -> int | None:
        return self._doc()["checkpoint"]

    def write(self, run) -> list[TableReport]:
        doc, reports = self._doc(), []
        for tc in run.tables.values():
            name = f"{tc.db}.{tc.name}"
            n = tc.row_count
            doc["rows"][name] = doc["rows"].get(name, 0) + n
            reports.append(TableReport(table=name, rows={"*": n}))
        self.path.write_text(json.dumps(doc))
        return reports

    def save_checkpoint(self, run) -> None:
        doc = self._doc()
        doc["checkpoint"] = run.to_ts
        self.path.write_text(json.dumps(doc))


class ToySession(WriterSession):
    def __init__(self, names: list[str]) -> None:
        self.names, self.counts = names, {}

    def write(self, table, rows) -> None:
        name = self.names[table]
        self.counts[name] = self.counts.get(name, 0) + rows.num_rows

    def close(self) -> bytes:
        return json.dumps(self.counts).encode()


class ToyWriter(RowWriter):
    def __init__(self, names: list[str]) -> None:
        self.names = names

    def open(self) -> WriterSession:
        return ToySession(self.names)


class ToyRestore(RestoreTarget):
    def __init__(self, path: Path) -> None:
        self.path = path

    def describe(self) -> str:
        return f"toy://{self.path}"

    def prepare(self, plan, replace: bool) -> RowWriter:
        return ToyWriter([t.name for t in plan.tables])

    def finish(self, plan, results) -> list[str]:
        total = {t.name: 0 for t in plan.tables}
        for r in results:
            for name, n in json.loads(r or b"{}").items():
                total[name] += n
        self.path.write_text(json.dumps(total))
        return []

    def close(self) -> None:
        pass


class ToyVerifier(Verifier):
    """The row counts a restore into toy:// wrote, against the upstream's at the ts."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def checkpoint(self) -> int | None:
        return None

    def compare(self, upstream, ts, tables) -> VerifyReport:
        held = json.loads(self.path.read_text())
        results = []
        for name, rows in sorted(upstream.items()):
            n = held.get(name, 0)
            results.append(TableResult(name, to_ts=ts, upstream_rows=len(rows), mirror_rows=n,
                                       problems=[] if n == len(rows) else [f"{n} rows held, {len(rows)} upstream"]))
        return VerifyReport(ts, results)


class ToySpec(SinkSpec[ToySettings]):
    names = ("toy",)
    section = "toy"
    config = ToySettings
    capabilities = Capabilities(verify=True)
    flags = (Flag("--toy-file", "toy.file", "where the toy sink counts"),)
    restore_schemes = ("toy",)
    against_schemes = ("toy",)

    def open(self, ctx: SinkContext[ToySettings]) -> Sink:
        return ToySink(Path(ctx.settings.file), ctx.dry_run)

    def restore_target(self, uri: str, settings: ToySettings) -> RestoreTarget:
        return ToyRestore(Path(urlsplit(uri).path))

    def verifier(self, ctx: SinkContext[ToySettings], against: str | None) -> Verifier:
        return ToyVerifier(Path(urlsplit(against or "").path))


SPEC = ToySpec()
'''


@pytest.fixture
def toy_package(tmp_path: Path) -> Iterator[str]:
    """A package ``toysink`` of its own on sys.path, holding only the toy sink's plugin module."""
    pkg = tmp_path / "plugins" / "toysink"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "plugin.py").write_text(textwrap.dedent(TOY_PLUGIN))
    sys.path.insert(0, str(pkg.parent))
    saved = list(registry._REGISTERED)
    try:
        yield "toysink.plugin:SPEC"
    finally:
        registry._REGISTERED[:] = saved
        if "toysink.plugin" in sys.modules:
            import pyspark.cloudpickle

            try:
                pyspark.cloudpickle.unregister_pickle_by_value(sys.modules["toysink.plugin"])
            except ValueError:   # never registered
                pass
        sys.path.remove(str(pkg.parent))
        sys.modules.pop("toysink.plugin", None)
        sys.modules.pop("toysink", None)


def test_a_sink_from_its_own_package_joins_with_one_registration_line(env: Env, toy_package: str) -> None:
    """One line registers the toy package's sink, its restore target and its reader: drains into it, a
    restore from the lake into it, and ``verify --against`` reading what the restore wrote."""
    registry.register(toy_package)                                    # the one registration line

    assert "toy" in registry.names() and registry.spec_for("TOY").names == ("toy",)
    toml = env.root / "drainer.toml"
    toml.write_text(f'[syncer]\ndb-type = "toy"\n[toy]\nfile = "{env.root / "counts.json"}"\n')
    o = load_config(drainer_model(), toml, {"registry": env.options.registry, "pd-urls": env.options.pd_urls,
                                            "upstream.status-url": env.options.upstream.status_url,
                                            "upstream.dsn": env.options.upstream.dsn,
                                            "data-dir": env.options.data_dir, "spark.master": "local[2]"})
    with pytest.raises(Exception, match="unknown configuration key 'toy.nothing'"):
        load_config(drainer_model(), None, {"toy.nothing": 1})

    env.sql("create table toy_t (id int primary key)")
    env.sql("insert into toy_t values (1), (2), (3)")
    env.sql("update toy_t set id = 4 where id = 3")
    first = env.drain(o)
    counts = json.loads((env.root / "counts.json").read_text())
    assert counts["checkpoint"] == first["to_ts"] and first["sink"] == "toy"
    assert counts["rows"]["test.toy_t"] >= 4     # three inserts and the key change
    assert {t["table"]: t["rows"] for t in first["tables"]}["test.toy_t"]["*"] == counts["rows"]["test.toy_t"]
    env.sql("insert into toy_t values (9)")
    second = env.drain(o)
    assert second["checkpoint_before"] == first["to_ts"]
    assert json.loads((env.root / "counts.json").read_text())["checkpoint"] == second["to_ts"]

    # the same line made it a restore target: the lake's tables at the first run's end, into toy://
    import pyspark.cloudpickle
    import toysink.plugin

    pyspark.cloudpickle.register_pickle_by_value(toysink.plugin)   # the tasks get its writer (not installed there)
    lake = env.drain()                                              # the lake restored from (Iceberg)
    restored = env.root / "restored.json"
    counts = run_restore_command(env.options, first["to_ts"], f"toy://{restored}", out=io.StringIO())
    assert json.loads(restored.read_text()) == counts and counts["test.toy_t"] == 3   # {1, 2, 4}

    # ... and a reader: verify --against toy:// compares what the restore wrote with the upstream then
    from binlake.drain import run_verify_command

    only = o.model_copy(update={"tables": [("test", "toy_t")]})
    out = io.StringIO()
    assert run_verify_command(only, first["to_ts"], out=out, against=f"toy://{restored}") == 0, out.getvalue()
    assert "test.toy_t" in out.getvalue()
    restored.write_text(json.dumps({"test.toy_t": 4}))
    assert run_verify_command(only, first["to_ts"], out=io.StringIO(), against=f"toy://{restored}") == 1
    assert lake["to_ts"] >= second["to_ts"]
    with pytest.raises(Exception, match="a restore writes into iceberg://, mysql://, tidb://, toy://"):
        run_restore_command(env.options, first["to_ts"], "ftp://x", out=io.StringIO())


def test_unknown_sinks_and_capabilities_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="sink 'nosuch' is not one of iceberg, parquet, mysql, tidb, kafka, file, pb"):
        load_config(drainer_model(), None, {"syncer.db-type": "nosuch"})
    with pytest.raises(Exception, match="db-type 'oracle' is not supported: binlake does not write to Oracle"):
        load_config(drainer_model(), None, {"syncer.db-type": "oracle"})
    o = load_config(drainer_model(), None, {"syncer.db-type": "PARQUET", "upstream.dsn": "mysql://u@127.0.0.1:1"})
    assert o.syncer.db_type == "parquet"
    from binlake.drain import run_verify_command

    with pytest.raises(Exception, match="the parquet sink has no verifier"):
        run_verify_command(o, 1, out=io.StringIO())
    with pytest.raises(Exception, match="no sink compares a ftp:// target"):
        run_verify_command(o, 1, out=io.StringIO(), against="ftp://x")
