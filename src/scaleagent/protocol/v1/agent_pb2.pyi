from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_TYPE_UNSPECIFIED: _ClassVar[EventType]
    ADDED: _ClassVar[EventType]
    MODIFIED: _ClassVar[EventType]
    DELETED: _ClassVar[EventType]
    SNAPSHOT_BEGIN: _ClassVar[EventType]
    SNAPSHOT_END: _ClassVar[EventType]
EVENT_TYPE_UNSPECIFIED: EventType
ADDED: EventType
MODIFIED: EventType
DELETED: EventType
SNAPSHOT_BEGIN: EventType
SNAPSHOT_END: EventType

class CachingMessage(_message.Message):
    __slots__ = ("hello", "account", "events", "account_removed", "accounts_answer", "heartbeat")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_REMOVED_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTS_ANSWER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    account: Account
    events: EventBatch
    account_removed: AccountRemoved
    accounts_answer: AccountsAnswer
    heartbeat: Heartbeat
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., account: _Optional[_Union[Account, _Mapping]] = ..., events: _Optional[_Union[EventBatch, _Mapping]] = ..., account_removed: _Optional[_Union[AccountRemoved, _Mapping]] = ..., accounts_answer: _Optional[_Union[AccountsAnswer, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("protocol_version", "agent_id", "zone_id", "agent_version", "accounts", "dynamic_accounts_enabled", "heartbeat_seconds", "heartbeat_timeout_seconds")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ZONE_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTS_FIELD_NUMBER: _ClassVar[int]
    DYNAMIC_ACCOUNTS_ENABLED_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    agent_id: str
    zone_id: str
    agent_version: str
    accounts: _containers.RepeatedCompositeFieldContainer[Account]
    dynamic_accounts_enabled: bool
    heartbeat_seconds: int
    heartbeat_timeout_seconds: int
    def __init__(self, protocol_version: _Optional[int] = ..., agent_id: _Optional[str] = ..., zone_id: _Optional[str] = ..., agent_version: _Optional[str] = ..., accounts: _Optional[_Iterable[_Union[Account, _Mapping]]] = ..., dynamic_accounts_enabled: _Optional[bool] = ..., heartbeat_seconds: _Optional[int] = ..., heartbeat_timeout_seconds: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("sequence",)
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    def __init__(self, sequence: _Optional[int] = ...) -> None: ...

class Account(_message.Message):
    __slots__ = ("name", "state", "reason", "api_host", "certificate_fingerprint", "server_version", "properties", "kinds", "kinds_not_watching")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    API_HOST_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    KINDS_NOT_WATCHING_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: str
    reason: str
    api_host: str
    certificate_fingerprint: str
    server_version: str
    properties: _struct_pb2.Struct
    kinds: _containers.RepeatedScalarFieldContainer[str]
    kinds_not_watching: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., state: _Optional[str] = ..., reason: _Optional[str] = ..., api_host: _Optional[str] = ..., certificate_fingerprint: _Optional[str] = ..., server_version: _Optional[str] = ..., properties: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., kinds: _Optional[_Iterable[str]] = ..., kinds_not_watching: _Optional[_Iterable[str]] = ...) -> None: ...

class AccountRemoved(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class AccountsAnswer(_message.Message):
    __slots__ = ("request_id", "answers")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    answers: _containers.RepeatedCompositeFieldContainer[AccountAnswer]
    def __init__(self, request_id: _Optional[str] = ..., answers: _Optional[_Iterable[_Union[AccountAnswer, _Mapping]]] = ...) -> None: ...

class AccountAnswer(_message.Message):
    __slots__ = ("name", "accepted", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    accepted: bool
    reason: str
    def __init__(self, name: _Optional[str] = ..., accepted: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("type", "account", "group", "version", "kind", "namespace", "name", "resource_version", "object", "read_at_unix_ms")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    READ_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    type: EventType
    account: str
    group: str
    version: str
    kind: str
    namespace: str
    name: str
    resource_version: str
    object: bytes
    read_at_unix_ms: int
    def __init__(self, type: _Optional[_Union[EventType, str]] = ..., account: _Optional[str] = ..., group: _Optional[str] = ..., version: _Optional[str] = ..., kind: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., resource_version: _Optional[str] = ..., object: _Optional[bytes] = ..., read_at_unix_ms: _Optional[int] = ...) -> None: ...

class EventBatch(_message.Message):
    __slots__ = ("sequence", "events", "packed")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    events: _containers.RepeatedCompositeFieldContainer[Event]
    packed: PackedEvents
    def __init__(self, sequence: _Optional[int] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., packed: _Optional[_Union[PackedEvents, _Mapping]] = ...) -> None: ...

class PackedEvents(_message.Message):
    __slots__ = ("index", "objects")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    index: bytes
    objects: bytes
    def __init__(self, index: _Optional[bytes] = ..., objects: _Optional[bytes] = ...) -> None: ...

class CachingControl(_message.Message):
    __slots__ = ("welcome", "ack", "account_rejected", "resync", "add_accounts", "delete_accounts", "heartbeat")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_REJECTED_FIELD_NUMBER: _ClassVar[int]
    RESYNC_FIELD_NUMBER: _ClassVar[int]
    ADD_ACCOUNTS_FIELD_NUMBER: _ClassVar[int]
    DELETE_ACCOUNTS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    ack: Ack
    account_rejected: AccountRejected
    resync: Resync
    add_accounts: AddAccounts
    delete_accounts: DeleteAccounts
    heartbeat: Heartbeat
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., account_rejected: _Optional[_Union[AccountRejected, _Mapping]] = ..., resync: _Optional[_Union[Resync, _Mapping]] = ..., add_accounts: _Optional[_Union[AddAccounts, _Mapping]] = ..., delete_accounts: _Optional[_Union[DeleteAccounts, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("session_id", "hub_replica", "protocol_version", "max_message_bytes", "heartbeats", "packed_events")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    HUB_REPLICA_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    HEARTBEATS_FIELD_NUMBER: _ClassVar[int]
    PACKED_EVENTS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    hub_replica: str
    protocol_version: int
    max_message_bytes: int
    heartbeats: bool
    packed_events: bool
    def __init__(self, session_id: _Optional[str] = ..., hub_replica: _Optional[str] = ..., protocol_version: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., heartbeats: _Optional[bool] = ..., packed_events: _Optional[bool] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("sequence",)
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    def __init__(self, sequence: _Optional[int] = ...) -> None: ...

class AccountRejected(_message.Message):
    __slots__ = ("name", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Resync(_message.Message):
    __slots__ = ("account",)
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    account: str
    def __init__(self, account: _Optional[str] = ...) -> None: ...

class AddAccounts(_message.Message):
    __slots__ = ("request_id", "accounts")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    accounts: _containers.RepeatedCompositeFieldContainer[DynamicAccount]
    def __init__(self, request_id: _Optional[str] = ..., accounts: _Optional[_Iterable[_Union[DynamicAccount, _Mapping]]] = ...) -> None: ...

class DynamicAccount(_message.Message):
    __slots__ = ("name", "kubeconfig_base64", "context", "properties")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KUBECONFIG_BASE64_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    kubeconfig_base64: str
    context: str
    properties: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., kubeconfig_base64: _Optional[str] = ..., context: _Optional[str] = ..., properties: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class DeleteAccounts(_message.Message):
    __slots__ = ("request_id", "names")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_id: _Optional[str] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class OperationsMessage(_message.Message):
    __slots__ = ("hello", "result")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    hello: OperationsHello
    result: OperationResult
    def __init__(self, hello: _Optional[_Union[OperationsHello, _Mapping]] = ..., result: _Optional[_Union[OperationResult, _Mapping]] = ...) -> None: ...

class OperationsHello(_message.Message):
    __slots__ = ("protocol_version", "agent_id", "session_id")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    agent_id: str
    session_id: str
    def __init__(self, protocol_version: _Optional[int] = ..., agent_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("id", "account", "type", "request", "deadline_unix_ms", "timeout_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    id: str
    account: str
    type: str
    request: bytes
    deadline_unix_ms: int
    timeout_ms: int
    def __init__(self, id: _Optional[str] = ..., account: _Optional[str] = ..., type: _Optional[str] = ..., request: _Optional[bytes] = ..., deadline_unix_ms: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class OperationResult(_message.Message):
    __slots__ = ("id", "ok", "objects", "error", "output", "expect")
    ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    EXPECT_FIELD_NUMBER: _ClassVar[int]
    id: str
    ok: bool
    objects: bytes
    error: Status
    output: bytes
    expect: _containers.RepeatedCompositeFieldContainer[CacheExpectation]
    def __init__(self, id: _Optional[str] = ..., ok: _Optional[bool] = ..., objects: _Optional[bytes] = ..., error: _Optional[_Union[Status, _Mapping]] = ..., output: _Optional[bytes] = ..., expect: _Optional[_Iterable[_Union[CacheExpectation, _Mapping]]] = ...) -> None: ...

class CacheExpectation(_message.Message):
    __slots__ = ("group", "kind", "namespace", "name", "resource_version", "deleted", "uid")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    group: str
    kind: str
    namespace: str
    name: str
    resource_version: str
    deleted: bool
    uid: str
    def __init__(self, group: _Optional[str] = ..., kind: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., resource_version: _Optional[str] = ..., deleted: _Optional[bool] = ..., uid: _Optional[str] = ...) -> None: ...

class Status(_message.Message):
    __slots__ = ("code", "reason", "message", "details")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    code: int
    reason: str
    message: str
    details: bytes
    def __init__(self, code: _Optional[int] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., details: _Optional[bytes] = ...) -> None: ...
