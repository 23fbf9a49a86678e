from agentmesh.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunTaskRequest(_message.Message):
    __slots__ = ("task", "grant", "principal", "trace", "handoff_outcomes")
    TASK_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    task: _common_pb2.AgentTask
    grant: _common_pb2.SignedTaskGrant
    principal: _common_pb2.AgentPrincipal
    trace: _common_pb2.TraceContext
    handoff_outcomes: _containers.RepeatedCompositeFieldContainer[_common_pb2.HandoffOutcome]
    def __init__(self, task: _Optional[_Union[_common_pb2.AgentTask, _Mapping]] = ..., grant: _Optional[_Union[_common_pb2.SignedTaskGrant, _Mapping]] = ..., principal: _Optional[_Union[_common_pb2.AgentPrincipal, _Mapping]] = ..., trace: _Optional[_Union[_common_pb2.TraceContext, _Mapping]] = ..., handoff_outcomes: _Optional[_Iterable[_Union[_common_pb2.HandoffOutcome, _Mapping]]] = ...) -> None: ...

class RunTaskResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _common_pb2.AgentResult
    def __init__(self, result: _Optional[_Union[_common_pb2.AgentResult, _Mapping]] = ...) -> None: ...

class DescribeAgentRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: _common_pb2.AgentDefinition
    def __init__(self, agent: _Optional[_Union[_common_pb2.AgentDefinition, _Mapping]] = ...) -> None: ...
