"""Bad input is an InvalidRequestError naming the field, never a decision."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from policy_svc.engine import PolicyEngine
from policy_svc.errors import InvalidRequestError, PolicyError
from policy_svc.model import ActorType, AuthorizationRequest, OperationKind


def _without_user(r: AuthorizationRequest) -> AuthorizationRequest:
    return replace(r, user=None)


def _user(**changes: Any) -> Any:
    def edit(r: AuthorizationRequest) -> AuthorizationRequest:
        assert r.user is not None
        return replace(r, user=replace(r.user, **changes))

    return edit


def _agent(**changes: Any) -> Any:
    def edit(r: AuthorizationRequest) -> AuthorizationRequest:
        assert r.agent is not None
        return replace(r, agent=replace(r.agent, **changes))

    return edit


def _resource(**changes: Any) -> Any:
    def edit(r: AuthorizationRequest) -> AuthorizationRequest:
        assert r.resource is not None
        return replace(r, resource=replace(r.resource, **changes))

    return edit


def _set(**changes: Any) -> Any:
    return lambda r: replace(r, **changes)


BAD_REQUESTS = [
    ("user", "MISSING_FIELD", _without_user),
    ("user.tenant_id", "MISSING_FIELD", _user(tenant_id="")),
    ("user.tenant_id", "INVALID_FIELD", _user(tenant_id="acme/../globex")),
    ("user.user_id", "MISSING_FIELD", _user(user_id="")),
    ("actor_type", "MISSING_FIELD", _set(actor_type=ActorType.UNSPECIFIED)),
    ("system_actor", "MISSING_FIELD", _set(actor_type=ActorType.SYSTEM)),
    ("system_actor", "INVALID_FIELD", _set(system_actor="TrainingExpirationScanner")),
    ("agent", "MISSING_FIELD", _set(agent=None)),
    ("agent.agent_id", "MISSING_FIELD", _agent(agent_id="")),
    ("delegation_depth", "INVALID_FIELD", _set(delegation_depth=-1)),
    ("delegation_depth", "INVALID_FIELD", _set(delegation_depth=2**31)),
    ("capability_id", "MISSING_FIELD", _set(capability_id="")),
    ("resource", "MISSING_FIELD", _set(resource=None)),
    ("resource.type", "MISSING_FIELD", _resource(type="")),
    ("resource.id", "MISSING_FIELD", _resource(id="")),
    ("resource.tenant_id", "MISSING_FIELD", _resource(tenant_id="")),
    ("operation", "MISSING_FIELD", _set(operation=OperationKind.UNSPECIFIED)),
    # Without it the own-request forbids would compare against "" and never fire.
    ("context.subject_requester_id", "MISSING_FIELD", _set(operation=OperationKind.REVIEW)),
    ("context.subject_requester_id", "MISSING_FIELD", _set(operation=OperationKind.OVERRIDE)),
]


@pytest.mark.parametrize(
    ("field", "reason", "edit"),
    BAD_REQUESTS,
    ids=[f"{field}-{reason}" for field, reason, _ in BAD_REQUESTS],
)
def test_bad_request_names_the_field(
    engine: PolicyEngine, make_request: Any, field: str, reason: str, edit: Any
) -> None:
    request = edit(make_request())
    with pytest.raises(InvalidRequestError) as caught:
        engine.authorize(request, kill_switches=())
    error = caught.value
    assert error.field == field
    assert error.reason == reason
    assert error.metadata == {"field": field}
    assert field in str(error)
    assert isinstance(error, PolicyError)


def test_system_actor_needs_no_user_id(engine: PolicyEngine, make_request: Any) -> None:
    request = make_request(
        actor_type=ActorType.SYSTEM,
        system_actor="TrainingExpirationScanner",
        user_id="",
        capability="training.getStatus",
    )
    assert engine.authorize(request, kill_switches=()).allowed


@pytest.mark.parametrize("operation", [OperationKind.REVIEW, OperationKind.OVERRIDE])
def test_decision_by_an_agent_without_capabilities_is_well_formed(
    engine: PolicyEngine, make_request: Any, operation: OperationKind
) -> None:
    # The Decision Center asks as the supervisor, which registers no capability.
    request = make_request(
        operation=operation,
        roles=("admin",),
        agent_id="supervisor",
        agent_capabilities=(),
        delegation_chain=("user:acme/alice", "svc:supervisor"),
        delegation_depth=1,
        capability="workPermit.release",
        subject_requester_id="bob",
        override_reason="checked on site",
    )
    assert engine.authorize(request, kill_switches=()).allowed


def test_subject_requester_is_not_required_for_invoke(engine: PolicyEngine, make_request: Any) -> None:
    assert engine.authorize(make_request(subject_requester_id=""), kill_switches=()).allowed


def test_bad_request_is_refused_even_under_a_kill_switch(engine: PolicyEngine, make_request: Any) -> None:
    # Validation comes first: a caller learns its request is malformed rather
    # than being told about switches.
    with pytest.raises(InvalidRequestError):
        engine.authorize(replace(make_request(), capability_id=""), kill_switches={"platform"})


EXECUTION_OPERATIONS = [OperationKind.READ_EXECUTION, OperationKind.CANCEL_EXECUTION]


def _on_execution(make_request: Any, operation: OperationKind, **changes: Any) -> AuthorizationRequest:
    """A read or cancel of alice's execution as the supervisor asks for it."""
    request: dict[str, Any] = {
        "operation": operation,
        "agent_id": "supervisor",
        "agent_capabilities": (),
        "delegation_chain": ("user:acme/alice", "svc:supervisor"),
        "delegation_depth": 1,
        "capability": "",
        "resource_type": "Execution",
        "resource_id": "ex-1",
        "subject_requester_id": "alice",
        **changes,
    }
    built: AuthorizationRequest = make_request(**request)
    return built


@pytest.mark.parametrize("operation", EXECUTION_OPERATIONS, ids=lambda o: o.name)
def test_execution_operation_needs_no_capability(
    engine: PolicyEngine, make_request: Any, operation: OperationKind
) -> None:
    assert engine.authorize(_on_execution(make_request, operation), kill_switches=()).allowed


BAD_EXECUTION_REQUESTS = [
    # Without it "is this the requester?" would compare against "".
    ("context.subject_requester_id", "MISSING_FIELD", {"subject_requester_id": ""}),
    # An execution is not a capability: a capability here is a caller bug.
    ("capability_id", "INVALID_FIELD", {"capability": "workPermit.get"}),
    ("resource.type", "INVALID_FIELD", {"resource_type": "WorkPermit"}),
    ("resource.type", "INVALID_FIELD", {"resource_type": "execution"}),
    ("resource.type", "MISSING_FIELD", {"resource_type": ""}),
    ("resource.id", "MISSING_FIELD", {"resource_id": ""}),
    ("resource.tenant_id", "MISSING_FIELD", {"resource_tenant": ""}),
    ("user.user_id", "MISSING_FIELD", {"user_id": ""}),
    ("agent.agent_id", "MISSING_FIELD", {"agent_id": ""}),
]


@pytest.mark.parametrize("operation", EXECUTION_OPERATIONS, ids=lambda o: o.name)
@pytest.mark.parametrize(
    ("field", "reason", "changes"),
    BAD_EXECUTION_REQUESTS,
    ids=[f"{field}-{reason}-{i}" for i, (field, reason, _) in enumerate(BAD_EXECUTION_REQUESTS)],
)
def test_bad_execution_request_names_the_field(
    engine: PolicyEngine,
    make_request: Any,
    operation: OperationKind,
    field: str,
    reason: str,
    changes: dict[str, Any],
) -> None:
    request = _on_execution(make_request, operation, **changes)
    with pytest.raises(InvalidRequestError) as caught:
        # Even the platform switch does not turn a malformed request into a decision.
        engine.authorize(request, kill_switches={"platform"})
    assert caught.value.field == field
    assert caught.value.reason == reason
    assert caught.value.metadata == {"field": field}
    assert field in str(caught.value)


@pytest.mark.parametrize("operation", EXECUTION_OPERATIONS, ids=lambda o: o.name)
def test_system_actor_request_on_an_execution_is_well_formed_and_denied(
    engine: PolicyEngine, make_request: Any, operation: OperationKind
) -> None:
    request = _on_execution(
        make_request, operation, actor_type=ActorType.SYSTEM, system_actor="TrainingExpirationScanner", user_id="",
        subject_requester_id="TrainingExpirationScanner",
    )
    decision = engine.authorize(request, kill_switches=())
    assert not decision.allowed
    assert decision.reason_codes == ("execution.system_actor",)
