"""CRC32C of many records per span must flag exactly the records one-by-one checks flag."""
from __future__ import annotations

import crc32c
import numpy as np
import pytest

from ingest.pump.storage import crcspan
from ingest.pump.storage.crcspan import MAX_BULK_LEN, bad_records, one_by_one
from ingest.pump.storage.vlog import encode_record


def _span(rng: np.random.Generator, lengths: list[int],
          gap_every: int = 0) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    """Frames (value-log encoding) back to back, with foreign bytes every ``gap_every`` frames."""
    out = bytearray(rng.integers(0, 256, 40, dtype=np.uint8).tobytes())  # bytes before the first frame
    frame, crc = [], []
    for k, n in enumerate(lengths):
        if gap_every and k % gap_every == gap_every - 1:
            out += encode_record(b"foreign" * 3)
        payload = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        frame.append(len(out))
        crc.append(crc32c.crc32c(payload))
        out += encode_record(payload)
    frame_a = np.array(frame, dtype=np.int64)
    pos = frame_a + 16
    return bytes(out), frame_a, pos, np.array(crc, dtype=np.uint32)


def _corrupt(buf: bytes, at: list[int]) -> bytes:
    b = bytearray(buf)
    for i in at:
        b[i] ^= 0x5A
    return bytes(b)


@pytest.mark.parametrize("seed", range(6))
def test_bulk_flags_what_one_by_one_flags(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    one_by_one_calls: list[int] = []

    def counting(*args: np.ndarray) -> np.ndarray:
        one_by_one_calls.append(len(args[1]))
        return one_by_one(*args)

    monkeypatch.setattr(crcspan, "one_by_one", counting)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(64, 600))
    lengths = [int(x) for x in rng.choice([0, 1, 2, 3, 4, 5, 30, 1000, 1100, 5000], n)]
    if seed % 2:
        lengths[n // 2] = MAX_BULK_LEN + 10  # one long record, checked on its own
    buf, frame, pos, crc = _span(rng, lengths, gap_every=[0, 0, 97, 250, 0, 131][seed])
    end = pos + np.array(lengths, dtype=np.int64)
    perm = np.arange(n)
    if seed >= 3:  # key-ts order is not quite file order: swap some neighbours
        swaps = rng.choice(n - 1, n // 20, replace=False)
        for s in swaps:
            perm[s], perm[s + 1] = perm[s + 1], perm[s]
    f, p, e, c = frame[perm], pos[perm], end[perm], crc[perm]
    assert bad_records(buf, f, p, e, c).tolist() == []
    assert all(k <= 1 for k in one_by_one_calls)  # the span was checked in bulk (a long record alone)
    nonempty = [i for i in range(n) if e[i] > p[i]]
    for damaged in ([nonempty[0]], [nonempty[-1]], list(rng.choice(nonempty, 3, replace=False))):
        hits = [int(rng.integers(p[i], e[i])) for i in damaged]
        bad = _corrupt(buf, hits)
        expected = one_by_one(bad, p, e, c).tolist()
        assert expected == sorted(set(damaged))
        assert bad_records(bad, f, p, e, c).tolist() == expected
    # a wrong stored checksum is caught as well as a wrong payload
    c2 = c.copy()
    c2[nonempty[5]] ^= 1
    assert bad_records(buf, f, p, e, c2).tolist() == [nonempty[5]]


def test_damaged_header_bytes_do_not_hide_a_payload_error() -> None:
    rng = np.random.default_rng(9)
    lengths = [100] * 200
    buf, frame, pos, crc = _span(rng, lengths)
    end = pos + 100
    bad = _corrupt(buf, [int(pos[50]) + 3])
    assert bad_records(bad, frame, pos, end, crc).tolist() == [50]


def test_small_or_scattered_sets_use_one_by_one() -> None:
    rng = np.random.default_rng(1)
    buf, frame, pos, crc = _span(rng, [10] * 20)
    end = pos + 10
    assert bad_records(buf, frame, pos, end, crc).tolist() == []
    assert bad_records(_corrupt(buf, [int(pos[3])]), frame, pos, end, crc).tolist() == [3]
    buf, frame, pos, crc = _span(rng, [10] * 200, gap_every=2)  # a gap after every other frame
    end = pos + 10
    assert bad_records(_corrupt(buf, [int(pos[7])]), frame, pos, end, crc).tolist() == [7]
