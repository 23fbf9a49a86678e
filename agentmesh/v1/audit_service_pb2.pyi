import datetime

from agentmesh.v1 import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AuditEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUDIT_EVENT_TYPE_UNSPECIFIED: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_EXECUTION_STARTED: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_EXECUTION_FINISHED: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_AGENT_SELECTED: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_TASK_DELEGATED: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_TASK_FINISHED: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_POLICY_DECISION: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_CAPABILITY_INVOKED: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_ACCESS_DENIED: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_KILL_SWITCH_CHANGED: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_STATUS_CHANGED: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_REVIEW_CREATED: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_REVIEW_DECIDED: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_CONFIRMATION: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_VERIFICATION: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_MODEL_CALL: _ClassVar[AuditEventType]
    AUDIT_EVENT_TYPE_TENANT_CHANGED: _ClassVar[AuditEventType]

class AuditOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUDIT_OUTCOME_UNSPECIFIED: _ClassVar[AuditOutcome]
    AUDIT_OUTCOME_SUCCESS: _ClassVar[AuditOutcome]
    AUDIT_OUTCOME_FAILURE: _ClassVar[AuditOutcome]
    AUDIT_OUTCOME_DENIED: _ClassVar[AuditOutcome]
    AUDIT_OUTCOME_PENDING: _ClassVar[AuditOutcome]
    AUDIT_OUTCOME_TIMEOUT: _ClassVar[AuditOutcome]
AUDIT_EVENT_TYPE_UNSPECIFIED: AuditEventType
AUDIT_EVENT_TYPE_EXECUTION_STARTED: AuditEventType
AUDIT_EVENT_TYPE_EXECUTION_FINISHED: AuditEventType
AUDIT_EVENT_TYPE_AGENT_SELECTED: AuditEventType
AUDIT_EVENT_TYPE_TASK_DELEGATED: AuditEventType
AUDIT_EVENT_TYPE_TASK_FINISHED: AuditEventType
AUDIT_EVENT_TYPE_POLICY_DECISION: AuditEventType
AUDIT_EVENT_TYPE_CAPABILITY_INVOKED: AuditEventType
AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME: AuditEventType
AUDIT_EVENT_TYPE_ACCESS_DENIED: AuditEventType
AUDIT_EVENT_TYPE_KILL_SWITCH_CHANGED: AuditEventType
AUDIT_EVENT_TYPE_STATUS_CHANGED: AuditEventType
AUDIT_EVENT_TYPE_REVIEW_CREATED: AuditEventType
AUDIT_EVENT_TYPE_REVIEW_DECIDED: AuditEventType
AUDIT_EVENT_TYPE_CONFIRMATION: AuditEventType
AUDIT_EVENT_TYPE_VERIFICATION: AuditEventType
AUDIT_EVENT_TYPE_MODEL_CALL: AuditEventType
AUDIT_EVENT_TYPE_TENANT_CHANGED: AuditEventType
AUDIT_OUTCOME_UNSPECIFIED: AuditOutcome
AUDIT_OUTCOME_SUCCESS: AuditOutcome
AUDIT_OUTCOME_FAILURE: AuditOutcome
AUDIT_OUTCOME_DENIED: AuditOutcome
AUDIT_OUTCOME_PENDING: AuditOutcome
AUDIT_OUTCOME_TIMEOUT: AuditOutcome

class AuditRecord(_message.Message):
    __slots__ = ("record_id", "index", "recorded_at", "event_type", "recorded_by", "tenant_id", "user_id", "trace_id", "correlation_id", "execution_id", "task_id", "agent_id", "principal", "capability_id", "capability_version", "policy_decision", "versions", "outcome", "reason_codes", "input_digest", "output_digest", "evidence", "confidence", "resource", "analysis_decision", "span_id", "model_call")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RECORDED_AT_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    RECORDED_BY_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_VERSION_FIELD_NUMBER: _ClassVar[int]
    POLICY_DECISION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_CODES_FIELD_NUMBER: _ClassVar[int]
    INPUT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ANALYSIS_DECISION_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALL_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    index: int
    recorded_at: _timestamp_pb2.Timestamp
    event_type: AuditEventType
    recorded_by: str
    tenant_id: str
    user_id: str
    trace_id: str
    correlation_id: str
    execution_id: str
    task_id: str
    agent_id: str
    principal: _common_pb2.AgentPrincipal
    capability_id: str
    capability_version: str
    policy_decision: _common_pb2.PolicyDecision
    versions: _common_pb2.VersionStamp
    outcome: AuditOutcome
    reason_codes: _containers.RepeatedScalarFieldContainer[str]
    input_digest: str
    output_digest: str
    evidence: _containers.RepeatedCompositeFieldContainer[_common_pb2.EvidenceReference]
    confidence: float
    resource: str
    analysis_decision: _common_pb2.AnalysisDecision
    span_id: str
    model_call: ModelCallRecord
    def __init__(self, record_id: _Optional[str] = ..., index: _Optional[int] = ..., recorded_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., event_type: _Optional[_Union[AuditEventType, str]] = ..., recorded_by: _Optional[str] = ..., tenant_id: _Optional[str] = ..., user_id: _Optional[str] = ..., trace_id: _Optional[str] = ..., correlation_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., task_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., principal: _Optional[_Union[_common_pb2.AgentPrincipal, _Mapping]] = ..., capability_id: _Optional[str] = ..., capability_version: _Optional[str] = ..., policy_decision: _Optional[_Union[_common_pb2.PolicyDecision, _Mapping]] = ..., versions: _Optional[_Union[_common_pb2.VersionStamp, _Mapping]] = ..., outcome: _Optional[_Union[AuditOutcome, str]] = ..., reason_codes: _Optional[_Iterable[str]] = ..., input_digest: _Optional[str] = ..., output_digest: _Optional[str] = ..., evidence: _Optional[_Iterable[_Union[_common_pb2.EvidenceReference, _Mapping]]] = ..., confidence: _Optional[float] = ..., resource: _Optional[str] = ..., analysis_decision: _Optional[_Union[_common_pb2.AnalysisDecision, str]] = ..., span_id: _Optional[str] = ..., model_call: _Optional[_Union[ModelCallRecord, _Mapping]] = ...) -> None: ...

class ModelCallRecord(_message.Message):
    __slots__ = ("call_id", "prompt", "model_id", "model_version", "usage", "latency_ms", "finish_reason", "route")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    prompt: str
    model_id: str
    model_version: str
    usage: _common_pb2.ModelUsage
    latency_ms: int
    finish_reason: str
    route: _common_pb2.ModelRoute
    def __init__(self, call_id: _Optional[str] = ..., prompt: _Optional[str] = ..., model_id: _Optional[str] = ..., model_version: _Optional[str] = ..., usage: _Optional[_Union[_common_pb2.ModelUsage, _Mapping]] = ..., latency_ms: _Optional[int] = ..., finish_reason: _Optional[str] = ..., route: _Optional[_Union[_common_pb2.ModelRoute, _Mapping]] = ...) -> None: ...

class AppendRecordRequest(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: AuditRecord
    def __init__(self, record: _Optional[_Union[AuditRecord, _Mapping]] = ...) -> None: ...

class AppendRecordResponse(_message.Message):
    __slots__ = ("record_id", "index", "tree_size")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    index: int
    tree_size: int
    def __init__(self, record_id: _Optional[str] = ..., index: _Optional[int] = ..., tree_size: _Optional[int] = ...) -> None: ...

class AppendRecordsRequest(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[AuditRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[AuditRecord, _Mapping]]] = ...) -> None: ...

class AppendRecordsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AppendRecordResponse]
    def __init__(self, results: _Optional[_Iterable[_Union[AppendRecordResponse, _Mapping]]] = ...) -> None: ...

class QueryRecordsRequest(_message.Message):
    __slots__ = ("execution_id", "trace_id", "correlation_id", "agent_id", "capability_id", "tenant_id", "start_time", "end_time", "page_size", "page_token", "max_records")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    trace_id: str
    correlation_id: str
    agent_id: str
    capability_id: str
    tenant_id: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    max_records: int
    def __init__(self, execution_id: _Optional[str] = ..., trace_id: _Optional[str] = ..., correlation_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., capability_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., max_records: _Optional[int] = ...) -> None: ...

class QueryRecordsResponse(_message.Message):
    __slots__ = ("records", "next_page_token")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[AuditRecord]
    next_page_token: str
    def __init__(self, records: _Optional[_Iterable[_Union[AuditRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("origin", "tree_size", "root_hash", "timestamp", "signature", "key_id")
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    ROOT_HASH_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    origin: str
    tree_size: int
    root_hash: bytes
    timestamp: _timestamp_pb2.Timestamp
    signature: bytes
    key_id: str
    def __init__(self, origin: _Optional[str] = ..., tree_size: _Optional[int] = ..., root_hash: _Optional[bytes] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., signature: _Optional[bytes] = ..., key_id: _Optional[str] = ...) -> None: ...

class GetCheckpointRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint", "public_key_pem")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_PEM_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    public_key_pem: str
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., public_key_pem: _Optional[str] = ...) -> None: ...

class GetInclusionProofRequest(_message.Message):
    __slots__ = ("leaf_index", "tree_size")
    LEAF_INDEX_FIELD_NUMBER: _ClassVar[int]
    TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    leaf_index: int
    tree_size: int
    def __init__(self, leaf_index: _Optional[int] = ..., tree_size: _Optional[int] = ...) -> None: ...

class GetInclusionProofResponse(_message.Message):
    __slots__ = ("leaf_index", "tree_size", "leaf_hash", "audit_path", "root_hash")
    LEAF_INDEX_FIELD_NUMBER: _ClassVar[int]
    TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    LEAF_HASH_FIELD_NUMBER: _ClassVar[int]
    AUDIT_PATH_FIELD_NUMBER: _ClassVar[int]
    ROOT_HASH_FIELD_NUMBER: _ClassVar[int]
    leaf_index: int
    tree_size: int
    leaf_hash: bytes
    audit_path: _containers.RepeatedScalarFieldContainer[bytes]
    root_hash: bytes
    def __init__(self, leaf_index: _Optional[int] = ..., tree_size: _Optional[int] = ..., leaf_hash: _Optional[bytes] = ..., audit_path: _Optional[_Iterable[bytes]] = ..., root_hash: _Optional[bytes] = ...) -> None: ...

class GetConsistencyProofRequest(_message.Message):
    __slots__ = ("first_tree_size", "second_tree_size")
    FIRST_TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    SECOND_TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    first_tree_size: int
    second_tree_size: int
    def __init__(self, first_tree_size: _Optional[int] = ..., second_tree_size: _Optional[int] = ...) -> None: ...

class GetConsistencyProofResponse(_message.Message):
    __slots__ = ("first_tree_size", "second_tree_size", "proof", "first_root_hash", "second_root_hash")
    FIRST_TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    SECOND_TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    FIRST_ROOT_HASH_FIELD_NUMBER: _ClassVar[int]
    SECOND_ROOT_HASH_FIELD_NUMBER: _ClassVar[int]
    first_tree_size: int
    second_tree_size: int
    proof: _containers.RepeatedScalarFieldContainer[bytes]
    first_root_hash: bytes
    second_root_hash: bytes
    def __init__(self, first_tree_size: _Optional[int] = ..., second_tree_size: _Optional[int] = ..., proof: _Optional[_Iterable[bytes]] = ..., first_root_hash: _Optional[bytes] = ..., second_root_hash: _Optional[bytes] = ...) -> None: ...
