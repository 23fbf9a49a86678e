import datetime

from agentmesh.v1 import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class KillSwitchScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KILL_SWITCH_SCOPE_UNSPECIFIED: _ClassVar[KillSwitchScope]
    KILL_SWITCH_SCOPE_AGENT: _ClassVar[KillSwitchScope]
    KILL_SWITCH_SCOPE_CAPABILITY: _ClassVar[KillSwitchScope]
    KILL_SWITCH_SCOPE_TENANT: _ClassVar[KillSwitchScope]
    KILL_SWITCH_SCOPE_PLATFORM: _ClassVar[KillSwitchScope]

class OperationKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_KIND_UNSPECIFIED: _ClassVar[OperationKind]
    OPERATION_KIND_INVOKE: _ClassVar[OperationKind]
    OPERATION_KIND_OVERRIDE: _ClassVar[OperationKind]
    OPERATION_KIND_REVIEW: _ClassVar[OperationKind]
    OPERATION_KIND_READ_EXECUTION: _ClassVar[OperationKind]
    OPERATION_KIND_CANCEL_EXECUTION: _ClassVar[OperationKind]
    OPERATION_KIND_USE_MODEL: _ClassVar[OperationKind]
    OPERATION_KIND_MANAGE_AGENT: _ClassVar[OperationKind]
    OPERATION_KIND_APPROVE_AGENT: _ClassVar[OperationKind]
    OPERATION_KIND_USE_FALLBACK_AGENT: _ClassVar[OperationKind]
KILL_SWITCH_SCOPE_UNSPECIFIED: KillSwitchScope
KILL_SWITCH_SCOPE_AGENT: KillSwitchScope
KILL_SWITCH_SCOPE_CAPABILITY: KillSwitchScope
KILL_SWITCH_SCOPE_TENANT: KillSwitchScope
KILL_SWITCH_SCOPE_PLATFORM: KillSwitchScope
OPERATION_KIND_UNSPECIFIED: OperationKind
OPERATION_KIND_INVOKE: OperationKind
OPERATION_KIND_OVERRIDE: OperationKind
OPERATION_KIND_REVIEW: OperationKind
OPERATION_KIND_READ_EXECUTION: OperationKind
OPERATION_KIND_CANCEL_EXECUTION: OperationKind
OPERATION_KIND_USE_MODEL: OperationKind
OPERATION_KIND_MANAGE_AGENT: OperationKind
OPERATION_KIND_APPROVE_AGENT: OperationKind
OPERATION_KIND_USE_FALLBACK_AGENT: OperationKind

class ResourceRef(_message.Message):
    __slots__ = ("type", "id", "tenant_id")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    type: str
    id: str
    tenant_id: str
    def __init__(self, type: _Optional[str] = ..., id: _Optional[str] = ..., tenant_id: _Optional[str] = ...) -> None: ...

class OperationContext(_message.Message):
    __slots__ = ("confirmation_given", "human_approval_id", "human_approver_id", "risk_profile", "override_reason", "subject_requester_id", "model_fallback", "agent_risk_profile")
    CONFIRMATION_GIVEN_FIELD_NUMBER: _ClassVar[int]
    HUMAN_APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    HUMAN_APPROVER_ID_FIELD_NUMBER: _ClassVar[int]
    RISK_PROFILE_FIELD_NUMBER: _ClassVar[int]
    OVERRIDE_REASON_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_REQUESTER_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FALLBACK_FIELD_NUMBER: _ClassVar[int]
    AGENT_RISK_PROFILE_FIELD_NUMBER: _ClassVar[int]
    confirmation_given: bool
    human_approval_id: str
    human_approver_id: str
    risk_profile: _common_pb2.RiskProfile
    override_reason: str
    subject_requester_id: str
    model_fallback: bool
    agent_risk_profile: _common_pb2.RiskProfile
    def __init__(self, confirmation_given: _Optional[bool] = ..., human_approval_id: _Optional[str] = ..., human_approver_id: _Optional[str] = ..., risk_profile: _Optional[_Union[_common_pb2.RiskProfile, _Mapping]] = ..., override_reason: _Optional[str] = ..., subject_requester_id: _Optional[str] = ..., model_fallback: _Optional[bool] = ..., agent_risk_profile: _Optional[_Union[_common_pb2.RiskProfile, _Mapping]] = ...) -> None: ...

class AuthorizeRequest(_message.Message):
    __slots__ = ("user", "actor_type", "system_actor", "agent", "delegation_depth", "capability_id", "capability_version", "resource", "context", "operation", "trace")
    USER_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TYPE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_ACTOR_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_DEPTH_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    user: _common_pb2.UserContext
    actor_type: _common_pb2.ActorType
    system_actor: str
    agent: _common_pb2.AgentPrincipal
    delegation_depth: int
    capability_id: str
    capability_version: str
    resource: ResourceRef
    context: OperationContext
    operation: OperationKind
    trace: _common_pb2.TraceContext
    def __init__(self, user: _Optional[_Union[_common_pb2.UserContext, _Mapping]] = ..., actor_type: _Optional[_Union[_common_pb2.ActorType, str]] = ..., system_actor: _Optional[str] = ..., agent: _Optional[_Union[_common_pb2.AgentPrincipal, _Mapping]] = ..., delegation_depth: _Optional[int] = ..., capability_id: _Optional[str] = ..., capability_version: _Optional[str] = ..., resource: _Optional[_Union[ResourceRef, _Mapping]] = ..., context: _Optional[_Union[OperationContext, _Mapping]] = ..., operation: _Optional[_Union[OperationKind, str]] = ..., trace: _Optional[_Union[_common_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class AuthorizeResponse(_message.Message):
    __slots__ = ("decision", "explanation")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    decision: _common_pb2.PolicyDecision
    explanation: str
    def __init__(self, decision: _Optional[_Union[_common_pb2.PolicyDecision, _Mapping]] = ..., explanation: _Optional[str] = ...) -> None: ...

class AuthorizeBatchRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[AuthorizeRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[AuthorizeRequest, _Mapping]]] = ...) -> None: ...

class AuthorizeBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AuthorizeResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AuthorizeResult, _Mapping]]] = ...) -> None: ...

class AuthorizeResult(_message.Message):
    __slots__ = ("response", "error")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    response: AuthorizeResponse
    error: _status_pb2.Status
    def __init__(self, response: _Optional[_Union[AuthorizeResponse, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class KillSwitch(_message.Message):
    __slots__ = ("scope", "target", "enabled", "reason", "changed_by", "changed_at")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CHANGED_BY_FIELD_NUMBER: _ClassVar[int]
    CHANGED_AT_FIELD_NUMBER: _ClassVar[int]
    scope: KillSwitchScope
    target: str
    enabled: bool
    reason: str
    changed_by: str
    changed_at: _timestamp_pb2.Timestamp
    def __init__(self, scope: _Optional[_Union[KillSwitchScope, str]] = ..., target: _Optional[str] = ..., enabled: _Optional[bool] = ..., reason: _Optional[str] = ..., changed_by: _Optional[str] = ..., changed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SetKillSwitchRequest(_message.Message):
    __slots__ = ("scope", "target", "enabled", "reason")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    scope: KillSwitchScope
    target: str
    enabled: bool
    reason: str
    def __init__(self, scope: _Optional[_Union[KillSwitchScope, str]] = ..., target: _Optional[str] = ..., enabled: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class SetKillSwitchResponse(_message.Message):
    __slots__ = ("kill_switch",)
    KILL_SWITCH_FIELD_NUMBER: _ClassVar[int]
    kill_switch: KillSwitch
    def __init__(self, kill_switch: _Optional[_Union[KillSwitch, _Mapping]] = ...) -> None: ...

class ListKillSwitchesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListKillSwitchesResponse(_message.Message):
    __slots__ = ("kill_switches",)
    KILL_SWITCHES_FIELD_NUMBER: _ClassVar[int]
    kill_switches: _containers.RepeatedCompositeFieldContainer[KillSwitch]
    def __init__(self, kill_switches: _Optional[_Iterable[_Union[KillSwitch, _Mapping]]] = ...) -> None: ...

class GetPolicyInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetPolicyInfoResponse(_message.Message):
    __slots__ = ("policy_version", "policy_ids", "policy_release")
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    POLICY_IDS_FIELD_NUMBER: _ClassVar[int]
    POLICY_RELEASE_FIELD_NUMBER: _ClassVar[int]
    policy_version: str
    policy_ids: _containers.RepeatedScalarFieldContainer[str]
    policy_release: str
    def __init__(self, policy_version: _Optional[str] = ..., policy_ids: _Optional[_Iterable[str]] = ..., policy_release: _Optional[str] = ...) -> None: ...
