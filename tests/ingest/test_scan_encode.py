"""The scan path's own RecordBatch encoder must produce what protobuf's serializer produces."""
from __future__ import annotations

import numpy as np
import pytest

from ingest.pump.storage.scan import ScanColumns, varints
from schemas import binlake_pb2


@pytest.mark.parametrize("n", [0, 1, 7, 500])
def test_encode_is_byte_identical_to_protobuf(n: int) -> None:
    rng = np.random.default_rng(n)
    key_ts = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)
    tp = rng.integers(-3, 3, n).astype(np.int64)
    start = rng.integers(0, 2**62, n, dtype=np.int64)
    commit = np.where(rng.integers(0, 2, n) == 0, 0, rng.integers(0, 2**40, n, dtype=np.int64))
    lengths = rng.integers(0, 300, n).astype(np.int64)
    payloads = bytes(rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8))
    cut = len(payloads) // 3
    cols = ScanColumns(key_ts, tp, start, commit, lengths, [payloads[:cut], memoryview(payloads)[cut:]])
    for scanned_to in (0, 5, 470631633839718400):
        expected = binlake_pb2.RecordBatch(
            key_ts=key_ts.tolist(), tp=tp.tolist(), start_ts=start.tolist(), commit_ts=commit.tolist(),
            lengths=lengths.tolist(), payloads=payloads, scanned_to=scanned_to).SerializeToString()
        assert cols.encode(scanned_to) == expected
        assert binlake_pb2.RecordBatch.FromString(cols.encode(scanned_to)).payloads == payloads


def test_varints_at_group_boundaries() -> None:
    values = np.array([0, 1, 127, 128, 16383, 16384, 2**35, 2**63 - 1, -1, -2**63], dtype=np.int64)
    expected = binlake_pb2.RecordBatch(key_ts=values.tolist()).SerializeToString()
    body = varints(values)
    assert expected.endswith(body) and len(expected) - len(body) <= 3
