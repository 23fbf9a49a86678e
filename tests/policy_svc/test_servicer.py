"""The servicer's mapping between the wire messages and the engine's model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentmesh import errors
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as pb
from policy_svc import model
from policy_svc.agent_registrations import AgentRegistrationError, AgentRegistrations
from policy_svc.engine import PolicyEngine
from policy_svc.kill_switches import KillSwitchStore
from policy_svc.servicer import PolicyServicer, to_request

# Only the acting agents' registrations matter; the supervisor has none.
REGISTRATIONS = {"permit-agent": ("workPermit.get", "workPermit.release")}


def _capabilities(agent_id: str) -> tuple[str, ...]:
    return REGISTRATIONS.get(agent_id, ())


def _review(**context: Any) -> pb.AuthorizeRequest:
    """A review as the supervisor's Decision Center sends it."""
    return pb.AuthorizeRequest(
        user=common_pb2.UserContext(tenant_id="acme", user_id="carol", roles=["reviewer"]),
        actor_type=common_pb2.ACTOR_TYPE_USER,
        agent=common_pb2.AgentPrincipal(agent_id="supervisor", delegation_chain=["user:acme/carol", "svc:supervisor"]),
        delegation_depth=1,
        capability_id="workPermit.release",
        resource=pb.ResourceRef(type="WorkPermit", id="WP-10233", tenant_id="acme"),
        context=pb.OperationContext(subject_requester_id="alice", **context),
        operation=pb.OPERATION_KIND_REVIEW,
    )


def test_review_maps_operation_and_subject_requester() -> None:
    request = to_request(_review(), _capabilities)
    assert request.operation is model.OperationKind.REVIEW
    assert request.context.subject_requester_id == "alice"
    assert request.agent is not None
    assert request.agent.capabilities == ()
    assert request.resource == model.ResourceRef(type="WorkPermit", id="WP-10233", tenant_id="acme")


def test_override_carries_reason_and_subject_requester() -> None:
    wire = _review(override_reason="verified on site")
    wire.operation = pb.OPERATION_KIND_OVERRIDE
    request = to_request(wire, _capabilities)
    assert request.operation is model.OperationKind.OVERRIDE
    assert request.context.override_reason == "verified on site"
    assert request.context.subject_requester_id == "alice"


@pytest.mark.parametrize("name", pb.OperationKind.keys())
def test_every_wire_operation_has_a_model_member(name: str) -> None:
    wire = _review()
    wire.operation = pb.OperationKind.Value(name)
    assert to_request(wire, _capabilities).operation.name == name.removeprefix("OPERATION_KIND_")


@pytest.fixture
def servicer(engine: PolicyEngine, tmp_path: Path) -> Iterator[PolicyServicer]:
    with KillSwitchStore(tmp_path / "policy.db") as store:
        yield PolicyServicer(engine, store, _capabilities, audit=None)


def _reasons(servicer: PolicyServicer, request: pb.AuthorizeRequest) -> tuple[str, list[str]]:
    # Authorize never reads its gRPC context.
    response = servicer.Authorize(request, context=None)  # type: ignore[arg-type]
    decision = response.decision
    return common_pb2.PolicyEffect.Name(decision.effect), list(decision.reason_codes)


def test_review_over_the_servicer(servicer: PolicyServicer) -> None:
    assert _reasons(servicer, _review()) == ("POLICY_EFFECT_ALLOW", ["reviewer.review"])


def test_own_request_review_over_the_servicer(servicer: PolicyServicer) -> None:
    wire = _review()
    wire.context.subject_requester_id = "carol"
    assert _reasons(servicer, wire) == ("POLICY_EFFECT_DENY", ["review.own_request"])


def _on_execution(operation: int, *, user_id: str = "carol", roles: tuple[str, ...] = ("viewer",),
                  requester: str = "alice") -> pb.AuthorizeRequest:
    """A read or cancel of an execution as the supervisor sends it: no capability, the execution as resource."""
    return pb.AuthorizeRequest(
        user=common_pb2.UserContext(tenant_id="acme", user_id=user_id, roles=list(roles)),
        actor_type=common_pb2.ACTOR_TYPE_USER,
        agent=common_pb2.AgentPrincipal(agent_id="supervisor",
                                        delegation_chain=[f"user:acme/{user_id}", "svc:supervisor"]),
        delegation_depth=1,
        resource=pb.ResourceRef(type="Execution", id="ex-1", tenant_id="acme"),
        context=pb.OperationContext(subject_requester_id=requester),
        operation=operation,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(("wire", "member"), [
    (pb.OPERATION_KIND_READ_EXECUTION, model.OperationKind.READ_EXECUTION),
    (pb.OPERATION_KIND_CANCEL_EXECUTION, model.OperationKind.CANCEL_EXECUTION),
])
def test_execution_operations_map_to_the_model(wire: int, member: model.OperationKind) -> None:
    request = to_request(_on_execution(wire), _capabilities)
    assert request.operation is member
    assert request.capability_id == ""
    assert request.resource == model.ResourceRef(type="Execution", id="ex-1", tenant_id="acme")
    assert request.context.subject_requester_id == "alice"


@pytest.mark.parametrize(("request_kwargs", "expected"), [
    ({"user_id": "alice"}, ("POLICY_EFFECT_ALLOW", ["execution.read_own"])),
    ({}, ("POLICY_EFFECT_DENY", ["execution.not_requester_or_reader"])),
    ({"roles": ("operator",)}, ("POLICY_EFFECT_ALLOW", ["execution.read_privileged"])),
])
def test_read_execution_over_the_servicer(servicer: PolicyServicer, request_kwargs: dict[str, Any],
                                          expected: tuple[str, list[str]]) -> None:
    assert _reasons(servicer, _on_execution(pb.OPERATION_KIND_READ_EXECUTION, **request_kwargs)) == expected


@pytest.mark.parametrize(("request_kwargs", "expected"), [
    ({"user_id": "alice"}, ("POLICY_EFFECT_ALLOW", ["execution.cancel_own"])),
    ({"roles": ("reviewer",)}, ("POLICY_EFFECT_DENY", ["execution.not_requester_or_canceller"])),
    ({"roles": ("admin",)}, ("POLICY_EFFECT_ALLOW", ["execution.cancel_privileged"])),
])
def test_cancel_execution_over_the_servicer(servicer: PolicyServicer, request_kwargs: dict[str, Any],
                                            expected: tuple[str, list[str]]) -> None:
    assert _reasons(servicer, _on_execution(pb.OPERATION_KIND_CANCEL_EXECUTION, **request_kwargs)) == expected


def _knowledge_read(scope: str = "compliance.nr", agent: str = "compliance-agent") -> pb.AuthorizeRequest:
    """A knowledge read as the capability service sends it: the scope is the resource."""
    return pb.AuthorizeRequest(
        user=common_pb2.UserContext(tenant_id="acme", user_id="alice", roles=["viewer"]),
        actor_type=common_pb2.ACTOR_TYPE_USER,
        agent=common_pb2.AgentPrincipal(agent_id=agent, delegation_chain=["user:acme/alice", "svc:supervisor",
                                                                          f"agent:{agent}"]),
        delegation_depth=2, capability_id="knowledge.search",
        resource=pb.ResourceRef(type="KnowledgeScope", id=scope, tenant_id="acme"),
        context=pb.OperationContext(risk_profile=common_pb2.RiskProfile(max_risk=common_pb2.RISK_LEVEL_LOW)),
        operation=pb.OPERATION_KIND_INVOKE,
    )


def _knowledge_servicer(engine: PolicyEngine, store: KillSwitchStore) -> PolicyServicer:
    registrations = AgentRegistrations.load()
    return PolicyServicer(engine, store, registrations.capabilities, None, registrations.knowledge_scopes,
                          registrations.risk_profile)


def test_knowledge_scopes_come_from_the_registered_manifests_never_the_request(engine: PolicyEngine,
                                                                               tmp_path: Path) -> None:
    registrations = AgentRegistrations.load()
    assert registrations.knowledge_scopes("compliance-agent") == ("compliance.nr",)
    assert registrations.knowledge_scopes("nobody") == ()
    request = to_request(_knowledge_read(), registrations.capabilities, registrations.knowledge_scopes)
    assert request.agent is not None and request.agent.knowledge_scopes == ("compliance.nr",)
    with KillSwitchStore(tmp_path / "policy.db") as store:
        servicer = _knowledge_servicer(engine, store)
        assert _reasons(servicer, _knowledge_read()) == ("POLICY_EFFECT_ALLOW", ["user.invoke"])
        # The training agent registers training.nr, not compliance.nr (nor knowledge.search).
        assert _reasons(servicer, _knowledge_read(agent="training-agent")) == (
            "POLICY_EFFECT_DENY", ["agent.capability_not_registered", "knowledge.scope_not_registered"])
        assert _reasons(servicer, _knowledge_read(scope="training.nr")) == (
            "POLICY_EFFECT_DENY", ["knowledge.scope_not_registered"])
        # Without a registry of scopes (the default), no scope is anyone's: fail closed.
        bare = PolicyServicer(engine, store, registrations.capabilities, audit=None)
        assert _reasons(bare, _knowledge_read()) == (
            "POLICY_EFFECT_DENY", ["blast_radius.agent_profile_exceeded", "knowledge.scope_not_registered"])


def _release(agent: str, declared: common_pb2.RiskProfile | None = None) -> pb.AuthorizeRequest:
    request = pb.AuthorizeRequest(
        user=common_pb2.UserContext(tenant_id="acme", user_id="alice", roles=["permit-manager"]),
        actor_type=common_pb2.ACTOR_TYPE_USER,
        agent=common_pb2.AgentPrincipal(agent_id=agent, delegation_chain=["user:acme/alice", "svc:supervisor",
                                                                          f"agent:{agent}"]),
        delegation_depth=2, capability_id="workPermit.get",
        resource=pb.ResourceRef(type="WorkPermit", id="WP-10231", tenant_id="acme"),
        context=pb.OperationContext(risk_profile=common_pb2.RiskProfile(max_risk=common_pb2.RISK_LEVEL_MEDIUM,
                                                                        can_mutate=True)),
        operation=pb.OPERATION_KIND_INVOKE)
    if declared is not None:
        request.context.agent_risk_profile.CopyFrom(declared)
    return request


def test_an_agent_never_goes_beyond_the_risk_profile_it_declared(engine: PolicyEngine, tmp_path: Path) -> None:
    """PRD §65: from the version's grant when it carries one, else from the registered manifest."""
    registrations = AgentRegistrations.load()
    assert registrations.risk_profile("training-agent") is not None
    with KillSwitchStore(tmp_path / "policy.db") as store:
        servicer = _knowledge_servicer(engine, store)
        # The work-permit agent's manifest declares can_mutate: the mutation is past this rule
        # (it still needs the user's confirmation).
        effect, reasons = _reasons(servicer, _release("work-permit-agent"))
        assert "blast_radius.agent_profile_exceeded" not in reasons
        # The training agent declared it changes nothing and is LOW risk: refused outright.
        effect, reasons = _reasons(servicer, _release("training-agent"))
        assert effect == "POLICY_EFFECT_DENY" and "blast_radius.agent_profile_exceeded" in reasons
        # A version's own declaration (signed into its grant) is the one that counts.
        wide = common_pb2.RiskProfile(max_risk=common_pb2.RISK_LEVEL_HIGH, can_mutate=True)
        assert "blast_radius.agent_profile_exceeded" not in _reasons(servicer, _release("training-agent", wide))[1]
        narrow = common_pb2.RiskProfile(max_risk=common_pb2.RISK_LEVEL_LOW, can_mutate=True)
        assert "blast_radius.agent_profile_exceeded" in _reasons(
            servicer, _release("work-permit-agent", narrow))[1]
        # An agent nobody registered declared nothing: nothing with any risk.
        assert "blast_radius.agent_profile_exceeded" in _reasons(servicer, _release("ghost-agent"))[1]


def test_a_manifest_whose_knowledge_scopes_are_not_a_list_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("agent_id: a\ncapabilities: []\nknowledge_scopes: compliance.nr\n")
    with pytest.raises(AgentRegistrationError, match="knowledge_scopes must be a list"):
        AgentRegistrations.load(tmp_path)


# --- AuthorizeBatch -----------------------------------------------------------------------------------

def test_a_batch_is_decided_as_each_request_alone(servicer: PolicyServicer) -> None:
    own = _review()
    own.user.user_id = "alice"  # the requester reviewing her own request
    broken = _review()
    broken.ClearField("user")
    batch = servicer.AuthorizeBatch(pb.AuthorizeBatchRequest(requests=[_review(), own, broken]),
                                    context=None)  # type: ignore[arg-type]
    first, second, third = batch.results
    assert _reasons(servicer, _review()) == (common_pb2.PolicyEffect.Name(first.response.decision.effect),
                                            list(first.response.decision.reason_codes))
    assert _reasons(servicer, own) == (common_pb2.PolicyEffect.Name(second.response.decision.effect),
                                      list(second.response.decision.reason_codes))
    assert first.response.decision.decision_id != second.response.decision.decision_id
    # The one Authorize would refuse gets its own error; the others are decided regardless.
    with pytest.raises(errors.InvalidArgument) as alone:
        servicer.Authorize(broken, context=None)  # type: ignore[arg-type]
    assert third.WhichOneof("outcome") == "error"
    assert third.error == alone.value.to_status()


@pytest.mark.parametrize(("count", "reason"), [(0, "MISSING_FIELD"), (65, "FIELD_TOO_LONG")])
def test_a_batch_empty_or_too_large_is_refused_whole(servicer: PolicyServicer, count: int, reason: str) -> None:
    with pytest.raises(errors.InvalidArgument) as info:
        servicer.AuthorizeBatch(pb.AuthorizeBatchRequest(requests=[_review()] * count),
                                context=None)  # type: ignore[arg-type]
    assert (info.value.reason, info.value.field) == (reason, "requests")


def test_without_the_kill_switches_a_batch_has_no_decision_at_all(engine: PolicyEngine, tmp_path: Path) -> None:
    store = KillSwitchStore(tmp_path / "policy.db")
    servicer = PolicyServicer(engine, store, _capabilities, audit=None)
    store.close()
    with pytest.raises(errors.Unavailable) as info:
        servicer.AuthorizeBatch(pb.AuthorizeBatchRequest(requests=[_review(), _review()]),
                                context=None)  # type: ignore[arg-type]
    assert info.value.reason == "KILL_SWITCH_STORE_UNAVAILABLE"


def test_a_request_answered_from_memory_still_meets_a_kill_switch_set_after_it(servicer: PolicyServicer) -> None:
    first = servicer.Authorize(_review(), context=None)  # type: ignore[arg-type]
    again = servicer.Authorize(_review(), context=None)  # type: ignore[arg-type]
    assert first.decision.effect == again.decision.effect == common_pb2.POLICY_EFFECT_ALLOW
    assert first.decision.decision_id != again.decision.decision_id
    assert first.explanation == again.explanation
    servicer._switches.set(model.KillSwitchScope.TENANT, "acme", enabled=True, reason="incident", changed_by="ops")
    assert _reasons(servicer, _review())[0] == "POLICY_EFFECT_DENY"
    servicer._switches.set(model.KillSwitchScope.TENANT, "acme", enabled=False, reason="over", changed_by="ops")
    assert _reasons(servicer, _review()) == ("POLICY_EFFECT_ALLOW", ["reviewer.review"])


def test_servicers_of_one_engine_never_answer_from_each_others_registrations(engine: PolicyEngine,
                                                                             tmp_path: Path) -> None:
    with KillSwitchStore(tmp_path / "policy.db") as store:
        registered = _knowledge_servicer(engine, store)
        unregistered = PolicyServicer(engine, store, lambda agent_id: (), audit=None)
        assert _reasons(registered, _knowledge_read())[0] == "POLICY_EFFECT_ALLOW"
        assert _reasons(unregistered, _knowledge_read())[0] == "POLICY_EFFECT_DENY"
        assert _reasons(registered, _knowledge_read())[0] == "POLICY_EFFECT_ALLOW"
