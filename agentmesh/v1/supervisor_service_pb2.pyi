import datetime

from agentmesh.v1 import common_pb2 as _common_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExecutionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_STATUS_UNSPECIFIED: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_RUNNING: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_SUCCEEDED: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_PARTIAL: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_FAILED: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_CANCELLED: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_STOPPED: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_AWAITING_REVIEW: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_AWAITING_CONFIRMATION: _ClassVar[ExecutionStatus]

class ExecutionIntent(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_INTENT_UNSPECIFIED: _ClassVar[ExecutionIntent]
    EXECUTION_INTENT_ANALYZE_PERMIT: _ClassVar[ExecutionIntent]
    EXECUTION_INTENT_PERMIT_STATUS: _ClassVar[ExecutionIntent]
    EXECUTION_INTENT_TRAINING_EXPIRED: _ClassVar[ExecutionIntent]
    EXECUTION_INTENT_DOMAIN: _ClassVar[ExecutionIntent]

class ExecutionEvent(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_EVENT_UNSPECIFIED: _ClassVar[ExecutionEvent]
    EXECUTION_EVENT_SNAPSHOT: _ClassVar[ExecutionEvent]
    EXECUTION_EVENT_TASK_STARTED: _ClassVar[ExecutionEvent]
    EXECUTION_EVENT_TASK_FINISHED: _ClassVar[ExecutionEvent]
    EXECUTION_EVENT_EXECUTION_UPDATED: _ClassVar[ExecutionEvent]
    EXECUTION_EVENT_EXECUTION_FINISHED: _ClassVar[ExecutionEvent]
    EXECUTION_EVENT_TASK_WAITING: _ClassVar[ExecutionEvent]

class MissingKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MISSING_KIND_UNSPECIFIED: _ClassVar[MissingKind]
    MISSING_KIND_TASK_FAILED: _ClassVar[MissingKind]
    MISSING_KIND_TASK_TIMED_OUT: _ClassVar[MissingKind]
    MISSING_KIND_TASK_CANCELLED: _ClassVar[MissingKind]
    MISSING_KIND_TASK_SKIPPED: _ClassVar[MissingKind]
    MISSING_KIND_TASK_NOT_RUN: _ClassVar[MissingKind]
    MISSING_KIND_RESULT_FAILED: _ClassVar[MissingKind]
    MISSING_KIND_RESULT_CONTRACT_VIOLATION: _ClassVar[MissingKind]
    MISSING_KIND_RESULT_AMBIGUOUS: _ClassVar[MissingKind]
    MISSING_KIND_ANALYSIS_INCOMPLETE: _ClassVar[MissingKind]
    MISSING_KIND_HANDOFF: _ClassVar[MissingKind]
    MISSING_KIND_INFORMATION_REQUESTED: _ClassVar[MissingKind]
    MISSING_KIND_NOT_FINISHED: _ClassVar[MissingKind]

class ActionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_STATE_UNSPECIFIED: _ClassVar[ActionState]
    ACTION_STATE_NOT_ELIGIBLE: _ClassVar[ActionState]
    ACTION_STATE_DENIED: _ClassVar[ActionState]
    ACTION_STATE_AWAITING_APPROVAL: _ClassVar[ActionState]
    ACTION_STATE_AWAITING_CONFIRMATION: _ClassVar[ActionState]
    ACTION_STATE_EXECUTING: _ClassVar[ActionState]
    ACTION_STATE_SUCCEEDED: _ClassVar[ActionState]
    ACTION_STATE_FAILED: _ClassVar[ActionState]
    ACTION_STATE_DECLINED: _ClassVar[ActionState]
    ACTION_STATE_EXPIRED: _ClassVar[ActionState]
    ACTION_STATE_REJECTED: _ClassVar[ActionState]

class ActionEffect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_EFFECT_UNSPECIFIED: _ClassVar[ActionEffect]
    ACTION_EFFECT_NONE: _ClassVar[ActionEffect]
    ACTION_EFFECT_APPLIED: _ClassVar[ActionEffect]
    ACTION_EFFECT_COMPENSATED: _ClassVar[ActionEffect]
    ACTION_EFFECT_NOT_RESTORED: _ClassVar[ActionEffect]
    ACTION_EFFECT_UNKNOWN: _ClassVar[ActionEffect]

class AttemptKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTEMPT_KIND_UNSPECIFIED: _ClassVar[AttemptKind]
    ATTEMPT_KIND_FIRST: _ClassVar[AttemptKind]
    ATTEMPT_KIND_RETRY: _ClassVar[AttemptKind]
    ATTEMPT_KIND_FALLBACK: _ClassVar[AttemptKind]
    ATTEMPT_KIND_CONTINUE: _ClassVar[AttemptKind]

class AttemptOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTEMPT_OUTCOME_UNSPECIFIED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_ANSWERED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_TRANSIENT_RESULT: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_RESULT_FAILED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_UNAVAILABLE: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_TIMED_OUT: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_NOT_CALLED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_FAILED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_CANCELLED: _ClassVar[AttemptOutcome]
EXECUTION_STATUS_UNSPECIFIED: ExecutionStatus
EXECUTION_STATUS_RUNNING: ExecutionStatus
EXECUTION_STATUS_SUCCEEDED: ExecutionStatus
EXECUTION_STATUS_PARTIAL: ExecutionStatus
EXECUTION_STATUS_FAILED: ExecutionStatus
EXECUTION_STATUS_CANCELLED: ExecutionStatus
EXECUTION_STATUS_STOPPED: ExecutionStatus
EXECUTION_STATUS_AWAITING_REVIEW: ExecutionStatus
EXECUTION_STATUS_AWAITING_CONFIRMATION: ExecutionStatus
EXECUTION_INTENT_UNSPECIFIED: ExecutionIntent
EXECUTION_INTENT_ANALYZE_PERMIT: ExecutionIntent
EXECUTION_INTENT_PERMIT_STATUS: ExecutionIntent
EXECUTION_INTENT_TRAINING_EXPIRED: ExecutionIntent
EXECUTION_INTENT_DOMAIN: ExecutionIntent
EXECUTION_EVENT_UNSPECIFIED: ExecutionEvent
EXECUTION_EVENT_SNAPSHOT: ExecutionEvent
EXECUTION_EVENT_TASK_STARTED: ExecutionEvent
EXECUTION_EVENT_TASK_FINISHED: ExecutionEvent
EXECUTION_EVENT_EXECUTION_UPDATED: ExecutionEvent
EXECUTION_EVENT_EXECUTION_FINISHED: ExecutionEvent
EXECUTION_EVENT_TASK_WAITING: ExecutionEvent
MISSING_KIND_UNSPECIFIED: MissingKind
MISSING_KIND_TASK_FAILED: MissingKind
MISSING_KIND_TASK_TIMED_OUT: MissingKind
MISSING_KIND_TASK_CANCELLED: MissingKind
MISSING_KIND_TASK_SKIPPED: MissingKind
MISSING_KIND_TASK_NOT_RUN: MissingKind
MISSING_KIND_RESULT_FAILED: MissingKind
MISSING_KIND_RESULT_CONTRACT_VIOLATION: MissingKind
MISSING_KIND_RESULT_AMBIGUOUS: MissingKind
MISSING_KIND_ANALYSIS_INCOMPLETE: MissingKind
MISSING_KIND_HANDOFF: MissingKind
MISSING_KIND_INFORMATION_REQUESTED: MissingKind
MISSING_KIND_NOT_FINISHED: MissingKind
ACTION_STATE_UNSPECIFIED: ActionState
ACTION_STATE_NOT_ELIGIBLE: ActionState
ACTION_STATE_DENIED: ActionState
ACTION_STATE_AWAITING_APPROVAL: ActionState
ACTION_STATE_AWAITING_CONFIRMATION: ActionState
ACTION_STATE_EXECUTING: ActionState
ACTION_STATE_SUCCEEDED: ActionState
ACTION_STATE_FAILED: ActionState
ACTION_STATE_DECLINED: ActionState
ACTION_STATE_EXPIRED: ActionState
ACTION_STATE_REJECTED: ActionState
ACTION_EFFECT_UNSPECIFIED: ActionEffect
ACTION_EFFECT_NONE: ActionEffect
ACTION_EFFECT_APPLIED: ActionEffect
ACTION_EFFECT_COMPENSATED: ActionEffect
ACTION_EFFECT_NOT_RESTORED: ActionEffect
ACTION_EFFECT_UNKNOWN: ActionEffect
ATTEMPT_KIND_UNSPECIFIED: AttemptKind
ATTEMPT_KIND_FIRST: AttemptKind
ATTEMPT_KIND_RETRY: AttemptKind
ATTEMPT_KIND_FALLBACK: AttemptKind
ATTEMPT_KIND_CONTINUE: AttemptKind
ATTEMPT_OUTCOME_UNSPECIFIED: AttemptOutcome
ATTEMPT_OUTCOME_ANSWERED: AttemptOutcome
ATTEMPT_OUTCOME_TRANSIENT_RESULT: AttemptOutcome
ATTEMPT_OUTCOME_RESULT_FAILED: AttemptOutcome
ATTEMPT_OUTCOME_UNAVAILABLE: AttemptOutcome
ATTEMPT_OUTCOME_TIMED_OUT: AttemptOutcome
ATTEMPT_OUTCOME_NOT_CALLED: AttemptOutcome
ATTEMPT_OUTCOME_FAILED: AttemptOutcome
ATTEMPT_OUTCOME_CANCELLED: AttemptOutcome

class MissingItem(_message.Message):
    __slots__ = ("kind", "analysis", "agent_id", "detail", "text")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ANALYSIS_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    kind: MissingKind
    analysis: str
    agent_id: str
    detail: str
    text: str
    def __init__(self, kind: _Optional[_Union[MissingKind, str]] = ..., analysis: _Optional[str] = ..., agent_id: _Optional[str] = ..., detail: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class ProposedAction(_message.Message):
    __slots__ = ("action_id", "capability_id", "resource_id", "arguments", "action_digest", "state", "confirmation_token", "confirmation_expires_at", "policy_decision", "approval_review_id", "approved_by", "reason", "verified", "compensated", "updated_at", "effect")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    ACTION_DIGEST_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    POLICY_DECISION_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REVIEW_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVED_BY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    COMPENSATED_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    capability_id: str
    resource_id: str
    arguments: _struct_pb2.Struct
    action_digest: str
    state: ActionState
    confirmation_token: str
    confirmation_expires_at: _timestamp_pb2.Timestamp
    policy_decision: _common_pb2.PolicyDecision
    approval_review_id: str
    approved_by: str
    reason: str
    verified: bool
    compensated: bool
    updated_at: _timestamp_pb2.Timestamp
    effect: ActionEffect
    def __init__(self, action_id: _Optional[str] = ..., capability_id: _Optional[str] = ..., resource_id: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., action_digest: _Optional[str] = ..., state: _Optional[_Union[ActionState, str]] = ..., confirmation_token: _Optional[str] = ..., confirmation_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., policy_decision: _Optional[_Union[_common_pb2.PolicyDecision, _Mapping]] = ..., approval_review_id: _Optional[str] = ..., approved_by: _Optional[str] = ..., reason: _Optional[str] = ..., verified: _Optional[bool] = ..., compensated: _Optional[bool] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., effect: _Optional[_Union[ActionEffect, str]] = ...) -> None: ...

class Conflict(_message.Message):
    __slots__ = ("subject", "agent_a", "agent_b", "evidence_a", "evidence_b", "applicable_rules", "resolution", "review_id")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    AGENT_A_FIELD_NUMBER: _ClassVar[int]
    AGENT_B_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_A_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_B_FIELD_NUMBER: _ClassVar[int]
    APPLICABLE_RULES_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    REVIEW_ID_FIELD_NUMBER: _ClassVar[int]
    subject: str
    agent_a: str
    agent_b: str
    evidence_a: _containers.RepeatedCompositeFieldContainer[_common_pb2.EvidenceReference]
    evidence_b: _containers.RepeatedCompositeFieldContainer[_common_pb2.EvidenceReference]
    applicable_rules: _containers.RepeatedScalarFieldContainer[str]
    resolution: str
    review_id: str
    def __init__(self, subject: _Optional[str] = ..., agent_a: _Optional[str] = ..., agent_b: _Optional[str] = ..., evidence_a: _Optional[_Iterable[_Union[_common_pb2.EvidenceReference, _Mapping]]] = ..., evidence_b: _Optional[_Iterable[_Union[_common_pb2.EvidenceReference, _Mapping]]] = ..., applicable_rules: _Optional[_Iterable[str]] = ..., resolution: _Optional[str] = ..., review_id: _Optional[str] = ...) -> None: ...

class Execution(_message.Message):
    __slots__ = ("execution_id", "status", "decision", "request_text", "tenant_id", "user_id", "graph", "results", "selection_scores", "conflicts", "reason", "trace", "started_at", "finished_at", "summary", "action", "actor_type", "system_actor", "recommended_resources", "client_request_id", "intent", "intent_rule", "missing", "user_roles", "intent_classification", "intent_kind", "domain", "waived_limits", "attempts", "fallbacks")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_TEXT_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    SELECTION_SCORES_FIELD_NUMBER: _ClassVar[int]
    CONFLICTS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TYPE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_ACTOR_FIELD_NUMBER: _ClassVar[int]
    RECOMMENDED_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    INTENT_RULE_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    USER_ROLES_FIELD_NUMBER: _ClassVar[int]
    INTENT_CLASSIFICATION_FIELD_NUMBER: _ClassVar[int]
    INTENT_KIND_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    WAIVED_LIMITS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    status: ExecutionStatus
    decision: _common_pb2.AnalysisDecision
    request_text: str
    tenant_id: str
    user_id: str
    graph: _common_pb2.AgentTaskGraph
    results: _containers.RepeatedCompositeFieldContainer[_common_pb2.AgentResult]
    selection_scores: _containers.RepeatedCompositeFieldContainer[_common_pb2.AgentSelectionScore]
    conflicts: _containers.RepeatedCompositeFieldContainer[Conflict]
    reason: str
    trace: _common_pb2.TraceContext
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    summary: str
    action: ProposedAction
    actor_type: _common_pb2.ActorType
    system_actor: str
    recommended_resources: _containers.RepeatedScalarFieldContainer[str]
    client_request_id: str
    intent: ExecutionIntent
    intent_rule: str
    missing: _containers.RepeatedCompositeFieldContainer[MissingItem]
    user_roles: _containers.RepeatedScalarFieldContainer[str]
    intent_classification: IntentClassification
    intent_kind: str
    domain: str
    waived_limits: _containers.RepeatedScalarFieldContainer[str]
    attempts: _containers.RepeatedCompositeFieldContainer[TaskAttempt]
    fallbacks: _containers.RepeatedCompositeFieldContainer[FallbackDecision]
    def __init__(self, execution_id: _Optional[str] = ..., status: _Optional[_Union[ExecutionStatus, str]] = ..., decision: _Optional[_Union[_common_pb2.AnalysisDecision, str]] = ..., request_text: _Optional[str] = ..., tenant_id: _Optional[str] = ..., user_id: _Optional[str] = ..., graph: _Optional[_Union[_common_pb2.AgentTaskGraph, _Mapping]] = ..., results: _Optional[_Iterable[_Union[_common_pb2.AgentResult, _Mapping]]] = ..., selection_scores: _Optional[_Iterable[_Union[_common_pb2.AgentSelectionScore, _Mapping]]] = ..., conflicts: _Optional[_Iterable[_Union[Conflict, _Mapping]]] = ..., reason: _Optional[str] = ..., trace: _Optional[_Union[_common_pb2.TraceContext, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., summary: _Optional[str] = ..., action: _Optional[_Union[ProposedAction, _Mapping]] = ..., actor_type: _Optional[_Union[_common_pb2.ActorType, str]] = ..., system_actor: _Optional[str] = ..., recommended_resources: _Optional[_Iterable[str]] = ..., client_request_id: _Optional[str] = ..., intent: _Optional[_Union[ExecutionIntent, str]] = ..., intent_rule: _Optional[str] = ..., missing: _Optional[_Iterable[_Union[MissingItem, _Mapping]]] = ..., user_roles: _Optional[_Iterable[str]] = ..., intent_classification: _Optional[_Union[IntentClassification, _Mapping]] = ..., intent_kind: _Optional[str] = ..., domain: _Optional[str] = ..., waived_limits: _Optional[_Iterable[str]] = ..., attempts: _Optional[_Iterable[_Union[TaskAttempt, _Mapping]]] = ..., fallbacks: _Optional[_Iterable[_Union[FallbackDecision, _Mapping]]] = ...) -> None: ...

class TaskAttempt(_message.Message):
    __slots__ = ("task_id", "attempt", "kind", "agent_id", "agent_version", "endpoint", "outcome", "reason", "backoff_ms", "started_at", "finished_at", "fallback_for", "decision_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FOR_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt: int
    kind: AttemptKind
    agent_id: str
    agent_version: str
    endpoint: str
    outcome: AttemptOutcome
    reason: str
    backoff_ms: int
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    fallback_for: str
    decision_id: str
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., kind: _Optional[_Union[AttemptKind, str]] = ..., agent_id: _Optional[str] = ..., agent_version: _Optional[str] = ..., endpoint: _Optional[str] = ..., outcome: _Optional[_Union[AttemptOutcome, str]] = ..., reason: _Optional[str] = ..., backoff_ms: _Optional[int] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fallback_for: _Optional[str] = ..., decision_id: _Optional[str] = ...) -> None: ...

class FallbackDecision(_message.Message):
    __slots__ = ("task_id", "primary_agent_id", "primary_version", "primary_failure", "fallback_agent_id", "fallback_version", "allowed", "decision_id", "reason_codes")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_VERSION_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_FAILURE_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_VERSION_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_CODES_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    primary_agent_id: str
    primary_version: str
    primary_failure: str
    fallback_agent_id: str
    fallback_version: str
    allowed: bool
    decision_id: str
    reason_codes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, task_id: _Optional[str] = ..., primary_agent_id: _Optional[str] = ..., primary_version: _Optional[str] = ..., primary_failure: _Optional[str] = ..., fallback_agent_id: _Optional[str] = ..., fallback_version: _Optional[str] = ..., allowed: _Optional[bool] = ..., decision_id: _Optional[str] = ..., reason_codes: _Optional[_Iterable[str]] = ...) -> None: ...

class IntentClassification(_message.Message):
    __slots__ = ("source", "intent", "subjects", "candidates", "model_id", "model_version", "model_call_id", "confidence")
    class SubjectsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    SUBJECTS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    source: str
    intent: str
    subjects: _containers.ScalarMap[str, str]
    candidates: _containers.RepeatedScalarFieldContainer[str]
    model_id: str
    model_version: str
    model_call_id: str
    confidence: float
    def __init__(self, source: _Optional[str] = ..., intent: _Optional[str] = ..., subjects: _Optional[_Mapping[str, str]] = ..., candidates: _Optional[_Iterable[str]] = ..., model_id: _Optional[str] = ..., model_version: _Optional[str] = ..., model_call_id: _Optional[str] = ..., confidence: _Optional[float] = ...) -> None: ...

class AnalyzeRequest(_message.Message):
    __slots__ = ("user_assertion", "request_text", "tenant_id", "correlation_id", "budget", "detach", "request_release", "confirmation_ttl_seconds", "client_request_id")
    USER_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_TEXT_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    DETACH_FIELD_NUMBER: _ClassVar[int]
    REQUEST_RELEASE_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    user_assertion: str
    request_text: str
    tenant_id: str
    correlation_id: str
    budget: _common_pb2.AgentBudget
    detach: bool
    request_release: bool
    confirmation_ttl_seconds: int
    client_request_id: str
    def __init__(self, user_assertion: _Optional[str] = ..., request_text: _Optional[str] = ..., tenant_id: _Optional[str] = ..., correlation_id: _Optional[str] = ..., budget: _Optional[_Union[_common_pb2.AgentBudget, _Mapping]] = ..., detach: _Optional[bool] = ..., request_release: _Optional[bool] = ..., confirmation_ttl_seconds: _Optional[int] = ..., client_request_id: _Optional[str] = ...) -> None: ...

class AnalyzeResponse(_message.Message):
    __slots__ = ("execution",)
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    execution: Execution
    def __init__(self, execution: _Optional[_Union[Execution, _Mapping]] = ...) -> None: ...

class GetExecutionRequest(_message.Message):
    __slots__ = ("user_assertion", "execution_id")
    USER_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    user_assertion: str
    execution_id: str
    def __init__(self, user_assertion: _Optional[str] = ..., execution_id: _Optional[str] = ...) -> None: ...

class GetExecutionResponse(_message.Message):
    __slots__ = ("execution",)
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    execution: Execution
    def __init__(self, execution: _Optional[_Union[Execution, _Mapping]] = ...) -> None: ...

class ListExecutionsRequest(_message.Message):
    __slots__ = ("user_assertion", "page_size", "page_token")
    USER_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    user_assertion: str
    page_size: int
    page_token: str
    def __init__(self, user_assertion: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListExecutionsResponse(_message.Message):
    __slots__ = ("executions", "next_page_token")
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    executions: _containers.RepeatedCompositeFieldContainer[Execution]
    next_page_token: str
    def __init__(self, executions: _Optional[_Iterable[_Union[Execution, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchExecutionRequest(_message.Message):
    __slots__ = ("user_assertion", "execution_id")
    USER_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    user_assertion: str
    execution_id: str
    def __init__(self, user_assertion: _Optional[str] = ..., execution_id: _Optional[str] = ...) -> None: ...

class WatchExecutionResponse(_message.Message):
    __slots__ = ("task_id", "agent_id", "task_status", "execution", "event")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_STATUS_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    agent_id: str
    task_status: _common_pb2.TaskStatus
    execution: Execution
    event: ExecutionEvent
    def __init__(self, task_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., task_status: _Optional[_Union[_common_pb2.TaskStatus, str]] = ..., execution: _Optional[_Union[Execution, _Mapping]] = ..., event: _Optional[_Union[ExecutionEvent, str]] = ...) -> None: ...

class CancelExecutionRequest(_message.Message):
    __slots__ = ("user_assertion", "execution_id", "reason")
    USER_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    user_assertion: str
    execution_id: str
    reason: str
    def __init__(self, user_assertion: _Optional[str] = ..., execution_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelExecutionResponse(_message.Message):
    __slots__ = ("execution",)
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    execution: Execution
    def __init__(self, execution: _Optional[_Union[Execution, _Mapping]] = ...) -> None: ...

class ConfirmActionRequest(_message.Message):
    __slots__ = ("user_assertion", "execution_id", "confirmation_token", "capability_id", "resource_id", "decline")
    USER_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    DECLINE_FIELD_NUMBER: _ClassVar[int]
    user_assertion: str
    execution_id: str
    confirmation_token: str
    capability_id: str
    resource_id: str
    decline: bool
    def __init__(self, user_assertion: _Optional[str] = ..., execution_id: _Optional[str] = ..., confirmation_token: _Optional[str] = ..., capability_id: _Optional[str] = ..., resource_id: _Optional[str] = ..., decline: _Optional[bool] = ...) -> None: ...

class ConfirmActionResponse(_message.Message):
    __slots__ = ("execution",)
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    execution: Execution
    def __init__(self, execution: _Optional[_Union[Execution, _Mapping]] = ...) -> None: ...

class TrainingExpired(_message.Message):
    __slots__ = ("worker_id", "training_code", "expired_on")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    TRAINING_CODE_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_ON_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    training_code: str
    expired_on: str
    def __init__(self, worker_id: _Optional[str] = ..., training_code: _Optional[str] = ..., expired_on: _Optional[str] = ...) -> None: ...

class HandleEventRequest(_message.Message):
    __slots__ = ("event_id", "tenant_id", "correlation_id", "training_expired")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    TRAINING_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    tenant_id: str
    correlation_id: str
    training_expired: TrainingExpired
    def __init__(self, event_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., correlation_id: _Optional[str] = ..., training_expired: _Optional[_Union[TrainingExpired, _Mapping]] = ...) -> None: ...

class HandleEventResponse(_message.Message):
    __slots__ = ("execution", "duplicate")
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    execution: Execution
    duplicate: bool
    def __init__(self, execution: _Optional[_Union[Execution, _Mapping]] = ..., duplicate: _Optional[bool] = ...) -> None: ...
