"""What binlake's DAGs share: where binlake and its drainer.toml are, and running binlake's CLI.

The DAGs never import binlake: every task runs the ``binlake`` command of binlake's own environment
(a virtualenv, a container image…), so Airflow and binlake keep their own pins. Two settings, each
taken from the first place that has it:

- the drainer.toml: the DAG run's ``config`` param, the Airflow Variable ``binlake_drainer_conf``,
  the environment variable ``BINLAKE_DRAINER_CONF``;
- the command: the Variable ``binlake_bin``, the environment variable ``BINLAKE_BIN``, else
  ``binlake`` on the worker's PATH. It may hold arguments (``/opt/binlake/.venv/bin/python -m
  binlake.cli``).

Every run report a task reads is checked against binlake's JSON Schema of it
(``docs/run-report.schema.json`` in binlake's repository) when ``BINLAKE_REPORT_SCHEMA`` names that
file: a binlake whose reports changed shape then fails the task that reads one, clearly.

binlake runs in the directory of the drainer.toml, so relative paths in it (``data-dir``,
``warehouse``) mean the same to every task and to a person running binlake there by hand.
"""
from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

CONF_VARIABLE, CONF_ENV = "binlake_drainer_conf", "BINLAKE_DRAINER_CONF"
BIN_VARIABLE, BIN_ENV = "binlake_bin", "BINLAKE_BIN"
SCHEMA_ENV = "BINLAKE_REPORT_SCHEMA"
FAILED_GATE = 1   # ``binlake check``: the exit status of a failed expectation

log = logging.getLogger("binlake.dags")


class CommandFailed(RuntimeError):
    """A binlake command exited with a non-zero status; the message holds its last output lines."""

    def __init__(self, args: list[str], status: int, tail: list[str]) -> None:
        super().__init__(f"`{shlex.join(args)}` exited with status {status}:\n" + "\n".join(tail))
        self.status = status
        self.tail = tail


def _variable(key: str) -> str | None:
    from airflow.sdk import Variable

    value = Variable.get(key, default=None)
    return str(value) if value else None


def drainer_conf(params: dict[str, Any]) -> Path:
    """The drainer.toml of this DAG run (see the module doc); a clear error when none is set."""
    value = params.get("config") or _variable(CONF_VARIABLE) or os.environ.get(CONF_ENV)
    if not value:
        raise ValueError(f"no drainer.toml: give the DAG param 'config', the Airflow Variable {CONF_VARIABLE!r} "
                         f"or the environment variable {CONF_ENV}")
    path = Path(value).expanduser().resolve()
    if not path.is_file():
        raise ValueError(f"the drainer.toml {path} does not exist (DAG param 'config', Variable "
                         f"{CONF_VARIABLE!r}, {CONF_ENV})")
    return path


def binlake_command() -> list[str]:
    """The ``binlake`` command line prefix (see the module doc)."""
    return shlex.split(_variable(BIN_VARIABLE) or os.environ.get(BIN_ENV) or "binlake")


def run_binlake(conf: Path, args: list[str]) -> None:
    """Run ``binlake ARGS --config CONF`` in the config's directory, its output streamed into the
    task log; :class:`CommandFailed` on a non-zero exit status."""
    argv = binlake_command() + args + ["--config", str(conf)]
    log.info("running %s", shlex.join(argv))
    tail: deque[str] = deque(maxlen=40)
    with subprocess.Popen(argv, cwd=conf.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\r\n")
            tail.append(line)
            log.info("%s", line)
        status = proc.wait()
    if status:
        raise CommandFailed(argv, status, list(tail))


def run_with_report(conf: Path, args: list[str]) -> dict[str, Any]:
    """:func:`run_binlake` with ``--report`` to a temporary file; returns the report it wrote."""
    with tempfile.TemporaryDirectory(prefix="binlake-report-") as tmp:
        path = Path(tmp) / "report.json"
        run_binlake(conf, args + ["--report", str(path)])
        report: dict[str, Any] = json.loads(path.read_text())
    check_report(report)
    return report


def check_report(report: dict[str, Any]) -> None:
    """Validate ``report`` against the schema file ``BINLAKE_REPORT_SCHEMA`` names (nothing when unset);
    ``jsonschema.ValidationError`` names the first field that does not fit."""
    schema = os.environ.get(SCHEMA_ENV)
    if not schema:
        return
    import jsonschema

    jsonschema.validate(report, json.loads(Path(schema).read_text()))


def data_dir(conf: Path, report: dict[str, Any]) -> Path:
    """The drainer's data dir a report names, resolved as binlake resolved it (from the config's dir)."""
    return (conf.parent / report["data_dir"]).resolve()
