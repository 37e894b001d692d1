"""The child process of ``bench/restore.py``: ``binlake restore`` through the CLI, its steps timed.

A module of its own so that the child imports what ``binlake restore`` imports and nothing of the
bench (its load generator imports pyspark): the process's figures are the command's.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def child_main(argv: list[str]) -> int:
    """``restore_child.py TIMINGS.json ENGINE restore ARGS…``: ``binlake.cli.main(["restore", …])`` with the
    restore's steps wrapped by timers; the seconds per step and the unix times of the command's start
    and end go to TIMINGS.json."""
    from binlake.process import command_done, configure_process

    configure_process("restore")   # what binlake.cli.main does first
    out_path, engine, cli_args = Path(argv[0]), argv[1], argv[2:]
    import binlake.restore
    import sink.iceberg.pit
    import sink.iceberg.pit_tasks
    import transform.history
    from sink.mysql.restore import MySQLRestore

    seconds: dict[str, float] = {}
    marks: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0
        return wrapper

    run = binlake.restore.run_restore_command

    def command(*a: Any, **kw: Any) -> Any:
        marks["start"] = time.time()
        try:
            return timed("command", run)(*a, **kw)
        finally:
            marks["end"] = time.time()

    # run_restore_command imports these from their modules when called: the wrappers are what it gets
    binlake.restore.run_restore_command = command
    transform.history.SchemaHistory.fetch = timed("history", transform.history.SchemaHistory.fetch)  # type: ignore[method-assign]
    sink.iceberg.pit.lake_range = timed("lake", sink.iceberg.pit.lake_range)
    sink.iceberg.pit.table_at = timed("locate", sink.iceberg.pit.table_at)
    if engine == "spark":   # imported only where the restore imports it: pyspark's import is part of its cost
        import transform.spark

        transform.spark.spark_session = timed("spark-start", transform.spark.spark_session)
    sink.iceberg.pit_tasks.load_tables = timed("load", sink.iceberg.pit_tasks.load_tables)
    sink.iceberg.pit_tasks.load_tables_here = timed("load", sink.iceberg.pit_tasks.load_tables_here)
    MySQLRestore.prepare = timed("ddl", MySQLRestore.prepare)  # type: ignore[method-assign]
    MySQLRestore.finish = timed("checkpoint", MySQLRestore.finish)  # type: ignore[method-assign]
    from binlake.cli import main as cli_main

    code = cli_main(cli_args)
    out_path.write_text(json.dumps({"code": code, "seconds": seconds, "marks": marks}))
    command_done()   # what the console script does after the command (binlake.cli.console)
    return code


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
