"""Onboarding agents (agents.cedar): who registers, moves and approves agent versions (PRD §4, §57)."""

from __future__ import annotations

from typing import Any

import pytest

from policy_svc.engine import PolicyEngine
from policy_svc.errors import InvalidRequestError
from policy_svc.model import ActorType, Effect, OperationKind

MANAGE = {
    "operation": OperationKind.MANAGE_AGENT,
    "agent_id": "supervisor",
    "agent_capabilities": (),
    "delegation_chain": ("user:acme/olga", "svc:supervisor"),
    "delegation_depth": 1,
    "capability": "",
    "resource_type": "AgentVersion",
    "resource_id": "training-agent@1.1.0",
    "user_id": "olga",
}
APPROVE = {**MANAGE, "operation": OperationKind.APPROVE_AGENT, "subject_requester_id": "olga"}


@pytest.mark.parametrize(("role", "effect"), [
    ("agent-operator", Effect.ALLOW), ("agent-approver", Effect.ALLOW), ("operator", Effect.DENY),
    ("admin", Effect.DENY), ("viewer", Effect.DENY), ("reviewer", Effect.DENY),
])
def test_only_agent_managers_register_and_move_versions(
    validating_engine: PolicyEngine, make_request: Any, role: str, effect: Effect
) -> None:
    decision = validating_engine.authorize(make_request(**MANAGE, roles=(role,)), kill_switches=())
    assert decision.effect is effect, decision.explanation
    if effect is Effect.DENY:
        assert "agent.requires_manager" in decision.reason_codes


def test_an_approval_is_by_an_admin_who_did_not_register(validating_engine: PolicyEngine, make_request: Any) -> None:
    other = validating_engine.authorize(make_request(**{**APPROVE, "user_id": "adam", "roles": ("agent-approver",),
                                                        "delegation_chain": ("user:acme/adam", "svc:supervisor")}),
                                        kill_switches=())
    assert other.effect is Effect.ALLOW, other.explanation
    own = validating_engine.authorize(make_request(**APPROVE, roles=("agent-approver",)), kill_switches=())
    assert own.effect is Effect.DENY
    assert "agent.own_registration" in own.reason_codes
    operator = validating_engine.authorize(make_request(**{**APPROVE, "user_id": "adam", "roles": ("agent-operator",),
                                                           "delegation_chain": ("user:acme/adam",
                                                                                "svc:supervisor")}),
                                           kill_switches=())
    assert operator.effect is Effect.DENY
    assert "agent.requires_approver" in operator.reason_codes


def test_an_approval_must_name_the_registrant(engine: PolicyEngine, make_request: Any) -> None:
    with pytest.raises(InvalidRequestError, match="subject_requester_id"):
        engine.authorize(make_request(**{**APPROVE, "subject_requester_id": ""}, roles=("agent-approver",)),
                         kill_switches=())


def test_a_system_actor_never_onboards(engine: PolicyEngine, make_request: Any) -> None:
    decision = engine.authorize(make_request(**{**MANAGE, "user_id": ""}, actor_type=ActorType.SYSTEM,
                                             system_actor="TrainingExpirationScanner"),
                                kill_switches=())
    assert decision.effect is Effect.DENY


def test_a_resource_of_the_wrong_type_is_refused(engine: PolicyEngine, make_request: Any) -> None:
    with pytest.raises(InvalidRequestError, match="resource.type"):
        engine.authorize(make_request(**{**MANAGE, "resource_type": "Execution"}, roles=("agent-operator",)),
                         kill_switches=())
