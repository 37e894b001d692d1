from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class DumpBinlogReq(_message.Message):
    __slots__ = ("beginCommitTS",)
    BEGINCOMMITTS_FIELD_NUMBER: _ClassVar[int]
    beginCommitTS: int
    def __init__(self, beginCommitTS: _Optional[int] = ...) -> None: ...

class DumpBinlogResp(_message.Message):
    __slots__ = ("commitTS", "payload", "ddljob")
    COMMITTS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DDLJOB_FIELD_NUMBER: _ClassVar[int]
    commitTS: int
    payload: bytes
    ddljob: bytes
    def __init__(self, commitTS: _Optional[int] = ..., payload: _Optional[bytes] = ..., ddljob: _Optional[bytes] = ...) -> None: ...

class DumpDDLJobsReq(_message.Message):
    __slots__ = ("beginCommitTS",)
    BEGINCOMMITTS_FIELD_NUMBER: _ClassVar[int]
    beginCommitTS: int
    def __init__(self, beginCommitTS: _Optional[int] = ...) -> None: ...

class DumpDDLJobsResp(_message.Message):
    __slots__ = ("ddljobs",)
    DDLJOBS_FIELD_NUMBER: _ClassVar[int]
    ddljobs: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, ddljobs: _Optional[_Iterable[bytes]] = ...) -> None: ...

class NotifyReq(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NotifyResp(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
