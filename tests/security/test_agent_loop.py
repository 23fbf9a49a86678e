"""Agent loops: an agent re-entering the mesh to make more work for itself or for other agents.

Only the supervisor dispatches tasks, so an agent holding its certificate tries
every other way in: calling another specialist (or itself) directly, starting an
analysis or an event through the supervisor, deciding a review, re-enabling
itself, and claiming a delegation deeper than the platform maximum. The same
event replayed starts one execution only.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from agentmesh import grants
from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

from .conftest import ANALYSIS, PLATFORM, TRAINING, WORK_PERMIT, Mesh, struct, unique

pytestmark = pytest.mark.integration


def _task(target: str) -> spec_pb2.RunTaskRequest:
    execution_id = unique("exe-loop")
    return spec_pb2.RunTaskRequest(task=common_pb2.AgentTask(
        task_id=f"{execution_id}-t9", execution_id=execution_id, source_agent_id="training-agent",
        target_agent_id=target, tenant_id="acme", user_id="alice", objective="do my work again",
        input=struct(permit_id="WP-10231", operation="assess")))


@pytest.mark.parametrize("target", ["work-permit-agent", "training-agent"], ids=["another-agent", "itself"])
def test_an_agent_cannot_hand_a_task_to_an_agent_directly(mesh: Mesh, target: str) -> None:
    since = mesh.marker()
    got = mesh.refused(lambda: mesh.specialist(target, TRAINING).RunTask(_task(target), timeout=10))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CALLER_NOT_ALLOWED"), got
    # Recorded by the specialist that refused it (its refusals must reach the log too).
    mesh.find_record(reason="CALLER_NOT_ALLOWED", since=since, caller=str(TRAINING), contains=["RunTask"])


REENTRY: dict[str, Any] = {
    "SupervisorService/Analyze": lambda m: m.supervisor(TRAINING).Analyze(sup_pb2.AnalyzeRequest(
        user_assertion=m.token("alice", "analyst"), request_text=ANALYSIS.format("WP-10231"), tenant_id="acme"),
        timeout=30),
    "SupervisorService/HandleEvent": lambda m: m.supervisor(TRAINING).HandleEvent(sup_pb2.HandleEventRequest(
        event_id=unique("evt"), tenant_id="acme", training_expired=sup_pb2.TrainingExpired(
            worker_id="W-1003", training_code="NR-10", expired_on="2026-08-15")), timeout=30),
    "DecisionCenterService/SubmitReviewDecision": lambda m: m.center(TRAINING).SubmitReviewDecision(
        dc_pb2.SubmitReviewDecisionRequest(user_assertion=m.token("bob", "reviewer"), review_id="rev-0",
                                           decision=dc_pb2.REVIEW_DECISION_APPROVE, reason="agents never decide"),
        timeout=30),
    "AgentRegistryService/SetAgentStatus": lambda m: m.registry(TRAINING).SetAgentStatus(
        reg_pb2.SetAgentStatusRequest(agent_id="training-agent", status=common_pb2.LIFECYCLE_STATUS_ACTIVE,
                                      reason="let me run"), timeout=30),
}


@pytest.mark.parametrize("rpc", sorted(REENTRY))
def test_an_agent_cannot_re_enter_through_the_supervisor(mesh: Mesh, rpc: str) -> None:
    since = mesh.marker()
    got = mesh.refused(lambda: REENTRY[rpc](mesh))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CALLER_NOT_ALLOWED"), got
    mesh.find_record(reason="CALLER_NOT_ALLOWED", since=since, caller=str(TRAINING), contains=[rpc.split("/")[1]])
    assert not [r for r in mesh.records(start_time=since)
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED], "an agent started an execution"


def test_a_delegation_deeper_than_the_maximum_is_denied_by_the_policy(mesh: Mesh) -> None:
    deep = mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-10231"], depth=50)
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, deep, "workPermit.get", permit_id="WP-10231"))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED"), got
    record = mesh.find_record(execution_id=grants.decode(deep).execution_id, reason="POLICY_DENIED")
    assert any("depth" in code for code in record.policy_decision.reason_codes), record.policy_decision
    # The same grant at depth 1 is answered: depth alone made the difference.
    shallow = mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-10231"], depth=1)
    assert mesh.invoke(WORK_PERMIT, shallow, "workPermit.get", permit_id="WP-10231").output["permit_id"] == "WP-10231"


def test_the_same_event_delivered_again_runs_once(mesh: Mesh) -> None:
    event_id = unique("evt")
    req = sup_pb2.HandleEventRequest(event_id=event_id, tenant_id="acme", training_expired=sup_pb2.TrainingExpired(
        worker_id="W-1003", training_code="NR-10", expired_on="2026-08-15"))
    first = mesh.supervisor(PLATFORM).HandleEvent(req, timeout=60)
    again = [mesh.supervisor(PLATFORM).HandleEvent(req, timeout=60) for _ in range(3)]
    assert not first.duplicate and all(a.duplicate for a in again)
    assert {a.execution.execution_id for a in again} == {first.execution.execution_id}
    started = [r for r in mesh.records(execution_id=first.execution.execution_id)
               if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED]
    assert len(started) == 1 and f"event_id={event_id}" in started[0].reason_codes
