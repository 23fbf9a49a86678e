"""The servicer's mapping between the wire messages and the engine's model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as pb
from policy_svc import model
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
