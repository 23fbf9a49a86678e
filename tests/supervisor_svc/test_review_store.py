"""The execution store's reviews: one undecided review per question an execution asks."""

from __future__ import annotations

from pathlib import Path

from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.executions import ExecutionStore


def _conflict(subject: str, execution_id: str = "exe-1") -> dc_pb2.ReviewItem:
    return dc_pb2.ReviewItem(execution_id=execution_id, tenant_id="acme", kind=dc_pb2.REVIEW_KIND_CONFLICT,
                             status=dc_pb2.REVIEW_STATUS_OPEN, requester="alice",
                             conflict=pb.Conflict(subject=subject, agent_a="training-agent",
                                                  agent_b="compliance-agent"))


def _limit(reason: str) -> dc_pb2.ReviewItem:
    return dc_pb2.ReviewItem(execution_id="exe-1", tenant_id="acme", kind=dc_pb2.REVIEW_KIND_LIMIT,
                             status=dc_pb2.REVIEW_STATUS_OPEN, requester="alice",
                             limit=dc_pb2.LimitReached(limit_reason=reason, limit=3, observed=4))


def test_the_same_question_asked_again_gets_the_review_it_had(tmp_path: Path) -> None:
    store = ExecutionStore(tmp_path / "supervisor.db")
    first, to_record = store.open_review(_conflict("worker:W-1005/NR-35"))
    assert to_record and first.review_id
    store.review_on_record(first.review_id)
    again, to_record_again = store.open_review(_conflict("worker:W-1005/NR-35"))
    assert (again.review_id, to_record_again) == (first.review_id, False)
    limit, _ = store.open_review(_limit("MAX_HANDOFFS_EXCEEDED"))
    store.review_on_record(limit.review_id)
    limit_again, limit_to_record = store.open_review(_limit("MAX_HANDOFFS_EXCEEDED"))
    assert (limit_again.review_id, limit_to_record) == (limit.review_id, False)
    assert len(store.reviews("acme", execution_id="exe-1")) == 2


def test_a_review_stored_but_never_recorded_is_recorded_when_asked_again(tmp_path: Path) -> None:
    """A process stopped between storing a review and recording its REVIEW_CREATED: the review asked
    again (on resume) is the same one, and its record is still to be made — until it is noted as made."""
    store = ExecutionStore(tmp_path / "supervisor.db")
    first, _ = store.open_review(_limit("MAX_HANDOFFS_EXCEEDED"))
    reopened = ExecutionStore(tmp_path / "supervisor.db")  # the process that resumes
    again, to_record = reopened.open_review(_limit("MAX_HANDOFFS_EXCEEDED"))
    assert (again.review_id, to_record) == (first.review_id, True)
    reopened.review_on_record(again.review_id)
    reopened.review_on_record(again.review_id)  # noting it twice is harmless
    assert reopened.open_review(_limit("MAX_HANDOFFS_EXCEEDED"))[1] is False


def test_another_question_a_decided_one_or_another_execution_opens_a_new_review(tmp_path: Path) -> None:
    store = ExecutionStore(tmp_path / "supervisor.db")
    first, _ = store.open_review(_conflict("worker:W-1005/NR-35"))
    other_subject, opened = store.open_review(_conflict("worker:W-1005/NR-10"))
    assert opened and other_subject.review_id != first.review_id
    other_limit, opened = store.open_review(_limit("MAX_TOKENS_EXCEEDED"))
    assert opened
    _, opened = store.open_review(_limit("MAX_HANDOFFS_EXCEEDED"))
    assert opened, "another limit reason is another question"
    _, opened = store.open_review(_conflict("worker:W-1005/NR-35", execution_id="exe-2"))
    assert opened, "another execution asks its own"

    first.status = dc_pb2.REVIEW_STATUS_APPROVED
    store.save_review(first)
    reopened, opened = store.open_review(_conflict("worker:W-1005/NR-35"))
    assert opened and reopened.review_id != first.review_id, "a decided review is not asked again"
    assert other_limit.review_id not in {reopened.review_id, first.review_id}
