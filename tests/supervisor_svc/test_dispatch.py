"""Single tasks (a confirmed release, the steps of an event): grants bound to the task's resources, and
nothing runs unless its delegation is on the record."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import errors, grants, spiffe
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.dispatch import Actor, TaskDispatcher
from supervisor_svc.events import EventHandler
from supervisor_svc.executions import ExecutionStore
from supervisor_svc.projection import ProjectionConfig
from supervisor_svc.registry import AgentRegistry

from .conftest import demo_tenants
from .test_orchestrator import Audit, Call

ALICE = Actor(tenant_id="acme", user_id="alice", roles=("permit-manager",), assertion_digest="d" * 64)


class Specialists:
    """Answers as the specialists would for an event: the training expired, one permit is affected."""

    def __init__(self) -> None:
        self.requests: list[spec_pb2.RunTaskRequest] = []

    def start(self, agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float, endpoint: Any = None) -> Call:
        self.requests.append(request)
        result = common_pb2.AgentResult(task_id=request.task.task_id, agent_id=agent_id,
                                        status=common_pb2.RESULT_STATUS_SUCCESS)
        if agent_id == "training-agent":
            result.result.update({"verdict": "FAIL", "subjects": {"worker:W-1003/NR-10": "FAIL"}})
        else:
            result.result.update({"verdict": "FAIL", "subjects": {"permit:WP-10231/training:NR-10": "FAIL"},
                                  "affected_permits": [{"permit_id": "WP-10231", "status": "PENDING_RELEASE",
                                                        "recommendation": "HOLD_RELEASE"}]})
        return Call(result)


@pytest.fixture()
def parts(tmp_path: Path) -> Iterator[tuple[TaskDispatcher, Specialists, Audit, ExecutionStore, grants.GrantSigner]]:
    signer = grants.GrantSigner(Ed25519PrivateKey.generate())
    registry = AgentRegistry(tmp_path / "agents.db")
    store = ExecutionStore(tmp_path / "supervisor.db")
    specialists, audit = Specialists(), Audit()
    dispatcher = TaskDispatcher(identity=spiffe.service("supervisor"), registry=registry, signer=signer,
                                specialists=specialists, audit=audit, store=store, task_timeout_s=5,
                                resources=ProjectionConfig.load().resources)
    yield dispatcher, specialists, audit, store, signer
    registry.close()
    store.close()


def _resources(signer: grants.GrantSigner, request: spec_pb2.RunTaskRequest) -> list[str]:
    return list(grants.verify(request.grant, {signer.key_id: signer.key.public_key()}).resources)


def test_the_release_grant_names_its_permit_only(parts: Any) -> None:
    dispatcher, specialists, _, _, signer = parts
    ex = pb.Execution(execution_id="exe-1", tenant_id="acme", user_id="alice")
    dispatcher.run(ex, agent_id="work-permit-agent", objective="Release permit WP-10231",
                   input={"operation": "release", "permit_id": "WP-10231", "reason": "ok to go",
                          "idempotency_key": "act-1"},
                   capabilities=["workPermit.release", "workPermit.get"], actor=ALICE)
    (request,) = specialists.requests
    assert _resources(signer, request) == ["permit:WP-10231"]


def test_audit_down_the_task_does_not_run(parts: Any) -> None:
    dispatcher, specialists, audit, store, _ = parts
    audit.down = True
    ex = pb.Execution(execution_id="exe-1", tenant_id="acme", user_id="alice")
    done = dispatcher.run(ex, agent_id="work-permit-agent", objective="Release permit WP-10231",
                          input={"operation": "release", "permit_id": "WP-10231", "reason": "ok to go",
                                 "idempotency_key": "act-1"},
                          capabilities=["workPermit.release", "workPermit.get"], actor=ALICE)
    assert done.result is None and done.failure.startswith("UNAVAILABLE AUDIT_UNAVAILABLE")
    assert not specialists.requests
    stored = store.get("exe-1")
    assert stored is not None and stored.graph.nodes[0].status == common_pb2.TASK_STATUS_FAILED


def _event(event_id: str = "evt-1") -> pb.HandleEventRequest:
    return pb.HandleEventRequest(event_id=event_id, tenant_id="acme", training_expired=pb.TrainingExpired(
        worker_id="W-1003", training_code="NR-10", expired_on="2026-08-15"))


def test_event_steps_name_the_worker_and_the_search_names_the_tenant(parts: Any) -> None:
    dispatcher, specialists, audit, store, signer = parts
    events = EventHandler(store=store, dispatcher=dispatcher, tenants=demo_tenants())
    ex, duplicate = events.handle(_event(), "spiffe://agentmesh.local/client/events")
    assert not duplicate and ex.status == pb.EXECUTION_STATUS_AWAITING_REVIEW
    training, permits = specialists.requests
    assert _resources(signer, training) == ["worker:W-1003"]
    assert _resources(signer, permits) == ["worker:W-1003", "tenant:acme"]
    assert audit.records[0].event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED


def test_audit_down_an_event_starts_nothing_and_may_be_sent_again(parts: Any) -> None:
    dispatcher, specialists, audit, store, _ = parts
    events = EventHandler(store=store, dispatcher=dispatcher, tenants=demo_tenants())
    audit.down = True
    with pytest.raises(errors.Unavailable) as err:
        events.handle(_event(), "spiffe://agentmesh.local/client/events")
    assert err.value.reason == "AUDIT_UNAVAILABLE" and not specialists.requests
    assert store.running() == []
    audit.down = False
    ex, duplicate = events.handle(_event(), "spiffe://agentmesh.local/client/events")
    assert not duplicate and ex.status == pb.EXECUTION_STATUS_AWAITING_REVIEW


def test_a_system_actors_execution_has_the_system_actor_as_its_requester(parts: Any) -> None:
    from agentmesh import assertion
    from agentmesh.v1 import policy_service_pb2 as policy_pb2
    from supervisor_svc.privacy import READ, ExecutionGuard

    dispatcher, _, audit, store, _ = parts
    events = EventHandler(store=store, dispatcher=dispatcher, tenants=demo_tenants())
    ex, _ = events.handle(_event(), "spiffe://agentmesh.local/client/events")
    asked: list[policy_pb2.AuthorizeRequest] = []

    def allow(request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        asked.append(request)
        return policy_pb2.AuthorizeResponse(decision=common_pb2.PolicyDecision(effect=common_pb2.POLICY_EFFECT_ALLOW))

    bob = assertion.UserIdentity("acme", "bob", ("reviewer",), "s", "c", "digest-b")
    ExecutionGuard(authorize=allow, audit=audit).require(bob, ex.execution_id, store.get(ex.execution_id), READ)
    assert asked[0].context.subject_requester_id == "TrainingExpirationScanner"


def test_a_task_is_stored_before_its_delegation_is_on_the_record(parts: Any) -> None:
    # A process killed right after the delegation became durable leaves a task its successor can close.
    dispatcher, _, audit, store, _ = parts
    ex = pb.Execution(execution_id="exe-3", tenant_id="acme", user_id="alice")
    store.save(ex)
    seen: list[list[tuple[int, bool]]] = []
    record = audit.record

    def delegation_sees_the_store(event_type: int, **fields: Any) -> Any:
        if event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED:
            stored = store.get("exe-3")
            assert stored is not None
            seen.append([(n.status, n.HasField("started_at")) for n in stored.graph.nodes])
        return record(event_type, **fields)

    audit.record = delegation_sees_the_store  # type: ignore[method-assign]
    dispatcher.run(ex, agent_id="work-permit-agent", objective="Release permit WP-10231",
                   input={"operation": "release", "permit_id": "WP-10231", "reason": "ok", "idempotency_key": "a-3"},
                   capabilities=["workPermit.release"], actor=ALICE)
    assert seen == [[(common_pb2.TASK_STATUS_CREATED, True)]]
    from supervisor_svc.dispatch import delegated_unfinished

    assert delegated_unfinished(common_pb2.AgentTask(status=common_pb2.TASK_STATUS_CREATED,
                                                     started_at=ex.graph.nodes[0].started_at))
    (attempt,) = ex.attempts
    assert (attempt.kind, attempt.outcome, attempt.agent_version) == (
        pb.ATTEMPT_KIND_FIRST, pb.ATTEMPT_OUTCOME_ANSWERED, "1.0.0")
    assert ex.graph.nodes[0].status == common_pb2.TASK_STATUS_COMPLETED


def test_a_release_is_never_retried(tmp_path: Path) -> None:
    from supervisor_svc.routing import RetryConfig, RoutingConfig
    from supervisor_svc.traffic import Traffic

    class Down(Specialists):
        def start(self, agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float,
                  endpoint: Any = None) -> Call:
            self.requests.append(request)
            return Call(None, errors.Unavailable("connection reset", reason="UNAVAILABLE"))

    registry, store, specialists = AgentRegistry(tmp_path / "a.db"), ExecutionStore(tmp_path / "s.db"), Down()
    traffic = Traffic.build(RoutingConfig(retry=RetryConfig(initial_backoff_ms=1)),
                            mutating={"workPermit.release": True, "training.getStatus": False})
    dispatcher = TaskDispatcher(identity=spiffe.service("supervisor"), registry=registry,
                                signer=grants.GrantSigner(Ed25519PrivateKey.generate()), specialists=specialists,
                                audit=Audit(), store=store, task_timeout_s=5,
                                resources=ProjectionConfig.load().resources, traffic=traffic)
    ex = pb.Execution(execution_id="exe-4", tenant_id="acme", user_id="alice")
    dispatcher.run(ex, agent_id="work-permit-agent", objective="Release permit WP-10231",
                   input={"operation": "release", "permit_id": "WP-10231", "reason": "ok", "idempotency_key": "a-4"},
                   capabilities=["workPermit.release"], actor=ALICE)
    assert len(specialists.requests) == 1 and [a.outcome for a in ex.attempts] == [pb.ATTEMPT_OUTCOME_UNAVAILABLE]
    read = dispatcher.run(ex, agent_id="training-agent", objective="Training of W-1003",
                          input={"worker_id": "W-1003"}, capabilities=["training.getStatus"], actor=ALICE)
    assert read.result is None and len(specialists.requests) == 4  # a read: tried max_attempts times
    assert [a.kind for a in ex.attempts[1:]] == [pb.ATTEMPT_KIND_FIRST, pb.ATTEMPT_KIND_RETRY, pb.ATTEMPT_KIND_RETRY]
    registry.close()
    store.close()
