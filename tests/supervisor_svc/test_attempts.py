"""How an attempt at a task ended, whether it is tried again, and the retry budget (PRD §45)."""

from __future__ import annotations

import pytest

from agentmesh import errors
from agentmesh.v1 import common_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.attempts import (
    AGENT_UNAVAILABLE,
    TRANSIENT,
    RetryBudget,
    idempotent,
    outcome_of,
    result_reason_codes,
    transient_result,
)


def _result(status: int, error_reason: str = "") -> common_pb2.AgentResult:
    return common_pb2.AgentResult(status=status, error_reason=error_reason)  # type: ignore[arg-type]


@pytest.mark.parametrize(("result", "error", "outcome"), [
    (_result(common_pb2.RESULT_STATUS_SUCCESS), None, pb.ATTEMPT_OUTCOME_ANSWERED),
    (_result(common_pb2.RESULT_STATUS_UNCERTAIN), None, pb.ATTEMPT_OUTCOME_ANSWERED),
    (_result(common_pb2.RESULT_STATUS_WAITING), None, pb.ATTEMPT_OUTCOME_ANSWERED),
    (_result(common_pb2.RESULT_STATUS_PARTIAL, "GOVERNANCE_UNAVAILABLE: training.getStatus AUDIT_UNAVAILABLE"), None,
     pb.ATTEMPT_OUTCOME_TRANSIENT_RESULT),
    (_result(common_pb2.RESULT_STATUS_PARTIAL, "GOVERNANCE_UNAVAILABLE: a; GOVERNANCE_UNAVAILABLE: b"), None,
     pb.ATTEMPT_OUTCOME_TRANSIENT_RESULT),
    # A source that was away was already tried again by the capability layer's gateway: an answer.
    (_result(common_pb2.RESULT_STATUS_PARTIAL, "LMS_UNAVAILABLE: training.getStatus ..."), None,
     pb.ATTEMPT_OUTCOME_ANSWERED),
    (_result(common_pb2.RESULT_STATUS_PARTIAL, "LMS_TIMEOUT: a; GOVERNANCE_UNAVAILABLE: b"), None,
     pb.ATTEMPT_OUTCOME_ANSWERED),
    (_result(common_pb2.RESULT_STATUS_PARTIAL, ""), None, pb.ATTEMPT_OUTCOME_ANSWERED),
    (_result(common_pb2.RESULT_STATUS_FAILED, "NOT_AUTHORISED: x"), None, pb.ATTEMPT_OUTCOME_RESULT_FAILED),
    (None, errors.Unavailable("connection refused", reason="UNAVAILABLE"), pb.ATTEMPT_OUTCOME_UNAVAILABLE),
    (None, errors.DeadlineExceeded("too slow", reason="DEADLINE_EXCEEDED"), pb.ATTEMPT_OUTCOME_TIMED_OUT),
    (None, errors.Internal("schema", reason="RESULT_SCHEMA_VIOLATION"), pb.ATTEMPT_OUTCOME_FAILED),
    (None, errors.PermissionDenied("no", reason="GRANT_AUDIENCE_MISMATCH"), pb.ATTEMPT_OUTCOME_FAILED),
])
def test_each_outcome(result: common_pb2.AgentResult | None, error: errors.MeshError | None, outcome: int) -> None:
    assert outcome_of(result, error) == outcome


def test_a_cancelled_call_is_cancelled_whatever_it_failed_with() -> None:
    assert outcome_of(None, errors.Unavailable("x", reason="CANCELLED"), cancelled=True) == \
        pb.ATTEMPT_OUTCOME_CANCELLED


def test_what_is_retried_and_what_means_the_agent_is_down() -> None:
    assert {pb.ATTEMPT_OUTCOME_TRANSIENT_RESULT, pb.ATTEMPT_OUTCOME_UNAVAILABLE,
                         pb.ATTEMPT_OUTCOME_TIMED_OUT, pb.ATTEMPT_OUTCOME_NOT_CALLED} == TRANSIENT
    # A source that was down is no reason for a fallback: another agent would read the same source.
    assert TRANSIENT - {pb.ATTEMPT_OUTCOME_TRANSIENT_RESULT} == AGENT_UNAVAILABLE


def test_reason_codes_of_a_result() -> None:
    result = _result(common_pb2.RESULT_STATUS_PARTIAL, "LMS_TIMEOUT: a, b; GOVERNANCE_UNAVAILABLE: c")
    assert result_reason_codes(result) == ["LMS_TIMEOUT", "GOVERNANCE_UNAVAILABLE"]
    assert not transient_result(result)
    assert transient_result(_result(common_pb2.RESULT_STATUS_PARTIAL, "GOVERNANCE_UNAVAILABLE: c"))


MUTATING = {"workPermit.get": False, "training.getStatus": False, "workPermit.release": True}


@pytest.mark.parametrize(("capabilities", "reads", "why"), [
    (["workPermit.get", "training.getStatus"], True, ""),
    ([], True, ""),
    (["workPermit.get", "workPermit.release"], False, "workPermit.release mutates"),
    (["ghost.read"], False, "ghost.read is not in the capability registry"),
])
def test_only_a_task_that_reads_is_idempotent(capabilities: list[str], reads: bool, why: str) -> None:
    assert idempotent(capabilities, MUTATING) == (reads, why)


def test_without_risk_profiles_nothing_is_idempotent() -> None:
    assert idempotent(["workPermit.get"], None) == (False, "the capability registry's risk profiles are not known")


def test_the_retry_budget_is_spent_once() -> None:
    budget = RetryBudget(2)
    assert [budget.take() for _ in range(3)] == [True, True, False]
    assert budget.left == 0
