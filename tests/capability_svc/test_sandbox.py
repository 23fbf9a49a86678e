"""Sandbox grants (PRD §60): an evaluation's capability calls are answered from the grant's signed mocks —
nothing runs, no key is claimed, no policy is asked, an unmocked or unregistered capability fails closed."""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2

from agentmesh import grants
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2

from .governed import Mesh, error_info


def _struct(data: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(data)
    return out


PERMIT = {"permit_id": "WP-10231", "title": "t", "description": "", "site": "s", "work_type": "ELECTRICAL",
          "status": "PENDING_RELEASE", "valid_from": "2030-06-01", "valid_until": "2030-06-10", "requested_by": "a",
          "released_at": None, "released_by": None, "required_trainings": [], "workers": [], "added_workers": [],
          "provenance": {"source": "permit-registry", "authority": "OFFICIAL_RECORD",
                         "fetched_at": "2030-06-01T09:00:00.000Z", "reference": "permit/WP-10231"}}


def sandbox(mesh: Mesh, *answers: common_pb2.SandboxAnswer, **kw: Any) -> common_pb2.SignedTaskGrant:
    body = grants.decode(mesh.grant(**kw))
    body.sandbox = True
    body.sandbox_answers.extend(answers)
    return mesh.signer.sign(body)


def test_a_sandbox_call_is_answered_from_its_mock_and_nothing_runs(mesh: Mesh) -> None:
    before = mesh.permit("WP-10231")
    grant = sandbox(mesh, common_pb2.SandboxAnswer(capability_id="workPermit.get", input=_struct(
        {"permit_id": "WP-10231"}), output=_struct(PERMIT)))
    answer = mesh.call(mesh.request("workPermit.get", grant=grant, permit_id="WP-10231"))
    assert answer.output["valid_from"] == "2030-06-01"  # the mock's, not the world's
    assert not mesh.policy.requests  # no tenant data read: no policy asked
    (record,) = mesh.audit.records
    assert record[0] == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME
    assert record[1]["reason_codes"] == ["SANDBOX", "MOCK_ANSWER"]
    # A mutation under a sandbox grant changes nothing either, and claims no idempotency key.
    release = sandbox(mesh, common_pb2.SandboxAnswer(capability_id="workPermit.release", output=_struct(
        {"permit_id": "WP-10231", "status": "RELEASED", "previous_status": "PENDING_RELEASE",
         "released_at": "2030-06-01T10:00:00Z", "released_by": "alice", "provenance": PERMIT["provenance"]})))
    released = mesh.call(mesh.request("workPermit.release", "k-sandbox", grant=release, permit_id="WP-10231",
                                         reason="evaluation"))
    assert released.output["status"] == "RELEASED"
    assert mesh.permit("WP-10231") == before
    real = mesh.invoke("workPermit.release", "k-sandbox", permit_id="WP-10231", reason="evaluation")
    assert real.output["status"] == "RELEASED" and not real.replayed


def test_an_unmocked_call_and_an_unregistered_capability_fail_closed(mesh: Mesh) -> None:
    grant = sandbox(mesh, common_pb2.SandboxAnswer(capability_id="workPermit.get", input=_struct(
        {"permit_id": "WP-1"}), output=_struct(PERMIT)), capabilities=["workPermit.get", "ghost.read"])
    err = mesh.refusal(mesh.request("workPermit.get", grant=grant, permit_id="WP-10231"))
    assert (err.code.name, error_info(err).reason) == ("FAILED_PRECONDITION", "SANDBOX_NOT_MOCKED")
    assert "SANDBOX" in mesh.audit.records[-1][1]["reason_codes"]
    ghost = mesh.refusal(mesh.request("ghost.read", grant=grant, permit_id="WP-10231"))
    assert ghost.code.name == "NOT_FOUND"


def test_a_mock_is_held_to_the_output_schema_and_a_mocked_failure_is_that_failure(mesh: Mesh) -> None:
    bad = sandbox(mesh, common_pb2.SandboxAnswer(capability_id="workPermit.get", output=_struct({"x": 1})))
    err = mesh.refusal(mesh.request("workPermit.get", grant=bad, permit_id="WP-10231"))
    assert error_info(err).reason == "SANDBOX_ANSWER_INVALID"
    down = sandbox(mesh, common_pb2.SandboxAnswer(capability_id="workPermit.get", error_code="DEADLINE_EXCEEDED",
                                                  error_reason="DEADLINE_EXCEEDED"))
    late = mesh.refusal(mesh.request("workPermit.get", grant=down, permit_id="WP-10231"))
    assert (late.code.name, error_info(late).reason) == ("DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED")
    internal = sandbox(mesh, common_pb2.SandboxAnswer(capability_id="workPermit.get", error_code="INTERNAL"))
    assert mesh.refusal(mesh.request("workPermit.get", grant=internal, permit_id="WP-10231")).code.name == \
        "UNAVAILABLE"


def test_a_sandbox_grant_still_needs_its_signature_and_its_audience(mesh: Mesh) -> None:
    grant = sandbox(mesh, common_pb2.SandboxAnswer(capability_id="workPermit.get", output=_struct(PERMIT)))
    forged = common_pb2.SignedTaskGrant()
    forged.CopyFrom(grant)
    body = grants.decode(grant)
    body.sandbox_answers[0].output.update({"status": "RELEASED"})
    forged.grant = body.SerializeToString(deterministic=True)
    assert mesh.refusal(mesh.request("workPermit.get", grant=forged, permit_id="WP-10231")).code.name == \
        "UNAUTHENTICATED"
    other = mesh.refusal(mesh.request("workPermit.get", grant=grant, permit_id="WP-10231"),
                         caller="spiffe://agentmesh.local/agent/risk-agent")
    assert error_info(other).reason == "GRANT_AUDIENCE_MISMATCH"


def test_a_sandbox_answer_whose_record_cannot_be_kept_is_withheld(mesh: Mesh) -> None:
    grant = sandbox(mesh, common_pb2.SandboxAnswer(capability_id="workPermit.get", output=_struct(PERMIT)))
    mesh.audit.outbox_broken = True
    err = mesh.refusal(mesh.request("workPermit.get", grant=grant, permit_id="WP-10231"))
    assert (err.code.name, error_info(err).reason) == ("UNAVAILABLE", "AUDIT_UNAVAILABLE")
