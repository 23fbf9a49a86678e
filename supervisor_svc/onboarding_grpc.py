"""The gRPC side of onboarding: policy and audit adapters, proto conversion (see :mod:`supervisor_svc.onboarding`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf import json_format, timestamp_pb2

from agentmesh import assertion
from agentmesh.audit_client import AuditRecorder
from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.vocabulary import LifecycleStatus, RiskLevel
from supervisor_svc.onboarding import AgentVersionRecord, CapabilityFacts, Onboarding, Transition
from supervisor_svc.recording import governing, narrative
from supervisor_svc.registry import AgentEntry

__all__ = ["audit_adapter", "capability_facts", "policy_adapter", "to_proto"]

_OPERATIONS = {"MANAGE_AGENT": policy_pb2.OPERATION_KIND_MANAGE_AGENT,
               "APPROVE_AGENT": policy_pb2.OPERATION_KIND_APPROVE_AGENT}


def policy_adapter(
    authorize: Callable[[policy_pb2.AuthorizeRequest], policy_pb2.AuthorizeResponse],
) -> Callable[[str, assertion.UserIdentity, str, str], tuple[bool, Sequence[str], str]]:
    """The onboarding's ``authorize`` over ``PolicyService.Authorize``: ALLOW only, anything else refused."""

    def ask(operation: str, user: assertion.UserIdentity, key: str, subject: str) -> tuple[bool, Sequence[str], str]:
        request = policy_pb2.AuthorizeRequest(
            user=user.to_context(), actor_type=common_pb2.ACTOR_TYPE_USER,
            agent=common_pb2.AgentPrincipal(agent_id="supervisor", delegation_chain=[
                f"user:{user.tenant_id}/{user.user_id}", "svc:supervisor"]),
            delegation_depth=1,
            resource=policy_pb2.ResourceRef(type="AgentVersion", id=key, tenant_id=user.tenant_id),
            context=policy_pb2.OperationContext(subject_requester_id=subject),
            operation=_OPERATIONS[operation])
        decision = authorize(request).decision
        return decision.effect == common_pb2.POLICY_EFFECT_ALLOW, list(decision.reason_codes), decision.decision_id

    return ask


def audit_adapter(audit: AuditRecorder) -> Callable[..., None]:
    """The onboarding's ``audit``: with ``first``, the record that lets a change take effect (durable in the
    log, or UNAVAILABLE ``AUDIT_UNAVAILABLE`` and the change does not happen); otherwise a durable narrative
    record (a refusal, what did not happen: kept in the outbox when audit is away)."""

    def record(event: str, *, outcome: str, first: bool = False, **fields: Any) -> None:
        write = governing if first else narrative
        write(audit, getattr(audit_pb2, f"AUDIT_EVENT_TYPE_{event}"),
              outcome=getattr(audit_pb2, f"AUDIT_OUTCOME_{outcome}"), **fields)

    return record


def capability_facts(caps: Sequence[cap_pb2.CapabilityDefinition]) -> list[CapabilityFacts]:
    """The Release Manager's view of the capability registry."""
    out = []
    for c in caps:
        try:
            status = LifecycleStatus.from_proto(c.status)
        except ValueError:
            status = LifecycleStatus.RETIRED  # not understood: not usable (fail closed)
        risk = str(common_pb2.RiskLevel.Name(c.risk_profile.max_risk)).removeprefix("RISK_LEVEL_")
        out.append(CapabilityFacts(
            c.capability_id, c.version, status,
            RiskLevel(risk) if risk in RiskLevel.__members__ else RiskLevel.CRITICAL,
            c.risk_profile.can_mutate, c.risk_profile.can_external_write, c.risk_profile.can_bulk_operate))
    return out


def _transition(t: Transition) -> reg_pb2.AgentVersionTransition:
    at = timestamp_pb2.Timestamp()
    if t.changed_at:
        at.FromJsonString(t.changed_at)
    return reg_pb2.AgentVersionTransition(from_status=t.from_status.to_proto(), to_status=t.to_status.to_proto(),
                                          reason=t.reason, changed_by=t.changed_by, changed_at=at)


def to_proto(record: AgentVersionRecord, onboarding: Onboarding | None = None) -> reg_pb2.AgentVersion:
    """The ``AgentVersion`` message (with its latest evaluation when ``onboarding`` is given)."""
    definition = AgentEntry(record.manifest, record.status, "", "", "").to_proto()
    latest = onboarding.latest_evaluation(record.agent_id, record.version) if onboarding else None
    return reg_pb2.AgentVersion(
        evaluation=reg_pb2.AgentEvaluation.FromString(latest[0]) if latest else None,
        agent_id=record.agent_id, version=record.version, status=record.status.to_proto(),
        endpoint=record.endpoint, spiffe_id=record.spiffe_id, registered_by=record.registered_by,
        definition=definition, history=[_transition(t) for t in record.history], problems=list(record.problems))


def manifest_dict(message: Any) -> dict[str, Any]:
    """A ``Struct`` manifest as plain data (whole numbers stay numbers)."""
    data: dict[str, Any] = json_format.MessageToDict(message)
    return data
