"""Fallback agents (fallback.cedar, PRD §47): which tenants' work may run on a primary agent's fallback."""

from __future__ import annotations

from typing import Any

import pytest

from policy_svc.engine import PolicyEngine
from policy_svc.model import ActorType, Effect, OperationKind

FALLBACK = {
    "operation": OperationKind.USE_FALLBACK_AGENT,
    "agent_id": "risk-rules-agent",
    "agent_capabilities": ("risk.evaluate", "workPermit.get"),
    "delegation_depth": 1,
    "capability": "",
    "resource_type": "AgentVersion",
    "resource_id": "risk-rules-agent@1.0.0",
}


@pytest.mark.parametrize("role", ["viewer", "analyst", "reviewer", "admin"])
def test_acme_roles_hold_agent_fallback(validating_engine: PolicyEngine, make_request: Any, role: str) -> None:
    decision = validating_engine.authorize(make_request(**FALLBACK, roles=(role,)), kill_switches=())
    assert decision.effect is Effect.ALLOW, decision.explanation
    assert decision.reason_codes == ("agent.fallback",)


@pytest.mark.parametrize("role", ["viewer", "analyst", "admin"])
def test_globex_never_runs_on_a_fallback(validating_engine: PolicyEngine, make_request: Any, role: str) -> None:
    decision = validating_engine.authorize(
        make_request(**FALLBACK, tenant="globex", user_id="gina", roles=(role,)), kill_switches=())
    assert decision.effect is Effect.DENY
    assert "agent.fallback_not_allowed" in decision.reason_codes


def test_acme_roles_without_the_privilege_are_denied(validating_engine: PolicyEngine, make_request: Any) -> None:
    # agent-operator includes no viewer: onboarding agents is not running analyses.
    decision = validating_engine.authorize(make_request(**FALLBACK, roles=("agent-operator",)), kill_switches=())
    assert decision.effect is Effect.DENY
    assert "agent.fallback_not_allowed" in decision.reason_codes


def test_a_fallback_never_crosses_tenants(validating_engine: PolicyEngine, make_request: Any) -> None:
    decision = validating_engine.authorize(make_request(**FALLBACK, roles=("analyst",), resource_tenant="globex"),
                                           kill_switches=())
    assert decision.effect is Effect.DENY
    assert "tenant.isolation" in decision.reason_codes


def test_a_tenant_that_is_not_configured_has_no_fallback(validating_engine: PolicyEngine, make_request: Any) -> None:
    decision = validating_engine.authorize(make_request(**FALLBACK, tenant="umbrella", roles=("analyst",)),
                                           kill_switches=())
    assert decision.effect is Effect.DENY
    assert "tenant.not_configured" in decision.reason_codes


def test_a_kill_switch_on_the_fallback_agent_stops_it(validating_engine: PolicyEngine, make_request: Any) -> None:
    decision = validating_engine.authorize(make_request(**FALLBACK, roles=("analyst",)),
                                           kill_switches=("agent:risk-rules-agent",))
    assert decision.effect is Effect.DENY
    assert decision.reason_codes == ("kill_switch.agent",)


def test_a_system_actor_never_runs_on_a_fallback(validating_engine: PolicyEngine, make_request: Any) -> None:
    decision = validating_engine.authorize(
        make_request(**FALLBACK, roles=(), actor_type=ActorType.SYSTEM, system_actor="TrainingExpirationScanner",
                     delegation_chain=("system:acme/TrainingExpirationScanner", "svc:supervisor")),
        kill_switches=())
    assert decision.effect is Effect.DENY
    assert "agent.fallback_system_actor" in decision.reason_codes
