"""PolicyService and TenantService over gRPC: unpack requests, call the engine or the tenant directory.

Thin by design: every rule lives in Cedar policies and data, every check of a
request in the engine (and, for tenants, in policy_svc.tenants). Authorize is
not audited here — the capability runtime records each decision it acts on,
durably, with the delegation chain — but every kill-switch and tenant change is.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh import errors, transport
from agentmesh.audit_client import AuditRecorder
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as pb
from agentmesh.v1 import policy_service_pb2_grpc as pb_grpc
from agentmesh.v1 import tenant_service_pb2 as tenant_pb2
from agentmesh.v1 import tenant_service_pb2_grpc as tenant_grpc
from policy_svc import model
from policy_svc.engine import PolicyEngine
from policy_svc.errors import InvalidRequestError, KillSwitchStoreError, PolicyError
from policy_svc.kill_switches import KillSwitchStore
from policy_svc.tenants import AdministrationDenied, TenantDirectory, TenantNotConfigured

log = logging.getLogger(__name__)

MAX_BATCH = 64
"""Most requests one AuthorizeBatch decides."""

AgentCapabilities = Callable[[str], tuple[str, ...]]
AgentKnowledgeScopes = Callable[[str], tuple[str, ...]]
AgentRiskProfiles = Callable[[str], "model.RiskProfile | None"]


def _no_scopes(agent_id: str) -> tuple[str, ...]:
    return ()


def _no_profile(agent_id: str) -> model.RiskProfile | None:
    return None


def _risk(profile: common_pb2.RiskProfile) -> model.RiskProfile:
    return model.RiskProfile(_enum(model.RiskLevel, common_pb2.RiskLevel, profile.max_risk, "RISK_LEVEL_"),
                             profile.can_mutate, profile.can_external_write, profile.can_bulk_operate)


@functools.cache
def _enum(enum_cls: type[Any], proto_enum: Any, value: int, prefix: str) -> Any:
    """The engine's member for a wire enum value (a pure function of its arguments: remembered)."""
    name = proto_enum.Name(value).removeprefix(prefix)
    return enum_cls[name]


def to_request(req: pb.AuthorizeRequest, agent_capabilities: AgentCapabilities,
               agent_knowledge_scopes: AgentKnowledgeScopes = _no_scopes,
               agent_risk_profiles: AgentRiskProfiles = _no_profile) -> model.AuthorizationRequest:
    """Maps the wire request to the engine's request; registered capabilities and knowledge scopes come from
    the registry, never from the request. The agent's declared risk profile is the one its grant carries
    (signed by the supervisor for the version that runs), else the registry's."""
    user = None
    if req.HasField("user"):
        u = req.user
        user = model.UserContext(u.tenant_id, u.user_id, u.session_id, u.conversation_id, tuple(u.roles),
                                 u.assertion_digest)
    agent = None
    if req.HasField("agent"):
        a = req.agent
        agent = model.AgentPrincipal(a.agent_id, a.agent_version, a.execution_id, a.parent_agent_id,
                                     tuple(a.delegation_chain), agent_capabilities(a.agent_id),
                                     agent_knowledge_scopes(a.agent_id))
    resource = None
    if req.HasField("resource"):
        resource = model.ResourceRef(req.resource.type, req.resource.id, req.resource.tenant_id)
    c = req.context
    risk = _risk(c.risk_profile)
    declared = _risk(c.agent_risk_profile) if c.HasField("agent_risk_profile") \
        else agent_risk_profiles(req.agent.agent_id) if req.HasField("agent") else None
    return model.AuthorizationRequest(
        user=user,
        actor_type=_enum(model.ActorType, common_pb2.ActorType, req.actor_type, "ACTOR_TYPE_"),
        system_actor=req.system_actor,
        agent=agent,
        delegation_depth=req.delegation_depth,
        capability_id=req.capability_id,
        capability_version=req.capability_version,
        resource=resource,
        context=model.OperationContext(c.confirmation_given, c.human_approval_id, c.human_approver_id, risk,
                                       c.override_reason, c.subject_requester_id, c.model_fallback, declared),
        operation=_enum(model.OperationKind, pb.OperationKind, req.operation, "OPERATION_KIND_"),
    )


def to_decision(decision: model.Decision) -> pb.AuthorizeResponse:
    """Maps the engine's decision to the wire response."""
    return pb.AuthorizeResponse(
        decision=common_pb2.PolicyDecision(
            decision_id=decision.decision_id,
            effect=f"POLICY_EFFECT_{decision.effect.value}",
            reason_codes=list(decision.reason_codes),
            policy_version=decision.policy_version,
        ),
        explanation=decision.explanation,
    )


def _switch(s: model.KillSwitch) -> pb.KillSwitch:
    ts = Timestamp()
    ts.FromDatetime(s.changed_at)
    return pb.KillSwitch(scope=f"KILL_SWITCH_SCOPE_{s.scope.value}", target=s.target,
                         enabled=s.enabled, reason=s.reason, changed_by=s.changed_by, changed_at=ts)


ERRORS: errors.ErrorTable = [
    (InvalidRequestError, errors.InvalidArgument),
    (KillSwitchStoreError, errors.Unavailable),
    (TenantNotConfigured, errors.NotFound),
    (AdministrationDenied, errors.PermissionDenied),
]
"""Policy-domain errors and their gRPC statuses; a decision is never an error."""


def _mesh_error(err: PolicyError) -> errors.MeshError:
    return errors.translate(err, ERRORS)


class PolicyServicer(pb_grpc.PolicyServiceServicer):
    """The gRPC face of the policy engine.

    The registration lookups (``agent_capabilities`` and the others) must answer the same for the servicer's
    lifetime (they are read from the manifests once): a request is remembered by its wire bytes, under this
    servicer's own prefix (another servicer of the same engine may have other registrations).
    """

    def __init__(self, engine: PolicyEngine, switches: KillSwitchStore, agent_capabilities: AgentCapabilities,
                 audit: AuditRecorder | None, agent_knowledge_scopes: AgentKnowledgeScopes = _no_scopes,
                 agent_risk_profiles: AgentRiskProfiles = _no_profile) -> None:
        self._engine = engine
        self._agent_risk_profiles = agent_risk_profiles
        self._switches = switches
        self._agent_capabilities = agent_capabilities
        self._agent_knowledge_scopes = agent_knowledge_scopes
        self._audit = audit
        self._remembered_as = uuid.uuid4().bytes

    def Authorize(self, request: pb.AuthorizeRequest, context: grpc.ServicerContext) -> pb.AuthorizeResponse:
        return self._decide(request, self._active_switches())

    def AuthorizeBatch(self, request: pb.AuthorizeBatchRequest,
                       context: grpc.ServicerContext) -> pb.AuthorizeBatchResponse:
        if not request.requests:
            raise errors.InvalidArgument("requests is empty", reason="MISSING_FIELD", metadata={"field": "requests"})
        if len(request.requests) > MAX_BATCH:
            raise errors.InvalidArgument(f"at most {MAX_BATCH} requests in one batch", reason="FIELD_TOO_LONG",
                                         metadata={"field": "requests", "max": str(MAX_BATCH), "unit": "items"})
        active = self._active_switches()
        results = []
        for one in request.requests:
            try:
                results.append(pb.AuthorizeResult(response=self._decide(one, active)))
            except errors.MeshError as err:
                results.append(pb.AuthorizeResult(error=err.to_status()))
        return pb.AuthorizeBatchResponse(results=results)

    def _active_switches(self) -> frozenset[str]:
        # Reading the switches can fail; then there is no decision at all (never an ALLOW).
        try:
            return self._switches.active()
        except PolicyError as err:
            raise _mesh_error(err) from err

    def _decide(self, request: pb.AuthorizeRequest, active: frozenset[str]) -> pb.AuthorizeResponse:
        # The wire bytes are the request's exact key: what it maps to (with this servicer's registrations,
        # read once) is a function of them, so a request seen before is answered without being mapped again.
        key = self._remembered_as + request.SerializeToString(deterministic=True)
        try:
            decision = self._engine.remembered(key, kill_switches=active) or self._engine.authorize(
                to_request(request, self._agent_capabilities, self._agent_knowledge_scopes,
                           self._agent_risk_profiles), kill_switches=active, remember_as=key)
        except PolicyError as err:
            raise _mesh_error(err) from err
        return to_decision(decision)

    def SetKillSwitch(
        self, request: pb.SetKillSwitchRequest, context: grpc.ServicerContext
    ) -> pb.SetKillSwitchResponse:
        operator = transport.caller_id(context)
        try:
            scope = _enum(model.KillSwitchScope, pb.KillSwitchScope, request.scope, "KILL_SWITCH_SCOPE_")
            if scope is model.KillSwitchScope.UNSPECIFIED:
                raise InvalidRequestError.missing("scope")
            switch = self._switches.set(scope, request.target, enabled=request.enabled, reason=request.reason,
                                        changed_by=operator)
        except PolicyError as err:
            raise _mesh_error(err) from err
        if self._audit is not None:
            # The switch is already in force and in the policy database's own
            # history; a failing audit must not hold a safety stop back. The
            # record reaches the log now or, through the outbox, once audit is back.
            try:
                self._audit.record_durably(
                    audit_pb2.AUDIT_EVENT_TYPE_KILL_SWITCH_CHANGED,
                    outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS,
                    reason_codes=[f"scope={scope.value}", f"target={switch.target}",
                                  f"enabled={str(switch.enabled).lower()}", f"reason={switch.reason}",
                                  f"changed_by={operator}"],
                    tenant_id=switch.target if scope is model.KillSwitchScope.TENANT else "",
                    agent_id=switch.target if scope is model.KillSwitchScope.AGENT else "",
                    capability_id=switch.target if scope is model.KillSwitchScope.CAPABILITY else "",
                )
            except errors.MeshError:
                log.exception("kill switch change not recorded in audit nor in the outbox (kept in the policy "
                              "history)")
        return pb.SetKillSwitchResponse(kill_switch=_switch(switch))

    def ListKillSwitches(self, request: pb.ListKillSwitchesRequest,
                         context: grpc.ServicerContext) -> pb.ListKillSwitchesResponse:
        try:
            return pb.ListKillSwitchesResponse(kill_switches=[_switch(s) for s in self._switches.list()])
        except PolicyError as err:
            raise _mesh_error(err) from err

    def GetPolicyInfo(
        self, request: pb.GetPolicyInfoRequest, context: grpc.ServicerContext
    ) -> pb.GetPolicyInfoResponse:
        info = self._engine.info()
        return pb.GetPolicyInfoResponse(policy_version=info.policy_version, policy_ids=list(info.policy_ids),
                                        policy_release=info.policy_release)


class TenantServicer(tenant_grpc.TenantServiceServicer):
    """ApplyTenants, GetTenant, ListTenants over the :class:`~policy_svc.tenants.TenantDirectory`."""

    def __init__(self, directory: TenantDirectory) -> None:
        self._directory = directory

    def ApplyTenants(self, request: tenant_pb2.ApplyTenantsRequest,
                     context: grpc.ServicerContext) -> tenant_pb2.ApplyTenantsResponse:
        try:
            applied, version = self._directory.apply(list(request.tenants), transport.caller_id(context))
        except AdministrationDenied as err:
            raise errors.recorded(_mesh_error(err)) from err  # recorded by the directory, with its decision
        except PolicyError as err:
            raise _mesh_error(err) from err
        return tenant_pb2.ApplyTenantsResponse(
            results=[tenant_pb2.AppliedTenant(tenant=a.tenant, change=a.change) for a in applied],
            policy_version=version)

    def GetTenant(self, request: tenant_pb2.GetTenantRequest,
                  context: grpc.ServicerContext) -> tenant_pb2.GetTenantResponse:
        try:
            return tenant_pb2.GetTenantResponse(tenant=self._directory.get(request.tenant_id))
        except PolicyError as err:
            raise _mesh_error(err) from err

    def ListTenants(self, request: tenant_pb2.ListTenantsRequest,
                    context: grpc.ServicerContext) -> tenant_pb2.ListTenantsResponse:
        return tenant_pb2.ListTenantsResponse(tenants=self._directory.all())
