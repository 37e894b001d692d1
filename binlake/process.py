"""Process-wide settings of binlake's processes, decided in one place.

A setting that belongs to a whole process — an environment variable a library reads once (grpc when
it is imported, pyiceberg when it makes its thread pool, Spark's launcher, Great Expectations), or
what CPython's cyclic garbage collector does — is decided here per kind of process, each decision
with its reason (``ENV_DEFAULTS``, ``GC_POLICIES``). An entry point calls :func:`configure_process`
once, before grpc, pyiceberg, Spark or Great Expectations are imported: the ``binlake`` command
(``binlake.cli.main``; the kind is the subcommand, ``drain --follow`` included), and the programs that
drive the commands in-process or as children (kind ``harness``: the test suite, ``tests/conftest.py``,
the benchmarks, ``bench/faults.py``, and the emulator's ``binlake-emulator``). Libraries (``ingest``,
``transform``, ``sink``) change neither the environment nor ``gc`` (``tests/test_process.py`` holds
them to it).

Three decisions wait for a fact the entry point learns later: :func:`local_spark` (the Spark master
is local), :func:`startup_done` (start-up is over: the kind's freeze) and :func:`command_done` (the
command has returned and the process is about to exit). Spark's Python workers
never run this module: their setting is ``transform.worker``'s, applied by the decode task.

An environment default never overrides a value already set: the user's choice wins.
"""
from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Literal

# the binlake subcommands (``drain`` covers ``drain --follow``: the same driver, for as long as it runs)
COMMANDS = ("pump", "ctl", "drain", "verify", "check", "maintain", "restore", "reparo")
# a program running pumps, drains and checks in-process or as children (tests, benchmarks, the emulator)
HARNESS = "harness"
KINDS = (*COMMANDS, HARNESS)


@dataclass(frozen=True)
class EnvDefault:
    """``name=value`` in the environment of the processes of ``kinds``, unless it is already set."""

    name: str
    value: str
    kinds: frozenset[str]
    reason: str


ENV_DEFAULTS = (
    EnvDefault("GRPC_ENABLE_FORK_SUPPORT", "false", frozenset(KINDS),
               "no gRPC fork handlers (read when grpc is imported): the commands' and harnesses' only forks "
               "that use gRPC are children that exec at once (pumps, Spark's JVM, which pyspark starts "
               "through fork because of its preexec_fn); a child's fork handler starts a poller that "
               "Popen's closing of descriptors kills before the exec (grpc/grpc#43055: a test session's "
               "JVM died at start so, and every Spark test of the session with it)"),
    EnvDefault("GX_ANALYTICS_ENABLED", "false", frozenset({"check", HARNESS}),
               "Great Expectations sends usage analytics unless told not to; a replication job reports to no one"),
)
# applied by configure_process for these kinds (their Spark master is always local), and by
# local_spark for the commands whose master is a setting
LOCAL_SPARK = EnvDefault("SPARK_LOCAL_IP", "127.0.0.1", frozenset({HARNESS}),
                         "a local Spark's JVM binds to loopback (the hostname may not resolve); never on a "
                         "cluster master, whose executors must reach the driver")


@dataclass(frozen=True)
class GCPolicy:
    """What a kind of process does with CPython's cyclic garbage collector."""

    thresholds: tuple[int, int, int] | None   # set by configure_process; None: CPython's (700, 10, 10)
    freeze: Literal["", "configure", "startup"]   # gc.freeze(): never, in configure_process, in startup_done
    reason: str


# a Drainer run's driver: first-generation collections every 50,000 net container allocations (not
# 700), the older generations 20 times rarer each (not 10)
DRIVER_GC_THRESHOLDS = (50_000, 20, 20)

_CPYTHON = GCPolicy(None, "", "a short command, or a harness measuring the libraries themselves: CPython's collector")
_DRIVER = GCPolicy(DRIVER_GC_THRESHOLDS, "configure",
                   "a run's driver allocates millions of short-lived acyclic objects (the MySQL sink's DMLs and "
                   "their strings): collected every 700 of them, that took about a quarter of the apply thread's "
                   "CPU (bench/mysql_apply.py); what the command loaded is frozen, cycles are still collected")
GC_POLICIES: dict[str, GCPolicy] = {
    "pump": GCPolicy(None, "startup",
                     "what exists once the pump is online (modules, grpc, protobuf descriptors) lives as long as "
                     "the process: out of the full collections the per-call garbage triggers"),
    "ctl": _CPYTHON,
    "drain": _DRIVER,
    "verify": _CPYTHON,
    "check": _CPYTHON,
    "maintain": _CPYTHON,
    "restore": _CPYTHON,   # its driver holds metadata; the rows are on Spark's executors
    "reparo": _CPYTHON,
    HARNESS: _CPYTHON,
}

_configured: list[str] = []   # the kinds configure_process was called with, in order


def configure_process(kind: str) -> None:
    """Apply the settings of ``kind`` (one of ``KINDS``) to this process: its environment defaults
    (never over a value already set) and its collector thresholds and freeze. Call it first, before
    the libraries that read the environment once are imported."""
    if kind not in KINDS:
        raise ValueError(f"unknown process kind {kind!r}; one of {', '.join(KINDS)}")
    for default in (*ENV_DEFAULTS, LOCAL_SPARK):
        if kind in default.kinds:
            os.environ.setdefault(default.name, default.value)
    policy = GC_POLICIES[kind]
    if policy.thresholds is not None:
        gc.set_threshold(*policy.thresholds)
    if policy.freeze == "configure":
        gc.freeze()
    _configured.append(kind)


def local_spark() -> None:
    """This process starts Spark on a local master: its ``LOCAL_SPARK`` default (a command whose
    master is a setting calls this once it has read it, before the session starts)."""
    os.environ.setdefault(LOCAL_SPARK.name, LOCAL_SPARK.value)


def startup_done() -> None:
    """The entry point has started what lives as long as the process: the freeze of the kind
    :func:`configure_process` applied, if it waits for this."""
    if _configured and GC_POLICIES[_configured[-1]].freeze == "startup":
        gc.freeze()


def command_done() -> None:
    """The command has returned and the process exits next: what it holds is frozen, so the
    interpreter's final collections do not walk every object of the libraries it imported (about
    0.2 s of a short command's exit, ``bench/restore.py``). Its objects are still released by
    reference count as the modules are torn down; only cycles are left to the operating system."""
    gc.freeze()
