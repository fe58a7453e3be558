from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
EVENT_TYPE_ACQUIRED: EventType
EVENT_TYPE_DEQUEUED: EventType
EVENT_TYPE_EXPIRED: EventType
EVENT_TYPE_LOCK_DELAY_ENDED: EventType
EVENT_TYPE_PROCLAIMED: EventType
EVENT_TYPE_QUEUED: EventType
EVENT_TYPE_RELEASED: EventType
EVENT_TYPE_UNSPECIFIED: EventType
LOCK_MODE_EXCLUSIVE: LockMode
LOCK_MODE_SHARED: LockMode

class AcquireRequest(_message.Message):
    __slots__ = ["lease_id", "lock_delay_ms", "mode", "name", "permits", "value", "wait_id", "wait_ms"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    WAIT_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    lock_delay_ms: int
    mode: LockMode
    name: str
    permits: int
    value: bytes
    wait_id: int
    wait_ms: int
    def __init__(self, name: _Optional[str] = ..., lease_id: _Optional[str] = ..., wait_ms: _Optional[int] = ..., lock_delay_ms: _Optional[int] = ..., wait_id: _Optional[int] = ..., mode: _Optional[_Union[LockMode, str]] = ..., permits: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ["holding", "ttl_ms"]
    HOLDING_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    holding: Holding
    ttl_ms: int
    def __init__(self, holding: _Optional[_Union[Holding, _Mapping]] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class AddMemberRequest(_message.Message):
    __slots__ = ["api_addr", "fresh", "id", "raft_addr"]
    API_ADDR_FIELD_NUMBER: _ClassVar[int]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDR_FIELD_NUMBER: _ClassVar[int]
    api_addr: str
    fresh: bool
    id: str
    raft_addr: str
    def __init__(self, id: _Optional[str] = ..., raft_addr: _Optional[str] = ..., api_addr: _Optional[str] = ..., fresh: bool = ...) -> None: ...

class AddMemberResponse(_message.Message):
    __slots__ = ["cluster_id", "members"]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    members: _containers.RepeatedCompositeFieldContainer[Member]
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class BumpTokenRequest(_message.Message):
    __slots__ = ["min_token"]
    MIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    min_token: int
    def __init__(self, min_token: _Optional[int] = ...) -> None: ...

class BumpTokenResponse(_message.Message):
    __slots__ = ["token"]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: int
    def __init__(self, token: _Optional[int] = ...) -> None: ...

class CancelWaitRequest(_message.Message):
    __slots__ = ["lease_id", "name", "wait_id"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    WAIT_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    name: str
    wait_id: int
    def __init__(self, name: _Optional[str] = ..., lease_id: _Optional[str] = ..., wait_id: _Optional[int] = ...) -> None: ...

class CancelWaitResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ["lease_id"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    def __init__(self, lease_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ["released"]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, released: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ["owner", "sequencers", "ttl_ms"]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SEQUENCERS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    owner: str
    sequencers: bool
    ttl_ms: int
    def __init__(self, ttl_ms: _Optional[int] = ..., owner: _Optional[str] = ..., sequencers: bool = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ["lease_id", "owner", "ttl_ms"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    owner: str
    ttl_ms: int
    def __init__(self, lease_id: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., owner: _Optional[str] = ...) -> None: ...

class ErrorDetail(_message.Message):
    __slots__ = ["code", "last_token", "leader_api_addr"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LAST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LEADER_API_ADDR_FIELD_NUMBER: _ClassVar[int]
    code: str
    last_token: int
    leader_api_addr: str
    def __init__(self, code: _Optional[str] = ..., last_token: _Optional[int] = ..., leader_api_addr: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ["index", "lease_id", "name", "owner", "token", "type", "unix_ms", "value"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    index: int
    lease_id: str
    name: str
    owner: str
    token: int
    type: EventType
    unix_ms: int
    value: bytes
    def __init__(self, type: _Optional[_Union[EventType, str]] = ..., name: _Optional[str] = ..., lease_id: _Optional[str] = ..., owner: _Optional[str] = ..., token: _Optional[int] = ..., index: _Optional[int] = ..., unix_ms: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...

class Holding(_message.Message):
    __slots__ = ["acquired_unix_ms", "lease_id", "lock_delay_ms", "mode", "name", "owner", "remaining_ms", "sequencer", "slot", "token", "value"]
    ACQUIRED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCER_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    acquired_unix_ms: int
    lease_id: str
    lock_delay_ms: int
    mode: LockMode
    name: str
    owner: str
    remaining_ms: int
    sequencer: bytes
    slot: int
    token: int
    value: bytes
    def __init__(self, name: _Optional[str] = ..., lease_id: _Optional[str] = ..., token: _Optional[int] = ..., owner: _Optional[str] = ..., acquired_unix_ms: _Optional[int] = ..., lock_delay_ms: _Optional[int] = ..., sequencer: _Optional[bytes] = ..., mode: _Optional[_Union[LockMode, str]] = ..., slot: _Optional[int] = ..., value: _Optional[bytes] = ..., remaining_ms: _Optional[int] = ...) -> None: ...

class KeepAliveRequest(_message.Message):
    __slots__ = ["lease_id", "lease_ids"]
    LEASE_IDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    lease_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, lease_id: _Optional[str] = ..., lease_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class KeepAliveResponse(_message.Message):
    __slots__ = ["lease_id", "results", "ttl_ms"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    results: _containers.RepeatedCompositeFieldContainer[KeepAliveResult]
    ttl_ms: int
    def __init__(self, lease_id: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., results: _Optional[_Iterable[_Union[KeepAliveResult, _Mapping]]] = ...) -> None: ...

class KeepAliveResult(_message.Message):
    __slots__ = ["error_code", "lease_id", "ttl_ms"]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    error_code: str
    lease_id: str
    ttl_ms: int
    def __init__(self, lease_id: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., error_code: _Optional[str] = ...) -> None: ...

class KeepAliveStreamRequest(_message.Message):
    __slots__ = ["lease_id", "lease_ids"]
    LEASE_IDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    lease_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, lease_id: _Optional[str] = ..., lease_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class KeepAliveStreamResponse(_message.Message):
    __slots__ = ["error_code", "leader_api_addr", "lease_id", "results", "ttl_ms"]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_API_ADDR_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    error_code: str
    leader_api_addr: str
    lease_id: str
    results: _containers.RepeatedCompositeFieldContainer[KeepAliveResult]
    ttl_ms: int
    def __init__(self, lease_id: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., error_code: _Optional[str] = ..., results: _Optional[_Iterable[_Union[KeepAliveResult, _Mapping]]] = ..., leader_api_addr: _Optional[str] = ...) -> None: ...

class KvDeleteRequest(_message.Message):
    __slots__ = ["key", "strict", "token"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    key: str
    strict: bool
    token: int
    def __init__(self, key: _Optional[str] = ..., token: _Optional[int] = ..., strict: bool = ...) -> None: ...

class KvDeleteResponse(_message.Message):
    __slots__ = ["key", "token"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    key: str
    token: int
    def __init__(self, key: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...

class KvGetRequest(_message.Message):
    __slots__ = ["key", "stale"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    key: str
    stale: bool
    def __init__(self, key: _Optional[str] = ..., stale: bool = ...) -> None: ...

class KvGetResponse(_message.Message):
    __slots__ = ["key", "token", "value"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    token: int
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., token: _Optional[int] = ...) -> None: ...

class KvPutRequest(_message.Message):
    __slots__ = ["key", "strict", "token", "value"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    strict: bool
    token: int
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., token: _Optional[int] = ..., strict: bool = ...) -> None: ...

class KvPutResponse(_message.Message):
    __slots__ = ["key", "token"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    key: str
    token: int
    def __init__(self, key: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ["limit", "prefix", "stale"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    limit: int
    prefix: str
    stale: bool
    def __init__(self, prefix: _Optional[str] = ..., stale: bool = ..., limit: _Optional[int] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ["locks", "truncated"]
    LOCKS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    locks: _containers.RepeatedCompositeFieldContainer[LockInfo]
    truncated: bool
    def __init__(self, locks: _Optional[_Iterable[_Union[LockInfo, _Mapping]]] = ..., truncated: bool = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ["limit", "stale"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    limit: int
    stale: bool
    def __init__(self, stale: bool = ..., limit: _Optional[int] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ["sessions", "truncated"]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[SessionInfo]
    truncated: bool
    def __init__(self, sessions: _Optional[_Iterable[_Union[SessionInfo, _Mapping]]] = ..., truncated: bool = ...) -> None: ...

class LockInfo(_message.Message):
    __slots__ = ["delayed", "holder", "holders", "name", "permits", "remaining_ms", "waiters"]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    delayed: bool
    holder: Holding
    holders: _containers.RepeatedCompositeFieldContainer[Holding]
    name: str
    permits: int
    remaining_ms: int
    waiters: _containers.RepeatedCompositeFieldContainer[Waiter]
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[_Union[Holding, _Mapping]] = ..., remaining_ms: _Optional[int] = ..., waiters: _Optional[_Iterable[_Union[Waiter, _Mapping]]] = ..., delayed: bool = ..., holders: _Optional[_Iterable[_Union[Holding, _Mapping]]] = ..., permits: _Optional[int] = ...) -> None: ...

class LockStreamRequest(_message.Message):
    __slots__ = ["acquire", "batch", "cancel", "cancel_wait", "close_session", "create_session", "id", "keep_alive", "release", "timeout_ms", "try_acquire"]
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    CANCEL_WAIT_FIELD_NUMBER: _ClassVar[int]
    CLOSE_SESSION_FIELD_NUMBER: _ClassVar[int]
    CREATE_SESSION_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TRY_ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    acquire: AcquireRequest
    batch: _containers.RepeatedCompositeFieldContainer[LockStreamRequest]
    cancel: int
    cancel_wait: CancelWaitRequest
    close_session: CloseSessionRequest
    create_session: CreateSessionRequest
    id: int
    keep_alive: KeepAliveRequest
    release: ReleaseRequest
    timeout_ms: int
    try_acquire: TryAcquireRequest
    def __init__(self, id: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., acquire: _Optional[_Union[AcquireRequest, _Mapping]] = ..., try_acquire: _Optional[_Union[TryAcquireRequest, _Mapping]] = ..., release: _Optional[_Union[ReleaseRequest, _Mapping]] = ..., cancel_wait: _Optional[_Union[CancelWaitRequest, _Mapping]] = ..., cancel: _Optional[int] = ..., create_session: _Optional[_Union[CreateSessionRequest, _Mapping]] = ..., keep_alive: _Optional[_Union[KeepAliveRequest, _Mapping]] = ..., close_session: _Optional[_Union[CloseSessionRequest, _Mapping]] = ..., batch: _Optional[_Iterable[_Union[LockStreamRequest, _Mapping]]] = ...) -> None: ...

class LockStreamResponse(_message.Message):
    __slots__ = ["acquire", "cancel_wait", "close_session", "create_session", "error", "id", "keep_alive", "leader_api_addr", "message", "release", "try_acquire"]
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_WAIT_FIELD_NUMBER: _ClassVar[int]
    CLOSE_SESSION_FIELD_NUMBER: _ClassVar[int]
    CREATE_SESSION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    LEADER_API_ADDR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    TRY_ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    acquire: AcquireResponse
    cancel_wait: CancelWaitResponse
    close_session: CloseSessionResponse
    create_session: CreateSessionResponse
    error: ErrorDetail
    id: int
    keep_alive: KeepAliveResponse
    leader_api_addr: str
    message: str
    release: ReleaseResponse
    try_acquire: TryAcquireResponse
    def __init__(self, id: _Optional[int] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ..., message: _Optional[str] = ..., acquire: _Optional[_Union[AcquireResponse, _Mapping]] = ..., try_acquire: _Optional[_Union[TryAcquireResponse, _Mapping]] = ..., release: _Optional[_Union[ReleaseResponse, _Mapping]] = ..., cancel_wait: _Optional[_Union[CancelWaitResponse, _Mapping]] = ..., create_session: _Optional[_Union[CreateSessionResponse, _Mapping]] = ..., keep_alive: _Optional[_Union[KeepAliveResponse, _Mapping]] = ..., close_session: _Optional[_Union[CloseSessionResponse, _Mapping]] = ..., leader_api_addr: _Optional[str] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ["api_addr", "applied_index", "commit_index", "id", "raft_addr", "role", "suffrage", "term"]
    API_ADDR_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDR_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    SUFFRAGE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    api_addr: str
    applied_index: int
    commit_index: int
    id: str
    raft_addr: str
    role: str
    suffrage: str
    term: int
    def __init__(self, id: _Optional[str] = ..., raft_addr: _Optional[str] = ..., api_addr: _Optional[str] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., suffrage: _Optional[str] = ...) -> None: ...

class MembersRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class MembersResponse(_message.Message):
    __slots__ = ["leader_id", "members"]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    leader_id: str
    members: _containers.RepeatedCompositeFieldContainer[Member]
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., leader_id: _Optional[str] = ...) -> None: ...

class ProclaimRequest(_message.Message):
    __slots__ = ["lease_id", "name", "token", "value"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    name: str
    token: int
    value: bytes
    def __init__(self, name: _Optional[str] = ..., lease_id: _Optional[str] = ..., token: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...

class ProclaimResponse(_message.Message):
    __slots__ = ["holding"]
    HOLDING_FIELD_NUMBER: _ClassVar[int]
    holding: Holding
    def __init__(self, holding: _Optional[_Union[Holding, _Mapping]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ["lease_id", "name", "token"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    name: str
    token: int
    def __init__(self, name: _Optional[str] = ..., lease_id: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ["next"]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    next: Holding
    def __init__(self, next: _Optional[_Union[Holding, _Mapping]] = ...) -> None: ...

class RemoveMemberRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class RemoveMemberResponse(_message.Message):
    __slots__ = ["members"]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ...) -> None: ...

class SessionInfo(_message.Message):
    __slots__ = ["created_unix_ms", "lease_id", "names", "owner", "remaining_ms", "ttl_ms"]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    created_unix_ms: int
    lease_id: str
    names: _containers.RepeatedScalarFieldContainer[str]
    owner: str
    remaining_ms: int
    ttl_ms: int
    def __init__(self, lease_id: _Optional[str] = ..., owner: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., created_unix_ms: _Optional[int] = ..., remaining_ms: _Optional[int] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ["index", "last_grant_unix_ms", "node_id", "peak_rate", "term", "token", "unix_ms"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_GRANT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PEAK_RATE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    index: int
    last_grant_unix_ms: int
    node_id: str
    peak_rate: int
    term: int
    token: int
    unix_ms: int
    def __init__(self, index: _Optional[int] = ..., term: _Optional[int] = ..., token: _Optional[int] = ..., node_id: _Optional[str] = ..., unix_ms: _Optional[int] = ..., last_grant_unix_ms: _Optional[int] = ..., peak_rate: _Optional[int] = ...) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SnapshotResponse(_message.Message):
    __slots__ = ["chunk", "info"]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    info: SnapshotInfo
    def __init__(self, info: _Optional[_Union[SnapshotInfo, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ["name", "stale"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    name: str
    stale: bool
    def __init__(self, name: _Optional[str] = ..., stale: bool = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ["lock"]
    LOCK_FIELD_NUMBER: _ClassVar[int]
    lock: LockInfo
    def __init__(self, lock: _Optional[_Union[LockInfo, _Mapping]] = ...) -> None: ...

class TransferLeaderRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class TransferLeaderResponse(_message.Message):
    __slots__ = ["leader_id"]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    leader_id: str
    def __init__(self, leader_id: _Optional[str] = ...) -> None: ...

class TryAcquireRequest(_message.Message):
    __slots__ = ["lease_id", "lock_delay_ms", "mode", "name", "permits", "value", "wait_id"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    WAIT_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    lock_delay_ms: int
    mode: LockMode
    name: str
    permits: int
    value: bytes
    wait_id: int
    def __init__(self, name: _Optional[str] = ..., lease_id: _Optional[str] = ..., lock_delay_ms: _Optional[int] = ..., wait_id: _Optional[int] = ..., mode: _Optional[_Union[LockMode, str]] = ..., permits: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...

class TryAcquireResponse(_message.Message):
    __slots__ = ["holding", "ttl_ms"]
    HOLDING_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    holding: Holding
    ttl_ms: int
    def __init__(self, holding: _Optional[_Union[Holding, _Mapping]] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class Waiter(_message.Message):
    __slots__ = ["lease_id", "owner", "queued_unix_ms"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    QUEUED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    owner: str
    queued_unix_ms: int
    def __init__(self, lease_id: _Optional[str] = ..., owner: _Optional[str] = ..., queued_unix_ms: _Optional[int] = ...) -> None: ...

class WatchCompacted(_message.Message):
    __slots__ = ["index", "locks", "truncated"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LOCKS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    index: int
    locks: _containers.RepeatedCompositeFieldContainer[LockInfo]
    truncated: bool
    def __init__(self, index: _Optional[int] = ..., locks: _Optional[_Iterable[_Union[LockInfo, _Mapping]]] = ..., truncated: bool = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ["from_index", "prefix", "progress_notify"]
    FROM_INDEX_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_NOTIFY_FIELD_NUMBER: _ClassVar[int]
    from_index: int
    prefix: str
    progress_notify: bool
    def __init__(self, prefix: _Optional[str] = ..., from_index: _Optional[int] = ..., progress_notify: bool = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ["applied_index", "compacted", "event"]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    applied_index: int
    compacted: WatchCompacted
    event: Event
    def __init__(self, event: _Optional[_Union[Event, _Mapping]] = ..., applied_index: _Optional[int] = ..., compacted: _Optional[_Union[WatchCompacted, _Mapping]] = ...) -> None: ...

class LockMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
