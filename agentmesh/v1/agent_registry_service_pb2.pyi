from agentmesh.v1 import common_pb2 as _common_pb2
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
