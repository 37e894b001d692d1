from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ScanRequest(_message.Message):
    __slots__ = ("cluster_id", "from_ts", "to_ts", "max_batch_bytes")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_TS_FIELD_NUMBER: _ClassVar[int]
    TO_TS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    from_ts: int
    to_ts: int
    max_batch_bytes: int
    def __init__(self, cluster_id: _Optional[int] = ..., from_ts: _Optional[int] = ..., to_ts: _Optional[int] = ..., max_batch_bytes: _Optional[int] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("cluster_id", "start_ts", "max_batch_bytes")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    start_ts: _containers.RepeatedScalarFieldContainer[int]
    max_batch_bytes: int
    def __init__(self, cluster_id: _Optional[int] = ..., start_ts: _Optional[_Iterable[int]] = ..., max_batch_bytes: _Optional[int] = ...) -> None: ...

class RecordBatch(_message.Message):
    __slots__ = ("scanned_to", "key_ts", "tp", "start_ts", "commit_ts", "offsets", "lengths", "data")
    SCANNED_TO_FIELD_NUMBER: _ClassVar[int]
    KEY_TS_FIELD_NUMBER: _ClassVar[int]
    TP_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    LENGTHS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    scanned_to: int
    key_ts: bytes
    tp: bytes
    start_ts: bytes
    commit_ts: bytes
    offsets: bytes
    lengths: bytes
    data: bytes
    def __init__(self, scanned_to: _Optional[int] = ..., key_ts: _Optional[bytes] = ..., tp: _Optional[bytes] = ..., start_ts: _Optional[bytes] = ..., commit_ts: _Optional[bytes] = ..., offsets: _Optional[bytes] = ..., lengths: _Optional[bytes] = ..., data: _Optional[bytes] = ...) -> None: ...

class WatermarkRequest(_message.Message):
    __slots__ = ("cluster_id",)
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    def __init__(self, cluster_id: _Optional[int] = ...) -> None: ...

class WatermarkResponse(_message.Message):
    __slots__ = ("node_id", "cluster_id", "max_commit_ts", "oldest_unresolved_ts", "state", "gc_ts")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    OLDEST_UNRESOLVED_TS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GC_TS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    cluster_id: int
    max_commit_ts: int
    oldest_unresolved_ts: int
    state: str
    gc_ts: int
    def __init__(self, node_id: _Optional[str] = ..., cluster_id: _Optional[int] = ..., max_commit_ts: _Optional[int] = ..., oldest_unresolved_ts: _Optional[int] = ..., state: _Optional[str] = ..., gc_ts: _Optional[int] = ...) -> None: ...
