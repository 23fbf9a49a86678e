"""Work-permit agent, phase two: a verified release (§67, §73) and the permits a training affects (§44, §28).

Failure never looks like success: every failed call of a release is a FAILED
result naming why, and a release counts only once the agent's own read-back
shows RELEASED.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from agentmesh import errors
from agentmesh.v1 import common_pb2 as c

AGENT = "work-permit-agent"
FACT, RECOMMENDATION, UNCERTAINTY = c.STATEMENT_KIND_FACT, c.STATEMENT_KIND_RECOMMENDATION, c.STATEMENT_KIND_UNCERTAINTY
RELEASE_INPUT: dict[str, Any] = {"operation": "release", "permit_id": "WP-1", "reason": "all checks passed",
                                 "idempotency_key": "exec-1:release:WP-1"}


def provenance(reference: str) -> dict[str, str]:
    return {"source": "permit-registry", "authority": "OFFICIAL_RECORD", "fetched_at": "2026-11-30T09:00:00.000Z",
            "reference": reference}


def permit(permit_id: str, status: str, *, trainings: list[str] | None = None, workers: tuple[str, ...] = ("W-1",),
           released: bool | None = None) -> dict[str, Any]:
    """A ``workPermit.get`` output."""
    done = status == "RELEASED" if released is None else released
    return {
        "permit_id": permit_id, "title": "t", "description": "", "site": "s", "work_type": "ELECTRICAL",
        "status": status, "valid_from": "2026-11-30", "valid_until": "2026-12-10", "requested_by": "alice",
        "released_at": "2026-11-30T09:00:00Z" if done else None, "released_by": "alice" if done else None,
        "required_trainings": ["NR-10"] if trainings is None else trainings,
        "workers": [{"worker_id": w, "name": "n", "job_title": "j", "company": "c", "permit_role": "EXECUTOR",
                     "medical_notes": "asthma"} for w in workers],
        "provenance": provenance(f"permit/{permit_id}"),
    }


def released(permit_id: str = "WP-1") -> dict[str, Any]:
    """A ``workPermit.release`` output."""
    return {"permit_id": permit_id, "status": "RELEASED", "previous_status": "PENDING_RELEASE",
            "released_at": "2026-11-30T09:00:00Z", "released_by": "alice",
            "provenance": provenance(f"permit/{permit_id}/release")}


def search(*permits: tuple[str, str], truncated: bool = False) -> dict[str, Any]:
    """A ``workPermit.search`` output listing ``(permit_id, status)``."""
    return {"permits": [{"permit_id": p, "title": "t", "site": "s", "work_type": "ELECTRICAL", "status": s,
                         "valid_from": "2026-11-30", "valid_until": "2026-12-10"} for p, s in permits],
            "count": len(permits), "truncated": truncated, "provenance": provenance("permits?worker_id=W-1")}


def result_of(result: c.AgentResult) -> dict[str, Any]:
    data: dict[str, Any] = json_format.MessageToDict(result.result)
    return data


def codes(result: c.AgentResult, kind: int, subject: str | None = None) -> list[str]:
    return [s.code for s in result.statements if s.kind == kind and (subject is None or s.subject == subject)]


# --- release ---------------------------------------------------------------------------------------

def test_a_release_read_back_as_released_succeeds(fake, run_agent, checked) -> None:
    fake.answer("workPermit.release", "WP-1", released())
    fake.answer("workPermit.get", "WP-1", permit("WP-1", "RELEASED"))
    result = run_agent(AGENT, RELEASE_INPUT, fake)
    parsed = checked(result, AGENT)
    assert result.status == c.RESULT_STATUS_SUCCESS and not result.error_reason
    assert parsed.verdict.value == "PASS"
    assert {k: v.value for k, v in parsed.subjects.items()} == {"permit:WP-1/release": "PASS"}
    assert result_of(result)["release"] == {
        "permit_id": "WP-1", "status": "RELEASED", "previous_status": "PENDING_RELEASE",
        "released_at": "2026-11-30T09:00:00Z", "released_by": "alice", "verified": True}
    (fact,) = [s for s in result.statements if s.code == "PERMIT_RELEASED"]
    assert fact.kind == FACT and fact.subject == "permit:WP-1/release"
    # Both answers are cited: the release and the independent read-back.
    assert sorted(result.evidence[i].capability for i in fact.evidence_indexes) == [
        "workPermit.get@1.1.0", "workPermit.release@1.0.0"]
    # The release carries the task's idempotency key; the read-back follows it.
    assert [name for name, _ in fake.calls] == ["workPermit.release", "workPermit.get"]
    assert fake.calls[0][1] == {"permit_id": "WP-1", "reason": "all checks passed"}
    assert fake.idempotency_keys == ["exec-1:release:WP-1", None]
    assert parsed.values.get("permit") is not None and parsed.values.get("permit")["status"] == "RELEASED"
    assert "asthma" not in str(result)
    assert result.versions.capability_version == "workPermit.get@1.1.0,workPermit.release@1.0.0"


def test_a_release_that_fails_verification_fails_naming_the_compensation(fake, run_agent) -> None:
    fake.answer("workPermit.release", "WP-1", errors.Aborted(
        "workPermit.release@1.0.0 on 'WP-1' was acknowledged but its effect is not visible (EFFECT_NOT_VISIBLE)",
        reason="VERIFICATION_FAILED", metadata={"compensated": "true", "restored": "status=PENDING_RELEASE"}))
    result = run_agent(AGENT, RELEASE_INPUT, fake)
    assert result.status == c.RESULT_STATUS_FAILED
    assert result.error_reason.startswith("RELEASE_VERIFICATION_FAILED: workPermit.release VERIFICATION_FAILED: ")
    assert result.error_reason.endswith("; compensated: true, restored status=PENDING_RELEASE")
    data = result_of(result)
    assert data["verdict"] == "UNKNOWN" and data["subjects"] == {}
    assert data["release"] == {"permit_id": "WP-1", "verified": False, "reason_code": "VERIFICATION_FAILED",
                               "compensated": True, "restored": "status=PENDING_RELEASE"}
    assert codes(result, UNCERTAINTY) == ["RELEASE_VERIFICATION_FAILED"] and not codes(result, FACT)
    assert [name for name, _ in fake.calls] == ["workPermit.release"]


def test_a_verification_failure_without_metadata_still_fails(fake, run_agent) -> None:
    fake.answer("workPermit.release", "WP-1", errors.Aborted("not visible", reason="VERIFICATION_FAILED"))
    result = run_agent(AGENT, RELEASE_INPUT, fake)
    assert result.status == c.RESULT_STATUS_FAILED
    assert result.error_reason == "RELEASE_VERIFICATION_FAILED: workPermit.release VERIFICATION_FAILED: not visible"
    assert result_of(result)["release"] == {"permit_id": "WP-1", "verified": False,
                                            "reason_code": "VERIFICATION_FAILED"}


@pytest.mark.parametrize(("read_back", "said"), [
    (permit("WP-1", "PENDING_RELEASE"), "workPermit.get reads back PENDING_RELEASE"),
    (errors.DeadlineExceeded("timed out", reason="DEADLINE_EXCEEDED"), "the read-back failed: PERMIT_REGISTRY_TIMEOUT"),
], ids=["read-back", "read-back-failed"])
def test_a_key_whose_first_release_failed_is_a_definite_failure_with_the_permit_read_back(
        read_back, said, fake, run_agent) -> None:
    first = ("the first call with idempotency key 'exec-1:release:WP-1' failed after its effect was attempted "
             "(VERIFICATION_FAILED); check the resource and use a new key")
    fake.answer("workPermit.release", "WP-1", errors.Aborted(first, reason="IDEMPOTENCY_KEY_FAILED"))
    fake.answer("workPermit.get", "WP-1", read_back)
    result = run_agent(AGENT, RELEASE_INPUT, fake)
    assert result.status == c.RESULT_STATUS_FAILED
    assert result.error_reason.startswith(
        f"RELEASE_FAILED_EARLIER: workPermit.release IDEMPOTENCY_KEY_FAILED: {first}; ")
    assert said in result.error_reason
    release = result_of(result)["release"]
    assert release["verified"] is False and release["reason_code"] == "IDEMPOTENCY_KEY_FAILED"
    assert release.get("status") == ("PENDING_RELEASE" if isinstance(read_back, dict) else None)
    assert [s.code for s in result.statements] == ["RELEASE_FAILED_EARLIER"]
    assert [name for name, _ in fake.calls] == ["workPermit.release", "workPermit.get"]


@pytest.mark.parametrize(("error", "code"), [
    (errors.FailedPrecondition("needs the user's confirmation", reason="CONFIRMATION_REQUIRED"), "RELEASE_REFUSED"),
    (errors.FailedPrecondition("needs a human approval", reason="HUMAN_APPROVAL_REQUIRED"), "RELEASE_REFUSED"),
    (errors.FailedPrecondition("already released", reason="PERMIT_ALREADY_RELEASED"), "RELEASE_REFUSED"),
    (errors.Aborted("key used for another payload", reason="IDEMPOTENCY_KEY_REUSED"), "RELEASE_REFUSED"),
    (errors.PermissionDenied("policy denied", reason="POLICY_DENIED"), "NOT_AUTHORISED"),
    (errors.NotFound("'WP-1' not found", reason="RESOURCE_NOT_FOUND"), "PERMIT_NOT_FOUND"),
    (errors.Unavailable("no policy decision", reason="POLICY_UNAVAILABLE"), "GOVERNANCE_UNAVAILABLE"),
    (errors.DeadlineExceeded("timed out", reason="DEADLINE_EXCEEDED"), "RELEASE_OUTCOME_UNKNOWN"),
    (errors.Aborted("still running", reason="IDEMPOTENCY_KEY_IN_FLIGHT"), "RELEASE_OUTCOME_UNKNOWN"),
])
def test_a_refused_or_failed_release_is_failed_naming_the_reason(error, code, fake, run_agent) -> None:
    fake.answer("workPermit.release", "WP-1", error)
    result = run_agent(AGENT, RELEASE_INPUT, fake)
    assert result.status == c.RESULT_STATUS_FAILED
    assert result.error_reason.startswith(f"{code}: workPermit.release {error.reason}: {error.message}")
    data = result_of(result)
    assert data["verdict"] == "UNKNOWN" and data["subjects"] == {}
    assert data["release"] == {"permit_id": "WP-1", "verified": False, "reason_code": error.reason}
    assert [s.code for s in result.statements] == [code]
    # Nothing is read back after a failed release: there is nothing to verify.
    assert [name for name, _ in fake.calls] == ["workPermit.release"]


def test_a_read_back_that_is_not_released_fails(fake, run_agent) -> None:
    fake.answer("workPermit.release", "WP-1", released())
    fake.answer("workPermit.get", "WP-1", permit("WP-1", "PENDING_RELEASE"))
    result = run_agent(AGENT, RELEASE_INPUT, fake)
    assert result.status == c.RESULT_STATUS_FAILED
    assert result.error_reason == (
        "RELEASE_NOT_VISIBLE: workPermit.release answered RELEASED but workPermit.get reads back PENDING_RELEASE")
    assert result_of(result)["release"] == {"permit_id": "WP-1", "verified": False,
                                            "reason_code": "RELEASE_NOT_VISIBLE", "status": "PENDING_RELEASE"}
    assert "permit_found" not in result_of(result)


def test_a_read_back_that_cannot_be_done_fails(fake, run_agent) -> None:
    fake.answer("workPermit.release", "WP-1", released())
    fake.answer("workPermit.get", "WP-1", errors.DeadlineExceeded("timed out", reason="DEADLINE_EXCEEDED"))
    result = run_agent(AGENT, RELEASE_INPUT, fake)
    assert result.status == c.RESULT_STATUS_FAILED
    assert result.error_reason.startswith("RELEASE_NOT_VERIFIED: workPermit.release answered RELEASED but the "
                                          "read-back failed: PERMIT_REGISTRY_TIMEOUT")
    assert result_of(result)["release"]["verified"] is False


def test_the_real_registry_refuses_to_release_a_released_permit(local, run_agent) -> None:
    client = local(AGENT)
    result = run_agent(AGENT, {**RELEASE_INPUT, "permit_id": "WP-10242"}, client)
    assert result.status == c.RESULT_STATUS_FAILED
    assert result.error_reason.startswith("RELEASE_REFUSED: workPermit.release PERMIT_ALREADY_RELEASED: ")
    assert [name for name, _ in client.calls] == ["workPermit.release"]


def test_a_release_the_real_registry_loses_fails_verification(local, run_agent) -> None:
    # WP-10241: the registry acknowledges the release and loses it (demo world).
    result = run_agent(AGENT, {**RELEASE_INPUT, "permit_id": "WP-10241"}, local(AGENT))
    assert result.status == c.RESULT_STATUS_FAILED
    assert result.error_reason.startswith("RELEASE_VERIFICATION_FAILED: workPermit.release VERIFICATION_FAILED: ")
    assert result_of(result)["release"]["verified"] is False


# --- input --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [
    {k: v for k, v in RELEASE_INPUT.items() if k != "idempotency_key"},
    {k: v for k, v in RELEASE_INPUT.items() if k != "reason"},
    {**RELEASE_INPUT, "reason": "ok"},
    {**RELEASE_INPUT, "reason": "x" * 501},
    {**RELEASE_INPUT, "idempotency_key": ""},
    {**RELEASE_INPUT, "worker_id": "W-1"},
    {"operation": "delete", "permit_id": "WP-1"},
    {"operation": "affected_by_training", "worker_id": "W-1"},
    {"operation": "affected_by_training", "worker_id": "W-1", "training_code": "NR-10", "permit_id": "WP-1"},
    {"operation": "affected_by_training", "worker_id": "../W-1", "training_code": "NR-10"},
    {"permit_id": "WP-1", "reason": "all checks passed"},
    {"operation": "assess"},
], ids=["release-without-idempotency-key", "release-without-reason", "reason-too-short", "reason-too-long",
        "empty-idempotency-key", "release-with-a-worker", "unknown-operation", "affected-without-training",
        "affected-with-a-permit", "affected-bad-worker-id", "assess-with-a-reason", "assess-without-permit"])
def test_the_input_schema_refuses_what_the_operation_does_not_take(data, fake, run_agent) -> None:
    with pytest.raises(errors.InvalidArgument) as info:
        run_agent(AGENT, data, fake)
    assert info.value.reason == "TASK_INPUT_INVALID"
    assert fake.calls == []


def test_assess_is_the_default_and_unchanged(local, run_agent) -> None:
    implicit = run_agent(AGENT, {"permit_id": "WP-10231"}, local(AGENT))
    explicit = run_agent(AGENT, {"operation": "assess", "permit_id": "WP-10231"}, local(AGENT))
    implicit.ClearField("completed_at")
    explicit.ClearField("completed_at")
    assert implicit == explicit
    assert "operation" not in result_of(implicit) and "release" not in result_of(implicit)


# --- affected by training -------------------------------------------------------------------------

def affected(worker_id: str, training_code: str) -> dict[str, str]:
    return {"operation": "affected_by_training", "worker_id": worker_id, "training_code": training_code}


def test_released_and_pending_permits_that_require_the_training_are_affected(fake, run_agent, checked) -> None:
    fake.answer("workPermit.search", "W-1?status=RELEASED", search(("WP-1", "RELEASED"), ("WP-3", "RELEASED")))
    fake.answer("workPermit.search", "W-1?status=PENDING_RELEASE", search(("WP-2", "PENDING_RELEASE")))
    fake.answer("workPermit.get", "WP-1", permit("WP-1", "RELEASED", trainings=["NR-10", "NR-35"]))
    fake.answer("workPermit.get", "WP-2", permit("WP-2", "PENDING_RELEASE", trainings=["NR-10"]))
    fake.answer("workPermit.get", "WP-3", permit("WP-3", "RELEASED", trainings=["NR-35"]))
    result = run_agent(AGENT, affected("W-1", "NR-10"), fake)
    parsed = checked(result, AGENT, "work-permit.affected_by_training")
    assert result.status == c.RESULT_STATUS_SUCCESS
    assert parsed.verdict.value == "FAIL"
    assert {k: v.value for k, v in parsed.subjects.items()} == {
        "worker:W-1/permits": "PASS", "permit:WP-1/training:NR-10": "FAIL", "permit:WP-2/training:NR-10": "FAIL",
        "permit:WP-3/training:NR-10": "PASS"}
    data = result_of(result)
    assert data["affected_permits"] == [
        {"permit_id": "WP-1", "status": "RELEASED", "recommendation": "SUSPEND"},
        {"permit_id": "WP-2", "status": "PENDING_RELEASE", "recommendation": "HOLD_RELEASE"}]
    assert data["unverified_permits"] == [] and (data["worker_id"], data["training_code"]) == ("W-1", "NR-10")
    assert codes(result, RECOMMENDATION, "permit:WP-1/training:NR-10") == ["SUSPEND_PERMIT"]
    assert codes(result, RECOMMENDATION, "permit:WP-2/training:NR-10") == ["HOLD_RELEASE"]
    assert codes(result, FACT, "permit:WP-3/training:NR-10") == ["TRAINING_NOT_REQUIRED"]
    for s in result.statements:
        if s.kind == RECOMMENDATION:
            assert s.evidence_indexes and result.evidence[s.evidence_indexes[0]].capability == "workPermit.get@1.1.0"
    # It reads only: two searches, one read per permit, nothing else.
    assert sorted(fake.calls, key=str) == sorted([
        ("workPermit.search", {"worker_id": "W-1", "status": "RELEASED", "limit": 100}),
        ("workPermit.search", {"worker_id": "W-1", "status": "PENDING_RELEASE", "limit": 100}),
        ("workPermit.get", {"permit_id": "WP-1"}), ("workPermit.get", {"permit_id": "WP-2"}),
        ("workPermit.get", {"permit_id": "WP-3"})], key=str)
    assert "asthma" not in str(result)


def test_the_record_read_decides_not_the_search_summary(fake, run_agent) -> None:
    fake.answer("workPermit.search", "W-1?status=RELEASED", search(("WP-1", "RELEASED")))
    fake.answer("workPermit.search", "W-1?status=PENDING_RELEASE", search(("WP-2", "PENDING_RELEASE")))
    fake.answer("workPermit.get", "WP-1", permit("WP-1", "SUSPENDED", released=True))  # suspended since
    fake.answer("workPermit.get", "WP-2", permit("WP-2", "PENDING_RELEASE", workers=("W-9",)))  # worker removed
    result = run_agent(AGENT, affected("W-1", "NR-10"), fake)
    assert result_of(result)["verdict"] == "PASS" and result_of(result)["affected_permits"] == []
    assert codes(result, FACT, "permit:WP-1/training:NR-10") == ["PERMIT_NOT_ACTIVE"]
    assert codes(result, FACT, "permit:WP-2/training:NR-10") == ["WORKER_NOT_ON_PERMIT"]


def test_a_worker_on_the_real_registry(local, run_agent, checked) -> None:
    # W-1001: WP-10231 (PENDING_RELEASE, NR-10 + NR-35) and WP-10242 (RELEASED, NR-10); globex's W-1001 is unseen.
    result = run_agent(AGENT, affected("W-1001", "NR-35"), local(AGENT))
    parsed = checked(result, AGENT, "work-permit.affected_by_training")
    assert {k: v.value for k, v in parsed.subjects.items()} == {
        "worker:W-1001/permits": "PASS", "permit:WP-10231/training:NR-35": "FAIL",
        "permit:WP-10242/training:NR-35": "PASS"}
    assert result_of(result)["affected_permits"] == [
        {"permit_id": "WP-10231", "status": "PENDING_RELEASE", "recommendation": "HOLD_RELEASE"}]
    both = run_agent(AGENT, affected("W-1001", "NR-10"), local(AGENT))
    assert [(p["permit_id"], p["recommendation"]) for p in result_of(both)["affected_permits"]] == [
        ("WP-10231", "HOLD_RELEASE"), ("WP-10242", "SUSPEND")]
    assert "WP-20001" not in str(both)


def test_a_worker_without_permits_passes(local, run_agent, checked) -> None:
    result = run_agent(AGENT, affected("W-9999", "NR-10"), local(AGENT))
    parsed = checked(result, AGENT, "work-permit.affected_by_training")
    assert result.status == c.RESULT_STATUS_SUCCESS and parsed.verdict.value == "PASS"
    assert codes(result, FACT) == ["WORKER_PERMITS_LISTED"]
    assert result_of(result)["affected_permits"] == []


def test_a_permit_that_cannot_be_read_is_unknown_not_guessed(fake, run_agent, checked) -> None:
    fake.answer("workPermit.search", "W-1?status=RELEASED", search())
    fake.answer("workPermit.search", "W-1?status=PENDING_RELEASE", search(("WP-2", "PENDING_RELEASE")))
    fake.answer("workPermit.get", "WP-2", errors.DeadlineExceeded("timed out", reason="DEADLINE_EXCEEDED"))
    result = run_agent(AGENT, affected("W-1", "NR-10"), fake)
    parsed = checked(result, AGENT, "work-permit.affected_by_training")
    assert result.status == c.RESULT_STATUS_PARTIAL and parsed.verdict.value == "UNKNOWN"
    assert codes(result, UNCERTAINTY, "permit:WP-2/training:NR-10") == ["PERMIT_REGISTRY_TIMEOUT"]
    assert result_of(result)["unverified_permits"] == ["WP-2"] and result_of(result)["affected_permits"] == []
    assert result.error_reason.startswith("PERMIT_REGISTRY_TIMEOUT: workPermit.get")


def test_a_truncated_search_is_not_a_complete_answer(fake, run_agent) -> None:
    fake.answer("workPermit.search", "W-1?status=RELEASED", search(truncated=True))
    fake.answer("workPermit.search", "W-1?status=PENDING_RELEASE", search())
    result = run_agent(AGENT, affected("W-1", "NR-10"), fake)
    assert result.status == c.RESULT_STATUS_UNCERTAIN and result_of(result)["verdict"] == "UNKNOWN"
    assert codes(result, UNCERTAINTY, "worker:W-1/permits") == ["PERMIT_SEARCH_TRUNCATED"]


def test_a_failed_search_fails_the_operation(fake, run_agent) -> None:
    fake.answer("workPermit.search", "W-1", errors.Unavailable("registry down", reason="UNAVAILABLE"))
    result = run_agent(AGENT, affected("W-1", "NR-10"), fake)
    assert result.status == c.RESULT_STATUS_FAILED
    assert result.error_reason.startswith("PERMIT_REGISTRY_UNAVAILABLE: workPermit.search")
