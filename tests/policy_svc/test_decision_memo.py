"""The engine answers a request it has evaluated against the same state and kill switches from memory:
the same answer as Cedar's, a new decision id, and nothing remembered across a change of tenants or switches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import cedarpy
import pytest

from agentmesh.tenant_file import load_tenant_file
from policy_svc import engine as engine_module
from policy_svc.data import RoleSpec, TenantPolicy
from policy_svc.engine import PolicyEngine
from policy_svc.errors import InvalidRequestError
from policy_svc.model import Effect
from policy_svc.tenants import check_definitions

from .conftest import AGENTS, DEMO_TENANTS, with_demo_tenants


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> tuple[PolicyEngine, list[int]]:
    """A fresh engine with the demo tenants, and the number of Cedar evaluations it has made."""
    calls = [0]
    real = cedarpy.is_authorized

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(cedarpy, "is_authorized", counting)
    return with_demo_tenants(PolicyEngine.load()), calls


def test_a_repeated_request_is_answered_without_evaluating_again(counted: Any, make_request: Any) -> None:
    engine, calls = counted
    first = engine.authorize(make_request(), kill_switches=())
    second = engine.authorize(make_request(), kill_switches=())
    assert first.effect is Effect.ALLOW
    assert calls[0] == 1
    assert (second.effect, second.reason_codes, second.explanation, second.policy_version) == (
        first.effect, first.reason_codes, first.explanation, first.policy_version)
    assert second.decision_id != first.decision_id


def test_a_request_that_differs_in_anything_is_evaluated(counted: Any, make_request: Any) -> None:
    engine, calls = counted
    assert engine.authorize(make_request(), kill_switches=()).effect is Effect.ALLOW
    other_tenant = engine.authorize(make_request(resource_tenant="globex"), kill_switches=())
    assert other_tenant.effect is Effect.DENY
    assert engine.authorize(make_request(capability="workPermit.release"), kill_switches=()).effect is not Effect.ALLOW
    assert calls[0] >= 3
    # ... and each of them is then remembered with its own answer.
    before = calls[0]
    assert engine.authorize(make_request(resource_tenant="globex"), kill_switches=()).reason_codes == \
        other_tenant.reason_codes
    assert engine.authorize(make_request(), kill_switches=()).effect is Effect.ALLOW
    assert calls[0] == before


def test_a_kill_switch_is_never_answered_from_before_it(counted: Any, make_request: Any) -> None:
    engine, _ = counted
    assert engine.authorize(make_request(), kill_switches=()).effect is Effect.ALLOW
    stopped = engine.authorize(make_request(), kill_switches={"agent:permit-agent"})
    assert stopped.effect is Effect.DENY
    assert engine.authorize(make_request(), kill_switches={"agent:permit-agent"}).effect is Effect.DENY
    # The switch released: allowed again.
    assert engine.authorize(make_request(), kill_switches=()).effect is Effect.ALLOW


def test_a_changed_role_is_never_answered_from_before_it(counted: Any, make_request: Any) -> None:
    engine, _ = counted
    allowed = engine.authorize(make_request(), kill_switches=())
    assert allowed.effect is Effect.ALLOW
    checked = check_definitions([d for d in load_tenant_file(DEMO_TENANTS).definitions if d.tenant_id == "acme"],
                                engine, AGENTS)

    def without_permit_reads(r: RoleSpec) -> RoleSpec:
        return RoleSpec(tuple(c for c in r.capabilities if c != "workPermit.get"), r.includes, r.privileges)

    version = engine.set_tenants({d.tenant_id: TenantPolicy({n: without_permit_reads(r) for n, r in p.roles.items()})
                                  for d, p in checked})
    denied = engine.authorize(make_request(), kill_switches=())
    assert denied.effect is Effect.DENY
    assert denied.policy_version == version != allowed.policy_version


def test_a_timed_out_evaluation_is_not_remembered(make_request: Any) -> None:
    ticks: Iterator[float] = iter([0.0, 10.0, 20.0, 20.1])  # the first evaluation takes 10 s, the second 0.1 s
    engine = with_demo_tenants(PolicyEngine.load(evaluation_budget_s=0.5, clock=lambda: next(ticks)))
    assert engine.authorize(make_request(), kill_switches=()).reason_codes == ("policy.timeout",)
    assert engine.authorize(make_request(), kill_switches=()).effect is Effect.ALLOW


def test_an_evaluation_that_raised_is_not_remembered(counted: Any, make_request: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    engine, calls = counted
    working = cedarpy.is_authorized

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine bug")

    monkeypatch.setattr(cedarpy, "is_authorized", broken)
    assert engine.authorize(make_request(), kill_switches=()).reason_codes == ("policy.engine_error",)
    monkeypatch.setattr(cedarpy, "is_authorized", working)
    assert engine.authorize(make_request(), kill_switches=()).effect is Effect.ALLOW
    assert calls[0] == 1


def test_the_memo_is_bounded(counted: Any, make_request: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, calls = counted
    monkeypatch.setattr(engine_module, "MEMO_SIZE", 3)
    for user in ("u1", "u2", "u3", "u4"):
        engine.authorize(make_request(user_id=user), kill_switches=())
    assert calls[0] == 4
    # The fourth started the memo again: the first is evaluated anew, the fourth is remembered.
    engine.authorize(make_request(user_id="u1"), kill_switches=())
    engine.authorize(make_request(user_id="u4"), kill_switches=())
    assert calls[0] == 5


def test_a_request_remembered_under_the_callers_key_is_found_by_that_key_only(counted: Any,
                                                                              make_request: Any) -> None:
    engine, calls = counted
    assert engine.remembered(b"wire-1", kill_switches=()) is None
    first = engine.authorize(make_request(), kill_switches=(), remember_as=b"wire-1")
    again = engine.remembered(b"wire-1", kill_switches=())
    assert again is not None and calls[0] == 1
    assert (again.effect, again.reason_codes, again.explanation, again.policy_version) == (
        first.effect, first.reason_codes, first.explanation, first.policy_version)
    assert again.decision_id != first.decision_id
    assert engine.remembered(b"wire-2", kill_switches=()) is None
    assert engine.remembered(b"", kill_switches=()) is None
    # Remembered from the engine's own memory too: a second key of an evaluated request.
    engine.authorize(make_request(), kill_switches=(), remember_as=b"wire-3")
    assert engine.remembered(b"wire-3", kill_switches=()) is not None and calls[0] == 1


def test_a_callers_key_is_never_answered_across_a_kill_switch_or_a_tenant_change(counted: Any,
                                                                                 make_request: Any) -> None:
    engine, _ = counted
    assert engine.authorize(make_request(), kill_switches=(), remember_as=b"wire").effect is Effect.ALLOW
    assert engine.remembered(b"wire", kill_switches={"agent:permit-agent"}) is None
    assert engine.remembered(b"wire", kill_switches={"not a switch"}) is None
    assert engine.authorize(make_request(), kill_switches={"agent:permit-agent"}).effect is Effect.DENY
    assert engine.remembered(b"wire", kill_switches=()) is None  # the board changed twice: a fresh memory
    assert engine.authorize(make_request(), kill_switches=(), remember_as=b"wire").effect is Effect.ALLOW
    with_demo_tenants(engine)  # the same tenants applied again: a new state
    assert engine.remembered(b"wire", kill_switches=()) is None


def test_an_invalid_or_timed_out_request_is_not_remembered_under_the_callers_key(make_request: Any) -> None:
    ticks: Iterator[float] = iter([0.0, 10.0])  # the evaluation takes 10 s
    engine = with_demo_tenants(PolicyEngine.load(evaluation_budget_s=0.5, clock=lambda: next(ticks)))
    assert engine.authorize(make_request(), kill_switches=(), remember_as=b"slow").reason_codes == (
        "policy.timeout",)
    assert engine.remembered(b"slow", kill_switches=()) is None
    with pytest.raises(InvalidRequestError):
        engine.authorize(make_request(tenant=""), kill_switches=(), remember_as=b"bad")
    assert engine.remembered(b"bad", kill_switches=()) is None

