"""Position deletes of a mirror's rows: Iceberg v2 position delete files, and what they delete.

A merge-on-read mirror merge (``sink.iceberg.tasks``) writes one per key bucket (per partition) it
merged, naming the rows of the bucket's data files that held a touched key, instead of rewriting
those files, and (unless the table says ``binlake.merge.fold=false``) the positions of the bucket's
earlier delete files, which it replaces: a bucket has one delete file however many runs. Its
``file_path`` bounds are the first and last file it names, as readers expect, so a delete file of
one data file is found by that file's path. pyiceberg, DuckDB's iceberg extension and Java Iceberg
read through them; ``binlake maintain`` folds them into rewritten data files and merges them.
"""
from __future__ import annotations

import posixpath
import uuid
from collections.abc import Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.types import LongType, StringType

FILE_PATH_ID = 2147483546   # the spec's reserved field ids of a position delete file
POS_ID = 2147483545
SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
])
MODE_KEY = "write.merge.mode"   # Iceberg's table property for MERGE: copy-on-write | merge-on-read
MERGE_ON_READ = "merge-on-read"
COPY_ON_WRITE = "copy-on-write"
FOLD_KEY = "binlake.merge.fold"   # true (default) | false: a merge-on-read run folds its bucket's small files


def merge_on_read(properties: Mapping[str, str], format_version: int) -> bool:
    """Whether a mirror's merge writes position deletes: the table says ``merge-on-read`` (binlake's
    mirrors do from creation; a mirror without the property merges on read too, an explicit
    ``copy-on-write`` rewrites files) and is a v2 table (v1 has no delete files, v3 wants deletion vectors)."""
    return properties.get(MODE_KEY, MERGE_ON_READ) == MERGE_ON_READ and format_version == 2


def folds(properties: Mapping[str, str]) -> bool:
    """Whether a merge-on-read run folds each bucket it merges to one delete file and a few data
    files (``sink.iceberg.tasks``): yes unless the table says ``binlake.merge.fold=false``."""
    return properties.get(FOLD_KEY, "true").lower() != "false"


def is_delete(f: DataFile) -> bool:
    """Whether ``f`` is a delete file rather than a data file."""
    return f.content != DataFileContent.DATA


def write(io: FileIO, hits: Mapping[str, pa.Array], like: DataFile) -> DataFile:
    """A position delete file deleting, of each data file path in ``hits``, the rows at its positions;
    in the partition and spec of ``like`` (one of those files: they must share them), beside it."""
    paths = sorted(hits)
    parts = [pc.unique(hits[p].cast(pa.int64())).sort() for p in paths]
    path_col = pa.concat_arrays([pa.array([p] * len(pos), pa.string()) for p, pos in zip(paths, parts)])
    rows = pa.table([path_col, pa.concat_arrays(parts)], schema=SCHEMA)
    path = posixpath.join(posixpath.dirname(like.file_path), f"{uuid.uuid4()}-deletes.parquet")
    with io.new_output(path).create(overwrite=False) as stream:
        pq.write_table(rows, stream, compression="zstd")
    size = len(io.new_input(path))
    pos = rows.column("pos")
    f = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=path, file_format=FileFormat.PARQUET,
        partition=like.partition, record_count=rows.num_rows, file_size_in_bytes=size, sort_order_id=None,
        spec_id=like.spec_id, equality_ids=None, key_metadata=None,
        value_counts={FILE_PATH_ID: rows.num_rows, POS_ID: rows.num_rows},
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
        lower_bounds={FILE_PATH_ID: to_bytes(StringType(), paths[0]),
                      POS_ID: to_bytes(LongType(), pc.min(pos).as_py())},
        upper_bounds={FILE_PATH_ID: to_bytes(StringType(), paths[-1]),
                      POS_ID: to_bytes(LongType(), pc.max(pos).as_py())},
    )
    f.spec_id = like.spec_id
    return f


def read_one(io: FileIO, delete_file: DataFile) -> dict[str, pa.Array]:
    """Data file path → the positions one delete file deletes of it (sorted)."""
    rows = pq.read_table(io.new_input(delete_file.file_path).open(), columns=["file_path", "pos"])
    rows = rows.sort_by([("file_path", "ascending"), ("pos", "ascending")])
    counts = pc.value_counts(rows.column("file_path"))   # in order of appearance: sorted
    pos = rows.column("pos").combine_chunks()
    out, start = {}, 0
    for path, n in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()):
        out[path] = pos.slice(start, n)
        start += n
    return out


def read(io: FileIO, delete_files: Iterable[DataFile]) -> dict[str, pa.Array]:
    """Data file path → the positions ``delete_files`` delete of it (sorted, distinct)."""
    parts: dict[str, list[pa.Array]] = {}
    for d in delete_files:
        for path, pos in read_one(io, d).items():
            parts.setdefault(path, []).append(pos)
    return {p: pc.unique(pa.concat_arrays(a)).sort() for p, a in parts.items()}
