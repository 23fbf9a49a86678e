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

class ModelData(_message.Message):
    __slots__ = ("name", "text", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    text: str
    source: str
    def __init__(self, name: _Optional[str] = ..., text: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("grant", "principal", "prompt_id", "parameters", "data", "trace")
    GRANT_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_ID_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    grant: _common_pb2.SignedTaskGrant
    principal: _common_pb2.AgentPrincipal
    prompt_id: str
    parameters: _struct_pb2.Struct
    data: _containers.RepeatedCompositeFieldContainer[ModelData]
    trace: _common_pb2.TraceContext
    def __init__(self, grant: _Optional[_Union[_common_pb2.SignedTaskGrant, _Mapping]] = ..., principal: _Optional[_Union[_common_pb2.AgentPrincipal, _Mapping]] = ..., prompt_id: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., data: _Optional[_Iterable[_Union[ModelData, _Mapping]]] = ..., trace: _Optional[_Union[_common_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class CompleteResponse(_message.Message):
    __slots__ = ("call_id", "answer", "model_id", "model_version", "usage", "finish_reason", "latency_ms", "route", "prompt_digest", "answer_digest", "prompt")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    ANSWER_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    answer: _struct_pb2.Struct
    model_id: str
    model_version: str
    usage: _common_pb2.ModelUsage
    finish_reason: str
    latency_ms: int
    route: _common_pb2.ModelRoute
    prompt_digest: str
    answer_digest: str
    prompt: str
    def __init__(self, call_id: _Optional[str] = ..., answer: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., model_id: _Optional[str] = ..., model_version: _Optional[str] = ..., usage: _Optional[_Union[_common_pb2.ModelUsage, _Mapping]] = ..., finish_reason: _Optional[str] = ..., latency_ms: _Optional[int] = ..., route: _Optional[_Union[_common_pb2.ModelRoute, _Mapping]] = ..., prompt_digest: _Optional[str] = ..., answer_digest: _Optional[str] = ..., prompt: _Optional[str] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("model_id", "backend_model", "url", "context_tokens", "max_output_tokens", "price_input_per_1k", "price_output_per_1k", "latency_ms", "quality", "availability")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_MODEL_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PRICE_INPUT_PER_1K_FIELD_NUMBER: _ClassVar[int]
    PRICE_OUTPUT_PER_1K_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    AVAILABILITY_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    backend_model: str
    url: str
    context_tokens: int
    max_output_tokens: int
    price_input_per_1k: float
    price_output_per_1k: float
    latency_ms: float
    quality: int
    availability: str
    def __init__(self, model_id: _Optional[str] = ..., backend_model: _Optional[str] = ..., url: _Optional[str] = ..., context_tokens: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., price_input_per_1k: _Optional[float] = ..., price_output_per_1k: _Optional[float] = ..., latency_ms: _Optional[float] = ..., quality: _Optional[int] = ..., availability: _Optional[str] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class ModelServiceRevokeExecutionRequest(_message.Message):
    __slots__ = ("execution_id", "reason", "issued_before")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ISSUED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    reason: str
    issued_before: _timestamp_pb2.Timestamp
    def __init__(self, execution_id: _Optional[str] = ..., reason: _Optional[str] = ..., issued_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ModelServiceRevokeExecutionResponse(_message.Message):
    __slots__ = ("execution_id", "revoked_at")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    revoked_at: _timestamp_pb2.Timestamp
    def __init__(self, execution_id: _Optional[str] = ..., revoked_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
