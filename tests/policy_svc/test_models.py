"""Which models an agent may use for a tenant (OPERATION_KIND_USE_MODEL), decided by Cedar from the data."""

from __future__ import annotations

from typing import Any

import pytest

from agentmesh.tenant_file import load_tenant_file
from policy_svc.engine import PolicyEngine
from policy_svc.errors import InvalidRequestError
from policy_svc.model import Effect, OperationKind
from policy_svc.tenants import check_definitions

from .conftest import AGENTS, DEMO_TENANTS


def use(make_request: Any, *, tenant: str = "acme", agent: str = "risk-agent", model: str = "sandbox-large",
        fallback: bool = False, **kw: Any) -> Any:
    fields: dict[str, Any] = {"capability": "", "resource_type": "Model", **kw}
    return make_request(operation=OperationKind.USE_MODEL, tenant=tenant, agent_id=agent, resource_id=model,
                        model_fallback=fallback, **fields)


@pytest.mark.parametrize(("tenant", "agent", "model", "fallback", "effect", "reason"), [
    ("acme", "risk-agent", "sandbox-large", False, Effect.ALLOW, "model.use"),
    ("acme", "supervisor", "sandbox-small", False, Effect.ALLOW, "model.use"),
    ("acme", "risk-agent", "sandbox-small", True, Effect.ALLOW, "model.use"),
    ("globex", "risk-agent", "sandbox-small", False, Effect.ALLOW, "model.use"),
    # globex lets its agents use one model, and never fall back.
    ("globex", "risk-agent", "sandbox-large", False, Effect.DENY, "model.not_permitted"),
    ("globex", "risk-agent", "sandbox-small", True, Effect.DENY, "model.fallback_not_permitted"),
    # An agent the tenant lists no model for uses none.
    ("acme", "training-agent", "sandbox-small", False, Effect.DENY, "model.not_permitted"),
    ("acme", "risk-agent", "gpt-unknown", False, Effect.DENY, "model.unknown"),
])
def test_models_per_tenant_and_agent(validating_engine: PolicyEngine, make_request: Any, tenant: str, agent: str,
                                     model: str, fallback: bool, effect: Effect, reason: str) -> None:
    decision = validating_engine.authorize(use(make_request, tenant=tenant, agent=agent, model=model,
                                               fallback=fallback), kill_switches=())
    assert decision.effect is effect, decision.explanation
    assert reason in decision.reason_codes


def test_a_model_of_another_tenants_work_is_isolated(engine: PolicyEngine, make_request: Any) -> None:
    decision = engine.authorize(use(make_request, resource_tenant="globex"), kill_switches=())
    assert decision.effect is Effect.DENY
    assert "tenant.isolation" in decision.reason_codes


@pytest.mark.parametrize(("switch", "reason"), [
    ("capability:model:sandbox-large", "kill_switch.capability"),
    ("agent:risk-agent", "kill_switch.agent"),
    ("tenant:acme", "kill_switch.tenant"),
    ("platform", "kill_switch.platform"),
])
def test_kill_switches_stop_model_use(engine: PolicyEngine, make_request: Any, switch: str, reason: str) -> None:
    decision = engine.authorize(use(make_request), kill_switches=(switch,))
    assert decision.effect is Effect.DENY
    assert reason in decision.reason_codes
    # A switch on one model leaves the others.
    if switch.startswith("capability:"):
        other = engine.authorize(use(make_request, model="sandbox-small"), kill_switches=(switch,))
        assert other.effect is Effect.ALLOW


def test_a_model_request_names_a_model_not_a_capability(engine: PolicyEngine, make_request: Any) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        engine.authorize(use(make_request, capability="risk.evaluate"), kill_switches=())
    assert caught.value.field == "capability_id"
    with pytest.raises(InvalidRequestError) as caught:
        engine.authorize(use(make_request, resource_type="WorkPermit"), kill_switches=())
    assert caught.value.field == "resource.type"


@pytest.mark.parametrize("change", [
    lambda d: d.models["risk-agent"].model_ids.__setitem__(1, "gpt-9"),
    lambda d: d.models["training-agent"].__setattr__("fallback", True),
], ids=["unknown-model", "fallback-without-models"])
def test_a_tenant_naming_an_unknown_model_or_a_fallback_without_models_is_refused(change: Any) -> None:
    engine = PolicyEngine.load()
    (acme,) = [d for d in load_tenant_file(DEMO_TENANTS).definitions if d.tenant_id == "acme"]
    change(acme)
    with pytest.raises(InvalidRequestError) as caught:
        check_definitions([acme], engine, AGENTS)
    assert caught.value.field in ("tenants[0].models.risk-agent.model_ids[1]",
                                  "tenants[0].models.training-agent.fallback")
