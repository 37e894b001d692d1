"""The executor side of every sink that writes its changelog as files (the Parquet CDC files, the
Iceberg changelog tables): one Spark task body writes them, each sink's driver commits them its own way.

:func:`write_changelogs` is the ``mapInArrow`` body over records of a run's frame
(``transform.changes.FRAME_SCHEMA``). Each record goes to the changelog of its table id, a
:class:`ChangelogFiles` the sink describes and the task receives pickled: it picks the record's rows
the changelog takes (rows a crashed run already committed left out, rows renamed into the table's
final schema, …), the task counts them per op and gathers them, and the changelog writes them in
commit order as durable files, ``batch_rows`` rows at a time. Back to the driver go the files'
descriptions and the counts (:data:`TABLE_FILES_DDL` records), never rows. The committers are the
sinks': the Parquet sink lists the files in its manifest and moves its checkpoint
(``sink.parquet.files``), the Iceberg sink appends them to the changelog table in one transaction
(``sink.iceberg.writer``).
"""
from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from transform.changes import OP, ORDER

# what write tasks return: packed file descriptions and replaced paths (on the first record of a
# changelog), row changes per op (one record per op; op "" and rows 0 when none was written)
FILES_SCHEMA = pa.schema([("files", pa.binary()), ("removed", pa.binary()), ("op", pa.string()),
                          ("rows", pa.int64())])
FILES_DDL = "files binary, removed binary, op string, rows long"
TABLE_FILES_DDL = FILES_DDL + ", table string"   # files of several tables: ``table`` names each one's

F = TypeVar("F")


class ChangelogFiles(ABC, Generic[F]):
    """One table's changelog as a sink writes it, pickled into the write tasks; ``F`` is what the sink
    describes a written file with. Subclasses are frozen dataclasses with a ``table`` field."""

    table: str                        # names the changelog in the tasks' output
    batch_rows: ClassVar[int] = 0     # rows gathered before they are written (0: each record on its own)

    @abstractmethod
    def rows(self, table_id: int, version: int, data: bytes) -> pa.Table:
        """The rows of one frame record (``data``, rows of ``table_id`` under schema ``version``) that
        this changelog takes, in commit order."""

    def batch(self, version: int) -> int:
        """Rows of different batches are never written into one file (default: one batch)."""
        return 0

    @abstractmethod
    def write(self, batch: int, rows: pa.Table) -> list[F]:
        """``rows`` (in commit order) as new durable files; their descriptions."""

    def pack(self, files: list[F]) -> bytes:
        """The descriptions as bytes for the driver (default: pickled)."""
        return pickle.dumps(files)

    def finish(self, files: list[F]) -> None:
        """Called once the task wrote every file it writes of this changelog (default: nothing)."""
        return None


def records(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[int, int, bytes]]:
    """``(table id, schema version, data)`` of each frame record."""
    for rb in batches:
        cols = rb.to_pydict()
        yield from zip(cols["table_id"], cols["schema_version"], cols["data"])


def op_counts(rows: pa.Table) -> dict[str, int]:
    """Row changes per op (``_tidb_op``) of ``rows``."""
    if not rows.num_rows:
        return {}
    return {d["values"]: d["counts"] for d in pc.value_counts(rows.column(OP)).to_pylist()}


def files_record(files: bytes, removed: Sequence[str] = (), counts: Mapping[str, int] | None = None,
                 table: str = "") -> pa.RecordBatch:
    """What a task wrote of one table (``TABLE_FILES_DDL``): one record per op counted (one record when
    none is), the packed ``files`` and the ``removed`` paths on the first."""
    per_op = dict(counts or {}) or {"": 0}
    return pa.RecordBatch.from_pylist(
        [{"files": files if i == 0 else None, "removed": pickle.dumps(list(removed)) if i == 0 else None,
          "op": op, "rows": n, "table": table} for i, (op, n) in enumerate(sorted(per_op.items()))],
        schema=FILES_SCHEMA.append(pa.field("table", pa.string())))


def unpack(blob: bytes | None) -> list[Any]:
    """What :meth:`ChangelogFiles.pack` (by default) or :func:`files_record`'s ``removed`` packed."""
    return list(pickle.loads(blob)) if blob else []


class _Task(Generic[F]):
    """One changelog's share of a task: rows gathered per batch, files written, row changes per op."""

    def __init__(self, changelog: ChangelogFiles[F]) -> None:
        self.changelog = changelog
        self.pending: dict[int, list[pa.Table]] = {}
        self.size: Counter[int] = Counter()
        self.files: list[F] = []
        self.counts: Counter[str] = Counter()

    def add(self, table_id: int, version: int, data: bytes) -> None:
        rows = self.changelog.rows(table_id, version, data)
        if not rows.num_rows:
            return
        self.counts.update(op_counts(rows))
        batch = self.changelog.batch(version)
        self.pending.setdefault(batch, []).append(rows)
        self.size[batch] += rows.num_rows
        if self.size[batch] >= self.changelog.batch_rows:
            self.flush(batch)

    def flush(self, batch: int) -> None:
        """Write the batch's rows, each file in commit order (tight commit_ts bounds per file and row group)."""
        parts = self.pending.pop(batch, [])
        self.size.pop(batch, None)
        if parts:
            self.files.extend(self.changelog.write(batch, pa.concat_tables(parts).sort_by(ORDER)))

    def close(self) -> pa.RecordBatch:
        for batch in list(self.pending):
            self.flush(batch)
        self.changelog.finish(self.files)
        return files_record(self.changelog.pack(self.files), counts=self.counts, table=self.changelog.table)


def write_changelogs(changelogs: Mapping[int, ChangelogFiles[Any]], batches: Iterable[pa.RecordBatch]
                     ) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the task's records written as files of their table id's changelog
    (``changelogs`` by table id; several ids may share one, and one pass over the frame writes every
    table's); ``TABLE_FILES_DDL`` out, one changelog's files and counts after another."""
    by_id: dict[int, _Task[Any]] = {}
    by_changelog: dict[int, _Task[Any]] = {}
    for table_id, version, data in records(batches):
        task = by_id.get(table_id)
        if task is None:
            changelog = changelogs[table_id]
            task = by_id[table_id] = by_changelog.setdefault(id(changelog), _Task(changelog))
        task.add(table_id, version, data)
    for task in by_changelog.values():
        yield task.close()
