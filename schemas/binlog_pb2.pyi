from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MutationType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Insert: _ClassVar[MutationType]
    Update: _ClassVar[MutationType]
    DeleteID: _ClassVar[MutationType]
    DeletePK: _ClassVar[MutationType]
    DeleteRow: _ClassVar[MutationType]

class BinlogType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Prewrite: _ClassVar[BinlogType]
    Commit: _ClassVar[BinlogType]
    Rollback: _ClassVar[BinlogType]
    PreDDL: _ClassVar[BinlogType]
    PostDDL: _ClassVar[BinlogType]
Insert: MutationType
Update: MutationType
DeleteID: MutationType
DeletePK: MutationType
DeleteRow: MutationType
Prewrite: BinlogType
Commit: BinlogType
Rollback: BinlogType
PreDDL: BinlogType
PostDDL: BinlogType

class TableMutation(_message.Message):
    __slots__ = ("table_id", "inserted_rows", "updated_rows", "deleted_ids", "deleted_pks", "deleted_rows", "sequence")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    INSERTED_ROWS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_ROWS_FIELD_NUMBER: _ClassVar[int]
    DELETED_IDS_FIELD_NUMBER: _ClassVar[int]
    DELETED_PKS_FIELD_NUMBER: _ClassVar[int]
    DELETED_ROWS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    inserted_rows: _containers.RepeatedScalarFieldContainer[bytes]
    updated_rows: _containers.RepeatedScalarFieldContainer[bytes]
    deleted_ids: _containers.RepeatedScalarFieldContainer[int]
    deleted_pks: _containers.RepeatedScalarFieldContainer[bytes]
    deleted_rows: _containers.RepeatedScalarFieldContainer[bytes]
    sequence: _containers.RepeatedScalarFieldContainer[MutationType]
    def __init__(self, table_id: _Optional[int] = ..., inserted_rows: _Optional[_Iterable[bytes]] = ..., updated_rows: _Optional[_Iterable[bytes]] = ..., deleted_ids: _Optional[_Iterable[int]] = ..., deleted_pks: _Optional[_Iterable[bytes]] = ..., deleted_rows: _Optional[_Iterable[bytes]] = ..., sequence: _Optional[_Iterable[_Union[MutationType, str]]] = ...) -> None: ...

class PrewriteValue(_message.Message):
    __slots__ = ("schema_version", "mutations")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    MUTATIONS_FIELD_NUMBER: _ClassVar[int]
    schema_version: int
    mutations: _containers.RepeatedCompositeFieldContainer[TableMutation]
    def __init__(self, schema_version: _Optional[int] = ..., mutations: _Optional[_Iterable[_Union[TableMutation, _Mapping]]] = ...) -> None: ...

class Binlog(_message.Message):
    __slots__ = ("tp", "start_ts", "commit_ts", "prewrite_key", "prewrite_value", "ddl_query", "ddl_job_id", "ddl_schema_state")
    TP_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    PREWRITE_KEY_FIELD_NUMBER: _ClassVar[int]
    PREWRITE_VALUE_FIELD_NUMBER: _ClassVar[int]
    DDL_QUERY_FIELD_NUMBER: _ClassVar[int]
    DDL_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DDL_SCHEMA_STATE_FIELD_NUMBER: _ClassVar[int]
    tp: BinlogType
    start_ts: int
    commit_ts: int
    prewrite_key: bytes
    prewrite_value: bytes
    ddl_query: bytes
    ddl_job_id: int
    ddl_schema_state: int
    def __init__(self, tp: _Optional[_Union[BinlogType, str]] = ..., start_ts: _Optional[int] = ..., commit_ts: _Optional[int] = ..., prewrite_key: _Optional[bytes] = ..., prewrite_value: _Optional[bytes] = ..., ddl_query: _Optional[bytes] = ..., ddl_job_id: _Optional[int] = ..., ddl_schema_state: _Optional[int] = ...) -> None: ...
