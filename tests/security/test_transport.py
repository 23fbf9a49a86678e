"""Transport attacks: who may connect, who is an operator, and what a server accepts as a request.

The attacker tries to turn a kill switch on (an operator RPC) with every kind of
certificate; a refused handshake never reaches a servicer, so "nothing happened"
is checked in the policy's own list of switches. Bad input (undecodable bytes,
unknown enum numbers, oversized or NUL ids in the request or in W3C baggage) must
be INVALID_ARGUMENT naming the field, audited, and refused before anything runs.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from agentmesh import grants
from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import model_service_pb2 as model_pb2
from agentmesh.v1 import model_service_pb2_grpc as model_grpc
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2
from agentmesh.v1 import tenant_service_pb2 as tenant_pb2
from agentmesh.v1 import tenant_service_pb2_grpc as tenant_grpc

from .conftest import ANALYSIS, OPERATOR, PLATFORM, RISK, TRAINING, Mesh, new_ca, struct

pytestmark = pytest.mark.integration

LONG_ID = "c" * 1000
"""Far over any id maximum, yet under OpenTelemetry's 4 KiB limit of one baggage entry (so it is delivered)."""


def _switch(target: str) -> policy_pb2.SetKillSwitchRequest:
    return policy_pb2.SetKillSwitchRequest(scope=policy_pb2.KILL_SWITCH_SCOPE_TENANT, target=target, enabled=True,
                                           reason="attack")


def _in_force(mesh: Mesh, target: str) -> bool:
    switches = mesh.policy(OPERATOR).ListKillSwitches(policy_pb2.ListKillSwitchesRequest(), timeout=10)
    return any(s.target == target for s in switches.kill_switches)


def _target() -> str:
    return f"sec-{uuid.uuid4().hex[:10]}"


def _nothing_recorded_for(mesh: Mesh, since: Any, target: str) -> None:
    assert not [r for r in mesh.records(start_time=since)
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_KILL_SWITCH_CHANGED and f"target={target}"
                in r.reason_codes], "a refused caller changed a kill switch"


# ------------------------------------------------------------------ who may connect


def test_plaintext_is_refused_at_the_handshake(mesh: Mesh) -> None:
    target, since = _target(), mesh.marker()
    with grpc.insecure_channel(mesh.addresses["policy"]) as channel:
        got = mesh.refused(lambda: policy_grpc.PolicyServiceStub(channel).SetKillSwitch(_switch(target), timeout=5))
    assert got.code == grpc.StatusCode.UNAVAILABLE, got
    assert not _in_force(mesh, target)
    _nothing_recorded_for(mesh, since, target)


def test_tls_without_a_client_certificate_is_refused(mesh: Mesh) -> None:
    target, since = _target(), mesh.marker()
    creds = grpc.ssl_channel_credentials(root_certificates=mesh.trust_bundle.read_bytes())
    name = "policy.svc.agentmesh.local"
    with grpc.secure_channel(mesh.addresses["policy"], creds,
                             options=[("grpc.ssl_target_name_override", name)]) as channel:
        got = mesh.refused(lambda: policy_grpc.PolicyServiceStub(channel).SetKillSwitch(_switch(target), timeout=5))
    assert got.code == grpc.StatusCode.UNAVAILABLE, got
    assert not _in_force(mesh, target)
    _nothing_recorded_for(mesh, since, target)


def test_operator_certificate_of_a_foreign_ca_is_refused(mesh: Mesh) -> None:
    target, since = _target(), mesh.marker()
    foreign = mesh.minted("foreign-operator", new_ca("attacker CA"), str(OPERATOR))
    got = mesh.refused(lambda: mesh.policy(foreign).SetKillSwitch(_switch(target), timeout=5))
    assert got.code == grpc.StatusCode.UNAVAILABLE, got
    assert not _in_force(mesh, target)
    _nothing_recorded_for(mesh, since, target)


def test_expired_operator_certificate_of_the_mesh_ca_is_refused(mesh: Mesh) -> None:
    target, since = _target(), mesh.marker()
    now = dt.datetime.now(dt.UTC)
    expired = mesh.issue_unchecked("expired-operator", str(OPERATOR), not_before=now - dt.timedelta(hours=3),
                                   validity=dt.timedelta(hours=2))
    got = mesh.refused(lambda: mesh.policy(expired).SetKillSwitch(_switch(target), timeout=5))
    assert got.code == grpc.StatusCode.UNAVAILABLE, got
    assert not _in_force(mesh, target)
    _nothing_recorded_for(mesh, since, target)


def test_operator_leaf_of_a_sub_ca_signed_by_the_mesh_ca_is_refused(mesh: Mesh) -> None:
    """An intermediate signed with the mesh CA key must not issue identities (path length enforced)."""
    target, since = _target(), mesh.marker()
    sub_ca = new_ca("attacker sub-CA", signer=mesh.mesh_ca(), path_length=0)
    leaf = mesh.minted("sub-ca-operator", sub_ca, str(OPERATOR))
    got = mesh.refused(lambda: mesh.policy(leaf).SetKillSwitch(_switch(target), timeout=5))
    assert not _in_force(mesh, target), "a leaf of a sub-CA acted as the operator"
    _nothing_recorded_for(mesh, since, target)
    # Refused at the handshake, or (if the chain is checked after it) as an identity that is not one.
    assert got.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAUTHENTICATED), got
    if got.code == grpc.StatusCode.UNAUTHENTICATED:
        mesh.find_record(reason=got.reason, since=since)


def test_several_uri_sans_give_no_identity(mesh: Mesh) -> None:
    target, since = _target(), mesh.marker()
    two = mesh.issue_unchecked("two-sans", str(PLATFORM), extra_uri_sans=(str(OPERATOR),))
    got = mesh.refused(lambda: mesh.policy(two).SetKillSwitch(_switch(target), timeout=5))
    assert (got.code, got.reason) == (grpc.StatusCode.UNAUTHENTICATED, "NO_PEER_IDENTITY"), got
    assert not _in_force(mesh, target)
    mesh.find_record(reason="NO_PEER_IDENTITY", since=since,
                     where=lambda r: r.recorded_by == "spiffe://agentmesh.local/svc/policy")


@pytest.fixture(scope="module")
def operator_evil(mesh: Mesh) -> Any:
    """``client/operator-evil``, minted with the project's own issuing command (which holds the CA)."""
    return mesh.issue_with_cli("spiffe://agentmesh.local/client/operator-evil")


OPERATOR_RPCS: dict[str, Callable[[Mesh, Any, str], Any]] = {
    "PolicyService/SetKillSwitch": lambda m, who, t: m.policy(who).SetKillSwitch(_switch(t), timeout=10),
    "AuditService/QueryRecords": lambda m, who, t: list(m.audit(who).QueryRecords(
        audit_pb2.QueryRecordsRequest(max_records=1), timeout=10)),
    "AgentRegistryService/SetAgentStatus": lambda m, who, t: m.registry(who).SetAgentStatus(
        reg_pb2.SetAgentStatusRequest(agent_id="risk-agent", status=common_pb2.LIFECYCLE_STATUS_DISABLED,
                                      reason=t), timeout=10),
    "CapabilityService/SetCapabilityStatus": lambda m, who, t: m.capability(who).SetCapabilityStatus(
        cap_pb2.SetCapabilityStatusRequest(capability_id="risk.evaluate",
                                           status=common_pb2.LIFECYCLE_STATUS_DISABLED, reason=t), timeout=10),
}


@pytest.mark.parametrize("rpc", sorted(OPERATOR_RPCS))
def test_a_new_name_minted_with_the_ca_is_not_an_operator(mesh: Mesh, operator_evil: Any, rpc: str) -> None:
    target, since = _target(), mesh.marker()
    try:
        got = mesh.refused(lambda: OPERATOR_RPCS[rpc](mesh, operator_evil, target))
        # Nothing it asked for happened.
        assert not _in_force(mesh, target)
        assert _agent_status(mesh) == common_pb2.LIFECYCLE_STATUS_ACTIVE
        assert _capability_status(mesh) == common_pb2.LIFECYCLE_STATUS_ACTIVE
    finally:
        _restore(mesh)
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CALLER_NOT_ALLOWED"), got
    mesh.find_record(reason="CALLER_NOT_ALLOWED", since=since,
                     caller="spiffe://agentmesh.local/client/operator-evil", contains=[rpc.split("/")[1]])


def _agent_status(mesh: Mesh) -> int:
    agents = mesh.registry(OPERATOR).ListAgents(reg_pb2.ListAgentsRequest(), timeout=10).agents
    return next(a.status for a in agents if a.agent_id == "risk-agent")


def _capability_status(mesh: Mesh) -> int:
    caps = mesh.capability(OPERATOR).ListCapabilities(cap_pb2.ListCapabilitiesRequest(), timeout=10).capabilities
    return next(c.status for c in caps if c.capability_id == "risk.evaluate")


def _restore(mesh: Mesh) -> None:
    """Undoes what an attack that was not refused changed, so later tests see the mesh as it was."""
    if _agent_status(mesh) != common_pb2.LIFECYCLE_STATUS_ACTIVE:
        mesh.registry(OPERATOR).SetAgentStatus(reg_pb2.SetAgentStatusRequest(
            agent_id="risk-agent", status=common_pb2.LIFECYCLE_STATUS_ACTIVE, reason="undo attack"), timeout=10)
    if _capability_status(mesh) != common_pb2.LIFECYCLE_STATUS_ACTIVE:
        mesh.capability(OPERATOR).SetCapabilityStatus(cap_pb2.SetCapabilityStatusRequest(
            capability_id="risk.evaluate", status=common_pb2.LIFECYCLE_STATUS_ACTIVE, reason="undo attack"),
            timeout=10)


# ------------------------------------------------------------------ what a server accepts

UNDECODABLE = b"\x0a\x05ab"
"""Field 1, length-delimited, announcing 5 bytes and giving 2: no message type decodes it."""

RAW_TARGETS = [
    # (server, full method, caller)
    ("supervisor", "/agentmesh.v1.SupervisorService/Analyze", PLATFORM),
    ("supervisor", "/agentmesh.v1.SupervisorService/HandleEvent", PLATFORM),
    ("supervisor", "/agentmesh.v1.DecisionCenterService/SubmitReviewDecision", PLATFORM),
    ("supervisor", "/agentmesh.v1.AgentRegistryService/SetAgentStatus", OPERATOR),
    ("policy", "/agentmesh.v1.PolicyService/Authorize", OPERATOR),
    ("policy", "/agentmesh.v1.PolicyService/SetKillSwitch", OPERATOR),
    ("capability", "/agentmesh.v1.CapabilityService/InvokeCapability", TRAINING),
    ("capability", "/agentmesh.v1.CapabilityService/SetCapabilityStatus", OPERATOR),
    ("audit", "/agentmesh.v1.AuditService/QueryRecords", OPERATOR),
]


@pytest.mark.parametrize("server, method, caller", RAW_TARGETS, ids=[m.rsplit("/", 1)[1] for _, m, _ in RAW_TARGETS])
def test_undecodable_request_bytes_are_invalid_argument(mesh: Mesh, server: str, method: str, caller: Any) -> None:
    since = mesh.marker()
    channel = mesh.channel(server, caller)
    if method.endswith("QueryRecords"):
        call: Any = channel.unary_stream(method, request_serializer=None, response_deserializer=None)
    else:
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    got = mesh.refused(lambda: call(UNDECODABLE, timeout=10))
    assert (got.code, got.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_UNDECODABLE"), got
    mesh.find_record(reason="REQUEST_UNDECODABLE", since=since, caller=str(caller))


ENUM_CASES: dict[str, tuple[str, Any, str]] = {
    # id: (server, call(mesh), field)
    "Authorize.operation": ("policy", lambda m: m.policy(OPERATOR).Authorize(policy_pb2.AuthorizeRequest(
        operation=99, actor_type=common_pb2.ACTOR_TYPE_USER), timeout=10), "operation"),
    "Authorize.actor_type": ("policy", lambda m: m.policy(OPERATOR).Authorize(policy_pb2.AuthorizeRequest(
        operation=policy_pb2.OPERATION_KIND_INVOKE, actor_type=77), timeout=10), "actor_type"),
    "Authorize.risk": ("policy", lambda m: m.policy(OPERATOR).Authorize(policy_pb2.AuthorizeRequest(
        operation=policy_pb2.OPERATION_KIND_INVOKE, context=policy_pb2.OperationContext(
            risk_profile=common_pb2.RiskProfile(max_risk=42))), timeout=10), "context.risk_profile.max_risk"),
    "SetKillSwitch.scope": ("policy", lambda m: m.policy(OPERATOR).SetKillSwitch(policy_pb2.SetKillSwitchRequest(
        scope=99, target="sec-enum", enabled=True, reason="attack"), timeout=10), "scope"),
    "SetCapabilityStatus.status": ("capability", lambda m: m.capability(OPERATOR).SetCapabilityStatus(
        cap_pb2.SetCapabilityStatusRequest(capability_id="risk.evaluate", status=99, reason="attack"), timeout=10),
        "status"),
    "SetAgentStatus.status": ("supervisor", lambda m: m.registry(OPERATOR).SetAgentStatus(
        reg_pb2.SetAgentStatusRequest(agent_id="risk-agent", status=99, reason="attack"), timeout=10), "status"),
    "SubmitReviewDecision.decision": ("supervisor", lambda m: m.center(PLATFORM).SubmitReviewDecision(
        dc_pb2.SubmitReviewDecisionRequest(user_assertion=m.token("bob", "reviewer"), review_id="rev-x",
                                           decision=99, reason="attack"), timeout=10), "decision"),
}


@pytest.mark.parametrize("case", sorted(ENUM_CASES))
def test_unknown_enum_numbers_are_invalid_argument(mesh: Mesh, case: str) -> None:
    _, call, field = ENUM_CASES[case]
    since = mesh.marker()
    got = mesh.refused(lambda: call(mesh))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.INVALID_ARGUMENT, "ENUM_VALUE_UNKNOWN", field), got
    caller = str(PLATFORM) if case.startswith("SubmitReview") else str(OPERATOR)
    mesh.find_record(reason="ENUM_VALUE_UNKNOWN", since=since, caller=caller)
    if case == "SetKillSwitch.scope":
        assert not _in_force(mesh, "sec-enum")


NAN, INF = float("nan"), float("inf")
NOT_RUN = (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME,
           audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED, audit_pb2.AUDIT_EVENT_TYPE_MODEL_CALL)
"""What a refused call must not have led to."""


def _read_with(mesh: Mesh, number: float) -> cap_pb2.InvokeCapabilityRequest:
    return cap_pb2.InvokeCapabilityRequest(
        capability_id="training.getStatus", grant=mesh.grant(TRAINING, ["training.getStatus"], ["worker:W-1001"]),
        input=struct(worker_id="W-1001", filters={"min_hours": [1, number]}))


def _acme_revision(mesh: Mesh) -> int:
    return int(tenant_grpc.TenantServiceStub(mesh.channel("policy", OPERATOR)).GetTenant(
        tenant_pb2.GetTenantRequest(tenant_id="acme"), timeout=10).tenant.revision)


def _not_finite_invoke(mesh: Mesh) -> tuple[Any, Callable[[], Any], str, Callable[[Any], list[Any]]]:
    req = _read_with(mesh, NAN)
    exe = _execution_of(req.grant)
    return (TRAINING, lambda: mesh.capability(TRAINING).InvokeCapability(req, timeout=10), "input",
            lambda since: [r for r in mesh.records(execution_id=exe) if r.event_type in NOT_RUN])


def _not_finite_batch(mesh: Mesh) -> tuple[Any, Callable[[], Any], str, Callable[[Any], list[Any]]]:
    calls = [_read_with(mesh, 1.5), _read_with(mesh, -INF)]
    exes = {_execution_of(c.grant) for c in calls}
    req = cap_pb2.InvokeCapabilitiesRequest(calls=calls)
    return (TRAINING, lambda: mesh.capability(TRAINING).InvokeCapabilities(req, timeout=10), "calls[1].input",
            lambda since: [r for e in exes for r in mesh.records(execution_id=e) if r.event_type in NOT_RUN])


def _not_finite_parameters(mesh: Mesh) -> tuple[Any, Callable[[], Any], str, Callable[[Any], list[Any]]]:
    req = model_pb2.CompleteRequest(prompt_id="risk.summary", parameters=struct(weights={"a": [INF]}))
    return (RISK, lambda: model_grpc.ModelServiceStub(mesh.channel("model", RISK)).Complete(req, timeout=10),
            "parameters", lambda since: [r for r in mesh.records(start_time=since)
                                         if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_MODEL_CALL])


def _not_finite_record(mesh: Mesh) -> tuple[Any, Callable[[], Any], str, Callable[[Any], list[Any]]]:
    probe = f"PROBE_{uuid.uuid4().hex[:8].upper()}"
    req = audit_pb2.AppendRecordRequest(record=audit_pb2.AuditRecord(
        event_type=audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
        confidence=NAN, reason_codes=[probe]))
    return (TRAINING, lambda: mesh.audit(TRAINING).AppendRecord(req, timeout=10), "record.confidence",
            lambda since: [r for r in mesh.records(start_time=since) if probe in r.reason_codes])


def _not_finite_budget(mesh: Mesh) -> tuple[Any, Callable[[], Any], str, Callable[[Any], list[Any]]]:
    user = f"nan-{uuid.uuid4().hex[:8]}"
    req = sup_pb2.AnalyzeRequest(user_assertion=mesh.token(user, "analyst"), tenant_id="acme",
                                 request_text=ANALYSIS.format("WP-10231"))
    req.budget.max_cost = INF
    return (PLATFORM, lambda: mesh.supervisor(PLATFORM).Analyze(req, timeout=10), "budget.max_cost",
            lambda since: [r for r in mesh.records(start_time=since) if r.user_id == user and r.event_type in NOT_RUN])


def _not_finite_tenant(mesh: Mesh) -> tuple[Any, Callable[[], Any], str, Callable[[Any], list[Any]]]:
    tenant = tenant_pb2.TenantDefinition(tenant_id="acme", display_name="attack")
    tenant.limits.max_cost = NAN
    revision = _acme_revision(mesh)
    return (OPERATOR, lambda: tenant_grpc.TenantServiceStub(mesh.channel("policy", OPERATOR)).ApplyTenants(
        tenant_pb2.ApplyTenantsRequest(tenants=[tenant]), timeout=10), "tenants[0].limits.max_cost",
            lambda since: [] if _acme_revision(mesh) == revision else ["acme changed"])


NOT_FINITE_CASES = {
    "InvokeCapability.input": _not_finite_invoke,
    "InvokeCapabilities.calls.input": _not_finite_batch,
    "Complete.parameters": _not_finite_parameters,
    "AppendRecord.record.confidence": _not_finite_record,
    "Analyze.budget.max_cost": _not_finite_budget,
    "ApplyTenants.limits.max_cost": _not_finite_tenant,
}


@pytest.mark.parametrize("case", sorted(NOT_FINITE_CASES))
def test_numbers_that_are_not_finite_are_invalid_argument_and_nothing_runs(mesh: Mesh, case: str) -> None:
    """No JSON, schema or digest has NaN or infinity: every service refuses one at its edge, naming the field that
    holds it (inside a Struct, never a key of it), and records the refusal; nothing the call asked for happens."""
    caller, call, field, happened = NOT_FINITE_CASES[case](mesh)
    since = mesh.marker()
    got = mesh.refused(call)
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.INVALID_ARGUMENT, "FIELD_OUT_OF_RANGE", field), got
    assert "finite" in got.message and not {"min_hours", "weights"} & set(got.message.split()), got
    mesh.find_record(reason="FIELD_OUT_OF_RANGE", since=since, caller=str(caller))
    assert happened(since) == []


# -- caller-supplied ids: length and character set, in the request and in baggage


def _analyze(mesh: Mesh, user: str, *, correlation_id: str = "", metadata: Any = None) -> Any:
    return mesh.supervisor().Analyze(sup_pb2.AnalyzeRequest(
        user_assertion=mesh.token(user, "analyst"), request_text=ANALYSIS.format("WP-10231"), tenant_id="acme",
        correlation_id=correlation_id), metadata=metadata, timeout=60)


def _started_for(mesh: Mesh, since: Any, user: str) -> list[audit_pb2.AuditRecord]:
    return [r for r in mesh.records(start_time=since)
            if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED and r.user_id == user]


@pytest.mark.parametrize("value, reason", [(LONG_ID, "FIELD_TOO_LONG"), ("corr-\x00-evil", "FIELD_INVALID_CHARACTERS"),
                                           ("corr\nERROR forged log line", "FIELD_INVALID_CHARACTERS")],
                         ids=["oversized", "nul", "newline"])
def test_bad_correlation_id_in_analyze_is_refused_before_anything_runs(mesh: Mesh, value: str, reason: str) -> None:
    user, since = f"mallory-{uuid.uuid4().hex[:8]}", mesh.marker()
    got = mesh.refused(lambda: _analyze(mesh, user, correlation_id=value))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.INVALID_ARGUMENT, reason, "correlation_id"), got
    if reason == "FIELD_TOO_LONG":
        assert int(got.metadata["max"]) < len(value)
    assert value not in got.message
    mesh.find_record(reason=reason, since=since, caller=str(PLATFORM))
    assert not _started_for(mesh, since, user), "an analysis started with the refused id"


@pytest.mark.parametrize("entry, reason", [
    (f"agentmesh.correlation_id={LONG_ID}", "FIELD_TOO_LONG"),
    ("agentmesh.correlation_id=corr-%00-evil", "FIELD_INVALID_CHARACTERS"),
    (f"agentmesh.execution_id=exe-{LONG_ID}", "FIELD_TOO_LONG"),
], ids=["oversized-correlation", "nul-correlation", "oversized-execution"])
def test_bad_ids_in_baggage_are_refused_on_the_supervisor(mesh: Mesh, entry: str, reason: str) -> None:
    user, since = f"mallory-{uuid.uuid4().hex[:8]}", mesh.marker()
    got = mesh.refused(lambda: _analyze(mesh, user, metadata=[("baggage", entry)]))
    field = "baggage." + entry.split("=", 1)[0]
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.INVALID_ARGUMENT, reason, field), got
    mesh.find_record(reason=reason, since=since, caller=str(PLATFORM))
    assert not _started_for(mesh, since, user)


def test_bad_ids_in_baggage_are_refused_on_policy_and_capability(mesh: Mesh) -> None:
    bad = [("baggage", f"agentmesh.correlation_id={LONG_ID}")]
    since = mesh.marker()
    got = mesh.refused(lambda: mesh.policy(OPERATOR).Authorize(policy_pb2.AuthorizeRequest(), metadata=bad,
                                                                timeout=10))
    assert (got.code, got.reason, got.field) == (
        grpc.StatusCode.INVALID_ARGUMENT, "FIELD_TOO_LONG", "baggage.agentmesh.correlation_id"), got
    mesh.find_record(reason="FIELD_TOO_LONG", since=since, caller=str(OPERATOR))

    since = mesh.marker()
    grant = mesh.grant(TRAINING, ["training.getStatus"], ["worker:W-1001"])
    got = mesh.refused(lambda: mesh.capability(TRAINING).InvokeCapability(cap_pb2.InvokeCapabilityRequest(
        grant=grant, capability_id="training.getStatus", input=_worker("W-1001")), metadata=bad, timeout=10))
    assert (got.code, got.reason, got.field) == (
        grpc.StatusCode.INVALID_ARGUMENT, "FIELD_TOO_LONG", "baggage.agentmesh.correlation_id"), got
    mesh.find_record(reason="FIELD_TOO_LONG", since=since, caller=str(TRAINING))
    invoked = [r for r in mesh.records(start_time=since) if r.event_type ==
               audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED and r.execution_id == _execution_of(grant)]
    assert not invoked, "the capability ran for a refused request"


def _worker(worker_id: str) -> Any:
    return struct(worker_id=worker_id)


def _execution_of(grant: Any) -> str:
    return grants.decode(grant).execution_id


@pytest.mark.parametrize("value, reason", [(LONG_ID, "FIELD_TOO_LONG"), ("corr-\x00", "FIELD_INVALID_CHARACTERS")],
                         ids=["oversized", "nul"])
def test_bad_trace_ids_in_capability_and_policy_requests_are_refused(mesh: Mesh, value: str, reason: str) -> None:
    since = mesh.marker()
    grant = mesh.grant(TRAINING, ["training.getStatus"], ["worker:W-1001"])
    got = mesh.refused(lambda: mesh.capability(TRAINING).InvokeCapability(cap_pb2.InvokeCapabilityRequest(
        grant=grant, capability_id="training.getStatus", input=_worker("W-1001"),
        trace=common_pb2.TraceContext(correlation_id=value)), timeout=10))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.INVALID_ARGUMENT, reason, "trace.correlation_id"), got
    mesh.find_record(reason=reason, since=since, caller=str(TRAINING))

    since = mesh.marker()
    got = mesh.refused(lambda: mesh.policy(OPERATOR).Authorize(policy_pb2.AuthorizeRequest(
        trace=common_pb2.TraceContext(correlation_id=value)), timeout=10))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.INVALID_ARGUMENT, reason, "trace.correlation_id"), got
    mesh.find_record(reason=reason, since=since, caller=str(OPERATOR))


def _event(event_id: str, correlation_id: str = "") -> sup_pb2.HandleEventRequest:
    return sup_pb2.HandleEventRequest(event_id=event_id, tenant_id="acme", correlation_id=correlation_id,
                                      training_expired=sup_pb2.TrainingExpired(
                                          worker_id="W-1003", training_code="NR-10", expired_on="2026-08-15"))


def test_a_one_megabyte_event_id_is_refused(mesh: Mesh) -> None:
    since = mesh.marker()
    huge = "e" * (1 << 20)
    got = mesh.refused(lambda: mesh.supervisor().HandleEvent(_event(huge), timeout=30))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.INVALID_ARGUMENT, "FIELD_TOO_LONG", "event_id"), got
    assert len(got.message) < 1000 and len(got.details) < 4000, "the refused value came back in the error"
    mesh.find_record(reason="FIELD_TOO_LONG", since=since, caller=str(PLATFORM))
    assert not [r for r in mesh.records(start_time=since)
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED], "the event started an execution"


def test_an_event_refused_for_its_correlation_id_never_ran(mesh: Mesh) -> None:
    event_id, since = f"evt-{uuid.uuid4().hex[:12]}", mesh.marker()
    got = mesh.refused(lambda: mesh.supervisor().HandleEvent(_event(event_id, "corr\x00x"), timeout=30))
    assert (got.code, got.reason, got.field) == (
        grpc.StatusCode.INVALID_ARGUMENT, "FIELD_INVALID_CHARACTERS", "correlation_id"), got
    mesh.find_record(reason="FIELD_INVALID_CHARACTERS", since=since, caller=str(PLATFORM))
    # The same event with a good id is new: the refused one was never claimed nor run.
    again = mesh.supervisor().HandleEvent(_event(event_id, f"corr-{uuid.uuid4().hex[:8]}"), timeout=60)
    assert not again.duplicate


@pytest.mark.parametrize("execution_id, reason", [("exe-\x00", "FIELD_INVALID_CHARACTERS"),
                                                  ("exe-" + LONG_ID, "FIELD_TOO_LONG")], ids=["nul", "oversized"])
def test_bad_execution_ids_are_refused(mesh: Mesh, execution_id: str, reason: str) -> None:
    user, since = f"mallory-{uuid.uuid4().hex[:8]}", mesh.marker()
    got = mesh.refused(lambda: mesh.supervisor().GetExecution(sup_pb2.GetExecutionRequest(
        user_assertion=mesh.token(user, "viewer"), execution_id=execution_id), timeout=10))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.INVALID_ARGUMENT, reason, "execution_id"), got
    mesh.find_record(reason=reason, since=since, caller=str(PLATFORM))
