"""The :class:`~specialist_svc.rules.ModelPort` over gRPC: ModelService.Complete with the task's grant.

One client serves one task, like the capability client: the same grant,
principal, trace ids and deadline (less a small reserve). It adds up what the
task's calls used (:attr:`GrpcModelClient.usage`, reported with the result as
``AgentResult.model_usage``), remembers a call refused because a model budget
was exhausted (``usage.exhausted_reason``: the supervisor applies the tenant's
policy), and makes no call once the task's RunTask has ended.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import struct_pb2

from agentmesh import errors
from agentmesh.structs import plain_struct
from agentmesh.v1 import common_pb2
from agentmesh.v1 import model_service_pb2 as model_pb2
from agentmesh.v1 import model_service_pb2_grpc as model_grpc
from specialist_svc.capability_client import Deadline
from specialist_svc.rules import ModelAnswer, ModelInput

__all__ = ["BUDGET_REASONS", "GrpcModelClient"]

BUDGET_REASONS = frozenset({"MAX_TOKENS_EXCEEDED", "MAX_MODEL_CALLS_EXCEEDED", "MAX_MODEL_COST_EXCEEDED"})
"""The refusals of an exhausted model budget."""


class GrpcModelClient:
    """Calls ``ModelService.Complete`` for one task. Thread-safe."""

    def __init__(self, stub: model_grpc.ModelServiceStub, *, grant: common_pb2.SignedTaskGrant,
                 principal: common_pb2.AgentPrincipal, trace: common_pb2.TraceContext, deadline: Deadline,
                 is_active: Callable[[], bool] = lambda: True) -> None:
        self._stub = stub
        self._grant = grant
        self._principal = principal
        self._trace = trace
        self._deadline = deadline
        self._is_active = is_active
        self._lock = threading.Lock()
        self._usage = common_pb2.ModelUsage()
        self._versions: list[str] = []

    @property
    def usage(self) -> common_pb2.ModelUsage:
        """What this task's calls used so far (failed ones included), and a budget refusal if there was one."""
        with self._lock:
            out = common_pb2.ModelUsage()
            out.CopyFrom(self._usage)
            return out

    @property
    def model_versions(self) -> list[str]:
        """The versions of the models that answered, in order of first use."""
        with self._lock:
            return list(self._versions)

    def _add(self, usage: common_pb2.ModelUsage) -> None:
        with self._lock:
            self._usage.prompt_tokens += usage.prompt_tokens
            self._usage.completion_tokens += usage.completion_tokens
            self._usage.calls += usage.calls
            self._usage.cost += usage.cost
            for m in usage.models:
                if m not in self._usage.models:
                    self._usage.models.append(m)

    def complete(self, prompt_id: str, parameters: Mapping[str, Any], data: Sequence[ModelInput]) -> ModelAnswer:
        """One model call (see :class:`specialist_svc.rules.ModelPort`); raises the typed MeshError."""
        if not self._is_active():
            raise errors.Aborted(f"the task was cancelled or its caller is gone; {prompt_id} was not asked",
                                 reason="TASK_CANCELLED")
        timeout = self._deadline.call_timeout()
        if timeout is not None and timeout <= 0:
            raise errors.DeadlineExceeded(f"no time left to ask {prompt_id}", reason="TASK_DEADLINE_EXCEEDED")
        params = struct_pb2.Struct()
        params.update(dict(parameters))
        request = model_pb2.CompleteRequest(
            grant=self._grant, principal=self._principal, prompt_id=prompt_id, parameters=params,
            data=[model_pb2.ModelData(name=d.name, text=d.text, source=d.source) for d in data], trace=self._trace)
        try:
            response: model_pb2.CompleteResponse = self._stub.Complete(request, timeout=timeout)
        except grpc.RpcError as err:
            failure = errors.from_rpc_error(err)
            meta = failure.metadata
            if "calls" in meta:  # attempts were made and charged before it failed
                with self._lock:
                    self._usage.calls += int(meta.get("calls", "0") or 0)
                    self._usage.cost += float(meta.get("cost", "0") or 0)
                    self._usage.prompt_tokens += int(meta.get("prompt_tokens", "0") or 0)
                    self._usage.completion_tokens += int(meta.get("completion_tokens", "0") or 0)
            if isinstance(failure, errors.ResourceExhausted) and failure.reason in BUDGET_REASONS:
                with self._lock:
                    self._usage.exhausted_reason = self._usage.exhausted_reason or failure.reason
            raise failure from err
        self._add(response.usage)
        with self._lock:
            if response.model_version and response.model_version not in self._versions:
                self._versions.append(response.model_version)
        return ModelAnswer(answer=plain_struct(response.answer), call_id=response.call_id,
                           model_id=response.model_id, model_version=response.model_version, prompt=response.prompt,
                           answer_digest=response.answer_digest)
