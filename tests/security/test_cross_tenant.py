"""Cross-tenant requests: an acme caller reaching for globex, and globex users reaching for acme.

A foreign resource must look exactly like a missing one at every layer (status,
message, metadata), so nothing about another tenant can be learned; the audit
record says what really happened.
"""

from __future__ import annotations

import json

import grpc
import pytest
from google.protobuf import json_format

from agentmesh import grants
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

from .conftest import (
    ANALYSIS,
    TRAINING,
    WORK_PERMIT,
    Mesh,
    Refusal,
    refusal_of,
    unique,
    world_permit,
    world_tenant,
    world_worker,
)

pytestmark = pytest.mark.integration


def _same_answer(foreign: Refusal, missing: Refusal, foreign_id: str, missing_id: str) -> None:
    """Byte-identical once the id asked for is swapped: status, reason, message, metadata and details."""
    assert len(foreign_id) == len(missing_id), "ids of one length, so the encoded details compare byte for byte"
    assert foreign.code == missing.code, (foreign, missing)
    assert foreign.reason == missing.reason, (foreign, missing)
    assert foreign.metadata == missing.metadata, (foreign, missing)
    assert foreign.message.replace(foreign_id, "<id>") == missing.message.replace(missing_id, "<id>"), (
        foreign, missing)
    assert foreign.details.replace(foreign_id.encode(), b"<id>") == missing.details.replace(missing_id.encode(),
                                                                                           b"<id>")


def lookalike(some_id: str) -> str:
    """An id of the same shape and length that names nothing."""
    prefix, _, rest = some_id.rpartition("-")
    return f"{prefix}-{'0' * len(rest)}" if prefix else "0" * len(some_id)


def test_a_request_naming_another_tenant_is_refused_and_audited(mesh: Mesh) -> None:
    user, since = unique("mallory"), mesh.marker()
    got = mesh.refused(lambda: mesh.analyze("Analyze permit WP-20001 for tenant globex and tell me if it can be "
                                            "released", mesh.token(user, "analyst")))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "TENANT_MISMATCH"), got
    mesh.find_record(reason="TENANT_MISMATCH", since=since, user_id=user)


def test_a_tenant_id_other_than_the_assertions_is_refused_and_audited(mesh: Mesh) -> None:
    user, since = unique("mallory"), mesh.marker()
    got = mesh.refused(lambda: mesh.analyze(ANALYSIS.format("WP-20001"), mesh.token(user, "analyst"),
                                            tenant="globex"))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.PERMISSION_DENIED, "TENANT_MISMATCH",
                                                 "tenant_id"), got
    mesh.find_record(reason="TENANT_MISMATCH", since=since, user_id=user)


def test_an_analysis_of_another_tenants_permit_reads_like_one_of_a_missing_permit(mesh: Mesh) -> None:
    token = mesh.token(unique("mallory"), "analyst")
    foreign = mesh.analyze(ANALYSIS.format("WP-20001"), token)
    missing = mesh.analyze(ANALYSIS.format("WP-99999"), token)
    assert (foreign.status, foreign.decision, foreign.reason) == (missing.status, missing.decision, missing.reason)
    assert foreign.summary.replace("WP-20001", "<id>") == missing.summary.replace("WP-99999", "<id>")
    assert [m.text.replace("WP-20001", "<id>") for m in foreign.missing] == [
        m.text.replace("WP-99999", "<id>") for m in missing.missing]
    text = json.dumps(json_format.MessageToDict(foreign)).lower()
    globex = world_permit("globex", "WP-20001")
    for secret in ("globex", globex["title"], globex["site"],
                   *(world_worker("globex", w["id"])["name"] for w in globex["workers"])):
        assert secret.lower() not in text, f"{secret!r} of tenant globex reached an acme user"
    # The log says the truth: the permit belongs to another tenant.
    denial = mesh.find_record(execution_id=foreign.execution_id, reason="RESOURCE_NOT_FOUND",
                              where=lambda r: r.resource == "permit:WP-20001")
    assert "tenant.isolation" in denial.policy_decision.reason_codes


def test_the_capability_answers_for_a_foreign_permit_exactly_as_for_a_missing_one(mesh: Mesh) -> None:
    grant = mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-20001", "permit:WP-99999"])
    foreign = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, grant, "workPermit.get", permit_id="WP-20001"))
    missing = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, grant, "workPermit.get", permit_id="WP-99999"))
    assert (foreign.code, foreign.reason) == (grpc.StatusCode.NOT_FOUND, "RESOURCE_NOT_FOUND"), foreign
    assert foreign.message == "'WP-20001' not found" and foreign.metadata == {}, foreign
    _same_answer(foreign, missing, "WP-20001", "WP-99999")
    execution_id = grants.decode(grant).execution_id
    record = mesh.find_record(execution_id=execution_id, reason="RESOURCE_NOT_FOUND",
                              where=lambda r: r.resource == "permit:WP-20001")
    assert "tenant.isolation" in record.policy_decision.reason_codes
    mesh.find_record(execution_id=execution_id, reason="RESOURCE_NOT_FOUND",
                     where=lambda r: r.resource == "permit:WP-99999")


def test_the_capability_answers_for_a_foreign_worker_exactly_as_for_an_unknown_one(mesh: Mesh) -> None:
    """globex's W-2002 (who has medical notes) must be indistinguishable from a worker nobody has."""
    foreign_id, missing_id = "W-2002", "W-9999"
    assert world_worker("globex", foreign_id)
    assert all(w["id"] != missing_id for t in ("acme", "globex") for w in world_tenant(t)["workers"])
    assert all(w["id"] != foreign_id for w in world_tenant("acme")["workers"])
    answers = []
    for worker in (foreign_id, missing_id):
        grant = mesh.grant(TRAINING, ["training.getStatus"], [f"worker:{worker}"])
        try:
            resp = mesh.invoke(TRAINING, grant, "training.getStatus", worker_id=worker)
            out = json_format.MessageToDict(resp.output)
            out.pop("provenance", None)
            answers.append(("ok", json.dumps(out, sort_keys=True).replace(worker, "<id>")))
        except grpc.RpcError as err:
            got = refusal_of(err)
            mesh.refusals.append(got)
            answers.append(("refused", got.code.name, got.reason, got.message.replace(worker, "<id>"),
                            json.dumps(got.metadata, sort_keys=True)))
    assert answers[0] == answers[1], f"another tenant's worker is told apart from an unknown one: {answers}"
    records = mesh.records(capability_id="training.getStatus")
    foreign_records = [r for r in records if r.resource == f"worker:{foreign_id}"]
    assert foreign_records and any("tenant.isolation" in r.policy_decision.reason_codes for r in foreign_records)


def test_an_execution_of_another_tenant_is_not_found_exactly_like_a_missing_one(
        mesh: Mesh, alice_execution: sup_pb2.Execution) -> None:
    grace, since = unique("grace"), mesh.marker()
    token = mesh.token(grace, "admin", tenant="globex")
    theirs = alice_execution.execution_id
    none = lookalike(theirs)
    stub = mesh.supervisor()
    calls = {
        "GetExecution": lambda eid: stub.GetExecution(sup_pb2.GetExecutionRequest(user_assertion=token,
                                                                                  execution_id=eid), timeout=10),
        "WatchExecution": lambda eid: stub.WatchExecution(sup_pb2.WatchExecutionRequest(user_assertion=token,
                                                                                        execution_id=eid), timeout=10),
        "CancelExecution": lambda eid: stub.CancelExecution(sup_pb2.CancelExecutionRequest(
            user_assertion=token, execution_id=eid, reason="attack"), timeout=10),
    }
    for name, call in calls.items():
        foreign = mesh.refused(lambda call=call: call(theirs))
        missing = mesh.refused(lambda call=call: call(none))
        assert (foreign.code, foreign.reason) == (grpc.StatusCode.NOT_FOUND, "EXECUTION_NOT_FOUND"), (name, foreign)
        _same_answer(foreign, missing, theirs, none)
    for eid in (theirs, none):
        mesh.find_record(reason="EXECUTION_NOT_FOUND", since=since, user_id=grace, contains=[eid])
    after = mesh.supervisor().GetExecution(sup_pb2.GetExecutionRequest(
        user_assertion=mesh.token("alice", "permit-manager"), execution_id=theirs), timeout=10).execution
    assert after.status == alice_execution.status


def test_a_review_of_another_tenant_is_not_found_and_stays_undecided(
        mesh: Mesh, conflict_review: tuple[sup_pb2.Execution, str]) -> None:
    _, review_id = conflict_review
    grace, since = unique("grace"), mesh.marker()
    token = mesh.token(grace, "admin", tenant="globex")
    center = mesh.center()
    foreign = mesh.refused(lambda: center.GetReview(dc_pb2.GetReviewRequest(user_assertion=token,
                                                                            review_id=review_id), timeout=10))
    none = lookalike(review_id)
    missing = mesh.refused(lambda: center.GetReview(dc_pb2.GetReviewRequest(user_assertion=token,
                                                                            review_id=none), timeout=10))
    assert (foreign.code, foreign.reason) == (grpc.StatusCode.NOT_FOUND, "REVIEW_NOT_FOUND"), foreign
    _same_answer(foreign, missing, review_id, none)
    decided = mesh.refused(lambda: center.SubmitReviewDecision(dc_pb2.SubmitReviewDecisionRequest(
        user_assertion=token, review_id=review_id, decision=dc_pb2.REVIEW_DECISION_APPROVE, reason="attack"),
        timeout=30))
    assert (decided.code, decided.reason) == (grpc.StatusCode.NOT_FOUND, "REVIEW_NOT_FOUND"), decided
    mesh.find_record(reason="REVIEW_NOT_FOUND", since=since, user_id=grace, contains=[review_id])
    review = center.GetReview(dc_pb2.GetReviewRequest(user_assertion=mesh.token("bob", "reviewer"),
                                                      review_id=review_id), timeout=10).review
    assert review.status == dc_pb2.REVIEW_STATUS_OPEN
    assert all(e.reviewer != grace for e in review.history)
    # No record says a globex user decided anything.
    assert not [r for r in mesh.records(start_time=since)
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_REVIEW_DECIDED and r.user_id == grace]


def test_a_grant_of_one_tenant_does_not_reach_into_another(mesh: Mesh) -> None:
    """A globex grant naming acme's permit is refused like any missing permit, never answered."""
    grant = mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-10231"], user=unique("grace"), tenant="globex")
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, grant, "workPermit.get", permit_id="WP-10231"))
    assert (got.code, got.reason, got.message, got.metadata) == (
        grpc.StatusCode.NOT_FOUND, "RESOURCE_NOT_FOUND", "'WP-10231' not found", {}), got
    record = mesh.find_record(execution_id=grants.decode(grant).execution_id, reason="RESOURCE_NOT_FOUND")
    assert record.tenant_id == "globex" and record.resource == "permit:WP-10231"
    assert "tenant.isolation" in record.policy_decision.reason_codes
    assert record.policy_decision.effect == common_pb2.POLICY_EFFECT_DENY
