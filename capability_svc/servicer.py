"""CapabilityService over gRPC: the thin face of the governed invoker and the registry."""

from __future__ import annotations

import logging

import grpc
from google.protobuf import struct_pb2

from agentmesh import errors, telemetry, transport
from agentmesh.audit_client import AuditRecorder
from agentmesh.policy_client import PolicyClient
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2 as pb
from agentmesh.v1 import capability_service_pb2_grpc as pb_grpc
from agentmesh.v1 import common_pb2
from capability_svc import errors as cap_errors
from capability_svc.governance import MAX_BATCH, GovernedInvoker, mesh_error
from capability_svc.knowledge_store import KnowledgeLibrary
from capability_svc.registry import CapabilityEntry, CapabilityRegistry

__all__ = ["CapabilityServicer", "PolicyClient", "definition"]

log = logging.getLogger(__name__)


def definition(entry: CapabilityEntry) -> pb.CapabilityDefinition:
    """A registry entry as the wire message."""
    m = entry.manifest
    inp, out = struct_pb2.Struct(), struct_pb2.Struct()
    inp.update(dict(m.input_schema))
    out.update(dict(m.output_schema))
    return pb.CapabilityDefinition(
        capability_id=m.id, version=str(m.version), description=m.description, domain=m.domain,
        input_schema=inp, output_schema=out, backend=m.backend,
        risk_profile=common_pb2.RiskProfile(
            max_risk=f"RISK_LEVEL_{m.risk_profile.max_risk.value}", can_mutate=m.risk_profile.mutates,
            can_external_write=m.risk_profile.external_write, can_bulk_operate=m.risk_profile.bulk),
        status=f"LIFECYCLE_STATUS_{entry.status.value}",
    )


def _deadline(context: grpc.ServicerContext) -> float | None:
    """The time the call may take: the caller's deadline, minus a little kept back, so that a backend
    timeout is reported as such (with its cause) before the caller gives up."""
    remaining = context.time_remaining()
    return None if remaining is None else remaining - min(0.25, remaining * 0.1)


class CapabilityServicer(pb_grpc.CapabilityServiceServicer):
    """InvokeCapability(ies), ListCapabilities, SetCapabilityStatus, RevokeExecution."""

    def __init__(self, invoker: GovernedInvoker, registry: CapabilityRegistry, audit: AuditRecorder,
                 knowledge: KnowledgeLibrary | None = None) -> None:
        self._knowledge = knowledge
        self._invoker = invoker
        self._registry = registry
        self._audit = audit

    def InvokeCapability(
        self, request: pb.InvokeCapabilityRequest, context: grpc.ServicerContext
    ) -> pb.InvokeCapabilityResponse:
        return self._invoker.invoke(transport.caller_id(context), request, deadline_s=_deadline(context))

    def InvokeCapabilities(
        self, request: pb.InvokeCapabilitiesRequest, context: grpc.ServicerContext
    ) -> pb.InvokeCapabilitiesResponse:
        if not request.calls:
            raise errors.InvalidArgument("calls is empty", reason="MISSING_FIELD", metadata={"field": "calls"})
        if len(request.calls) > MAX_BATCH:
            raise errors.InvalidArgument(f"at most {MAX_BATCH} calls in one InvokeCapabilities",
                                         reason="FIELD_TOO_LONG",
                                         metadata={"field": "calls", "max": str(MAX_BATCH), "unit": "items"})
        contexts = [telemetry.under_traceparent(t) for t in request.traceparents[:len(request.calls)]]
        answers = self._invoker.invoke_all(transport.caller_id(context), request.calls,
                                           deadline_s=_deadline(context), contexts=contexts)
        return pb.InvokeCapabilitiesResponse(results=[
            pb.InvokeCapabilityResult(error=a.to_status()) if isinstance(a, errors.MeshError)
            else pb.InvokeCapabilityResult(response=a) for a in answers])

    def RevokeExecution(
        self, request: pb.RevokeExecutionRequest, context: grpc.ServicerContext
    ) -> pb.RevokeExecutionResponse:
        # Only the supervisor gets here (the caller table).
        return self._invoker.revoke(transport.caller_id(context), request)

    def ListCapabilities(
        self, request: pb.ListCapabilitiesRequest, context: grpc.ServicerContext
    ) -> pb.ListCapabilitiesResponse:
        stores = [self._knowledge.get(scope) for scope in self._knowledge.scopes] if self._knowledge else []
        return pb.ListCapabilitiesResponse(
            capabilities=[definition(e) for e in self._registry.list()],
            knowledge_stores=[pb.KnowledgeStoreInfo(scope=s.scope, release=s.release, version=s.version,
                                                    title=s.title) for s in stores if s is not None])

    def SetCapabilityStatus(
        self, request: pb.SetCapabilityStatusRequest, context: grpc.ServicerContext
    ) -> pb.SetCapabilityStatusResponse:
        operator = transport.caller_id(context)
        if not request.capability_id:
            raise errors.InvalidArgument("capability_id is required", reason="MISSING_FIELD",
                                         metadata={"field": "capability_id"})
        if request.status == common_pb2.LIFECYCLE_STATUS_UNSPECIFIED:
            raise errors.InvalidArgument("status is required", reason="MISSING_FIELD", metadata={"field": "status"})
        if not request.reason.strip():
            raise errors.InvalidArgument("a reason is required", reason="MISSING_FIELD", metadata={"field": "reason"})
        status = common_pb2.LifecycleStatus.Name(request.status)
        try:
            self._registry.set_status(request.capability_id, status, changed_by=operator, reason=request.reason)
            entry = self._registry.get(request.capability_id)
        except cap_errors.CapabilityError as err:
            raise mesh_error(err) from err
        # The status is in force (a safety stop must not wait for audit); its record
        # reaches the log now or, through the outbox, as soon as audit is back.
        try:
            self._audit.record_durably(
                audit_pb2.AUDIT_EVENT_TYPE_STATUS_CHANGED, outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS,
                capability_id=request.capability_id,
                reason_codes=[f"status={status}", f"reason={request.reason}", f"changed_by={operator}"])
        except errors.MeshError:
            # Only when the outbox cannot write either; the registry's own history has the change.
            log.exception("capability status change not recorded in audit nor in the outbox")
        return pb.SetCapabilityStatusResponse(capability=definition(entry))
