"""SpecialistService over gRPC: unpacks a task, runs the agent's rules through a governed capability client.

Thin by design: the rules live in :mod:`specialist_svc.agents`, input and
output checks in :class:`~specialist_svc.agent.SpecialistAgent`, the capability
call in :class:`~specialist_svc.capability_client.GrpcCapabilityClient`. Who
may call (only the supervisor) is the caller table's job, in the transport.

RunTask refuses, before doing anything:

=====================  ==========================  ==========================================
status                 reason                      when
=====================  ==========================  ==========================================
INVALID_ARGUMENT       ``TASK_AGENT_MISMATCH``     the task targets another agent
INVALID_ARGUMENT       ``MISSING_FIELD``           no ``task.task_id``
INVALID_ARGUMENT       ``GRANT_MISSING`` /         no grant / not a TaskGrant
                       ``GRANT_MALFORMED``
PERMISSION_DENIED      ``GRANT_AUDIENCE_MISMATCH`` the grant is for another identity
INVALID_ARGUMENT       ``GRANT_TASK_MISMATCH`` /   the grant is for another task / tenant
                       ``GRANT_TENANT_MISMATCH``
INVALID_ARGUMENT       ``TASK_INPUT_INVALID``      the input breaks the agent's input schema
=====================  ==========================  ==========================================

The grant's signature is verified where it grants something: by the capability
service, on every call. A refused capability call is not an RPC error here but
part of the result (FAILED with ``error_reason``, or UNCERTAINTY).

Each of those refusals is recorded in the audit log (ACCESS_DENIED, DENIED,
reason codes starting with the reason), under this agent's identity, through
the durable outbox: the refusal stands whether or not audit is up.

What the process receives is logged at DEBUG (logger ``specialist_svc.received``; the config's
``log_levels`` sets a process's level): each task's input and each capability answer, as canonical
JSON — the agent's least context, as it arrived, for whoever must check it (PRD §23-25).

A task stops when its call ends: when the supervisor cancels the RunTask (a
cancelled execution), or the call is gone (its deadline passed, the
supervisor died), gRPC ends the server context, and the agent makes no
further capability call — each one is refused locally (``TASK_CANCELLED``)
before it leaves, so the rules wind down at once. The capability service
refuses the grants of a cancelled execution anyway (``GRANT_REVOKED``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc

from agentmesh import errors, grants, telemetry, transport
from agentmesh.audit_client import AuditRecorder
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2_grpc as cap_grpc
from agentmesh.v1 import common_pb2
from agentmesh.v1 import model_service_pb2_grpc as model_grpc
from agentmesh.v1 import specialist_service_pb2 as pb
from agentmesh.v1 import specialist_service_pb2_grpc as pb_grpc
from specialist_svc.agent import SpecialistAgent
from specialist_svc.capability_client import Deadline, GrpcCapabilityClient, principal_for
from specialist_svc.model_client import GrpcModelClient
from specialist_svc.rules import Answered, CapabilityClient

__all__ = ["SpecialistServicer", "StopWhenCallEnds"]

log = logging.getLogger(__name__)
received = logging.getLogger("specialist_svc.received")
"""What arrived at this agent (task inputs, capability answers), at DEBUG only."""


def _json(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


class StopWhenCallEnds:
    """A capability client that makes no call once the task's RunTask has ended (see the module docstring)."""

    def __init__(self, client: CapabilityClient, is_active: Callable[[], bool]) -> None:
        self._client = client
        self._is_active = is_active
        self.stopped = False
        """Whether a call was refused because the task had ended."""

    def call(self, capability_id: str, input: Mapping[str, Any], idempotency_key: str | None = None
             ) -> tuple[dict[str, Any], list[common_pb2.EvidenceReference]]:
        """The call, unless the task was cancelled (or its caller is gone): then Aborted ``TASK_CANCELLED``."""
        if not self._is_active():
            self.stopped = True
            raise errors.Aborted(f"the task was cancelled or its caller is gone; {capability_id} was not called",
                                 reason="TASK_CANCELLED")
        output, evidence = self._client.call(capability_id, input, idempotency_key)
        if received.isEnabledFor(logging.DEBUG):
            received.debug("capability %s answered: %s", capability_id, _json(output))
        return output, evidence

    def call_all(self, calls: Sequence[tuple[str, Mapping[str, Any]]], *,
                 traceparents: Sequence[str] = ()) -> list[Answered | errors.MeshError]:
        """The calls, unless the task was cancelled (or its caller is gone): then each is Aborted ``TASK_CANCELLED``."""
        if not self._is_active():
            self.stopped = True
            return [errors.Aborted(f"the task was cancelled or its caller is gone; {capability_id} was not called",
                                   reason="TASK_CANCELLED") for capability_id, _ in calls]
        answers = self._client.call_all(calls, traceparents=traceparents)
        if received.isEnabledFor(logging.DEBUG):
            for (capability_id, _), answer in zip(calls, answers, strict=True):
                if not isinstance(answer, errors.MeshError):
                    received.debug("capability %s answered: %s", capability_id, _json(answer[0]))
        return answers


def check_grant(agent: SpecialistAgent, task: common_pb2.AgentTask,
                signed: common_pb2.SignedTaskGrant) -> common_pb2.TaskGrant:
    """The grant's body, if it is addressed to this agent for this task (signature not checked here).

    Raises:
        agentmesh.errors.InvalidArgument, agentmesh.errors.PermissionDenied: see the module docstring.
    """
    if not signed.grant:
        raise errors.InvalidArgument("a task grant is required", reason="GRANT_MISSING", field="grant")
    try:
        grant = grants.decode(signed)
    except grants.GrantInvalid as err:
        raise errors.InvalidArgument(str(err), reason="GRANT_MALFORMED", field="grant") from err
    if grant.audience != agent.spiffe_id:
        raise errors.PermissionDenied("the grant was issued to another identity", reason="GRANT_AUDIENCE_MISMATCH",
                                      field="grant")
    if grant.task_id != task.task_id:
        raise errors.InvalidArgument("the grant is for another task", reason="GRANT_TASK_MISMATCH", field="grant")
    if task.tenant_id and grant.tenant_id != task.tenant_id:
        raise errors.InvalidArgument("the grant is for another tenant", reason="GRANT_TENANT_MISMATCH",
                                     field="grant")
    return grant


class SpecialistServicer(pb_grpc.SpecialistServiceServicer):
    """RunTask and DescribeAgent for the one agent this process runs."""

    def __init__(self, agent: SpecialistAgent, capability: cap_grpc.CapabilityServiceStub, *,
                 fixed_delay_s: float = 0.0, audit: AuditRecorder | None = None,
                 models: model_grpc.ModelServiceStub | None = None) -> None:
        """Args:
        agent: The agent this process runs.
        capability: A stub on the mTLS channel to the capability service.
        models: A stub on the mTLS channel to the model service, for an agent whose rules
            may ask a model; None runs them without one.
        fixed_delay_s: Sleep this long inside every RunTask before the rules run
            (benchmarks and parallelism tests); cut short if the call ends.
        audit: Records each refusal of a task (durably); None records nothing.
        """
        self._agent = agent
        self._capability = capability
        self._fixed_delay_s = fixed_delay_s
        self._audit = audit
        self._models = models

    def RunTask(self, request: pb.RunTaskRequest, context: grpc.ServicerContext) -> pb.RunTaskResponse:
        try:
            grant = self._admit(request)
        except errors.MeshError as err:
            if self._record_refusal(request, err, transport.caller_id(context)):
                errors.recorded(err)
            raise
        return self._run(request, grant, context)

    def _admit(self, request: pb.RunTaskRequest) -> common_pb2.TaskGrant:
        """The task's grant, if this agent takes the task; raises the refusal otherwise."""
        task = request.task
        if task.target_agent_id != self._agent.agent_id:
            raise errors.InvalidArgument(
                f"this process runs {self._agent.agent_id}, not {task.target_agent_id or '<none>'}",
                reason="TASK_AGENT_MISMATCH", field="task.target_agent_id")
        if not task.task_id:
            raise errors.InvalidArgument("task.task_id is required", reason="MISSING_FIELD", field="task.task_id")
        grant = check_grant(self._agent, task, request.grant)
        data = self._agent.task_input(task)  # refuse a bad input before waiting or calling anything
        if received.isEnabledFor(logging.DEBUG):
            received.debug("task %s received input: %s", task.task_id, _json(data))
        return grant

    def _record_refusal(self, request: pb.RunTaskRequest, err: errors.MeshError, caller: str) -> bool:
        """Records the refusal of a task; False when there is no recorder (then the denial hook records it)."""
        if self._audit is None:
            return False
        task = request.task
        try:
            self._audit.record_durably(
                audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                reason_codes=[err.reason, f"field={err.field or ''}", f"caller={caller}",
                              "method=/agentmesh.v1.SpecialistService/RunTask"],
                agent_id=self._agent.agent_id, task_id=task.task_id, tenant_id=task.tenant_id,
                execution_id=task.execution_id, correlation_id=task.correlation_id)
        except errors.MeshError:
            log.exception("refusal of task %r recorded neither in audit nor in the outbox", task.task_id)
        return True

    def _run(self, request: pb.RunTaskRequest, grant: common_pb2.TaskGrant,
             context: grpc.ServicerContext) -> pb.RunTaskResponse:
        task = request.task
        deadline = Deadline(context.time_remaining())
        if self._fixed_delay_s > 0:
            self._pause(context)

        trace = common_pb2.TraceContext()
        trace.CopyFrom(request.trace)
        trace.execution_id = trace.execution_id or task.execution_id or grant.execution_id
        trace.correlation_id = trace.correlation_id or task.correlation_id
        principal = principal_for(request.principal, request.grant, agent_id=self._agent.agent_id,
                                  agent_version=self._agent.manifest.version,
                                  execution_id=task.execution_id or grant.execution_id)
        grpc_client = GrpcCapabilityClient(self._capability, grant=request.grant, principal=principal, trace=trace,
                                           deadline=deadline)
        client = StopWhenCallEnds(grpc_client, context.is_active)
        model_client = GrpcModelClient(self._models, grant=request.grant, principal=principal, trace=trace,
                                       deadline=deadline, is_active=context.is_active) \
            if self._models is not None and self._agent.rules.models else None
        attributes: dict[str, Any] = {"agentmesh.agent_id": self._agent.agent_id, "agentmesh.task_id": task.task_id}
        with telemetry.mesh_ids(execution_id=trace.execution_id, correlation_id=trace.correlation_id), \
                telemetry.tracer(__name__).start_as_current_span("AgentTask", attributes=attributes):
            result = self._agent.run(task, client, request.handoff_outcomes,
                                     again=len(request.handoff_outcomes) > 0, models=model_client)
        if model_client is not None:
            usage = model_client.usage
            if usage.calls or usage.exhausted_reason:
                result.model_usage.CopyFrom(usage)
            result.versions.model_version = ",".join(model_client.model_versions)
        if client.stopped:
            log.info("task %s stopped: its call ended (cancelled, or the supervisor is gone)", task.task_id)
        result.versions.policy_version = ",".join(grpc_client.policy_versions)
        # The knowledge version of the task (PRD §58): what the capability service said each read read.
        result.versions.knowledge_version = ",".join(grpc_client.knowledge_versions)
        return pb.RunTaskResponse(result=result)

    def DescribeAgent(
        self, request: pb.DescribeAgentRequest, context: grpc.ServicerContext
    ) -> pb.DescribeAgentResponse:
        return pb.DescribeAgentResponse(agent=self._agent.definition())

    def _pause(self, context: grpc.ServicerContext) -> None:
        ended = threading.Event()
        if context.add_callback(ended.set):  # False: the call has ended already
            ended.wait(self._fixed_delay_s)
