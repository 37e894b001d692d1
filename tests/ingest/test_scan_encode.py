"""The scan path's RecordBatch: its own encoder against protobuf's serializer, the value-log spans a
batch ships (payloads found where its offsets say, nothing of other records, CRC32C checked per
record), and the client's decoding of it."""
from __future__ import annotations

import numpy as np
import pytest

from ingest.errors import MalformedBatch
from ingest.pump.storage.index import value_chunks
from ingest.pump.storage.scan import ScanColumns, _Chunk, scan_columns
from ingest.pump.storage.vlog import HEADER_LEN, ValueLog
from ingest.scan_client import ScanBatch, records
from schemas import binlake_pb2
from transform.pull import payload_array


def _columns(n: int, seed: int) -> tuple[ScanColumns, bytes]:
    rng = np.random.default_rng(seed)
    key_ts = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)
    tp = rng.integers(-3, 3, n).astype(np.int64)
    start = rng.integers(0, 2**62, n, dtype=np.int64)
    commit = np.where(rng.integers(0, 2, n) == 0, 0, rng.integers(0, 2**40, n, dtype=np.int64))
    lengths = rng.integers(0, 300, n).astype(np.int64)
    gaps = rng.integers(0, 20, n)
    data = bytes(rng.integers(0, 256, int((lengths + gaps).sum()), dtype=np.uint8))
    offsets = np.cumsum(lengths + gaps) - lengths
    perm = rng.permutation(n)  # payloads need not follow record order
    cut = len(data) // 3
    cols = ScanColumns(key_ts, tp, start, commit, offsets[perm], lengths[perm], [data[:cut], memoryview(data)[cut:]])
    return cols, data


@pytest.mark.parametrize("n", [0, 1, 7, 500])
def test_encode_is_byte_identical_to_protobuf(n: int) -> None:
    cols, data = _columns(n, n)
    for scanned_to in (0, 5, 470631633839718400):
        kw = dict(key_ts=cols.key_ts.astype("<i8").tobytes(), tp=cols.tp.astype("<i4").tobytes(),
                  start_ts=cols.start_ts.astype("<i8").tobytes(), commit_ts=cols.commit_ts.astype("<i8").tobytes(),
                  offsets=cols.offsets.astype("<u4").tobytes(), lengths=cols.lengths.astype("<u4").tobytes())
        expected = binlake_pb2.RecordBatch(scanned_to=scanned_to, data=data, **(kw if n else {})).SerializeToString()
        assert cols.encode(scanned_to) == expected
        batch = ScanBatch(cols.encode(scanned_to))
        assert batch.scanned_to == scanned_to and len(batch) == n
        assert batch.payloads() == cols.payloads() == [data[o:o + k] for o, k in
                                                        zip(cols.offsets.tolist(), cols.lengths.tolist())]
        assert payload_array(batch).to_pylist() == batch.payloads()
        assert [(r.key_ts, r.tp, r.start_ts, r.commit_ts) for r in records(batch)] == \
            list(zip(cols.key_ts.tolist(), cols.tp.tolist(), cols.start_ts.tolist(), cols.commit_ts.tolist()))


def test_client_parser_reads_what_protobuf_reads() -> None:
    """Unknown fields are skipped and a repeated field's last occurrence wins, as in protobuf."""
    cols, data = _columns(9, 4)
    body = cols.encode(-7 & 0xFFFFFFFFFFFFFFFF)
    unknown = b"\x78\x05" + b"\x82\x01\x03abc" + b"\x89\x01" + bytes(8) + b"\x95\x01" + bytes(4)
    raw = b"\x72\x02zz" + body + unknown
    batch = ScanBatch(raw)
    msg = binlake_pb2.RecordBatch.FromString(raw)
    assert batch.scanned_to == msg.scanned_to == -7
    assert bytes(batch.data) == msg.data == data
    for name, dtype in (("key_ts", "<i8"), ("tp", "<i4"), ("start_ts", "<i8"), ("commit_ts", "<i8"),
                        ("offsets", "<u4"), ("lengths", "<u4")):
        assert getattr(batch, name).tolist() == np.frombuffer(getattr(msg, name), dtype=dtype).tolist()
    assert len(ScanBatch(b"")) == 0


def test_concat_shifts_offsets() -> None:
    a, da = _columns(5, 1)
    b, db = _columns(3, 2)
    both = ScanColumns.concat([a, b])
    assert both.data == da + db and both.size == len(da) + len(db)
    assert both.payloads() == a.payloads() + b.payloads()


def test_client_rejects_inconsistent_batches() -> None:
    cols, _ = _columns(4, 3)
    msg = binlake_pb2.RecordBatch.FromString(cols.encode(0))
    msg.tp = msg.tp[:-4]
    with pytest.raises(MalformedBatch, match="column tp"):
        ScanBatch(msg.SerializeToString())
    msg = binlake_pb2.RecordBatch.FromString(cols.encode(0))
    msg.data = msg.data[:-300]
    with pytest.raises(MalformedBatch):
        payload_array(ScanBatch(msg.SerializeToString()))
    with pytest.raises(MalformedBatch, match="past the message end"):
        ScanBatch(cols.encode(0)[:-1])
    overlapping = ScanColumns(*(np.zeros(2, dtype=np.int64) for _ in range(4)), np.array([0, 2]),
                              np.array([4, 4]), [b"abcdefgh"])
    with pytest.raises(MalformedBatch, match="overlap"):
        payload_array(ScanBatch(overlapping.encode(0)))


def _chunk(frames: list[tuple[int, int]], order: list[int]) -> tuple[_Chunk, bytes]:
    """A chunk over a buffer of frames (header length, payload length) laid out back to back; its
    records are the frames in ``order``."""
    buf = bytearray()
    spans = []
    for k, (head, size) in enumerate(frames):
        spans.append((len(buf), len(buf) + head))
        buf += b"H" * head + bytes([65 + k % 26]) * size
    frame = np.array([spans[i][0] for i in order], dtype=np.int64)
    pos = np.array([spans[i][1] for i in order], dtype=np.int64)
    end = pos + np.array([frames[i][1] for i in order], dtype=np.int64)
    n = len(order)
    ts = np.arange(1, n + 1, dtype=np.int64)
    return _Chunk(bytes(buf), np.zeros(n, dtype=np.uint8), ts, np.zeros(n, dtype=np.int64), frame, pos, end), bytes(buf)


@pytest.mark.parametrize("order", [[0, 1, 2, 3, 4], [1, 0, 2, 4, 3], [0, 2, 4], [4, 3, 2, 1, 0], [3]])
def test_take_ships_exactly_the_frames_of_its_records(order: list[int]) -> None:
    frames = [(16, 10), (16, 0), (16, 300), (16, 7), (16, 40)]
    ch, buf = _chunk(frames, order)
    for i in range(len(order)):
        for j in range(i + 1, len(order) + 1):
            cols = ch.take(i, j)
            expected = [buf[p:e] for p, e in zip(ch.pos[i:j].tolist(), ch.end[i:j].tolist())]
            assert cols.payloads() == expected
            assert cols.size == len(cols.data) == sum(16 + frames[k][1] for k in order[i:j])
            assert cols.key_ts.tolist() == ch.start_ts[i:j].tolist()


def test_take_with_shared_bytes_ships_them_twice() -> None:
    frames = [(16, 10), (16, 20)]
    ch, buf = _chunk(frames, [0, 1, 0])
    cols = ch.take(0, 3)
    assert cols.payloads() == [buf[16:26], buf[42:62], buf[16:26]]
    assert cols.size == 26 + 36 + 26
    assert payload_array(ScanBatch(cols.encode(0))).to_pylist() == cols.payloads()


def _vlog(tmp_path, payloads: list[bytes]) -> tuple[ValueLog, list[bytes]]:
    """A value log holding ``payloads`` and the raw index values of its records (ts = 1, 2, …)."""
    from ingest.pump.storage.index import Entry
    from ingest.pump.storage.vlog import Pointer

    vlog = ValueLog(tmp_path, sync=False)
    ptrs: list[Pointer] = []
    for p in payloads:
        ptrs += vlog.append_batch([p], 0)
    values = [Entry(i + 1, 0, i + 1, 0, ptr).pack() for i, ptr in enumerate(ptrs)]
    return vlog, values


@pytest.mark.parametrize("limit", [1, 100, 1000, 1 << 20])
def test_scan_columns_batches_and_order(tmp_path, limit: int) -> None:
    payloads = [bytes([i % 251]) * (i * 7 % 300) for i in range(200)]
    vlog, values = _vlog(tmp_path, payloads)
    rng = np.random.default_rng(limit)
    shuffled = [values[i] for i in rng.permutation(len(values))]
    want = [payloads[int.from_bytes(v[13:21], "little") - 1] for v in shuffled]
    batches = list(scan_columns(value_chunks(shuffled), vlog, limit, pytest.fail))
    got = [p for b in batches for p in b.payloads()]
    assert got == want
    assert [k for b in batches for k in b.key_ts.tolist()] == [int.from_bytes(v[13:21], "little") for v in shuffled]
    for b in batches:
        assert b.size <= limit or len(b) == 1
        assert b.size == len(b.data) == int(b.lengths.sum()) + HEADER_LEN * len(b)
    vlog.close()


def test_scan_columns_skips_and_reports_a_corrupt_record(tmp_path) -> None:
    payloads = [b"a" * 50, b"b" * 60, b"c" * 70, b"d" * 80]
    vlog, values = _vlog(tmp_path, payloads)
    path = vlog.current.path
    raw = bytearray(path.read_bytes())
    at = raw.index(b"c" * 70)
    raw[at + 5] ^= 0xFF  # the third record's payload no longer matches its CRC32C
    path.write_bytes(bytes(raw))
    reported: list[str] = []
    batches = list(scan_columns(value_chunks(values), vlog, 1 << 20, reported.append))
    assert [p for b in batches for p in b.payloads()] == [b"a" * 50, b"b" * 60, b"d" * 80]
    assert len(reported) == 1 and "checksum mismatch" in reported[0]
    data = b"".join(b.data for b in batches)
    assert b"c" * 5 not in data  # the corrupt record's bytes are not shipped
    vlog.close()
