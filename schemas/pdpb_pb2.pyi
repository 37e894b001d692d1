from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OK: _ClassVar[ErrorType]
    UNKNOWN: _ClassVar[ErrorType]
    NOT_BOOTSTRAPPED: _ClassVar[ErrorType]
OK: ErrorType
UNKNOWN: ErrorType
NOT_BOOTSTRAPPED: ErrorType

class RequestHeader(_message.Message):
    __slots__ = ("cluster_id", "sender_id")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    sender_id: int
    def __init__(self, cluster_id: _Optional[int] = ..., sender_id: _Optional[int] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("type", "message")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    type: ErrorType
    message: str
    def __init__(self, type: _Optional[_Union[ErrorType, str]] = ..., message: _Optional[str] = ...) -> None: ...

class ResponseHeader(_message.Message):
    __slots__ = ("cluster_id", "error")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    error: Error
    def __init__(self, cluster_id: _Optional[int] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class TsoRequest(_message.Message):
    __slots__ = ("header", "count", "dc_location")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DC_LOCATION_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    count: int
    dc_location: str
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., count: _Optional[int] = ..., dc_location: _Optional[str] = ...) -> None: ...

class Timestamp(_message.Message):
    __slots__ = ("physical", "logical", "suffix_bits")
    PHYSICAL_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_BITS_FIELD_NUMBER: _ClassVar[int]
    physical: int
    logical: int
    suffix_bits: int
    def __init__(self, physical: _Optional[int] = ..., logical: _Optional[int] = ..., suffix_bits: _Optional[int] = ...) -> None: ...

class TsoResponse(_message.Message):
    __slots__ = ("header", "count", "timestamp")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    count: int
    timestamp: Timestamp
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., count: _Optional[int] = ..., timestamp: _Optional[_Union[Timestamp, _Mapping]] = ...) -> None: ...
