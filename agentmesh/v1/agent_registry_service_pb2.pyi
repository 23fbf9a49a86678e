import datetime

from agentmesh.v1 import common_pb2 as _common_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListAgentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[_common_pb2.AgentDefinition]
    def __init__(self, agents: _Optional[_Iterable[_Union[_common_pb2.AgentDefinition, _Mapping]]] = ...) -> None: ...

class GetAgentRequest(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class GetAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: _common_pb2.AgentDefinition
    def __init__(self, agent: _Optional[_Union[_common_pb2.AgentDefinition, _Mapping]] = ...) -> None: ...

class DiscoverAgentsRequest(_message.Message):
    __slots__ = ("tenant_id", "domains", "required_capabilities", "knowledge_scopes")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    DOMAINS_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_SCOPES_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    domains: _containers.RepeatedScalarFieldContainer[str]
    required_capabilities: _containers.RepeatedScalarFieldContainer[str]
    knowledge_scopes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tenant_id: _Optional[str] = ..., domains: _Optional[_Iterable[str]] = ..., required_capabilities: _Optional[_Iterable[str]] = ..., knowledge_scopes: _Optional[_Iterable[str]] = ...) -> None: ...

class DiscoverAgentsResponse(_message.Message):
    __slots__ = ("candidates", "scores")
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    candidates: _containers.RepeatedCompositeFieldContainer[_common_pb2.AgentDefinition]
    scores: _containers.RepeatedCompositeFieldContainer[_common_pb2.AgentSelectionScore]
    def __init__(self, candidates: _Optional[_Iterable[_Union[_common_pb2.AgentDefinition, _Mapping]]] = ..., scores: _Optional[_Iterable[_Union[_common_pb2.AgentSelectionScore, _Mapping]]] = ...) -> None: ...

class SetAgentStatusRequest(_message.Message):
    __slots__ = ("agent_id", "status", "reason")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    status: _common_pb2.LifecycleStatus
    reason: str
    def __init__(self, agent_id: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.LifecycleStatus, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class SetAgentStatusResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: _common_pb2.AgentDefinition
    def __init__(self, agent: _Optional[_Union[_common_pb2.AgentDefinition, _Mapping]] = ...) -> None: ...

class AgentVersionTransition(_message.Message):
    __slots__ = ("from_status", "to_status", "reason", "changed_by", "changed_at")
    FROM_STATUS_FIELD_NUMBER: _ClassVar[int]
    TO_STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CHANGED_BY_FIELD_NUMBER: _ClassVar[int]
    CHANGED_AT_FIELD_NUMBER: _ClassVar[int]
    from_status: _common_pb2.LifecycleStatus
    to_status: _common_pb2.LifecycleStatus
    reason: str
    changed_by: str
    changed_at: _timestamp_pb2.Timestamp
    def __init__(self, from_status: _Optional[_Union[_common_pb2.LifecycleStatus, str]] = ..., to_status: _Optional[_Union[_common_pb2.LifecycleStatus, str]] = ..., reason: _Optional[str] = ..., changed_by: _Optional[str] = ..., changed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AgentVersion(_message.Message):
    __slots__ = ("agent_id", "version", "status", "endpoint", "spiffe_id", "registered_by", "definition", "history", "problems", "evaluation")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    SPIFFE_ID_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_BY_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    version: str
    status: _common_pb2.LifecycleStatus
    endpoint: str
    spiffe_id: str
    registered_by: str
    definition: _common_pb2.AgentDefinition
    history: _containers.RepeatedCompositeFieldContainer[AgentVersionTransition]
    problems: _containers.RepeatedScalarFieldContainer[str]
    evaluation: AgentEvaluation
    def __init__(self, agent_id: _Optional[str] = ..., version: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.LifecycleStatus, str]] = ..., endpoint: _Optional[str] = ..., spiffe_id: _Optional[str] = ..., registered_by: _Optional[str] = ..., definition: _Optional[_Union[_common_pb2.AgentDefinition, _Mapping]] = ..., history: _Optional[_Iterable[_Union[AgentVersionTransition, _Mapping]]] = ..., problems: _Optional[_Iterable[str]] = ..., evaluation: _Optional[_Union[AgentEvaluation, _Mapping]] = ...) -> None: ...

class EvaluationCaseResult(_message.Message):
    __slots__ = ("case_id", "description", "passed", "expected_verdict", "actual_verdict", "mismatches")
    CASE_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERDICT_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_VERDICT_FIELD_NUMBER: _ClassVar[int]
    MISMATCHES_FIELD_NUMBER: _ClassVar[int]
    case_id: str
    description: str
    passed: bool
    expected_verdict: str
    actual_verdict: str
    mismatches: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, case_id: _Optional[str] = ..., description: _Optional[str] = ..., passed: _Optional[bool] = ..., expected_verdict: _Optional[str] = ..., actual_verdict: _Optional[str] = ..., mismatches: _Optional[_Iterable[str]] = ...) -> None: ...

class AgentEvaluation(_message.Message):
    __slots__ = ("agent_id", "version", "dataset_version", "score", "passed_cases", "total_cases", "cases", "baseline_version", "baseline_score", "gate_passed", "gate_problems", "evaluated_by", "evaluated_at")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DATASET_VERSION_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    PASSED_CASES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_CASES_FIELD_NUMBER: _ClassVar[int]
    CASES_FIELD_NUMBER: _ClassVar[int]
    BASELINE_VERSION_FIELD_NUMBER: _ClassVar[int]
    BASELINE_SCORE_FIELD_NUMBER: _ClassVar[int]
    GATE_PASSED_FIELD_NUMBER: _ClassVar[int]
    GATE_PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_BY_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_AT_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    version: str
    dataset_version: str
    score: float
    passed_cases: int
    total_cases: int
    cases: _containers.RepeatedCompositeFieldContainer[EvaluationCaseResult]
    baseline_version: str
    baseline_score: float
    gate_passed: bool
    gate_problems: _containers.RepeatedScalarFieldContainer[str]
    evaluated_by: str
    evaluated_at: _timestamp_pb2.Timestamp
    def __init__(self, agent_id: _Optional[str] = ..., version: _Optional[str] = ..., dataset_version: _Optional[str] = ..., score: _Optional[float] = ..., passed_cases: _Optional[int] = ..., total_cases: _Optional[int] = ..., cases: _Optional[_Iterable[_Union[EvaluationCaseResult, _Mapping]]] = ..., baseline_version: _Optional[str] = ..., baseline_score: _Optional[float] = ..., gate_passed: _Optional[bool] = ..., gate_problems: _Optional[_Iterable[str]] = ..., evaluated_by: _Optional[str] = ..., evaluated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RegisterAgentVersionRequest(_message.Message):
    __slots__ = ("user_assertion", "manifest", "endpoint", "spiffe_id")
    USER_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    SPIFFE_ID_FIELD_NUMBER: _ClassVar[int]
    user_assertion: str
    manifest: _struct_pb2.Struct
    endpoint: str
    spiffe_id: str
    def __init__(self, user_assertion: _Optional[str] = ..., manifest: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., endpoint: _Optional[str] = ..., spiffe_id: _Optional[str] = ...) -> None: ...

class RegisterAgentVersionResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: AgentVersion
    def __init__(self, version: _Optional[_Union[AgentVersion, _Mapping]] = ...) -> None: ...

class TransitionAgentVersionRequest(_message.Message):
    __slots__ = ("user_assertion", "agent_id", "version", "to_status", "reason")
    USER_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TO_STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    user_assertion: str
    agent_id: str
    version: str
    to_status: _common_pb2.LifecycleStatus
    reason: str
    def __init__(self, user_assertion: _Optional[str] = ..., agent_id: _Optional[str] = ..., version: _Optional[str] = ..., to_status: _Optional[_Union[_common_pb2.LifecycleStatus, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class TransitionAgentVersionResponse(_message.Message):
    __slots__ = ("version", "also_changed")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ALSO_CHANGED_FIELD_NUMBER: _ClassVar[int]
    version: AgentVersion
    also_changed: _containers.RepeatedCompositeFieldContainer[AgentVersion]
    def __init__(self, version: _Optional[_Union[AgentVersion, _Mapping]] = ..., also_changed: _Optional[_Iterable[_Union[AgentVersion, _Mapping]]] = ...) -> None: ...

class ListAgentVersionsRequest(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class EvaluateAgentVersionRequest(_message.Message):
    __slots__ = ("user_assertion", "agent_id", "version")
    USER_ASSERTION_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    user_assertion: str
    agent_id: str
    version: str
    def __init__(self, user_assertion: _Optional[str] = ..., agent_id: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class EvaluateAgentVersionResponse(_message.Message):
    __slots__ = ("evaluation", "version")
    EVALUATION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    evaluation: AgentEvaluation
    version: AgentVersion
    def __init__(self, evaluation: _Optional[_Union[AgentEvaluation, _Mapping]] = ..., version: _Optional[_Union[AgentVersion, _Mapping]] = ...) -> None: ...

class ListAgentVersionsResponse(_message.Message):
    __slots__ = ("versions",)
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[AgentVersion]
    def __init__(self, versions: _Optional[_Iterable[_Union[AgentVersion, _Mapping]]] = ...) -> None: ...
