"""Decision Center rules without a mesh: what a human decision may and may not change."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentmesh import assertion, errors
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.actions import ReleaseActions
from supervisor_svc.decision_center import DecisionCenter
from supervisor_svc.executions import ExecutionStore

from .test_actions import FakeDispatcher

BOB = assertion.UserIdentity("acme", "bob", ("reviewer",), "s", "c", "digest-b")


class Policy:
    """ALLOW unless told otherwise; records the operations asked."""

    def __init__(self, effect: int = common_pb2.POLICY_EFFECT_ALLOW) -> None:
        self.effect = effect
        self.operations: list[int] = []

    def __call__(self, request: policy_pb2.AuthorizeRequest) -> policy_pb2.AuthorizeResponse:
        self.operations.append(request.operation)
        return policy_pb2.AuthorizeResponse(decision=common_pb2.PolicyDecision(
            decision_id="d", effect=self.effect, reason_codes=["review.requires_reviewer"]))  # type: ignore[arg-type]


def center_with_conflict(tmp_path: Path, decision: int, status: int,
                         policy: Policy | None = None) -> tuple[DecisionCenter, ExecutionStore, str]:
    store = ExecutionStore(tmp_path / "supervisor.db")
    policy = policy or Policy()
    dispatcher = FakeDispatcher()
    actions = ReleaseActions(store=store, dispatcher=dispatcher, authorize=policy, capabilities={})  # type: ignore[arg-type]
    conflict = pb.Conflict(subject="worker:W-1005/NR-35", agent_a="training-agent", agent_b="compliance-agent")
    review_id = store.add_review(dc_pb2.ReviewItem(execution_id="exe-1", tenant_id="acme",
                                                   kind=dc_pb2.REVIEW_KIND_CONFLICT,
                                                   status=dc_pb2.REVIEW_STATUS_OPEN, requester="alice",
                                                   conflict=conflict))
    conflict.review_id = review_id
    store.save(pb.Execution(execution_id="exe-1", tenant_id="acme", user_id="alice", decision=decision,  # type: ignore[arg-type]
                            status=status, conflicts=[conflict]))  # type: ignore[arg-type]

    def visible(user: assertion.UserIdentity, execution_id: str) -> pb.Execution:
        ex = store.get(execution_id)
        assert ex is not None
        return ex

    center = DecisionCenter(store=store, actions=actions, authorize=policy, dispatcher=dispatcher,  # type: ignore[arg-type]
                            visible=visible)
    return center, store, review_id


def approve(center: DecisionCenter, review_id: str) -> tuple[dc_pb2.ReviewItem, pb.Execution]:
    return center.submit(BOB, dc_pb2.SubmitReviewDecisionRequest(review_id=review_id,
                                                                 decision=dc_pb2.REVIEW_DECISION_APPROVE))


def test_approving_an_open_conflict_recommends_as_a_human_decision(tmp_path: Path) -> None:
    center, _, review_id = center_with_conflict(tmp_path, common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW,
                                                pb.EXECUTION_STATUS_SUCCEEDED)
    review, ex = approve(center, review_id)
    assert review.status == dc_pb2.REVIEW_STATUS_APPROVED
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    assert ex.reason.startswith("HUMAN_REVIEW: approved by acme/bob")


def test_approving_a_conflict_never_lifts_a_definitive_fail_elsewhere(tmp_path: Path) -> None:
    center, _, review_id = center_with_conflict(tmp_path, common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED,
                                                pb.EXECUTION_STATUS_SUCCEEDED)
    review, ex = approve(center, review_id)
    assert review.status == dc_pb2.REVIEW_STATUS_APPROVED
    assert ex.decision == common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED
    assert ex.conflicts[0].resolution.startswith("human: approved by acme/bob")


def test_a_decision_keeps_the_analysis_own_status(tmp_path: Path) -> None:
    center, _, review_id = center_with_conflict(tmp_path, common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW,
                                                pb.EXECUTION_STATUS_PARTIAL)
    _, ex = center.submit(BOB, dc_pb2.SubmitReviewDecisionRequest(
        review_id=review_id, decision=dc_pb2.REVIEW_DECISION_REJECT, reason="the finding stands"))
    assert ex.status == pb.EXECUTION_STATUS_PARTIAL
    assert ex.decision == common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED


def test_a_refused_reviewer_changes_nothing(tmp_path: Path) -> None:
    center, store, review_id = center_with_conflict(tmp_path, common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW,
                                                    pb.EXECUTION_STATUS_SUCCEEDED,
                                                    Policy(common_pb2.POLICY_EFFECT_DENY))
    with pytest.raises(errors.PermissionDenied) as refused:
        approve(center, review_id)
    assert refused.value.reason == "REVIEWER_ROLE_REQUIRED"
    stored = store.get("exe-1")
    assert stored is not None and stored.decision == common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW
    item = store.review(review_id)
    assert item is not None and item.status == dc_pb2.REVIEW_STATUS_OPEN and not item.history


def test_a_decision_is_on_the_record_before_it_applies(tmp_path: Path) -> None:
    center, store, review_id = center_with_conflict(tmp_path, common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW,
                                                    pb.EXECUTION_STATUS_SUCCEEDED)
    dispatcher = center._dispatch
    dispatcher.audit_down = True  # type: ignore[attr-defined]
    for decision, reason in ((dc_pb2.REVIEW_DECISION_APPROVE, ""), (dc_pb2.REVIEW_DECISION_REJECT, "no"),
                             (dc_pb2.REVIEW_DECISION_REQUEST_INFORMATION, "why?")):
        with pytest.raises(errors.Unavailable) as err:
            center.submit(BOB, dc_pb2.SubmitReviewDecisionRequest(review_id=review_id, decision=decision,
                                                                  reason=reason))
        assert err.value.reason == "AUDIT_UNAVAILABLE"
        stored = store.get("exe-1")
        assert stored is not None and stored.decision == common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW
        assert not stored.missing and not stored.conflicts[0].resolution
        item = store.review(review_id)
        assert item is not None and item.status == dc_pb2.REVIEW_STATUS_OPEN and not item.history
    dispatcher.audit_down = False  # type: ignore[attr-defined]
    review, _ = approve(center, review_id)
    assert review.status == dc_pb2.REVIEW_STATUS_APPROVED
    (decided,) = [f for t, f in dispatcher.governing  # type: ignore[attr-defined]
                  if t == audit_pb2.AUDIT_EVENT_TYPE_REVIEW_DECIDED]
    assert decided["reason_codes"][:2] == ["APPROVE", review_id]


def test_another_tenants_review_and_a_missing_one_are_the_same_answer(tmp_path: Path) -> None:
    center, _, review_id = center_with_conflict(tmp_path, common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW,
                                                pb.EXECUTION_STATUS_SUCCEEDED)
    eve = assertion.UserIdentity("globex", "eve", ("reviewer",), "s", "c", "digest-e")
    missing = review_id[:-4] + ("0000" if not review_id.endswith("0000") else "1111")
    answers = []
    for call in (lambda i: center.get(eve, i), lambda i: center.submit(eve, dc_pb2.SubmitReviewDecisionRequest(
            review_id=i, decision=dc_pb2.REVIEW_DECISION_APPROVE))):
        for rid in (review_id, missing):
            with pytest.raises(errors.NotFound) as err:
                call(rid)
            answers.append(err.value.to_status().SerializeToString().replace(rid.encode(), b"<id>"))
    assert len(set(answers)) == 1
    assert center._dispatch.records[-1][1]["reason_codes"] == ["REVIEW_NOT_FOUND"]  # type: ignore[attr-defined]


def test_reading_the_execution_behind_a_review_is_asked_too(tmp_path: Path) -> None:
    center, _, review_id = center_with_conflict(tmp_path, common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW,
                                                pb.EXECUTION_STATUS_SUCCEEDED)
    asked: list[str] = []
    read = center._visible

    def visible(user: assertion.UserIdentity, execution_id: str) -> pb.Execution:
        asked.append(execution_id)
        return read(user, execution_id)

    center._visible = visible
    center.get(BOB, review_id)
    approve(center, review_id)
    assert asked == ["exe-1", "exe-1"]


def test_a_decision_whose_execution_cannot_be_stored_leaves_the_review_open_to_decide_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The review and the execution it moves are one transaction: a failure after the execution's row is written
    (a crash of the process, here the review's own update failing) keeps neither, so the review can be decided
    again rather than being approved with its execution still waiting for it."""
    center, store, review_id = center_with_conflict(tmp_path, common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW,
                                                    pb.EXECUTION_STATUS_SUCCEEDED)
    update = store._update_review

    def crash(item: dc_pb2.ReviewItem) -> None:
        raise RuntimeError("process killed between the execution and its review")

    monkeypatch.setattr(store, "_update_review", crash)
    with pytest.raises(RuntimeError):
        approve(center, review_id)
    stored = store.get("exe-1")
    assert stored is not None and stored.decision == common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW
    assert [r.status for r in store.reviews("acme", execution_id="exe-1")] == [dc_pb2.REVIEW_STATUS_OPEN]
    monkeypatch.setattr(store, "_update_review", update)
    review, ex = approve(center, review_id)  # decided again, as the reviewer's retry does
    assert review.status == dc_pb2.REVIEW_STATUS_APPROVED
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    assert [r.status for r in store.reviews("acme", execution_id="exe-1")] == [dc_pb2.REVIEW_STATUS_APPROVED]


def _second_conflict(store: ExecutionStore) -> str:
    """A second open conflict review of exe-1 (its execution then has two)."""
    conflict = pb.Conflict(subject="worker:W-1005/NR-10", agent_a="training-agent", agent_b="compliance-agent")
    conflict.review_id = store.add_review(dc_pb2.ReviewItem(execution_id="exe-1", tenant_id="acme",
                                                            kind=dc_pb2.REVIEW_KIND_CONFLICT,
                                                            status=dc_pb2.REVIEW_STATUS_OPEN, requester="alice",
                                                            conflict=conflict))
    ex = store.get("exe-1")
    assert ex is not None
    ex.conflicts.append(conflict)
    store.save(ex)
    return conflict.review_id


def reject(center: DecisionCenter, review_id: str) -> tuple[dc_pb2.ReviewItem, pb.Execution]:
    return center.submit(BOB, dc_pb2.SubmitReviewDecisionRequest(review_id=review_id, reason="not safe",
                                                                 decision=dc_pb2.REVIEW_DECISION_REJECT))


def test_a_rejection_closes_the_executions_other_reviews_with_it(tmp_path: Path) -> None:
    center, store, review_id = center_with_conflict(tmp_path, common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW,
                                                    pb.EXECUTION_STATUS_AWAITING_REVIEW)
    other_id = _second_conflict(store)
    review, ex = reject(center, review_id)
    assert review.status == dc_pb2.REVIEW_STATUS_REJECTED
    assert (ex.status, ex.decision) == (pb.EXECUTION_STATUS_SUCCEEDED, common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED)
    other = store.review(other_id)
    assert other is not None and other.status == dc_pb2.REVIEW_STATUS_REJECTED
    assert other.history[-1].reason == f"closed with review {review_id}"
    with pytest.raises(errors.FailedPrecondition) as err:
        approve(center, other_id)
    assert err.value.reason == "REVIEW_CLOSED"


def test_a_rejection_whose_closing_reviews_cannot_be_stored_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rejection, its execution and the reviews it closes are one transaction: a failure storing one of
    them (a crash, here the rejected review's own update failing) keeps none — both reviews stay open, rather
    than the other one closed with its execution still waiting."""
    center, store, review_id = center_with_conflict(tmp_path, common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW,
                                                    pb.EXECUTION_STATUS_AWAITING_REVIEW)
    _second_conflict(store)
    update = store._update_review

    def crash(item: dc_pb2.ReviewItem) -> None:
        if item.review_id == review_id:
            raise RuntimeError("process killed before the rejected review was stored")
        update(item)

    monkeypatch.setattr(store, "_update_review", crash)
    with pytest.raises(RuntimeError):
        reject(center, review_id)
    stored = store.get("exe-1")
    assert stored is not None and stored.status == pb.EXECUTION_STATUS_AWAITING_REVIEW
    assert stored.decision == common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW
    assert [r.status for r in store.reviews("acme", execution_id="exe-1")] == [dc_pb2.REVIEW_STATUS_OPEN] * 2
    monkeypatch.setattr(store, "_update_review", update)
    review, _ = reject(center, review_id)
    assert review.status == dc_pb2.REVIEW_STATUS_REJECTED
    assert [r.status for r in store.reviews("acme", execution_id="exe-1")] == [dc_pb2.REVIEW_STATUS_REJECTED] * 2
