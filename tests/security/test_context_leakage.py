"""Context leakage: data reaching a context that has no need of it.

The training agent never receives medical notes (context projection) and cannot
fetch them itself; a grant issued for one permit's task cannot read another
permit's workers; the Decision Center's evidence is for reviewers only.
"""

from __future__ import annotations

import json

import grpc
import pytest
from google.protobuf import json_format

from agentmesh import grants
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

from .conftest import ANALYSIS, TRAINING, WORK_PERMIT, Mesh, task_grants, unique, world_permit, world_worker

pytestmark = pytest.mark.integration


def _medical_notes(permit_id: str) -> list[str]:
    notes = [world_worker("acme", w["id"]).get("medical_notes") for w in world_permit("acme", permit_id)["workers"]]
    found = [n for n in notes if n]
    assert found, f"{permit_id} has no worker with medical notes: the test would prove nothing"
    return found


def _text(message: object) -> str:
    return json.dumps(json_format.MessageToDict(message)).lower()  # type: ignore[arg-type]


def test_the_training_agent_never_receives_medical_notes_and_cannot_fetch_them(mesh: Mesh) -> None:
    notes = _medical_notes("WP-10231")
    ex = mesh.analyze(ANALYSIS.format("WP-10231"), mesh.token("alice", "analyst"))
    assert ex.status == sup_pb2.EXECUTION_STATUS_SUCCEEDED, ex.summary
    node = next(n for n in ex.graph.nodes if n.target_agent_id == "training-agent")
    received = _text(node.input)
    assert "medical" not in received and all(n.lower() not in received for n in notes), received
    assert node.projection.digest and not [f for f in node.projection.allowed_fields if "medical" in f]
    # What the log says was delegated is what we see was delegated.
    delegated = [r for r in mesh.records(execution_id=ex.execution_id)
                 if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED and r.agent_id == "training-agent"]
    assert [r.input_digest for r in delegated] == [node.projection.digest]
    training = next(r for r in ex.results if r.agent_id == "training-agent")
    assert all(n.lower() not in _text(training) for n in notes)
    calls = {r.capability_id for r in mesh.records(execution_id=ex.execution_id)
             if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED and r.agent_id == "training-agent"}
    assert calls == {"training.getStatus"}
    # Nor can it reach for them with the grant it was given.
    grant = task_grants(mesh, ex)["training-agent"]
    for capability, field in (("worker.get", {"worker_id": "W-1001"}), ("workPermit.get", {"permit_id": "WP-10231"})):
        got = mesh.refused(lambda capability=capability, field=field: mesh.invoke(TRAINING, grant, capability,
                                                                                   **field))
        assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "GRANT_CAPABILITY_NOT_LISTED"), got
        mesh.find_record(execution_id=ex.execution_id, reason="GRANT_CAPABILITY_NOT_LISTED",
                         where=lambda r, capability=capability: r.capability_id == capability)


def test_the_analysis_shown_to_the_user_carries_no_medical_notes(mesh: Mesh) -> None:
    notes = _medical_notes("WP-10233")
    ex = mesh.analyze(ANALYSIS.format("WP-10233"), mesh.token(unique("ana"), "analyst"))
    text = _text(ex)
    assert all(n.lower() not in text for n in notes), "medical notes reached the execution record"
    assert all(n.lower() not in _text(node.input) for node in ex.graph.nodes for n in notes)


def test_a_grant_of_a_wp_10232_task_cannot_read_wp_10233s_workers(mesh: Mesh) -> None:
    ex = mesh.analyze(ANALYSIS.format("WP-10232"), mesh.token("alice", "analyst"))
    issued = task_grants(mesh, ex)
    others = [w["id"] for w in world_permit("acme", "WP-10233")["workers"]]
    mine = [w["id"] for w in world_permit("acme", "WP-10232")["workers"]]
    assert not set(others) & set(mine)

    permit_grant = issued["work-permit-agent"]
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, permit_grant, "workPermit.get", permit_id="WP-10233"))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.PERMISSION_DENIED, "GRANT_RESOURCE_NOT_LISTED",
                                                 "permit_id"), got
    mesh.find_record(execution_id=ex.execution_id, reason="GRANT_RESOURCE_NOT_LISTED",
                     where=lambda r: r.resource == "permit:WP-10233")
    for note in _medical_notes("WP-10233"):
        assert note not in got.message and note not in json.dumps(got.metadata)

    training_grant = issued["training-agent"]
    got = mesh.refused(lambda: mesh.invoke(TRAINING, training_grant, "training.getStatus", worker_id=others[-1]))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.PERMISSION_DENIED, "GRANT_RESOURCE_NOT_LISTED",
                                                 "worker_id"), got
    mesh.find_record(execution_id=ex.execution_id, reason="GRANT_RESOURCE_NOT_LISTED",
                     where=lambda r: r.resource == f"worker:{others[-1]}")
    # The same grants still do their own task: the refusal is about the resource, not the grant.
    assert mesh.invoke(WORK_PERMIT, permit_grant, "workPermit.get", permit_id="WP-10232").output["permit_id"]
    own = mesh.invoke(TRAINING, training_grant, "training.getStatus", worker_id=mine[0])
    assert own.output["worker_id"] == mine[0]
    assert grants.decode(training_grant).execution_id == ex.execution_id


def test_a_viewer_cannot_read_the_evidence_in_the_decision_center(
        mesh: Mesh, conflict_review: tuple[sup_pb2.Execution, str]) -> None:
    _, review_id = conflict_review
    viewer, since = unique("victor"), mesh.marker()
    token = mesh.token(viewer, "viewer")
    listed = mesh.refused(lambda: mesh.center().ListReviews(dc_pb2.ListReviewsRequest(user_assertion=token),
                                                            timeout=10))
    shown = mesh.refused(lambda: mesh.center().GetReview(dc_pb2.GetReviewRequest(user_assertion=token,
                                                                                 review_id=review_id), timeout=10))
    for got in (listed, shown):
        assert got.code == grpc.StatusCode.PERMISSION_DENIED and got.reason == "REVIEWER_ROLE_REQUIRED", got
    mesh.find_record(reason="REVIEWER_ROLE_REQUIRED", since=since, user_id=viewer, contains=[review_id])
    # A reviewer of the tenant does see it, with both sides' evidence.
    review = mesh.center().GetReview(dc_pb2.GetReviewRequest(user_assertion=mesh.token("bob", "reviewer"),
                                                             review_id=review_id), timeout=10).review
    assert review.conflict.evidence_a and review.conflict.evidence_b
