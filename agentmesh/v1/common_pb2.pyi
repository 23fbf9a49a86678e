import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LifecycleStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LIFECYCLE_STATUS_UNSPECIFIED: _ClassVar[LifecycleStatus]
    LIFECYCLE_STATUS_DRAFT: _ClassVar[LifecycleStatus]
    LIFECYCLE_STATUS_VALIDATING: _ClassVar[LifecycleStatus]
    LIFECYCLE_STATUS_EVALUATING: _ClassVar[LifecycleStatus]
    LIFECYCLE_STATUS_APPROVED: _ClassVar[LifecycleStatus]
    LIFECYCLE_STATUS_CANARY: _ClassVar[LifecycleStatus]
    LIFECYCLE_STATUS_ACTIVE: _ClassVar[LifecycleStatus]
    LIFECYCLE_STATUS_DEPRECATED: _ClassVar[LifecycleStatus]
    LIFECYCLE_STATUS_DISABLED: _ClassVar[LifecycleStatus]
    LIFECYCLE_STATUS_RETIRED: _ClassVar[LifecycleStatus]

class RiskLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RISK_LEVEL_UNSPECIFIED: _ClassVar[RiskLevel]
    RISK_LEVEL_LOW: _ClassVar[RiskLevel]
    RISK_LEVEL_MEDIUM: _ClassVar[RiskLevel]
    RISK_LEVEL_HIGH: _ClassVar[RiskLevel]
    RISK_LEVEL_CRITICAL: _ClassVar[RiskLevel]

class StatementKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATEMENT_KIND_UNSPECIFIED: _ClassVar[StatementKind]
    STATEMENT_KIND_FACT: _ClassVar[StatementKind]
    STATEMENT_KIND_INFERENCE: _ClassVar[StatementKind]
    STATEMENT_KIND_RECOMMENDATION: _ClassVar[StatementKind]
    STATEMENT_KIND_UNCERTAINTY: _ClassVar[StatementKind]

class AuthorityLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUTHORITY_LEVEL_UNSPECIFIED: _ClassVar[AuthorityLevel]
    AUTHORITY_LEVEL_GOVERNMENT_SOURCE: _ClassVar[AuthorityLevel]
    AUTHORITY_LEVEL_OFFICIAL_RECORD: _ClassVar[AuthorityLevel]
    AUTHORITY_LEVEL_VERIFIED_INTEGRATION: _ClassVar[AuthorityLevel]
    AUTHORITY_LEVEL_UNVERIFIED_DOCUMENT: _ClassVar[AuthorityLevel]
    AUTHORITY_LEVEL_MODEL_INFERENCE: _ClassVar[AuthorityLevel]

class TaskStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATUS_UNSPECIFIED: _ClassVar[TaskStatus]
    TASK_STATUS_CREATED: _ClassVar[TaskStatus]
    TASK_STATUS_RUNNING: _ClassVar[TaskStatus]
    TASK_STATUS_WAITING: _ClassVar[TaskStatus]
    TASK_STATUS_COMPLETED: _ClassVar[TaskStatus]
    TASK_STATUS_FAILED: _ClassVar[TaskStatus]
    TASK_STATUS_CANCELLED: _ClassVar[TaskStatus]
    TASK_STATUS_SKIPPED: _ClassVar[TaskStatus]

class TaskPriority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_PRIORITY_UNSPECIFIED: _ClassVar[TaskPriority]
    TASK_PRIORITY_LOW: _ClassVar[TaskPriority]
    TASK_PRIORITY_NORMAL: _ClassVar[TaskPriority]
    TASK_PRIORITY_HIGH: _ClassVar[TaskPriority]
    TASK_PRIORITY_CRITICAL: _ClassVar[TaskPriority]

class ResultStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_STATUS_UNSPECIFIED: _ClassVar[ResultStatus]
    RESULT_STATUS_SUCCESS: _ClassVar[ResultStatus]
    RESULT_STATUS_PARTIAL: _ClassVar[ResultStatus]
    RESULT_STATUS_FAILED: _ClassVar[ResultStatus]
    RESULT_STATUS_UNCERTAIN: _ClassVar[ResultStatus]
    RESULT_STATUS_WAITING: _ClassVar[ResultStatus]

class ActorType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTOR_TYPE_UNSPECIFIED: _ClassVar[ActorType]
    ACTOR_TYPE_USER: _ClassVar[ActorType]
    ACTOR_TYPE_SYSTEM: _ClassVar[ActorType]

class PolicyEffect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    POLICY_EFFECT_UNSPECIFIED: _ClassVar[PolicyEffect]
    POLICY_EFFECT_ALLOW: _ClassVar[PolicyEffect]
    POLICY_EFFECT_DENY: _ClassVar[PolicyEffect]
    POLICY_EFFECT_CONFIRMATION_REQUIRED: _ClassVar[PolicyEffect]
    POLICY_EFFECT_HUMAN_APPROVAL_REQUIRED: _ClassVar[PolicyEffect]

class AnalysisDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ANALYSIS_DECISION_UNSPECIFIED: _ClassVar[AnalysisDecision]
    ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE: _ClassVar[AnalysisDecision]
    ANALYSIS_DECISION_NOT_RECOMMENDED: _ClassVar[AnalysisDecision]
    ANALYSIS_DECISION_REQUIRES_REVIEW: _ClassVar[AnalysisDecision]
    ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE: _ClassVar[AnalysisDecision]

class HandoffState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HANDOFF_STATE_UNSPECIFIED: _ClassVar[HandoffState]
    HANDOFF_STATE_COMPLETED: _ClassVar[HandoffState]
    HANDOFF_STATE_FAILED: _ClassVar[HandoffState]
    HANDOFF_STATE_REFUSED: _ClassVar[HandoffState]
LIFECYCLE_STATUS_UNSPECIFIED: LifecycleStatus
LIFECYCLE_STATUS_DRAFT: LifecycleStatus
LIFECYCLE_STATUS_VALIDATING: LifecycleStatus
LIFECYCLE_STATUS_EVALUATING: LifecycleStatus
LIFECYCLE_STATUS_APPROVED: LifecycleStatus
LIFECYCLE_STATUS_CANARY: LifecycleStatus
LIFECYCLE_STATUS_ACTIVE: LifecycleStatus
LIFECYCLE_STATUS_DEPRECATED: LifecycleStatus
LIFECYCLE_STATUS_DISABLED: LifecycleStatus
LIFECYCLE_STATUS_RETIRED: LifecycleStatus
RISK_LEVEL_UNSPECIFIED: RiskLevel
RISK_LEVEL_LOW: RiskLevel
RISK_LEVEL_MEDIUM: RiskLevel
RISK_LEVEL_HIGH: RiskLevel
RISK_LEVEL_CRITICAL: RiskLevel
STATEMENT_KIND_UNSPECIFIED: StatementKind
STATEMENT_KIND_FACT: StatementKind
STATEMENT_KIND_INFERENCE: StatementKind
STATEMENT_KIND_RECOMMENDATION: StatementKind
STATEMENT_KIND_UNCERTAINTY: StatementKind
AUTHORITY_LEVEL_UNSPECIFIED: AuthorityLevel
AUTHORITY_LEVEL_GOVERNMENT_SOURCE: AuthorityLevel
AUTHORITY_LEVEL_OFFICIAL_RECORD: AuthorityLevel
AUTHORITY_LEVEL_VERIFIED_INTEGRATION: AuthorityLevel
AUTHORITY_LEVEL_UNVERIFIED_DOCUMENT: AuthorityLevel
AUTHORITY_LEVEL_MODEL_INFERENCE: AuthorityLevel
TASK_STATUS_UNSPECIFIED: TaskStatus
TASK_STATUS_CREATED: TaskStatus
TASK_STATUS_RUNNING: TaskStatus
TASK_STATUS_WAITING: TaskStatus
TASK_STATUS_COMPLETED: TaskStatus
TASK_STATUS_FAILED: TaskStatus
TASK_STATUS_CANCELLED: TaskStatus
TASK_STATUS_SKIPPED: TaskStatus
TASK_PRIORITY_UNSPECIFIED: TaskPriority
TASK_PRIORITY_LOW: TaskPriority
TASK_PRIORITY_NORMAL: TaskPriority
TASK_PRIORITY_HIGH: TaskPriority
TASK_PRIORITY_CRITICAL: TaskPriority
RESULT_STATUS_UNSPECIFIED: ResultStatus
RESULT_STATUS_SUCCESS: ResultStatus
RESULT_STATUS_PARTIAL: ResultStatus
RESULT_STATUS_FAILED: ResultStatus
RESULT_STATUS_UNCERTAIN: ResultStatus
RESULT_STATUS_WAITING: ResultStatus
ACTOR_TYPE_UNSPECIFIED: ActorType
ACTOR_TYPE_USER: ActorType
ACTOR_TYPE_SYSTEM: ActorType
POLICY_EFFECT_UNSPECIFIED: PolicyEffect
POLICY_EFFECT_ALLOW: PolicyEffect
POLICY_EFFECT_DENY: PolicyEffect
POLICY_EFFECT_CONFIRMATION_REQUIRED: PolicyEffect
POLICY_EFFECT_HUMAN_APPROVAL_REQUIRED: PolicyEffect
ANALYSIS_DECISION_UNSPECIFIED: AnalysisDecision
ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE: AnalysisDecision
ANALYSIS_DECISION_NOT_RECOMMENDED: AnalysisDecision
ANALYSIS_DECISION_REQUIRES_REVIEW: AnalysisDecision
ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE: AnalysisDecision
HANDOFF_STATE_UNSPECIFIED: HandoffState
HANDOFF_STATE_COMPLETED: HandoffState
HANDOFF_STATE_FAILED: HandoffState
HANDOFF_STATE_REFUSED: HandoffState

class VersionStamp(_message.Message):
    __slots__ = ("agent_version", "capability_version", "policy_version", "knowledge_version", "ui_manifest_version", "runtime_version", "model_version")
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_VERSION_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    UI_MANIFEST_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    agent_version: str
    capability_version: str
    policy_version: str
    knowledge_version: str
    ui_manifest_version: str
    runtime_version: str
    model_version: str
    def __init__(self, agent_version: _Optional[str] = ..., capability_version: _Optional[str] = ..., policy_version: _Optional[str] = ..., knowledge_version: _Optional[str] = ..., ui_manifest_version: _Optional[str] = ..., runtime_version: _Optional[str] = ..., model_version: _Optional[str] = ...) -> None: ...

class RiskProfile(_message.Message):
    __slots__ = ("max_risk", "can_mutate", "can_external_write", "can_bulk_operate")
    MAX_RISK_FIELD_NUMBER: _ClassVar[int]
    CAN_MUTATE_FIELD_NUMBER: _ClassVar[int]
    CAN_EXTERNAL_WRITE_FIELD_NUMBER: _ClassVar[int]
    CAN_BULK_OPERATE_FIELD_NUMBER: _ClassVar[int]
    max_risk: RiskLevel
    can_mutate: bool
    can_external_write: bool
    can_bulk_operate: bool
    def __init__(self, max_risk: _Optional[_Union[RiskLevel, str]] = ..., can_mutate: _Optional[bool] = ..., can_external_write: _Optional[bool] = ..., can_bulk_operate: _Optional[bool] = ...) -> None: ...

class AgentDependencies(_message.Message):
    __slots__ = ("capabilities", "knowledge", "policies")
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    knowledge: _containers.RepeatedScalarFieldContainer[str]
    policies: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, capabilities: _Optional[_Iterable[str]] = ..., knowledge: _Optional[_Iterable[str]] = ..., policies: _Optional[_Iterable[str]] = ...) -> None: ...

class AgentDefinition(_message.Message):
    __slots__ = ("agent_id", "version", "name", "description", "domains", "capabilities", "knowledge_scopes", "input_schema", "output_schema", "allowed_delegations", "status", "risk_profile", "dependencies", "spiffe_id", "cost")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DOMAINS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_SCOPES_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_DELEGATIONS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RISK_PROFILE_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    SPIFFE_ID_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    version: str
    name: str
    description: str
    domains: _containers.RepeatedScalarFieldContainer[str]
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    knowledge_scopes: _containers.RepeatedScalarFieldContainer[str]
    input_schema: _struct_pb2.Struct
    output_schema: _struct_pb2.Struct
    allowed_delegations: _containers.RepeatedScalarFieldContainer[str]
    status: LifecycleStatus
    risk_profile: RiskProfile
    dependencies: AgentDependencies
    spiffe_id: str
    cost: float
    def __init__(self, agent_id: _Optional[str] = ..., version: _Optional[str] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., domains: _Optional[_Iterable[str]] = ..., capabilities: _Optional[_Iterable[str]] = ..., knowledge_scopes: _Optional[_Iterable[str]] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., output_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., allowed_delegations: _Optional[_Iterable[str]] = ..., status: _Optional[_Union[LifecycleStatus, str]] = ..., risk_profile: _Optional[_Union[RiskProfile, _Mapping]] = ..., dependencies: _Optional[_Union[AgentDependencies, _Mapping]] = ..., spiffe_id: _Optional[str] = ..., cost: _Optional[float] = ...) -> None: ...

class UserContext(_message.Message):
    __slots__ = ("tenant_id", "user_id", "session_id", "conversation_id", "roles", "assertion_digest")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    ASSERTION_DIGEST_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    user_id: str
    session_id: str
    conversation_id: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    assertion_digest: str
    def __init__(self, tenant_id: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., assertion_digest: _Optional[str] = ...) -> None: ...

class TraceContext(_message.Message):
    __slots__ = ("trace_id", "correlation_id", "execution_id")
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    trace_id: str
    correlation_id: str
    execution_id: str
    def __init__(self, trace_id: _Optional[str] = ..., correlation_id: _Optional[str] = ..., execution_id: _Optional[str] = ...) -> None: ...

class AgentBudget(_message.Message):
    __slots__ = ("max_tokens", "max_model_calls", "max_execution_time_ms", "max_cost", "max_delegations", "max_model_cost")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_EXECUTION_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_FIELD_NUMBER: _ClassVar[int]
    MAX_DELEGATIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_COST_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    max_model_calls: int
    max_execution_time_ms: int
    max_cost: float
    max_delegations: int
    max_model_cost: float
    def __init__(self, max_tokens: _Optional[int] = ..., max_model_calls: _Optional[int] = ..., max_execution_time_ms: _Optional[int] = ..., max_cost: _Optional[float] = ..., max_delegations: _Optional[int] = ..., max_model_cost: _Optional[float] = ...) -> None: ...

class AgentContextProjection(_message.Message):
    __slots__ = ("source_context_id", "target_agent_id", "allowed_fields", "redacted_fields", "purpose", "expires_at", "digest")
    SOURCE_CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELDS_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELDS_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    source_context_id: str
    target_agent_id: str
    allowed_fields: _containers.RepeatedScalarFieldContainer[str]
    redacted_fields: _containers.RepeatedScalarFieldContainer[str]
    purpose: str
    expires_at: _timestamp_pb2.Timestamp
    digest: str
    def __init__(self, source_context_id: _Optional[str] = ..., target_agent_id: _Optional[str] = ..., allowed_fields: _Optional[_Iterable[str]] = ..., redacted_fields: _Optional[_Iterable[str]] = ..., purpose: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., digest: _Optional[str] = ...) -> None: ...

class AgentTask(_message.Message):
    __slots__ = ("task_id", "parent_task_id", "execution_id", "source_agent_id", "target_agent_id", "tenant_id", "user_id", "session_id", "conversation_id", "objective", "input", "required_capabilities", "deadline", "priority", "status", "depth", "budget", "projection", "correlation_id", "started_at", "finished_at", "locale")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    PROJECTION_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    parent_task_id: str
    execution_id: str
    source_agent_id: str
    target_agent_id: str
    tenant_id: str
    user_id: str
    session_id: str
    conversation_id: str
    objective: str
    input: _struct_pb2.Struct
    required_capabilities: _containers.RepeatedScalarFieldContainer[str]
    deadline: _timestamp_pb2.Timestamp
    priority: TaskPriority
    status: TaskStatus
    depth: int
    budget: AgentBudget
    projection: AgentContextProjection
    correlation_id: str
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    locale: str
    def __init__(self, task_id: _Optional[str] = ..., parent_task_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., source_agent_id: _Optional[str] = ..., target_agent_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., objective: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., required_capabilities: _Optional[_Iterable[str]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., priority: _Optional[_Union[TaskPriority, str]] = ..., status: _Optional[_Union[TaskStatus, str]] = ..., depth: _Optional[int] = ..., budget: _Optional[_Union[AgentBudget, _Mapping]] = ..., projection: _Optional[_Union[AgentContextProjection, _Mapping]] = ..., correlation_id: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., locale: _Optional[str] = ...) -> None: ...

class TaskEdge(_message.Message):
    __slots__ = ("from_task_id", "to_task_id", "condition")
    FROM_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TO_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    from_task_id: str
    to_task_id: str
    condition: str
    def __init__(self, from_task_id: _Optional[str] = ..., to_task_id: _Optional[str] = ..., condition: _Optional[str] = ...) -> None: ...

class AgentTaskGraph(_message.Message):
    __slots__ = ("graph_id", "nodes", "edges")
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    graph_id: str
    nodes: _containers.RepeatedCompositeFieldContainer[AgentTask]
    edges: _containers.RepeatedCompositeFieldContainer[TaskEdge]
    def __init__(self, graph_id: _Optional[str] = ..., nodes: _Optional[_Iterable[_Union[AgentTask, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[TaskEdge, _Mapping]]] = ...) -> None: ...

class EvidenceReference(_message.Message):
    __slots__ = ("source", "reference", "authority", "fetched_at", "data", "capability")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    AUTHORITY_FIELD_NUMBER: _ClassVar[int]
    FETCHED_AT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    source: str
    reference: str
    authority: AuthorityLevel
    fetched_at: _timestamp_pb2.Timestamp
    data: _struct_pb2.Struct
    capability: str
    def __init__(self, source: _Optional[str] = ..., reference: _Optional[str] = ..., authority: _Optional[_Union[AuthorityLevel, str]] = ..., fetched_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., capability: _Optional[str] = ...) -> None: ...

class Statement(_message.Message):
    __slots__ = ("kind", "text", "code", "evidence_indexes", "subject")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_INDEXES_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    kind: StatementKind
    text: str
    code: str
    evidence_indexes: _containers.RepeatedScalarFieldContainer[int]
    subject: str
    def __init__(self, kind: _Optional[_Union[StatementKind, str]] = ..., text: _Optional[str] = ..., code: _Optional[str] = ..., evidence_indexes: _Optional[_Iterable[int]] = ..., subject: _Optional[str] = ...) -> None: ...

class RequestedAction(_message.Message):
    __slots__ = ("action", "target_agent_id", "reason", "parameters", "action_id")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    action: str
    target_agent_id: str
    reason: str
    parameters: _struct_pb2.Struct
    action_id: str
    def __init__(self, action: _Optional[str] = ..., target_agent_id: _Optional[str] = ..., reason: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., action_id: _Optional[str] = ...) -> None: ...

class HandoffOutcome(_message.Message):
    __slots__ = ("action_id", "task_id", "target_agent_id", "state", "result", "reason")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    task_id: str
    target_agent_id: str
    state: HandoffState
    result: AgentResult
    reason: str
    def __init__(self, action_id: _Optional[str] = ..., task_id: _Optional[str] = ..., target_agent_id: _Optional[str] = ..., state: _Optional[_Union[HandoffState, str]] = ..., result: _Optional[_Union[AgentResult, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class AgentResult(_message.Message):
    __slots__ = ("task_id", "agent_id", "status", "result", "evidence", "confidence", "statements", "requested_actions", "completed_at", "error_reason", "versions", "model_usage")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    STATEMENTS_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_USAGE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    agent_id: str
    status: ResultStatus
    result: _struct_pb2.Struct
    evidence: _containers.RepeatedCompositeFieldContainer[EvidenceReference]
    confidence: float
    statements: _containers.RepeatedCompositeFieldContainer[Statement]
    requested_actions: _containers.RepeatedCompositeFieldContainer[RequestedAction]
    completed_at: _timestamp_pb2.Timestamp
    error_reason: str
    versions: VersionStamp
    model_usage: ModelUsage
    def __init__(self, task_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., status: _Optional[_Union[ResultStatus, str]] = ..., result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., evidence: _Optional[_Iterable[_Union[EvidenceReference, _Mapping]]] = ..., confidence: _Optional[float] = ..., statements: _Optional[_Iterable[_Union[Statement, _Mapping]]] = ..., requested_actions: _Optional[_Iterable[_Union[RequestedAction, _Mapping]]] = ..., completed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error_reason: _Optional[str] = ..., versions: _Optional[_Union[VersionStamp, _Mapping]] = ..., model_usage: _Optional[_Union[ModelUsage, _Mapping]] = ...) -> None: ...

class ModelUsage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "calls", "cost", "models", "exhausted_reason")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    EXHAUSTED_REASON_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    calls: int
    cost: float
    models: _containers.RepeatedScalarFieldContainer[str]
    exhausted_reason: str
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., calls: _Optional[int] = ..., cost: _Optional[float] = ..., models: _Optional[_Iterable[str]] = ..., exhausted_reason: _Optional[str] = ...) -> None: ...

class ModelRouteScore(_message.Message):
    __slots__ = ("model_id", "complexity_score", "risk_score", "latency_score", "cost_score", "availability_score", "final_score", "excluded_reason", "decision_id")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    COMPLEXITY_SCORE_FIELD_NUMBER: _ClassVar[int]
    RISK_SCORE_FIELD_NUMBER: _ClassVar[int]
    LATENCY_SCORE_FIELD_NUMBER: _ClassVar[int]
    COST_SCORE_FIELD_NUMBER: _ClassVar[int]
    AVAILABILITY_SCORE_FIELD_NUMBER: _ClassVar[int]
    FINAL_SCORE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDED_REASON_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    complexity_score: float
    risk_score: float
    latency_score: float
    cost_score: float
    availability_score: float
    final_score: float
    excluded_reason: str
    decision_id: str
    def __init__(self, model_id: _Optional[str] = ..., complexity_score: _Optional[float] = ..., risk_score: _Optional[float] = ..., latency_score: _Optional[float] = ..., cost_score: _Optional[float] = ..., availability_score: _Optional[float] = ..., final_score: _Optional[float] = ..., excluded_reason: _Optional[str] = ..., decision_id: _Optional[str] = ...) -> None: ...

class ModelRoute(_message.Message):
    __slots__ = ("scores", "chosen_model_id", "fallback_from", "fallback_reason", "fallback_decision_id")
    SCORES_FIELD_NUMBER: _ClassVar[int]
    CHOSEN_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FROM_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_REASON_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedCompositeFieldContainer[ModelRouteScore]
    chosen_model_id: str
    fallback_from: str
    fallback_reason: str
    fallback_decision_id: str
    def __init__(self, scores: _Optional[_Iterable[_Union[ModelRouteScore, _Mapping]]] = ..., chosen_model_id: _Optional[str] = ..., fallback_from: _Optional[str] = ..., fallback_reason: _Optional[str] = ..., fallback_decision_id: _Optional[str] = ...) -> None: ...

class AgentSelectionScore(_message.Message):
    __slots__ = ("agent_id", "domain_score", "capability_score", "knowledge_score", "availability_score", "cost_score", "history_score", "final_score", "agent_version", "version_reason", "task_id", "chosen", "availability_reason", "history_reason")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_SCORE_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_SCORE_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_SCORE_FIELD_NUMBER: _ClassVar[int]
    AVAILABILITY_SCORE_FIELD_NUMBER: _ClassVar[int]
    COST_SCORE_FIELD_NUMBER: _ClassVar[int]
    HISTORY_SCORE_FIELD_NUMBER: _ClassVar[int]
    FINAL_SCORE_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_REASON_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CHOSEN_FIELD_NUMBER: _ClassVar[int]
    AVAILABILITY_REASON_FIELD_NUMBER: _ClassVar[int]
    HISTORY_REASON_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    domain_score: float
    capability_score: float
    knowledge_score: float
    availability_score: float
    cost_score: float
    history_score: float
    final_score: float
    agent_version: str
    version_reason: str
    task_id: str
    chosen: bool
    availability_reason: str
    history_reason: str
    def __init__(self, agent_id: _Optional[str] = ..., domain_score: _Optional[float] = ..., capability_score: _Optional[float] = ..., knowledge_score: _Optional[float] = ..., availability_score: _Optional[float] = ..., cost_score: _Optional[float] = ..., history_score: _Optional[float] = ..., final_score: _Optional[float] = ..., agent_version: _Optional[str] = ..., version_reason: _Optional[str] = ..., task_id: _Optional[str] = ..., chosen: _Optional[bool] = ..., availability_reason: _Optional[str] = ..., history_reason: _Optional[str] = ...) -> None: ...

class TaskGrant(_message.Message):
    __slots__ = ("grant_id", "execution_id", "task_id", "tenant_id", "user_id", "assertion_digest", "issuer", "audience", "capabilities", "projection_digest", "depth", "issued_at", "expires_at", "actor_type", "roles", "session_id", "conversation_id", "parent_grant_id", "confirmed_action_digest", "confirmation_id", "human_approval_id", "human_approver_id", "resources", "budget", "execution_budget", "sandbox", "sandbox_answers", "agent_risk_profile")
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    ASSERTION_DIGEST_FIELD_NUMBER: _ClassVar[int]
    ISSUER_FIELD_NUMBER: _ClassVar[int]
    AUDIENCE_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    PROJECTION_DIGEST_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    ISSUED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_ACTION_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_ID_FIELD_NUMBER: _ClassVar[int]
    HUMAN_APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    HUMAN_APPROVER_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_BUDGET_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ANSWERS_FIELD_NUMBER: _ClassVar[int]
    AGENT_RISK_PROFILE_FIELD_NUMBER: _ClassVar[int]
    grant_id: str
    execution_id: str
    task_id: str
    tenant_id: str
    user_id: str
    assertion_digest: str
    issuer: str
    audience: str
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    projection_digest: str
    depth: int
    issued_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    actor_type: ActorType
    roles: _containers.RepeatedScalarFieldContainer[str]
    session_id: str
    conversation_id: str
    parent_grant_id: str
    confirmed_action_digest: str
    confirmation_id: str
    human_approval_id: str
    human_approver_id: str
    resources: _containers.RepeatedScalarFieldContainer[str]
    budget: AgentBudget
    execution_budget: AgentBudget
    sandbox: bool
    sandbox_answers: _containers.RepeatedCompositeFieldContainer[SandboxAnswer]
    agent_risk_profile: RiskProfile
    def __init__(self, grant_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., task_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., user_id: _Optional[str] = ..., assertion_digest: _Optional[str] = ..., issuer: _Optional[str] = ..., audience: _Optional[str] = ..., capabilities: _Optional[_Iterable[str]] = ..., projection_digest: _Optional[str] = ..., depth: _Optional[int] = ..., issued_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., actor_type: _Optional[_Union[ActorType, str]] = ..., roles: _Optional[_Iterable[str]] = ..., session_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., parent_grant_id: _Optional[str] = ..., confirmed_action_digest: _Optional[str] = ..., confirmation_id: _Optional[str] = ..., human_approval_id: _Optional[str] = ..., human_approver_id: _Optional[str] = ..., resources: _Optional[_Iterable[str]] = ..., budget: _Optional[_Union[AgentBudget, _Mapping]] = ..., execution_budget: _Optional[_Union[AgentBudget, _Mapping]] = ..., sandbox: _Optional[bool] = ..., sandbox_answers: _Optional[_Iterable[_Union[SandboxAnswer, _Mapping]]] = ..., agent_risk_profile: _Optional[_Union[RiskProfile, _Mapping]] = ...) -> None: ...

class SandboxAnswer(_message.Message):
    __slots__ = ("capability_id", "input", "output", "error_code", "error_reason")
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    capability_id: str
    input: _struct_pb2.Struct
    output: _struct_pb2.Struct
    error_code: str
    error_reason: str
    def __init__(self, capability_id: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., output: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., error_code: _Optional[str] = ..., error_reason: _Optional[str] = ...) -> None: ...

class SignedTaskGrant(_message.Message):
    __slots__ = ("grant", "signature", "key_id", "record_signature")
    GRANT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    RECORD_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    grant: bytes
    signature: bytes
    key_id: str
    record_signature: bytes
    def __init__(self, grant: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., key_id: _Optional[str] = ..., record_signature: _Optional[bytes] = ...) -> None: ...

class AgentPrincipal(_message.Message):
    __slots__ = ("agent_id", "agent_version", "execution_id", "parent_agent_id", "delegation_chain", "grants")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_CHAIN_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    agent_version: str
    execution_id: str
    parent_agent_id: str
    delegation_chain: _containers.RepeatedScalarFieldContainer[str]
    grants: _containers.RepeatedCompositeFieldContainer[SignedTaskGrant]
    def __init__(self, agent_id: _Optional[str] = ..., agent_version: _Optional[str] = ..., execution_id: _Optional[str] = ..., parent_agent_id: _Optional[str] = ..., delegation_chain: _Optional[_Iterable[str]] = ..., grants: _Optional[_Iterable[_Union[SignedTaskGrant, _Mapping]]] = ...) -> None: ...

class PolicyDecision(_message.Message):
    __slots__ = ("decision_id", "effect", "reason_codes", "policy_version")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    REASON_CODES_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    effect: PolicyEffect
    reason_codes: _containers.RepeatedScalarFieldContainer[str]
    policy_version: str
    def __init__(self, decision_id: _Optional[str] = ..., effect: _Optional[_Union[PolicyEffect, str]] = ..., reason_codes: _Optional[_Iterable[str]] = ..., policy_version: _Optional[str] = ...) -> None: ...
