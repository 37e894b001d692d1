"""What the Iceberg sink takes from pyiceberg beyond its public API, in one place, checked against one
version (``CHECKED_VERSION``, the pin in ``constraints.txt``; ``tests/sink/test_pyiceberg_adapter.py``
fails when the installed pyiceberg is another one, so a bump re-checks both points):

- :func:`data_files`: Arrow rows as data files of a table as a transaction will commit it, written
  where the rows are (a Spark executor). pyiceberg does this with ``_dataframe_to_data_files``, a
  private function (its public writes also commit).
- :func:`one_worker`: pyiceberg's shared thread pool with a single worker while a block runs. An
  overwrite that deletes data files by hand (the mirror merge's commit) evaluates the parent
  snapshot's manifests on that pool with ONE manifest evaluator, whose ``eval()`` stores the
  manifest's partition summaries on the evaluator itself (``_ManifestEvalVisitor.partition_fields``);
  two threads evaluating at once can prune the manifest holding a file to delete, and the commit
  fails ("Missing required files to delete"; before 0.12 it committed without the file's DELETED
  entry). The pool is created once per process with ``PYICEBERG_MAX_WORKERS`` workers
  (``ExecutorFactory``), so the environment only helps when it is set before pyiceberg's first
  parallel call: this swaps the pool itself, whatever the environment says. The race is still in
  pyiceberg 0.12.0, the newest release.
"""
from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager

import pyarrow as pa
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.utils.concurrent import ExecutorFactory

CHECKED_VERSION = "0.12.0"


def data_files(metadata: TableMetadata, rows: pa.Table, io: FileIO) -> list[DataFile]:
    """``rows`` (in the schema of ``metadata``) as new Parquet data files under the table's location,
    split by partition and target file size; each carries the spec id it is committed under (the
    default spec of ``metadata``)."""
    if not rows.num_rows:
        return []
    files = list(_dataframe_to_data_files(metadata, rows, io, write_uuid=uuid.uuid4()))
    for f in files:
        f.spec_id = metadata.default_spec_id
    return files


class _OneWorker:
    """Swaps pyiceberg's process-wide executor for a one-thread pool while any block holds it (blocks
    nest and may run on several threads: the first in swaps, the last out restores)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.saved: tuple[Executor | None, int | None] = (None, None)
        self.pool: ThreadPoolExecutor | None = None
        self.pool_pid: int | None = None

    def _pool(self) -> ThreadPoolExecutor:
        if self.pool is None or self.pool_pid != os.getpid():   # a thread pool does not survive a fork
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyiceberg-one")
            self.pool_pid = os.getpid()
        return self.pool

    def enter(self) -> None:
        with self.lock:
            if self.depth == 0:
                self.saved = (ExecutorFactory._instance, ExecutorFactory._instance_pid)
                ExecutorFactory._instance, ExecutorFactory._instance_pid = self._pool(), os.getpid()
            self.depth += 1

    def exit(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                ExecutorFactory._instance, ExecutorFactory._instance_pid = self.saved
                self.saved = (None, None)


_ONE_WORKER = _OneWorker()


@contextmanager
def one_worker() -> Iterator[None]:
    """pyiceberg's parallel work (manifest reads and evaluations, manifest writes) on one thread while
    the block runs; in this process, whichever thread calls pyiceberg meanwhile."""
    _ONE_WORKER.enter()
    try:
        yield
    finally:
        _ONE_WORKER.exit()


def executor_workers() -> int:
    """How many threads pyiceberg's executor has now (for tests and diagnostics)."""
    executor = ExecutorFactory.get_or_create()
    assert isinstance(executor, ThreadPoolExecutor)
    return executor._max_workers
