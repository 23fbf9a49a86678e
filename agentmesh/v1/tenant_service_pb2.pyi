import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LimitAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LIMIT_ACTION_UNSPECIFIED: _ClassVar[LimitAction]
    LIMIT_ACTION_STOP: _ClassVar[LimitAction]
    LIMIT_ACTION_HUMAN_REVIEW: _ClassVar[LimitAction]

class TenantChange(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TENANT_CHANGE_UNSPECIFIED: _ClassVar[TenantChange]
    TENANT_CHANGE_CREATED: _ClassVar[TenantChange]
    TENANT_CHANGE_UPDATED: _ClassVar[TenantChange]
    TENANT_CHANGE_UNCHANGED: _ClassVar[TenantChange]
LIMIT_ACTION_UNSPECIFIED: LimitAction
LIMIT_ACTION_STOP: LimitAction
LIMIT_ACTION_HUMAN_REVIEW: LimitAction
TENANT_CHANGE_UNSPECIFIED: TenantChange
TENANT_CHANGE_CREATED: TenantChange
TENANT_CHANGE_UPDATED: TenantChange
TENANT_CHANGE_UNCHANGED: TenantChange

class TenantRole(_message.Message):
    __slots__ = ("capabilities", "includes", "privileges")
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    INCLUDES_FIELD_NUMBER: _ClassVar[int]
    PRIVILEGES_FIELD_NUMBER: _ClassVar[int]
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    includes: _containers.RepeatedScalarFieldContainer[str]
    privileges: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, capabilities: _Optional[_Iterable[str]] = ..., includes: _Optional[_Iterable[str]] = ..., privileges: _Optional[_Iterable[str]] = ...) -> None: ...

class TenantLimits(_message.Message):
    __slots__ = ("max_depth", "max_tasks", "max_handoffs", "max_execution_time_ms", "max_cost", "max_tokens", "max_model_calls", "max_model_cost")
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MAX_TASKS_FIELD_NUMBER: _ClassVar[int]
    MAX_HANDOFFS_FIELD_NUMBER: _ClassVar[int]
    MAX_EXECUTION_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_COST_FIELD_NUMBER: _ClassVar[int]
    max_depth: int
    max_tasks: int
    max_handoffs: int
    max_execution_time_ms: int
    max_cost: float
    max_tokens: int
    max_model_calls: int
    max_model_cost: float
    def __init__(self, max_depth: _Optional[int] = ..., max_tasks: _Optional[int] = ..., max_handoffs: _Optional[int] = ..., max_execution_time_ms: _Optional[int] = ..., max_cost: _Optional[float] = ..., max_tokens: _Optional[int] = ..., max_model_calls: _Optional[int] = ..., max_model_cost: _Optional[float] = ...) -> None: ...

class TenantModelUse(_message.Message):
    __slots__ = ("model_ids", "fallback")
    MODEL_IDS_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    model_ids: _containers.RepeatedScalarFieldContainer[str]
    fallback: bool
    def __init__(self, model_ids: _Optional[_Iterable[str]] = ..., fallback: _Optional[bool] = ...) -> None: ...

class TenantDefinition(_message.Message):
    __slots__ = ("tenant_id", "display_name", "roles", "allowed_agents", "limits", "on_exceeded", "revision", "digest", "changed_by", "changed_at", "models")
    class RolesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TenantRole
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TenantRole, _Mapping]] = ...) -> None: ...
    class OnExceededEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: LimitAction
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[LimitAction, str]] = ...) -> None: ...
    class ModelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TenantModelUse
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TenantModelUse, _Mapping]] = ...) -> None: ...
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_AGENTS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    ON_EXCEEDED_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    CHANGED_BY_FIELD_NUMBER: _ClassVar[int]
    CHANGED_AT_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    display_name: str
    roles: _containers.MessageMap[str, TenantRole]
    allowed_agents: _containers.RepeatedScalarFieldContainer[str]
    limits: TenantLimits
    on_exceeded: _containers.ScalarMap[str, LimitAction]
    revision: int
    digest: str
    changed_by: str
    changed_at: _timestamp_pb2.Timestamp
    models: _containers.MessageMap[str, TenantModelUse]
    def __init__(self, tenant_id: _Optional[str] = ..., display_name: _Optional[str] = ..., roles: _Optional[_Mapping[str, TenantRole]] = ..., allowed_agents: _Optional[_Iterable[str]] = ..., limits: _Optional[_Union[TenantLimits, _Mapping]] = ..., on_exceeded: _Optional[_Mapping[str, LimitAction]] = ..., revision: _Optional[int] = ..., digest: _Optional[str] = ..., changed_by: _Optional[str] = ..., changed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., models: _Optional[_Mapping[str, TenantModelUse]] = ...) -> None: ...

class ApplyTenantsRequest(_message.Message):
    __slots__ = ("tenants",)
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[TenantDefinition]
    def __init__(self, tenants: _Optional[_Iterable[_Union[TenantDefinition, _Mapping]]] = ...) -> None: ...

class AppliedTenant(_message.Message):
    __slots__ = ("tenant", "change")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    tenant: TenantDefinition
    change: TenantChange
    def __init__(self, tenant: _Optional[_Union[TenantDefinition, _Mapping]] = ..., change: _Optional[_Union[TenantChange, str]] = ...) -> None: ...

class ApplyTenantsResponse(_message.Message):
    __slots__ = ("results", "policy_version")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AppliedTenant]
    policy_version: str
    def __init__(self, results: _Optional[_Iterable[_Union[AppliedTenant, _Mapping]]] = ..., policy_version: _Optional[str] = ...) -> None: ...

class GetTenantRequest(_message.Message):
    __slots__ = ("tenant_id",)
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    def __init__(self, tenant_id: _Optional[str] = ...) -> None: ...

class GetTenantResponse(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: TenantDefinition
    def __init__(self, tenant: _Optional[_Union[TenantDefinition, _Mapping]] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants",)
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[TenantDefinition]
    def __init__(self, tenants: _Optional[_Iterable[_Union[TenantDefinition, _Mapping]]] = ...) -> None: ...
