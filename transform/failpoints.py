"""Named failpoints for crash tests of the Drainer and its sinks (TiDB's failpoints, the Python way).

Product code marks a point with ``inject("name", *args)``. Unless a test enabled that name with
:func:`enable` (from Python, in the process under test), ``inject`` is a dictionary miss and does
nothing: no environment variable or flag turns a failpoint on, so a deployed binlake can never
hit one. Every point is listed in ``POINTS`` with when it fires and what it receives.
"""
from __future__ import annotations

from collections.abc import Callable

POINTS: dict[str, str] = {
    "sink-commit": "after each Iceberg table commit of a run; receives the commit's number in the run (1, 2, …)",
    "sink-before-commit": "when an Iceberg table's transaction is complete, just before it commits; receives the "
                          "table's name",
    "maintain-before-commit": "when a compaction's transaction (binlake maintain) is complete, just before it "
                              "commits; receives the table's name",
    "ddl-history-append": "when a drain's jobs for _binlake.ddl_history are ready, just before they are appended; "
                          "receives the number of jobs",
    "kafka-produce": "before each message the Kafka sink produces; receives the message's number in the run (1, 2, …)",
    "kafka-acked": "when every message a Kafka run produced is acknowledged, before its checkpoint is recorded; "
                   "receives 1",
    "kafka-checkpoint": "after a Kafka run recorded its checkpoint in the consumer group; receives 1",
    "file-append": "before each record the file sink appends; receives the record's number in the run (1, 2, …)",
    "drain-stage": "after each stage of a drain run ends, in order: plan, pull, pair (twice), decode, collect, "
                   "written (the sink wrote the run), ddl-recorded (the run's DDL jobs kept by the sink), checkpoint "
                   "(saved, before the drainer's registry state moves); receives the stage's name",
    "mysql-flush": "after each flush of the MySQL loader (DMLs committed downstream); receives the flush's number "
                   "in the run (1, 2, …)",
}

_enabled: dict[str, Callable[..., None]] = {}


def inject(name: str, *args: object) -> None:
    """Run the action enabled for ``name`` (nothing when none is)."""
    action = _enabled.get(name)
    if action is not None:
        action(*args)


def enable(name: str, action: Callable[..., None]) -> None:
    """Make ``inject(name, …)`` call ``action(…)``; ``KeyError`` for a name not in ``POINTS``."""
    if name not in POINTS:
        raise KeyError(f"unknown failpoint {name!r}; known: {', '.join(sorted(POINTS))}")
    _enabled[name] = action


def disable(name: str) -> None:
    """Make ``inject(name, …)`` do nothing again."""
    _enabled.pop(name, None)
