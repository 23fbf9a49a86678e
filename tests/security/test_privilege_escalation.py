"""Privilege escalation: doing more than one's role allows, or acting as someone else.

A viewer reading or cancelling alice's work, a user forging the roles in their
assertion, an analyst asking for a release, a requester approving their own
request, another user replaying alice's idempotency key.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from typing import Any

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import assertion, grants
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

from .conftest import ANALYSIS, RELEASE, WORK_PERMIT, Mesh, sha256_hex, unique

pytestmark = pytest.mark.integration


def _get(mesh: Mesh, token: str, execution_id: str) -> sup_pb2.Execution:
    return mesh.supervisor().GetExecution(sup_pb2.GetExecutionRequest(user_assertion=token,
                                                                      execution_id=execution_id), timeout=10).execution


def _permit_status(mesh: Mesh, permit_id: str) -> str:
    grant = mesh.grant(WORK_PERMIT, ["workPermit.get"], [f"permit:{permit_id}"])
    return str(mesh.invoke(WORK_PERMIT, grant, "workPermit.get", permit_id=permit_id).output["status"])


# ------------------------------------------------------------------ executions are private


def test_a_viewer_cannot_read_another_users_execution(mesh: Mesh, alice_execution: sup_pb2.Execution) -> None:
    victor, since = unique("victor"), mesh.marker()
    token = mesh.token(victor, "viewer")
    eid = alice_execution.execution_id
    read = mesh.refused(lambda: _get(mesh, token, eid))
    assert (read.code, read.reason) == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED"), read
    watch = mesh.refused(lambda: mesh.supervisor().WatchExecution(sup_pb2.WatchExecutionRequest(
        user_assertion=token, execution_id=eid), timeout=10))
    assert (watch.code, watch.reason) == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED"), watch
    record = mesh.find_record(reason="POLICY_DENIED", since=since, user_id=victor, contains=[eid])
    assert record.policy_decision.effect == common_pb2.POLICY_EFFECT_DENY
    # The requester and a reviewer of the tenant do read it: the refusal is about the viewer, not the execution.
    assert _get(mesh, mesh.token("alice", "permit-manager"), eid).execution_id == eid
    assert _get(mesh, mesh.token(unique("rita"), "reviewer"), eid).decision == alice_execution.decision


def test_no_one_but_the_requester_or_an_admin_cancels_a_running_analysis(mesh: Mesh) -> None:
    alice = mesh.token("alice", "permit-manager")
    # WP-10234's LMS lookups hang until their deadline: the analysis runs for seconds.
    started = mesh.supervisor().Analyze(sup_pb2.AnalyzeRequest(
        user_assertion=alice, request_text=ANALYSIS.format("WP-10234"), tenant_id="acme", detach=True),
        timeout=30).execution
    eid = started.execution_id
    try:
        since = mesh.marker()
        for role in ("viewer", "reviewer"):
            intruder = unique(f"{role}-intruder")
            got = mesh.refused(lambda intruder=intruder, role=role: mesh.supervisor().CancelExecution(
                sup_pb2.CancelExecutionRequest(user_assertion=mesh.token(intruder, role), execution_id=eid,
                                               reason="attack"), timeout=10))
            assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED"), (role, got)
            mesh.find_record(reason="POLICY_DENIED", since=since, user_id=intruder, contains=[eid])
        assert _get(mesh, alice, eid).status == sup_pb2.EXECUTION_STATUS_RUNNING, "a refused cancel stopped it"
    finally:
        try:
            done: sup_pb2.Execution | None = mesh.supervisor().CancelExecution(sup_pb2.CancelExecutionRequest(
                user_assertion=alice, execution_id=eid, reason="end of test"), timeout=30).execution
        except grpc.RpcError:
            done = None
    assert done is not None and done.status == sup_pb2.EXECUTION_STATUS_CANCELLED, "the requester could not cancel"


# ------------------------------------------------------------------ forged assertions


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def _claims(user: str, **over: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {"iss": assertion.DEV_ISSUER, "aud": assertion.AUDIENCE, "sub": user, "tenant": "acme",
              "roles": ["admin"], "sid": "ses-x", "cid": "conv-x", "iat": now, "nbf": now - 5, "exp": now + 600,
              "jti": uuid.uuid4().hex}
    claims.update(over)
    return claims


def _idp(mesh: Mesh) -> Ed25519PrivateKey:
    mesh.token("warm-up")  # loads the identity provider's key
    assert mesh._idp is not None
    return mesh._idp


FORGERIES = {
    "own-key": ("ASSERTION_INVALID", lambda m, u: jwt.encode(_claims(u), Ed25519PrivateKey.generate(),
                                                             algorithm="EdDSA")),
    "alg-none": ("ASSERTION_INVALID", lambda m, u: f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(_claims(u))}."),
    "expired": ("ASSERTION_EXPIRED", lambda m, u: m.token(u, "admin", ttl_s=-120)),
    "wrong-audience": ("ASSERTION_INVALID", lambda m, u: jwt.encode(_claims(u, aud="another-service"), _idp(m),
                                                                    algorithm="EdDSA")),
    "wrong-issuer": ("ASSERTION_INVALID", lambda m, u: jwt.encode(_claims(u, iss="https://evil.example"), _idp(m),
                                                                  algorithm="EdDSA")),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_assertion_claiming_admin_is_rejected_and_audited_by_digest(mesh: Mesh, forgery: str) -> None:
    reason, make = FORGERIES[forgery]
    user, since = unique("mallory"), mesh.marker()
    token = mesh.remember_assertion(make(mesh, user))
    got = mesh.refused(lambda: mesh.analyze(RELEASE.format("WP-10231"), token))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.UNAUTHENTICATED, reason, "user_assertion"), got
    record = mesh.find_record(reason=reason, since=since, contains=[f"assertion_sha256={sha256_hex(token)}"])
    assert record.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED
    assert not [r for r in mesh.records(start_time=since)
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED and r.user_id == user]


# ------------------------------------------------------------------ doing what the role does not allow


def test_an_analyst_asking_for_a_release_is_denied_by_the_policy_and_nothing_changes(mesh: Mesh) -> None:
    before = _permit_status(mesh, "WP-10231")
    ex = mesh.analyze(RELEASE.format("WP-10231"), mesh.token(unique("andy"), "analyst"))
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE, ex.summary
    assert ex.action.state == sup_pb2.ACTION_STATE_DENIED, (ex.action.state, ex.action.reason)
    assert ex.action.policy_decision.effect == common_pb2.POLICY_EFFECT_DENY
    record = mesh.find_record(execution_id=ex.execution_id, event_types=(audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION,),
                              where=lambda r: r.capability_id == "workPermit.release")
    assert record.policy_decision.effect == common_pb2.POLICY_EFFECT_DENY
    assert not [r for r in mesh.records(execution_id=ex.execution_id)
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED
                and r.capability_id == "workPermit.release"]
    assert _permit_status(mesh, "WP-10231") == before


def test_a_requester_cannot_approve_their_own_release(mesh: Mesh) -> None:
    olga = unique("olga")
    token = mesh.token(olga, "permit-manager", "reviewer")
    ex = mesh.analyze(RELEASE.format("WP-10231"), token)
    assert ex.action.state == sup_pb2.ACTION_STATE_AWAITING_APPROVAL, (ex.action.state, ex.action.reason)
    reviews = mesh.center().ListReviews(dc_pb2.ListReviewsRequest(
        user_assertion=mesh.token("bob", "reviewer"), execution_id=ex.execution_id), timeout=10).reviews
    assert [r.kind for r in reviews] == [dc_pb2.REVIEW_KIND_ACTION_APPROVAL]
    review_id = reviews[0].review_id
    since = mesh.marker()
    got = mesh.refused(lambda: mesh.center().SubmitReviewDecision(dc_pb2.SubmitReviewDecisionRequest(
        user_assertion=token, review_id=review_id, decision=dc_pb2.REVIEW_DECISION_APPROVE, reason="looks fine"),
        timeout=30))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "OWN_REQUEST"), got
    mesh.find_record(reason="OWN_REQUEST", since=since, user_id=olga, contains=[review_id])
    review = mesh.center().GetReview(dc_pb2.GetReviewRequest(user_assertion=mesh.token("bob", "reviewer"),
                                                             review_id=review_id), timeout=10).review
    assert review.status == dc_pb2.REVIEW_STATUS_OPEN
    assert _get(mesh, token, ex.execution_id).action.state == sup_pb2.ACTION_STATE_AWAITING_APPROVAL


def test_another_user_replaying_an_idempotency_key_gets_nothing_and_is_audited(mesh: Mesh) -> None:
    permit = "WP-10243"
    current = mesh.invoke(WORK_PERMIT, mesh.grant(WORK_PERMIT, ["workPermit.get"], [f"permit:{permit}"]),
                          "workPermit.get", permit_id=permit).output
    # A write that changes nothing (the same end date), so the world stays as the other tests expect it.
    args = {"permit_id": permit, "valid_until": current["valid_until"], "reason": "security evaluation"}
    digest = grants.action_digest("workPermit.updateValidity", args)

    def grant_for(user: str, roles: tuple[str, ...]) -> common_pb2.SignedTaskGrant:
        return mesh.grant(WORK_PERMIT, ["workPermit.updateValidity"], [f"permit:{permit}"], user=user, roles=roles,
                          confirmed_action_digest=digest, confirmation_id=unique("conf"))

    key = unique("idem")
    first = mesh.invoke(WORK_PERMIT, grant_for("alice", ("permit-manager",)), "workPermit.updateValidity",
                        idempotency_key=key, **args)
    assert first.verified and not first.replayed
    victor = unique("victor")
    stolen = grant_for(victor, ("viewer",))
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, stolen, "workPermit.updateValidity", idempotency_key=key,
                                           **args))
    assert (got.code, got.reason) == (grpc.StatusCode.ABORTED, "IDEMPOTENCY_KEY_REUSED"), got
    mesh.find_record(execution_id=grants.decode(stolen).execution_id, reason="IDEMPOTENCY_KEY_REUSED",
                     user_id=victor)
    # alice's own replay is answered, after a new decision, and recorded as a replay.
    mine = grant_for("alice", ("permit-manager",))
    again = mesh.invoke(WORK_PERMIT, mine, "workPermit.updateValidity", idempotency_key=key, **args)
    assert again.replayed and again.output == first.output
    assert again.decision.effect == common_pb2.POLICY_EFFECT_ALLOW
    assert again.decision.decision_id != first.decision.decision_id, "a replay must be authorised again"
    mesh.find_record(execution_id=grants.decode(mine).execution_id, event_types=None, outcome=None,
                     where=lambda r: "IDEMPOTENT_REPLAY" in r.reason_codes)
