"""The run's rows held in this process, behind the few DataFrame methods the sinks call.

A run computed without Spark (``transform.in_process``) leaves its decoded records here instead of in a
Spark DataFrame; the sinks' task functions (``mapInArrow`` bodies over Arrow record batches) then run
in this process, each over the whole frame as one partition. One partition keeps Spark's promises
that the sinks rely on: every record of a (table, bucket) reaches one call of ``merge_mirrors``, and
``repartitionByRange`` + ``sortWithinPartitions`` give one sorted stream. Pure pyarrow: no JVM.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

Task = Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]


def ddl_names(ddl: str) -> list[str]:
    """The column names of a Spark DDL string of simple types (``"a long, b string"``)."""
    return [part.split()[0] for part in ddl.split(",")]


class LocalConf:
    """``spark.conf`` of a frame in this process: one partition, whatever is asked."""

    def get(self, key: str, default: str | None = None) -> str:
        """``"1"``: the only setting sinks read is a partition count."""
        return "1"


class LocalContext:
    """``spark.sparkContext`` of a frame in this process."""

    defaultParallelism = 1


class LocalSession:
    """What the sinks ask of ``frame.sparkSession`` (or ``RunBatch.spark``), in this process."""

    conf = LocalConf()
    sparkContext = LocalContext()

    def createDataFrame(self, rows: Sequence[Sequence[Any]], ddl: str) -> LocalFrame:
        """A frame of ``rows`` (tuples), named by the DDL's column names (types as Arrow infers them)."""
        names = ddl_names(ddl)
        if not rows:
            return LocalFrame([])
        return LocalFrame([pa.RecordBatch.from_pylist([dict(zip(names, r)) for r in rows])])


LOCAL = LocalSession()


class LocalFrame:
    """Arrow record batches in this process, as one partition; each method computes at once."""

    sparkSession = LOCAL

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self.batches = [b for b in batches if b.num_rows]

    def of_tables(self, table_ids: Iterable[int]) -> LocalFrame:
        """The records whose ``table_id`` is one of ``table_ids`` (``RunBatch.rows_of``)."""
        wanted = pa.array(sorted(table_ids), pa.int64())
        return LocalFrame(b.filter(pc.is_in(b.column("table_id"), value_set=wanted)) for b in self.batches)

    def mapInArrow(self, task: Task, schema: str) -> LocalFrame:
        """``task`` over every batch, in one call (the frame is one partition)."""
        return LocalFrame(task(iter(self.batches)))

    def relabelled(self, column: str, values: Mapping[int, int]) -> LocalFrame:
        """The records with each value of the int64 ``column`` found in ``values`` replaced by what it maps to."""
        if not values:
            return self
        old = pa.array(list(values), pa.int64())
        new = pa.array(list(values.values()), pa.int64())
        out = []
        for b in self.batches:
            col = b.column(column)
            at = pc.index_in(col, value_set=old)
            mapped = pc.if_else(pc.is_null(at), col, pc.take(new, pc.fill_null(at, 0)))
            out.append(b.set_column(b.schema.get_field_index(column), column, mapped))
        return LocalFrame(out)

    def unionByName(self, other: LocalFrame) -> LocalFrame:
        """Both frames' records."""
        return LocalFrame(self.batches + other.batches)

    def repartition(self, partitions: int, *columns: str) -> LocalFrame:
        """The same frame: one partition holds every key."""
        return self

    def repartitionByRange(self, partitions: int, *columns: str) -> LocalFrame:
        """The same frame: one partition is its whole range (``sortWithinPartitions`` sorts it)."""
        return self

    def sortWithinPartitions(self, *columns: str) -> LocalFrame:
        """The records sorted by ``columns``, ascending."""
        if not self.batches:
            return self
        return LocalFrame(self.toArrow().sort_by([(c, "ascending") for c in columns]).to_batches())

    def toArrow(self) -> pa.Table:
        """Every record as one table (no columns when the frame is empty)."""
        if not self.batches:
            return pa.table({})
        return pa.concat_tables([pa.Table.from_batches([b]) for b in self.batches], promote_options="default")

    def toLocalIterator(self, prefetchPartitions: bool = False) -> Iterator[dict[str, Any]]:
        """Every record as a dict, in order."""
        for b in self.batches:
            yield from b.to_pylist()
