"""binlake/process.py: each kind of process gets its environment defaults (never over a user's value)
and its garbage-collector settings; the libraries leave both alone. Every check that applies settings
runs in a child interpreter, so the test process keeps its own."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from binlake.process import (
    DRIVER_GC_THRESHOLDS,
    ENV_DEFAULTS,
    GC_POLICIES,
    HARNESS,
    KINDS,
    LOCAL_SPARK,
)
from transform.worker import WORKER_GC_THRESHOLDS

ROOT = Path(__file__).resolve().parents[1]
CPYTHON_THRESHOLDS = [700, 10, 10]
ENV_NAMES = [d.name for d in (*ENV_DEFAULTS, LOCAL_SPARK)]

# what a child reports: the environment variables binlake sets, the thresholds and frozen objects
_REPORT = ("import gc, json, os\n"
           "def report():\n"
           f"    return {{'env': {{n: os.environ.get(n) for n in {ENV_NAMES!r}}},\n"
           "            'thresholds': list(gc.get_threshold()), 'frozen': gc.get_freeze_count(),\n"
           "            'enabled': gc.isenabled()}\n")


def _child(body: str, env: dict[str, str] | None = None) -> dict[str, object]:
    """Run ``body`` (which prints one JSON line, with ``report()`` at hand) in a fresh interpreter whose
    environment has none of binlake's variables, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in ENV_NAMES}
    out = subprocess.run([sys.executable, "-c", _REPORT + body], capture_output=True, text=True, cwd=ROOT,
                         env={**base, **(env or {})}, timeout=120)
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_gets_its_environment_defaults_and_collector_settings(kind: str) -> None:
    got = _child("from binlake.process import configure_process, startup_done\n"
                 "before = report()\n"
                 f"configure_process({kind!r})\n"
                 "configured = report()\n"
                 "startup_done()\n"
                 "print(json.dumps({'before': before, 'configured': configured, 'started': report()}))\n")
    before, configured, started = got["before"], got["configured"], got["started"]
    assert isinstance(before, dict) and isinstance(configured, dict) and isinstance(started, dict)
    assert before["frozen"] == 0 and before["thresholds"] == CPYTHON_THRESHOLDS
    assert configured["env"] == {d.name: d.value if kind in d.kinds else None for d in (*ENV_DEFAULTS, LOCAL_SPARK)}
    policy = GC_POLICIES[kind]
    assert configured["thresholds"] == list(policy.thresholds or CPYTHON_THRESHOLDS)
    assert (configured["frozen"] > 0) == (policy.freeze == "configure")
    assert (started["frozen"] > 0) == (policy.freeze in ("configure", "startup"))
    assert configured["enabled"] and started["enabled"]   # no kind turns the collector off


def test_the_decisions_per_kind() -> None:
    """What the table says, in words: every command and harness runs without gRPC fork handlers; a local Spark only
    where the master is local by construction; the
    drain driver raises the thresholds, the pump freezes after start-up, a harness and the short
    commands keep CPython's collector."""
    env = {d.name: d for d in ENV_DEFAULTS}
    assert env["GRPC_ENABLE_FORK_SUPPORT"].kinds == set(KINDS)
    assert "PYICEBERG_MAX_WORKERS" not in env   # the Iceberg sink's commits use no pyiceberg overwrite planning
    assert LOCAL_SPARK.kinds == {HARNESS}
    assert GC_POLICIES["drain"].thresholds == DRIVER_GC_THRESHOLDS
    assert GC_POLICIES["pump"].freeze == "startup" and GC_POLICIES["pump"].thresholds is None
    for kind in ("ctl", "verify", "check", "maintain", "restore", "reparo", HARNESS):
        assert GC_POLICIES[kind].thresholds is None and GC_POLICIES[kind].freeze == "", kind
    assert all(d.reason for d in (*ENV_DEFAULTS, LOCAL_SPARK)) and all(p.reason for p in GC_POLICIES.values())
    assert set(GC_POLICIES) == set(KINDS)


def test_a_users_value_is_kept() -> None:
    got = _child("from binlake.process import configure_process, local_spark\n"
                 "configure_process('drain'); local_spark()\n"
                 "print(json.dumps(report()))\n",
                 env={"SPARK_LOCAL_IP": "10.1.2.3", "GRPC_ENABLE_FORK_SUPPORT": "true"})
    assert got["env"] == {"GRPC_ENABLE_FORK_SUPPORT": "true",
                          "GX_ANALYTICS_ENABLED": None, "SPARK_LOCAL_IP": "10.1.2.3"}


def test_local_spark_binds_spark_to_loopback() -> None:
    got = _child("from binlake.process import configure_process, local_spark\n"
                 "configure_process('check'); before = report(); local_spark()\n"
                 "print(json.dumps({'before': before, 'after': report()}))\n")
    assert isinstance(got["before"], dict) and isinstance(got["after"], dict)
    assert got["before"]["env"]["SPARK_LOCAL_IP"] is None          # a cluster master: never set
    assert got["after"]["env"]["SPARK_LOCAL_IP"] == "127.0.0.1"


def test_an_unknown_kind_is_refused() -> None:
    from binlake.process import configure_process

    with pytest.raises(ValueError, match="unknown process kind 'pumps'"):
        configure_process("pumps")


def test_the_command_configures_its_process_before_grpc_loads() -> None:
    """``binlake drain --help``: the drain's settings, applied before the parser (which imports grpc)."""
    got = _child("import sys\nfrom binlake import cli\nseen = []\nreal = cli.configure_process\n"
                 "def spy(kind):\n    seen.append((kind, 'grpc' in sys.modules))\n    real(kind)\n"
                 "cli.configure_process = spy\n"
                 "try:\n    cli.main(['drain', '--help'])\nexcept SystemExit:\n    pass\n"
                 "print(json.dumps({'seen': seen, **report()}))\n")
    assert got["seen"] == [["drain", False]]
    assert got["env"] == {d.name: d.value if "drain" in d.kinds else None for d in (*ENV_DEFAULTS, LOCAL_SPARK)}
    assert got["thresholds"] == list(DRIVER_GC_THRESHOLDS)


def test_the_console_script_freezes_what_the_command_held_once_it_returned() -> None:
    """``binlake restore`` (a kind that freezes nothing while it runs): nothing frozen when the command
    returns from ``main``; frozen by the console script before it exits, error or not."""
    got = _child("import sys\nfrom binlake import cli\n"
                 "argv = ['restore', '--config', '/nonexistent.toml', '--ts', '5', '--into', 'mysql://u@127.0.0.1:1']\n"
                 "code = cli.main(argv)\nafter_main = report()['frozen']\nsys.argv = ['binlake', *argv]\n"
                 "try:\n    cli.console()\nexcept SystemExit as exc:\n    status = exc.code\n"
                 "print(json.dumps({'code': code, 'status': status, 'after_main': after_main, **report()}))\n")
    assert got["code"] == got["status"] == 1      # the missing config: one line, exit status 1
    assert got["after_main"] == 0 and isinstance(got["frozen"], int) and got["frozen"] > 1000


def test_the_emulator_configures_its_process_as_a_harness_before_grpc_loads() -> None:
    """``binlake-emulator demo --help``: a harness's settings, gRPC's fork handlers off, the drain
    driver's thresholds (its drains run in the demo's process), all before grpc is imported."""
    got = _child("import sys\nfrom upstream import cli\nseen = []\nreal = cli.configure_emulator\n"
                 "def spy(demo):\n    seen.append((demo, 'grpc' in sys.modules))\n    real(demo)\n"
                 "cli.configure_emulator = spy\n"
                 "try:\n    cli.main(['demo', '--help'])\nexcept SystemExit:\n    pass\n"
                 "print(json.dumps({'seen': seen, **report()}))\n")
    assert got["seen"] == [[True, False]]
    harness = {d.name: d.value if HARNESS in d.kinds else None for d in (*ENV_DEFAULTS, LOCAL_SPARK)}
    assert got["env"] == harness and harness["GRPC_ENABLE_FORK_SUPPORT"] == "false"
    assert got["thresholds"] == list(DRIVER_GC_THRESHOLDS) and got["frozen"]


def test_a_spark_worker_is_tuned_once() -> None:
    got = _child("from transform.worker import tune_worker\n"
                 "tune_worker(); first = report(); gc.unfreeze(); gc.set_threshold(700, 10, 10)\n"
                 "tune_worker()\n"
                 "print(json.dumps({'first': first, 'again': report()}))\n")
    assert isinstance(got["first"], dict) and isinstance(got["again"], dict)
    assert got["first"]["thresholds"] == list(WORKER_GC_THRESHOLDS) and got["first"]["frozen"] > 0
    assert got["again"]["thresholds"] == CPYTHON_THRESHOLDS and got["again"]["frozen"] == 0   # once per process


# the modules that decide process-wide settings: the rest leaves gc and the environment alone
DECIDERS = {"binlake/process.py", "transform/worker.py", "emulator/upstream/tuning.py", "emulator/upstream/cli.py"}
_GC_CALLS = {"disable", "enable", "freeze", "unfreeze", "set_threshold"}
_ENV_CALLS = {"setdefault", "update", "pop", "clear", "__setitem__", "__delitem__"}


def _settings_changed(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target, name = ast.unparse(node.func.value), node.func.attr
            if (target == "gc" and name in _GC_CALLS) or (target == "os.environ" and name in _ENV_CALLS) \
                    or (target == "os" and name in ("putenv", "unsetenv")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node.func)}()")
        elif isinstance(node, (ast.Assign, ast.Delete)):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and ast.unparse(t.value) == "os.environ":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: os.environ[...]")
    return found


def test_libraries_leave_the_collector_and_the_environment_alone() -> None:
    found = [hit for top in ("schemas", "ingest", "transform", "sink", "emulator/upstream", "binlake")
             for path in sorted((ROOT / top).rglob("*.py"))
             if path.relative_to(ROOT).as_posix() not in DECIDERS for hit in _settings_changed(path)]
    assert found == []
    assert _settings_changed(ROOT / "binlake" / "process.py")   # the scan does see a call
