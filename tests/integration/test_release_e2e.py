"""Phase two end to end over real processes: release with confirmation, Decision Center, events.

Each test starts from the demo world (reloaded into the capability service's
SQLite file) and puts it back afterwards, so releases never leak into other tests.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest

from agentmesh import errors, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import PLATFORM_CLI
from agentmesh.launcher import demo_world
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import decision_center_service_pb2_grpc as dc_grpc
from agentmesh.v1 import supervisor_service_pb2 as pb
from capability_svc.internal_runtime import InternalStore
from capability_svc.world import load_world

from .conftest import agentmesh_cli, client_tls, peer_address
from .test_analysis_e2e import audit_records, supervisor, token

RELEASE_WP_10231 = "Analyze permit WP-10231 and release it if everything is fine"
ALICE = ("permit-manager",)


def permit_status(cfg: MeshConfig, permit_id: str) -> str:
    permit = InternalStore(cfg.mesh_home.data / "internal.db").scope("acme").get_permit(permit_id)
    assert permit is not None
    return permit.status


@pytest.fixture
def world(mesh: MeshConfig) -> Iterator[MeshConfig]:
    """The demo world before and after the test."""
    store = InternalStore(mesh.mesh_home.data / "internal.db")
    load_world(demo_world(), store)
    yield mesh
    load_world(demo_world(), store)


def center(cfg: MeshConfig) -> dc_grpc.DecisionCenterServiceStub:
    channel = transport.secure_channel(peer_address(cfg, "supervisor"), client_tls(cfg, PLATFORM_CLI),
                                       spiffe.service("supervisor"), default_timeout_s=60)
    return dc_grpc.DecisionCenterServiceStub(channel)


def ask(cfg: MeshConfig, text: str, user: str = "alice", roles: tuple[str, ...] = ALICE,
        **kw: object) -> pb.Execution:
    req = pb.AnalyzeRequest(user_assertion=token(cfg, user=user, roles=roles), request_text=text, tenant_id="acme",
                            **kw)  # type: ignore[arg-type]
    return supervisor(cfg).Analyze(req, timeout=60).execution


def decide(cfg: MeshConfig, review_id: str, decision: int, user: str = "bob", roles: tuple[str, ...] = ("reviewer",),
           tenant: str = "acme", **kw: object) -> dc_pb2.SubmitReviewDecisionResponse:
    return center(cfg).SubmitReviewDecision(dc_pb2.SubmitReviewDecisionRequest(
        user_assertion=token(cfg, tenant=tenant, user=user, roles=roles), review_id=review_id, decision=decision,
        **kw), timeout=60)  # type: ignore[arg-type]


def get(cfg: MeshConfig, execution_id: str, user: str = "alice", roles: tuple[str, ...] = ALICE) -> pb.Execution:
    return supervisor(cfg).GetExecution(pb.GetExecutionRequest(
        user_assertion=token(cfg, user=user, roles=roles), execution_id=execution_id), timeout=30).execution


def confirm(cfg: MeshConfig, ex: pb.Execution, *, user: str = "alice", roles: tuple[str, ...] = ALICE,
            token_: str | None = None, resource_id: str | None = None, decline: bool = False) -> pb.Execution:
    return supervisor(cfg).ConfirmAction(pb.ConfirmActionRequest(
        user_assertion=token(cfg, user=user, roles=roles), execution_id=ex.execution_id,
        confirmation_token=ex.action.confirmation_token if token_ is None else token_,
        capability_id=ex.action.capability_id, resource_id=resource_id or ex.action.resource_id,
        decline=decline), timeout=60).execution


def refused(call: object) -> errors.MeshError:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return errors.from_rpc_error(info.value)


def awaits_approval(ex: pb.Execution) -> None:
    assert ex.status == pb.EXECUTION_STATUS_AWAITING_REVIEW, (ex.status, ex.reason, ex.action.reason)
    assert ex.action.state == pb.ACTION_STATE_AWAITING_APPROVAL, ex.action.reason


def approved_for_confirmation(cfg: MeshConfig, text: str = RELEASE_WP_10231, *, ex: pb.Execution | None = None,
                              **kw: object) -> pb.Execution:
    """Analysis → HUMAN_APPROVAL_REQUIRED → bob approves → the token, as alice sees it."""
    ex = ex or ask(cfg, text, **kw)
    awaits_approval(ex)
    reviews = center(cfg).ListReviews(dc_pb2.ListReviewsRequest(
        user_assertion=token(cfg, user="bob", roles=("reviewer",)), execution_id=ex.execution_id)).reviews
    assert [r.kind for r in reviews] == [dc_pb2.REVIEW_KIND_ACTION_APPROVAL], ex.action.reason
    decided = decide(cfg, reviews[0].review_id, dc_pb2.REVIEW_DECISION_APPROVE, reason="evidence checked")
    assert decided.execution.status == pb.EXECUTION_STATUS_AWAITING_CONFIRMATION, decided.execution.action.reason
    assert decided.execution.action.confirmation_token == "", "the reviewer must never see the requester's token"
    mine = get(cfg, ex.execution_id)
    assert mine.action.confirmation_token
    return mine


def test_wp_10231_is_released_only_after_the_requesters_confirmation(world: MeshConfig) -> None:
    ex = ask(world, RELEASE_WP_10231)
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE, ex.summary
    # workPermit.release is HIGH risk: a human other than the requester approves first (§66).
    awaits_approval(ex)
    assert ex.action.policy_decision.effect == common_pb2.POLICY_EFFECT_HUMAN_APPROVAL_REQUIRED
    assert not ex.action.confirmation_token
    assert permit_status(world, "WP-10231") == "PENDING_RELEASE"

    mine = approved_for_confirmation(world, ex=ex)
    assert mine.action.state == pb.ACTION_STATE_AWAITING_CONFIRMATION
    assert mine.action.approved_by == "bob" and mine.action.approval_review_id
    assert permit_status(world, "WP-10231") == "PENDING_RELEASE", "nothing changes without the confirmation"

    # Another user, another permit, a made-up token: refused, nothing changes. A user who may not even
    # read alice's execution gets no further than the policy engine; a reviewer, who may, is not alice.
    other = refused(lambda: confirm(world, mine, user="carol"))
    assert (other.code, other.reason) == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED")
    reader = refused(lambda: confirm(world, mine, user="bob", roles=("reviewer",)))
    assert (reader.code, reader.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CONFIRMATION_USER_MISMATCH")
    wrong_permit = refused(lambda: confirm(world, mine, resource_id="WP-10232"))
    assert (wrong_permit.reason, wrong_permit.field) == ("CONFIRMATION_ACTION_MISMATCH", "resource_id")
    forged = refused(lambda: confirm(world, mine, token_="not-the-token"))
    assert (forged.reason, forged.field) == ("CONFIRMATION_TOKEN_INVALID", "confirmation_token")
    assert permit_status(world, "WP-10231") == "PENDING_RELEASE"

    done = confirm(world, mine)
    assert done.status == pb.EXECUTION_STATUS_SUCCEEDED, done.action.reason
    assert done.action.state == pb.ACTION_STATE_SUCCEEDED and done.action.verified
    assert permit_status(world, "WP-10231") == "RELEASED"
    release = [r for r in done.results if r.agent_id == "work-permit-agent"][-1]
    assert release.status == common_pb2.RESULT_STATUS_SUCCESS

    replay = refused(lambda: confirm(world, mine))
    assert (replay.code, replay.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "CONFIRMATION_ALREADY_USED")

    records = audit_records(world, execution_id=mine.execution_id)
    confirmations = [r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CONFIRMATION]
    denied = {r.reason_codes[0] for r in confirmations if r.outcome == audit_pb2.AUDIT_OUTCOME_DENIED}
    assert denied == {"CONFIRMATION_USER_MISMATCH", "CONFIRMATION_ACTION_MISMATCH", "CONFIRMATION_TOKEN_INVALID",
                      "CONFIRMATION_ALREADY_USED"}
    assert any(r.outcome == audit_pb2.AUDIT_OUTCOME_SUCCESS for r in confirmations)
    assert any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED and r.user_id == "carol"
               and list(r.reason_codes[:2]) == ["POLICY_DENIED", "OPERATION_KIND_READ_EXECUTION"] for r in records)
    invoked = [r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED
               and r.capability_id == "workPermit.release"]
    assert invoked and invoked[0].policy_decision.effect == common_pb2.POLICY_EFFECT_ALLOW
    assert any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION and r.outcome == audit_pb2.AUDIT_OUTCOME_SUCCESS
               for r in records)

    trail = agentmesh_cli(world.home, "audit", "trail", mine.execution_id)
    assert trail.returncode == 0, trail.stderr
    out = trail.stdout
    for step in ("user:acme/alice", "svc:supervisor", "agent:training-agent", "decision RECOMMENDED_FOR_RELEASE",
                 "HUMAN_APPROVAL_REQUIRED", "user:acme/bob", "REVIEW_DECIDED", "CONFIRMATION_GIVEN",
                 "capability:workPermit.release", "policy: ALLOW", "VERIFIED"):
        assert step in out, f"{step!r} missing from the trail:\n{out}"


def test_an_expired_or_declined_confirmation_changes_nothing(world: MeshConfig) -> None:
    mine = approved_for_confirmation(world, confirmation_ttl_seconds=1)
    time.sleep(1.5)
    expired = refused(lambda: confirm(world, mine))
    assert (expired.code, expired.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "CONFIRMATION_EXPIRED")
    assert get(world, mine.execution_id).action.state == pb.ACTION_STATE_EXPIRED
    assert permit_status(world, "WP-10231") == "PENDING_RELEASE"
    assert any(r.reason_codes[:1] == ["CONFIRMATION_EXPIRED"]
               for r in audit_records(world, execution_id=mine.execution_id))

    again = approved_for_confirmation(world)
    declined = confirm(world, again, decline=True)
    assert declined.action.state == pb.ACTION_STATE_DECLINED
    assert permit_status(world, "WP-10231") == "PENDING_RELEASE"
    assert refused(lambda: confirm(world, again)).reason == "CONFIRMATION_NOT_PENDING"


def test_not_recommended_is_never_released(world: MeshConfig) -> None:
    ex = ask(world, "Analyze permit WP-10232 and release it if everything is fine")
    assert ex.decision == common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED
    assert ex.action.state == pb.ACTION_STATE_NOT_ELIGIBLE and not ex.action.confirmation_token
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED
    assert permit_status(world, "WP-10232") == "PENDING_RELEASE"


def conflict_review(cfg: MeshConfig) -> tuple[pb.Execution, str]:
    ex = ask(cfg, "Analise a permissão WP-10233 e libere se estiver tudo correto")
    assert ex.decision == common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW, ex.summary
    assert ex.action.state == pb.ACTION_STATE_AWAITING_APPROVAL
    reviews = [c.review_id for c in ex.conflicts if c.review_id]
    assert len(reviews) == 1
    return ex, reviews[0]


def test_wp_10233_conflict_approved_by_a_reviewer_is_released_after_confirmation(world: MeshConfig) -> None:
    ex, review_id = conflict_review(world)
    shown = center(world).GetReview(dc_pb2.GetReviewRequest(
        user_assertion=token(world, user="bob", roles=("reviewer",)), review_id=review_id))
    assert shown.review.kind == dc_pb2.REVIEW_KIND_CONFLICT
    assert shown.review.conflict.evidence_a and shown.review.conflict.evidence_b
    assert shown.execution.execution_id == ex.execution_id and not shown.execution.action.confirmation_token

    decided = decide(world, review_id, dc_pb2.REVIEW_DECISION_APPROVE, reason="LMS record checked by phone")
    assert decided.review.status == dc_pb2.REVIEW_STATUS_APPROVED
    assert decided.execution.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    assert decided.execution.status == pb.EXECUTION_STATUS_AWAITING_CONFIRMATION
    assert permit_status(world, "WP-10233") == "PENDING_RELEASE"
    done = confirm(world, get(world, ex.execution_id))
    assert done.action.state == pb.ACTION_STATE_SUCCEEDED, done.action.reason
    assert permit_status(world, "WP-10233") == "RELEASED"


def test_wp_10233_conflict_rejected_is_not_released(world: MeshConfig) -> None:
    ex, review_id = conflict_review(world)
    decided = decide(world, review_id, dc_pb2.REVIEW_DECISION_REJECT, reason="the compliance finding stands")
    assert decided.review.status == dc_pb2.REVIEW_STATUS_REJECTED
    assert decided.execution.decision == common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED
    assert decided.execution.action.state == pb.ACTION_STATE_REJECTED
    assert permit_status(world, "WP-10233") == "PENDING_RELEASE"
    closed = refused(lambda: decide(world, review_id, dc_pb2.REVIEW_DECISION_APPROVE))
    assert (closed.code, closed.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "REVIEW_CLOSED")


def test_request_information_parks_the_review_until_a_decision(world: MeshConfig) -> None:
    ex, review_id = conflict_review(world)
    parked = decide(world, review_id, dc_pb2.REVIEW_DECISION_REQUEST_INFORMATION,
                    reason="send the NR-35 certificate of W-1005")
    assert parked.review.status == dc_pb2.REVIEW_STATUS_INFORMATION_REQUESTED
    assert parked.execution.status == pb.EXECUTION_STATUS_AWAITING_REVIEW
    assert any("NR-35 certificate" in m.text and m.kind == pb.MISSING_KIND_INFORMATION_REQUESTED
               for m in parked.execution.missing)
    assigned = decide(world, review_id, dc_pb2.REVIEW_DECISION_ASSIGN, assignee="erin")
    assert assigned.review.assignee == "erin"
    approved = decide(world, review_id, dc_pb2.REVIEW_DECISION_APPROVE, reason="certificate received")
    assert approved.execution.status == pb.EXECUTION_STATUS_AWAITING_CONFIRMATION


def test_override_needs_an_admin_and_nobody_approves_their_own_release(world: MeshConfig) -> None:
    ex, review_id = conflict_review(world)
    not_admin = refused(lambda: decide(world, review_id, dc_pb2.REVIEW_DECISION_OVERRIDE, reason="ship it",
                                       override_decision=common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE))
    assert (not_admin.code, not_admin.reason) == (grpc.StatusCode.PERMISSION_DENIED, "ADMIN_ROLE_REQUIRED")
    own = refused(lambda: decide(world, review_id, dc_pb2.REVIEW_DECISION_APPROVE, user="alice",
                                 roles=("permit-manager", "reviewer")))
    assert (own.code, own.reason) == (grpc.StatusCode.PERMISSION_DENIED, "OWN_REQUEST")
    analyst = refused(lambda: decide(world, review_id, dc_pb2.REVIEW_DECISION_APPROVE, user="carol",
                                     roles=("analyst",)))
    assert analyst.reason == "REVIEWER_ROLE_REQUIRED"
    other_tenant = refused(lambda: decide(world, review_id, dc_pb2.REVIEW_DECISION_APPROVE, tenant="globex"))
    assert other_tenant.code == grpc.StatusCode.NOT_FOUND
    assert get(world, ex.execution_id).status == pb.EXECUTION_STATUS_AWAITING_REVIEW, "refusals change nothing"
    denials = [r for r in audit_records(world, execution_id=ex.execution_id)
               if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED]
    assert {r.reason_codes[0] for r in denials} >= {"ADMIN_ROLE_REQUIRED", "OWN_REQUEST", "REVIEWER_ROLE_REQUIRED"}

    overridden = decide(world, review_id, dc_pb2.REVIEW_DECISION_OVERRIDE, user="dave", roles=("admin",),
                        reason="site manager accepts the LMS record",
                        override_decision=common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE)
    assert overridden.review.status == dc_pb2.REVIEW_STATUS_OVERRIDDEN
    assert overridden.execution.status == pb.EXECUTION_STATUS_AWAITING_CONFIRMATION
    assert overridden.execution.action.approved_by == "dave"


def test_a_failed_verification_is_compensated_and_reported_failed(world: MeshConfig) -> None:
    for permit in ("WP-10244", "WP-10241"):  # half-applied write, lost write
        mine = approved_for_confirmation(world, f"Analyze permit {permit} and release it if everything is fine")
        done = confirm(world, mine)
        assert done.status == pb.EXECUTION_STATUS_FAILED, done.action.reason
        assert done.action.state == pb.ACTION_STATE_FAILED and not done.action.verified
        assert done.action.compensated, done.action.reason
        assert "VERIFICATION" in done.action.reason
        assert permit_status(world, permit) == "PENDING_RELEASE"


def test_training_expired_event_recommends_and_changes_nothing(world: MeshConfig) -> None:
    event = pb.HandleEventRequest(event_id="evt-nr10-w1003", tenant_id="acme", training_expired=pb.TrainingExpired(
        worker_id="W-1003", training_code="NR-10", expired_on="2026-08-15"))
    ex = supervisor(world).HandleEvent(event, timeout=60)
    assert not ex.duplicate
    run = ex.execution
    assert run.actor_type == common_pb2.ACTOR_TYPE_SYSTEM and run.system_actor == "TrainingExpirationScanner"
    assert run.intent == pb.EXECUTION_INTENT_TRAINING_EXPIRED
    assert run.status == pb.EXECUTION_STATUS_AWAITING_REVIEW, run.summary
    assert "permit:WP-10232" in run.recommended_resources
    assert permit_status(world, "WP-10232") == "PENDING_RELEASE"
    reviews = center(world).ListReviews(dc_pb2.ListReviewsRequest(
        user_assertion=token(world, user="bob", roles=("reviewer",)), execution_id=run.execution_id)).reviews
    assert [r.kind for r in reviews] == [dc_pb2.REVIEW_KIND_RECOMMENDATION]
    again = supervisor(world).HandleEvent(event, timeout=60)
    assert again.duplicate and again.execution.execution_id == run.execution_id
    # Every capability call of the system actor was a read, allowed by its explicit delegation.
    calls = [r for r in audit_records(world, execution_id=run.execution_id)
             if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED]
    assert calls and {r.capability_id for r in calls} <= {"training.getStatus", "workPermit.search", "workPermit.get"}

    bad = refused(lambda: supervisor(world).HandleEvent(pb.HandleEventRequest(
        event_id="evt-x", tenant_id="acme", training_expired=pb.TrainingExpired(worker_id="W-1003",
                                                                                training_code="NR-10",
                                                                                expired_on="yesterday"))))
    assert (bad.code, bad.field) == (grpc.StatusCode.INVALID_ARGUMENT, "training_expired.expired_on")
