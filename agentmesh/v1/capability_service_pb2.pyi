import datetime

from agentmesh.v1 import common_pb2 as _common_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CapabilityDefinition(_message.Message):
    __slots__ = ("capability_id", "version", "description", "domain", "input_schema", "output_schema", "risk_profile", "backend", "status")
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    RISK_PROFILE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    capability_id: str
    version: str
    description: str
    domain: str
    input_schema: _struct_pb2.Struct
    output_schema: _struct_pb2.Struct
    risk_profile: _common_pb2.RiskProfile
    backend: str
    status: _common_pb2.LifecycleStatus
    def __init__(self, capability_id: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ..., domain: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., output_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., risk_profile: _Optional[_Union[_common_pb2.RiskProfile, _Mapping]] = ..., backend: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.LifecycleStatus, str]] = ...) -> None: ...

class InvokeCapabilityRequest(_message.Message):
    __slots__ = ("grant", "capability_id", "input", "idempotency_key", "principal", "approval", "trace")
    GRANT_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    grant: _common_pb2.SignedTaskGrant
    capability_id: str
    input: _struct_pb2.Struct
    idempotency_key: str
    principal: _common_pb2.AgentPrincipal
    approval: InvocationApproval
    trace: _common_pb2.TraceContext
    def __init__(self, grant: _Optional[_Union[_common_pb2.SignedTaskGrant, _Mapping]] = ..., capability_id: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., principal: _Optional[_Union[_common_pb2.AgentPrincipal, _Mapping]] = ..., approval: _Optional[_Union[InvocationApproval, _Mapping]] = ..., trace: _Optional[_Union[_common_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class InvokeCapabilitiesRequest(_message.Message):
    __slots__ = ("calls", "traceparents")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENTS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[InvokeCapabilityRequest]
    traceparents: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, calls: _Optional[_Iterable[_Union[InvokeCapabilityRequest, _Mapping]]] = ..., traceparents: _Optional[_Iterable[str]] = ...) -> None: ...

class InvokeCapabilitiesResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[InvokeCapabilityResult]
    def __init__(self, results: _Optional[_Iterable[_Union[InvokeCapabilityResult, _Mapping]]] = ...) -> None: ...

class InvokeCapabilityResult(_message.Message):
    __slots__ = ("response", "error")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    response: InvokeCapabilityResponse
    error: _status_pb2.Status
    def __init__(self, response: _Optional[_Union[InvokeCapabilityResponse, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class InvocationApproval(_message.Message):
    __slots__ = ("confirmation_token", "human_approval_id")
    CONFIRMATION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HUMAN_APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    confirmation_token: str
    human_approval_id: str
    def __init__(self, confirmation_token: _Optional[str] = ..., human_approval_id: _Optional[str] = ...) -> None: ...

class InvokeCapabilityResponse(_message.Message):
    __slots__ = ("capability_id", "capability_version", "output", "evidence", "decision", "verified", "completed_at", "replayed", "knowledge_version")
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_VERSION_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    capability_id: str
    capability_version: str
    output: _struct_pb2.Struct
    evidence: _containers.RepeatedCompositeFieldContainer[_common_pb2.EvidenceReference]
    decision: _common_pb2.PolicyDecision
    verified: bool
    completed_at: _timestamp_pb2.Timestamp
    replayed: bool
    knowledge_version: str
    def __init__(self, capability_id: _Optional[str] = ..., capability_version: _Optional[str] = ..., output: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., evidence: _Optional[_Iterable[_Union[_common_pb2.EvidenceReference, _Mapping]]] = ..., decision: _Optional[_Union[_common_pb2.PolicyDecision, _Mapping]] = ..., verified: _Optional[bool] = ..., completed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., replayed: _Optional[bool] = ..., knowledge_version: _Optional[str] = ...) -> None: ...

class ListCapabilitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListCapabilitiesResponse(_message.Message):
    __slots__ = ("capabilities", "knowledge_stores")
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_STORES_FIELD_NUMBER: _ClassVar[int]
    capabilities: _containers.RepeatedCompositeFieldContainer[CapabilityDefinition]
    knowledge_stores: _containers.RepeatedCompositeFieldContainer[KnowledgeStoreInfo]
    def __init__(self, capabilities: _Optional[_Iterable[_Union[CapabilityDefinition, _Mapping]]] = ..., knowledge_stores: _Optional[_Iterable[_Union[KnowledgeStoreInfo, _Mapping]]] = ...) -> None: ...

class KnowledgeStoreInfo(_message.Message):
    __slots__ = ("scope", "release", "version", "title")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    scope: str
    release: str
    version: str
    title: str
    def __init__(self, scope: _Optional[str] = ..., release: _Optional[str] = ..., version: _Optional[str] = ..., title: _Optional[str] = ...) -> None: ...

class SetCapabilityStatusRequest(_message.Message):
    __slots__ = ("capability_id", "status", "reason")
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    capability_id: str
    status: _common_pb2.LifecycleStatus
    reason: str
    def __init__(self, capability_id: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.LifecycleStatus, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class SetCapabilityStatusResponse(_message.Message):
    __slots__ = ("capability",)
    CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    capability: CapabilityDefinition
    def __init__(self, capability: _Optional[_Union[CapabilityDefinition, _Mapping]] = ...) -> None: ...

class RevokeExecutionRequest(_message.Message):
    __slots__ = ("execution_id", "issued_before", "reason")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ISSUED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    issued_before: _timestamp_pb2.Timestamp
    reason: str
    def __init__(self, execution_id: _Optional[str] = ..., issued_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class RevokeExecutionResponse(_message.Message):
    __slots__ = ("execution_id", "issued_before", "revoked_at")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ISSUED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    issued_before: _timestamp_pb2.Timestamp
    revoked_at: _timestamp_pb2.Timestamp
    def __init__(self, execution_id: _Optional[str] = ..., issued_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoked_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
