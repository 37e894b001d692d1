"""The small files a merge-on-read run folds (``sink.iceberg.tasks.fold_set``): each file of a bucket
holds more than twice the rows of the next smaller one, a row is rewritten about log2(runs) / 2 times,
and a file far larger than the runs' rows is never taken."""
from __future__ import annotations

import random

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

from sink.iceberg.tasks import fold_set


def _file(n: int, rows: int) -> DataFile:
    return DataFile.from_args(content=DataFileContent.DATA, file_path=f"s3://b/f{n}.parquet",
                              file_format=FileFormat.PARQUET, record_count=rows, file_size_in_bytes=rows * 10)


def _run(files: list[DataFile], n: int, rows: int) -> int:
    """One run of ``rows`` new rows into the bucket's ``files`` (in place); the rows it rewrote."""
    taken = fold_set(files, rows)
    paths = {f.file_path for f in taken}
    files[:] = [f for f in files if f.file_path not in paths]
    folded = sum(f.record_count for f in taken)
    if rows:
        files.append(_file(n, rows + folded))
    return folded


def test_each_file_of_a_bucket_holds_more_than_twice_the_next_smaller_one() -> None:
    rng = random.Random(3)
    for _ in range(200):
        files: list[DataFile] = []
        for n in range(64):
            _run(files, n, rng.randint(0, 300))
            sizes = sorted(f.record_count for f in files)
            assert all(b > 2 * a for a, b in zip(sizes, sizes[1:])), sizes


def test_runs_into_a_compacted_bucket_leave_a_few_files_and_rewrite_a_row_a_few_times() -> None:
    base = _file(0, 100_000)
    files, rewritten = [base], 0
    for n in range(1, 65):
        rewritten += _run(files, n, 100)
        assert base in files and len(files) <= 5, (n, [f.record_count for f in files])
    assert rewritten / (64 * 100) < 3.5   # log2(64) / 2 = 3, and a little


def test_nothing_folds_without_new_rows_or_into_a_file_over_twice_their_size() -> None:
    files = [_file(1, 50), _file(2, 21)]
    assert fold_set(files, 0) == []
    assert fold_set(files, 10) == []
    assert [f.file_path for f in fold_set(files, 11)] == [files[1].file_path, files[0].file_path]
    assert [f.file_path for f in fold_set([_file(1, 100), _file(2, 21)], 11)] == [files[1].file_path]
