"""Value-log framing, footer, rotation, torn tails and corruption, byte for byte."""
from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from ingest.errors import CorruptRecord
from ingest.pump.storage.vlog import FILE_END_MAGIC, RECORD_MAGIC, LogFile, Pointer, ValueLog, encode_record, file_name


def test_record_layout_is_tidbs() -> None:
    payload = b"hello binlog"
    frame = encode_record(payload)
    magic, length, crc = struct.unpack("<IQI", frame[:16])
    assert (magic, length, crc) == (0x823A56E8, len(payload), crc32c.crc32c(payload))
    assert frame[:4] == bytes.fromhex("e8563a82")  # little-endian magic on disk
    assert frame[16:] == payload


def test_crc32c_is_castagnoli() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value


def test_pointer_is_12_bytes_little_endian() -> None:
    assert Pointer(3, 258).pack() == bytes.fromhex("03000000" "0201000000000000")
    assert Pointer.unpack(Pointer(7, 1 << 40).pack()) == Pointer(7, 1 << 40)


def test_append_read_and_footer(tmp_path: Path) -> None:
    vlog = ValueLog(tmp_path, file_size=100, sync=True, ts_of=lambda p: int(p))
    ptrs = vlog.append_batch([b"10", b"20"], max_ts=20)
    assert [vlog.read(p) for p in ptrs] == [b"10", b"20"]
    more = vlog.append_batch([b"9" * 80], max_ts=99)  # does not fit: rotates first
    assert more[0].fid == 1 and vlog.read(more[0]) == b"9" * 80
    first = (tmp_path / file_name(0)).read_bytes()
    max_ts, magic = struct.unpack("<qI", first[-12:])
    assert (max_ts, magic) == (20, FILE_END_MAGIC)
    vlog.close()
    reopened = ValueLog(tmp_path, file_size=100, ts_of=lambda p: int(p))
    assert reopened.files[0].ended and reopened.files[0].max_ts == 20
    assert reopened.current.fid == 1 and not reopened.current.ended  # small files stay open at close
    assert [p for _, p in reopened.scan(Pointer(0, 0), reopened.end())] == [b"10", b"20", b"9" * 80]
    reopened.close()


def test_torn_tail_is_cut_and_earlier_records_kept(tmp_path: Path) -> None:
    vlog = ValueLog(tmp_path, ts_of=lambda p: 0)
    vlog.append_batch([b"a" * 50, b"b" * 50, b"c" * 50], max_ts=1)
    vlog.close()
    path = tmp_path / file_name(0)
    data = path.read_bytes()
    path.write_bytes(data[:-20])  # the last record loses its end
    corrupt: list[tuple[int, int]] = []
    reopened = ValueLog(tmp_path, ts_of=lambda p: 0, on_corrupt=lambda o, n: corrupt.append((o, n)))
    assert [p for _, p in reopened.scan(Pointer(0, 0), reopened.end())] == [b"a" * 50, b"b" * 50]
    assert path.stat().st_size == 2 * 66
    assert corrupt == [(132, len(data) - 20 - 132)]
    ptr = reopened.append_batch([b"d" * 10], max_ts=2)[0]
    assert ptr == Pointer(0, 132) and reopened.read(ptr) == b"d" * 10
    reopened.close()


def test_corrupt_record_in_the_middle_is_skipped_and_reported(tmp_path: Path) -> None:
    vlog = ValueLog(tmp_path, ts_of=lambda p: 0)
    ptrs = vlog.append_batch([b"x" * 40, b"y" * 40, b"z" * 40], max_ts=1)
    path = tmp_path / file_name(0)
    raw = bytearray(path.read_bytes())
    raw[ptrs[1].offset + 20] ^= 0xFF  # flip a payload byte of the middle record
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptRecord, match="checksum mismatch"):
        vlog.read(ptrs[1])
    corrupt: list[tuple[int, int]] = []
    f = LogFile(tmp_path, 0)
    got = [p for _, p in f.scan(on_corrupt=lambda o, n: corrupt.append((o, n)))]
    assert got == [b"x" * 40, b"z" * 40]
    assert corrupt == [(ptrs[1].offset, 56)]
    f.close()
    vlog.close()


def test_wrong_magic_is_reported(tmp_path: Path) -> None:
    vlog = ValueLog(tmp_path, ts_of=lambda p: 0)
    ptr = vlog.append_batch([b"p" * 10], max_ts=1)[0]
    with pytest.raises(CorruptRecord, match="wrong magic"):
        vlog.read(Pointer(0, ptr.offset + 1))
    vlog.close()


def test_purge_deletes_only_old_ended_files(tmp_path: Path) -> None:
    vlog = ValueLog(tmp_path, file_size=32, ts_of=lambda p: 0)
    vlog.append_batch([b"1" * 20], max_ts=10)   # file 0 → ends, max 10
    vlog.append_batch([b"2" * 20], max_ts=20)   # file 1 → ends, max 20
    vlog.append_batch([b"3" * 5], max_ts=30)    # file 2 current
    assert vlog.purge_before(15) == [0]
    assert not (tmp_path / file_name(0)).exists() and (tmp_path / file_name(1)).exists()
    assert vlog.purge_before(10**9) == [1]
    assert vlog.current.fid == 2
    vlog.close()


def test_scan_resyncs_across_chunk_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ingest.pump.storage.vlog as vlog_mod
    monkeypatch.setattr(vlog_mod, "SCAN_CHUNK", 64)
    vlog = ValueLog(tmp_path, ts_of=lambda p: 0)
    payloads = [bytes([65 + i]) * (10 + 7 * i) for i in range(12)]
    vlog.append_batch(payloads, max_ts=1)
    assert [p for _, p in vlog.scan(Pointer(0, 0), vlog.end())] == payloads
    vlog.close()
    assert RECORD_MAGIC == 0x823A56E8
