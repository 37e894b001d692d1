from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Insert: _ClassVar[EventType]
    Update: _ClassVar[EventType]
    Delete: _ClassVar[EventType]

class BinlogType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DML: _ClassVar[BinlogType]
    DDL: _ClassVar[BinlogType]
Insert: EventType
Update: EventType
Delete: EventType
DML: BinlogType
DDL: BinlogType

class column(_message.Message):
    __slots__ = ("name", "tp", "mysql_type", "value", "changed_value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TP_FIELD_NUMBER: _ClassVar[int]
    MYSQL_TYPE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CHANGED_VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    tp: bytes
    mysql_type: str
    value: bytes
    changed_value: bytes
    def __init__(self, name: _Optional[str] = ..., tp: _Optional[bytes] = ..., mysql_type: _Optional[str] = ..., value: _Optional[bytes] = ..., changed_value: _Optional[bytes] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("schema_name", "table_name", "tp", "row")
    SCHEMA_NAME_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    TP_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    schema_name: str
    table_name: str
    tp: EventType
    row: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, schema_name: _Optional[str] = ..., table_name: _Optional[str] = ..., tp: _Optional[_Union[EventType, str]] = ..., row: _Optional[_Iterable[bytes]] = ...) -> None: ...

class DMLData(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ...) -> None: ...

class Binlog(_message.Message):
    __slots__ = ("tp", "commit_ts", "dml_data", "ddl_query")
    TP_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    DML_DATA_FIELD_NUMBER: _ClassVar[int]
    DDL_QUERY_FIELD_NUMBER: _ClassVar[int]
    tp: BinlogType
    commit_ts: int
    dml_data: DMLData
    ddl_query: bytes
    def __init__(self, tp: _Optional[_Union[BinlogType, str]] = ..., commit_ts: _Optional[int] = ..., dml_data: _Optional[_Union[DMLData, _Mapping]] = ..., ddl_query: _Optional[bytes] = ...) -> None: ...
