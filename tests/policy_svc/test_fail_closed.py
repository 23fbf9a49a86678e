"""Fail closed: anything but a clean Cedar Allow is a DENY that says why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cedarpy
import pytest

from agentmesh.tenant_file import load_tenant_file
from policy_svc import engine as engine_module
from policy_svc.data import RoleSpec, TenantPolicy
from policy_svc.engine import PolicyEngine
from policy_svc.errors import InvalidRequestError
from policy_svc.model import Effect, OperationKind, RiskLevel
from policy_svc.tenants import check_definitions

from .conftest import AGENTS, DEMO_TENANTS, with_demo_tenants

# Passes strict validation, errors at run time: Long overflow for any depth >= 1.
OVERFLOW_POLICY = """
@id("test.overflowing_guard")
@description("a guard whose arithmetic overflows")
forbid (principal, action, resource)
when { context.delegation_depth + 9223372036854775807 < 0 };
"""

# Reads an attribute of the resource without first checking it is catalogued:
# for an unknown capability the entity does not exist.
UNKNOWN_ENTITY_POLICY = """
@id("test.unguarded_read")
@description("reads a capability attribute without checking the capability exists")
forbid (principal, action, resource is AgentMesh::Capability)
when { resource.permitted_roles.contains("nobody/none") };
"""


def _with_policy(policy_dir: Path, text: str, **kwargs: Any) -> PolicyEngine:
    (policy_dir / "zz_test.cedar").write_text(text, encoding="utf-8")
    return with_demo_tenants(PolicyEngine.load(policy_dir, **kwargs))


def test_evaluation_error_denies_even_when_cedar_allows(policy_dir: Path, make_request: Any) -> None:
    engine = _with_policy(policy_dir, OVERFLOW_POLICY)
    request = make_request(delegation_depth=1)

    # Cedar itself skips the erroring forbid and answers Allow...
    raw = cedarpy.is_authorized(
        engine_module._cedar_request(request),
        engine._policy_set,
        engine._entities_with(engine._state, engine_module._parse_kill_switches(())),
    )
    assert raw.decision is cedarpy.Decision.Allow
    assert raw.diagnostics.errors

    # ...the engine does not.
    decision = engine.authorize(request, kill_switches=())
    assert decision.effect is Effect.DENY
    assert decision.reason_codes == ("policy.evaluation_error",)
    assert "test.overflowing_guard" in decision.explanation
    assert "overflow" in decision.explanation


def test_same_policy_without_error_allows(policy_dir: Path, make_request: Any) -> None:
    # Depth 0 does not overflow: proves the DENY above comes from the error.
    engine = _with_policy(policy_dir, OVERFLOW_POLICY)
    decision = engine.authorize(make_request(delegation_depth=0), kill_switches=())
    assert decision.effect is Effect.ALLOW


def test_unknown_entity_denies(policy_dir: Path, make_request: Any) -> None:
    engine = _with_policy(policy_dir, UNKNOWN_ENTITY_POLICY)

    known = engine.authorize(make_request(), kill_switches=())
    unknown = engine.authorize(
        make_request(capability="payroll.export", agent_capabilities=("payroll.export",)),
        kill_switches=(),
    )

    assert known.effect is Effect.ALLOW
    assert unknown.effect is Effect.DENY
    assert unknown.reason_codes == ("policy.evaluation_error",)
    assert "does not exist" in unknown.explanation


def test_evaluation_error_beats_an_obligation(policy_dir: Path, make_request: Any) -> None:
    # Without the error this would be CONFIRMATION_REQUIRED: an error is never
    # softened into an obligation.
    engine = _with_policy(policy_dir, OVERFLOW_POLICY)
    decision = engine.authorize(
        make_request(roles=("permit-manager",), capability="workPermit.release"),
        kill_switches=(),
    )
    assert decision.effect is Effect.DENY
    assert decision.reason_codes == ("policy.evaluation_error",)


def test_cedar_exception_denies(engine: PolicyEngine, make_request: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine on fire")

    monkeypatch.setattr(engine_module.cedarpy, "is_authorized", explode)
    decision = engine.authorize(make_request(), kill_switches=())
    assert decision.effect is Effect.DENY
    assert decision.reason_codes == ("policy.engine_error",)
    assert "engine on fire" in decision.explanation


def test_no_decision_denies(
    validating_engine: PolicyEngine, make_request: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A context that does not conform to the schema: Cedar refuses to build
    # the request and answers NoDecision.
    real = engine_module._cedar_request

    def malformed(request: Any) -> Any:
        built = real(request)
        built["context"]["delegation_depth"] = "two"
        return built

    monkeypatch.setattr(engine_module, "_cedar_request", malformed)
    decision = validating_engine.authorize(make_request(), kill_switches=())
    assert decision.effect is Effect.DENY
    assert decision.reason_codes == ("policy.no_decision",)


def test_missing_context_value_denies(engine: PolicyEngine, make_request: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without request validation, a missing value still cannot fail open:
    # the policies reading it error, and errors deny.
    real = engine_module._cedar_request

    def incomplete(request: Any) -> Any:
        built = real(request)
        del built["context"]["approval_id"]
        return built

    monkeypatch.setattr(engine_module, "_cedar_request", incomplete)
    decision = engine.authorize(make_request(max_risk=RiskLevel.HIGH), kill_switches=())
    assert decision.effect is Effect.DENY
    assert decision.reason_codes == ("policy.evaluation_error",)


def test_slow_evaluation_denies(make_request: Any) -> None:
    ticks: Iterator[float] = iter([0.0, 10.0])  # start, then "ten seconds later"
    engine = with_demo_tenants(PolicyEngine.load(evaluation_budget_s=0.5, clock=lambda: next(ticks)))
    decision = engine.authorize(make_request(), kill_switches=())
    assert decision.effect is Effect.DENY
    assert decision.reason_codes == ("policy.timeout",)


def test_evaluation_within_budget_allows(make_request: Any) -> None:
    ticks: Iterator[float] = iter([0.0, 0.4])
    engine = with_demo_tenants(PolicyEngine.load(evaluation_budget_s=0.5, clock=lambda: next(ticks)))
    assert engine.authorize(make_request(), kill_switches=()).effect is Effect.ALLOW


@pytest.mark.parametrize(
    "switches",
    [{"agent:"}, {"bogus"}, {"tenant"}, {"PLATFORM"}, "platform"],
    ids=["empty-target", "no-scope", "scope-only", "wrong-case", "bare-string"],
)
def test_kill_switch_not_understood_denies(engine: PolicyEngine, make_request: Any, switches: Any) -> None:
    decision = engine.authorize(make_request(), kill_switches=switches)
    assert decision.effect is Effect.DENY
    assert decision.reason_codes == ("policy.invalid_kill_switch",)


def test_budget_must_be_positive() -> None:
    with pytest.raises(ValueError):
        PolicyEngine.load(evaluation_budget_s=0)


def test_privilege_missing_from_the_data_denies_even_the_requester(policy_dir: Path, make_request: Any) -> None:
    # A data file that no longer defines execution.read still loads (no role
    # names it), but the policies reading the privilege then error: the
    # requester reading their own execution is refused rather than the rule
    # silently changing.
    path = policy_dir / "entities.yaml"
    text = path.read_text(encoding="utf-8")
    assert "  - execution.read\n" in text
    path.write_text(text.replace("  - execution.read\n", ""), encoding="utf-8")
    engine = PolicyEngine.load(policy_dir)
    # acme's roles, none holding execution.read (the platform no longer has it).
    checked = check_definitions([d for d in load_tenant_file(DEMO_TENANTS).definitions if d.tenant_id == "acme"],
                                with_demo_tenants(PolicyEngine.load()), AGENTS)
    def without_read(r: RoleSpec) -> RoleSpec:
        return RoleSpec(r.capabilities, r.includes, tuple(p for p in r.privileges if p != "execution.read"))

    engine.set_tenants({d.tenant_id: TenantPolicy({name: without_read(r) for name, r in policy.roles.items()})
                        for d, policy in checked})
    request = make_request(
        operation=OperationKind.READ_EXECUTION, agent_id="supervisor", agent_capabilities=(), capability="",
        resource_type="Execution", resource_id="ex-1", subject_requester_id="alice",
    )
    decision = engine.authorize(request, kill_switches=())
    assert decision.effect is Effect.DENY
    assert decision.reason_codes == ("policy.evaluation_error",)
    assert "execution.read" in decision.explanation


# One well-formed, allowed request per operation, as its caller sends it.
_ALLOWED_BY_OPERATION: dict[OperationKind, dict[str, Any]] = {
    OperationKind.INVOKE: {},
    OperationKind.OVERRIDE: {"roles": ("admin",), "subject_requester_id": "bob", "override_reason": "checked"},
    OperationKind.REVIEW: {"roles": ("reviewer",), "subject_requester_id": "bob", "capability": "workPermit.release"},
    OperationKind.READ_EXECUTION: {
        "capability": "", "resource_type": "Execution", "resource_id": "ex-1", "subject_requester_id": "alice",
    },
    OperationKind.CANCEL_EXECUTION: {
        "capability": "", "resource_type": "Execution", "resource_id": "ex-1", "subject_requester_id": "alice",
    },
    OperationKind.USE_MODEL: {
        "capability": "", "resource_type": "Model", "resource_id": "sandbox-small", "agent_id": "risk-agent",
    },
    OperationKind.MANAGE_AGENT: {
        "capability": "", "resource_type": "AgentVersion", "resource_id": "training-agent@1.1.0",
        "roles": ("agent-operator",),
    },
    OperationKind.APPROVE_AGENT: {
        "capability": "", "resource_type": "AgentVersion", "resource_id": "training-agent@1.1.0",
        "roles": ("agent-approver",), "subject_requester_id": "olga",
    },
    OperationKind.USE_FALLBACK_AGENT: {
        "capability": "", "resource_type": "AgentVersion", "resource_id": "risk-rules-agent@1.0.0",
        "agent_id": "risk-rules-agent", "roles": ("analyst",),
    },
}


def test_every_operation_is_decided_by_policies(validating_engine: PolicyEngine, make_request: Any) -> None:
    # Each model operation has a Cedar action the schema knows (the validating
    # engine would answer policy.no_decision otherwise), and each has a permit.
    assert set(_ALLOWED_BY_OPERATION) == set(OperationKind) - {OperationKind.UNSPECIFIED}
    assert set(engine_module._ACTIONS) == set(_ALLOWED_BY_OPERATION)
    for operation, request in _ALLOWED_BY_OPERATION.items():
        decision = validating_engine.authorize(make_request(operation=operation, **request), kill_switches=())
        assert decision.effect is Effect.ALLOW, f"{operation.name}: {decision.explanation}"
        assert not any(code.startswith("policy.") for code in decision.reason_codes)


def test_an_operation_without_a_cedar_action_is_invalid(
    engine: PolicyEngine, make_request: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A member added to the model but not mapped to an action is refused as a
    # bad request; it never reaches Cedar under some other action's name.
    actions = dict(engine_module._ACTIONS)
    del actions[OperationKind.READ_EXECUTION]
    monkeypatch.setattr(engine_module, "_ACTIONS", actions)
    read = OperationKind.READ_EXECUTION
    request = make_request(operation=read, **_ALLOWED_BY_OPERATION[read])
    with pytest.raises(InvalidRequestError) as caught:
        engine.authorize(request, kill_switches=())
    assert caught.value.field == "operation"


@pytest.mark.parametrize("validate", [False, True], ids=["service", "schema-checked"])
def test_an_action_the_policies_do_not_know_denies(
    engine: PolicyEngine,
    validating_engine: PolicyEngine,
    make_request: Any,
    monkeypatch: pytest.MonkeyPatch,
    validate: bool,
) -> None:
    # An action mapped in code but absent from the schema and the policies:
    # no permit names it, so nothing allows it.
    monkeypatch.setattr(engine_module, "_ACTIONS", {**engine_module._ACTIONS, OperationKind.READ_EXECUTION: "peek"})
    subject = validating_engine if validate else engine
    read = OperationKind.READ_EXECUTION
    request = make_request(operation=read, **_ALLOWED_BY_OPERATION[read])
    decision = subject.authorize(request, kill_switches=())
    assert decision.effect is Effect.DENY
    assert decision.reason_codes == (("policy.no_decision",) if validate else ("policy.default_deny",))


@pytest.mark.parametrize("operation", [OperationKind.READ_EXECUTION, OperationKind.CANCEL_EXECUTION])
def test_a_refused_execution_operation_is_never_an_obligation(
    engine: PolicyEngine, make_request: Any, operation: OperationKind
) -> None:
    # Whatever risk the caller declares, a refusal on an execution stays a
    # DENY: no confirmation or approval turns it into an ALLOW.
    request = make_request(
        operation=operation,
        **{**_ALLOWED_BY_OPERATION[operation], "subject_requester_id": "bob"},
        can_mutate=True,
        max_risk=RiskLevel.CRITICAL,
    )
    decision = engine.authorize(request, kill_switches=())
    assert decision.effect is Effect.DENY
    assert all(code.startswith("execution.not_requester_or_") for code in decision.reason_codes)
