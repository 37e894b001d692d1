"""Helpers over TiDB's ``binlog.Binlog`` message: parsing, keys, fake binlogs, gogoproto-style bytes."""
from __future__ import annotations

from google.protobuf.message import DecodeError

from ingest.errors import MalformedBinlog
from schemas import binlog_pb2

PREWRITE = binlog_pb2.Prewrite
COMMIT = binlog_pb2.Commit
ROLLBACK = binlog_pb2.Rollback


def parse(payload: bytes) -> binlog_pb2.Binlog:
    """Decode a marshalled Binlog (standard or gogoproto bytes); raise ``MalformedBinlog``."""
    b = binlog_pb2.Binlog()
    try:
        b.ParseFromString(payload)
    except DecodeError as exc:
        raise MalformedBinlog(f"payload of {len(payload)} bytes is not a binlog.Binlog: {exc}") from exc
    if b.tp not in (PREWRITE, COMMIT, ROLLBACK):
        raise MalformedBinlog(f"unsupported binlog type {b.tp} (start_ts={b.start_ts})")
    if b.start_ts < 0 or b.commit_ts < 0:
        raise MalformedBinlog(f"negative timestamp in binlog (start_ts={b.start_ts}, commit_ts={b.commit_ts})")
    if b.tp == COMMIT and b.commit_ts <= b.start_ts:
        raise MalformedBinlog(f"commit binlog with commit_ts {b.commit_ts} <= start_ts {b.start_ts}")
    return b


def key_ts(tp: int, start_ts: int, commit_ts: int) -> int:
    """The ts a record is indexed by: start_ts for prewrites, commit_ts for commits and rollbacks."""
    return start_ts if tp == PREWRITE else commit_ts


def is_fake(tp: int, start_ts: int, commit_ts: int) -> bool:
    """TiDB's fake binlog: Rollback-typed with start_ts == commit_ts (and not the all-zero probe)."""
    return tp == ROLLBACK and start_ts == commit_ts and start_ts != 0


def max_ts(payload: bytes) -> int:
    """The larger of a stored binlog's start and commit ts (0 if it does not parse)."""
    try:
        b = parse(payload)
    except MalformedBinlog:
        return 0
    return max(b.start_ts, b.commit_ts)


def marshal_gogo(b: binlog_pb2.Binlog) -> bytes:
    """Marshal like Go's gogoproto code: non-nullable fields always present, even when zero.

    Python's proto2 encoder omits unset optional fields; setting them explicitly makes it emit
    them, in field-number order, which is byte-identical to tipb's ``(*Binlog).MarshalTo``.
    """
    out = binlog_pb2.Binlog()
    out.CopyFrom(b)
    out.tp = b.tp
    out.start_ts = b.start_ts
    out.commit_ts = b.commit_ts
    out.ddl_job_id = b.ddl_job_id
    out.ddl_schema_state = b.ddl_schema_state
    data: bytes = out.SerializeToString()  # protobuf's Message is untyped here
    return data


def fake_binlog(ts: int) -> bytes:
    """A fake binlog at ``ts`` (Rollback, start_ts == commit_ts == ts), gogoproto-marshalled."""
    return marshal_gogo(binlog_pb2.Binlog(tp=ROLLBACK, start_ts=ts, commit_ts=ts))
