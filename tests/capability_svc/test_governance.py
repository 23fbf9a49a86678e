"""The governed path of a mutation, in process: read-back verification, compensation and their audit records.

Grant, policy and audit are the real invoker's ports (see ``governed.py``):
grants are signed with a key made per test, the policy engine allows, and
audit is a recorder that keeps what it was given (and can be told to fail).
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from agentmesh.v1 import audit_service_pb2 as audit_pb2
from capability_svc import errors as cap_errors

from .governed import INVOKED, NOT_VISIBLE, VERIFIED, Mesh, error_info, outcome


def test_verified_release_records_the_verification(mesh: Mesh) -> None:
    resp = mesh.invoke("workPermit.release", permit_id="WP-10231", reason="all checks passed")
    assert resp.verified
    assert mesh.audit.trail() == [INVOKED, VERIFIED, outcome(audit_pb2.AUDIT_OUTCOME_SUCCESS, "VERIFIED")]
    # The verification record names the call like every other record of it.
    _, verification = mesh.audit.records[1]
    assert verification["capability_id"] == "workPermit.release" and verification["resource"] == "permit:WP-10231"
    assert verification["output_digest"] == mesh.audit.records[2][1]["output_digest"] != ""


def test_lost_write_is_aborted_and_reported_compensated(mesh: Mesh) -> None:
    before = mesh.permit("WP-10241")
    err = mesh.refused("workPermit.release", permit_id="WP-10241", reason="all checks passed")
    assert (err.code, err.reason) == (grpc.StatusCode.ABORTED, "VERIFICATION_FAILED")
    info = error_info(err)
    assert (info.reason, dict(info.metadata)) == ("VERIFICATION_FAILED", {
        "compensated": "true", "restored": "status=PENDING_RELEASE", "compensation": "ALREADY_IN_PREVIOUS_STATE"})
    assert mesh.permit("WP-10241") == before
    assert mesh.audit.trail() == [
        INVOKED, NOT_VISIBLE,
        outcome(audit_pb2.AUDIT_OUTCOME_FAILURE, "VERIFICATION_FAILED", "COMPENSATED",
                "ALREADY_IN_PREVIOUS_STATE status=PENDING_RELEASE")]
    # The key stays failed: a replay never runs the write again.
    again = mesh.refused("workPermit.release", permit_id="WP-10241", reason="all checks passed")
    assert (again.code, again.reason) == (grpc.StatusCode.ABORTED, "IDEMPOTENCY_KEY_FAILED")
    assert len(mesh.audit.trail()) == 3 + 1  # only the refusal of the replay


def test_partial_write_is_compensated_back_to_pending_release(mesh: Mesh) -> None:
    before = mesh.permit("WP-10244")
    err = mesh.refused("workPermit.release", permit_id="WP-10244", reason="all checks passed")
    assert (err.code, err.reason) == (grpc.StatusCode.ABORTED, "VERIFICATION_FAILED")
    assert dict(error_info(err).metadata) == {
        "compensated": "true", "restored": "status=PENDING_RELEASE", "compensation": "RESTORED"}
    assert "compensated" in err.message and "COMPENSATION_FAILED" not in err.message
    after = mesh.permit("WP-10244")
    assert after == before
    assert (after.status, after.released_at, after.released_by, after.release_reason) == (
        "PENDING_RELEASE", None, None, None)
    assert mesh.audit.trail() == [
        INVOKED, NOT_VISIBLE,
        outcome(audit_pb2.AUDIT_OUTCOME_FAILURE, "VERIFICATION_FAILED", "COMPENSATED",
                "RESTORED status=PENDING_RELEASE")]


def test_failing_compensation_is_said_never_hidden(mesh: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("registry connection lost")

    monkeypatch.setattr(mesh.runtime.executor, "compensate", broken)
    err = mesh.refused("workPermit.release", permit_id="WP-10244", reason="all checks passed")
    assert (err.code, err.reason) == (grpc.StatusCode.ABORTED, "VERIFICATION_FAILED")
    assert dict(error_info(err).metadata) == {
        "compensated": "false", "restored": "", "compensation": "COMPENSATION_ERROR"}
    assert "COMPENSATION_FAILED (COMPENSATION_ERROR)" in err.message
    # The half-applied write is still there, and the answer says so.
    assert mesh.permit("WP-10244").status == "RELEASED"
    assert mesh.audit.trail() == [
        INVOKED, NOT_VISIBLE,
        outcome(audit_pb2.AUDIT_OUTCOME_FAILURE, "VERIFICATION_FAILED", "COMPENSATION_FAILED",
                "COMPENSATION_ERROR")]


def test_compensation_refused_by_a_later_write_is_a_failure(mesh: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    compensate = mesh.runtime.executor.compensate

    def suspended_first(*args: Any) -> Any:
        # Another writer suspends the permit between the write and its compensation.
        conn = mesh.store._connect  # noqa: SLF001 - the test plays the other writer
        with conn() as db:
            db.execute("UPDATE permits SET status = 'SUSPENDED' WHERE tenant_id = 'acme' AND permit_id = 'WP-10244'")
        return compensate(*args)

    monkeypatch.setattr(mesh.runtime.executor, "compensate", suspended_first)
    err = mesh.refused("workPermit.release", permit_id="WP-10244", reason="all checks passed")
    assert dict(error_info(err).metadata) == {
        "compensated": "false", "restored": "", "compensation": "CHANGED_BY_ANOTHER_WRITE"}
    assert mesh.permit("WP-10244").status == "SUSPENDED"  # not this call's to undo
    assert mesh.audit.trail()[-1] == outcome(audit_pb2.AUDIT_OUTCOME_FAILURE, "VERIFICATION_FAILED",
                                             "COMPENSATION_FAILED", "CHANGED_BY_ANOTHER_WRITE")


@pytest.mark.parametrize(("permit_id", "mode", "how"), [
    ("WP-10241", None, "ALREADY_IN_PREVIOUS_STATE"),
    ("WP-10235", "partial_write", "RESTORED"),
])
def test_update_validity_is_compensated(mesh: Mesh, permit_id: str, mode: str | None, how: str) -> None:
    if mode:
        mesh.store.scope("acme").set_simulated_verification_failure(permit_id, mode)  # type: ignore[arg-type]
    before = mesh.permit(permit_id)
    err = mesh.refused("workPermit.updateValidity", permit_id=permit_id, valid_until="2026-12-24",
                       reason="holiday shift")
    assert (err.code, err.reason) == (grpc.StatusCode.ABORTED, "VERIFICATION_FAILED")
    assert dict(error_info(err).metadata) == {
        "compensated": "true", "restored": f"valid_until={before.valid_until}", "compensation": how}
    assert mesh.permit(permit_id) == before
    assert mesh.audit.trail() == [
        INVOKED, NOT_VISIBLE,
        outcome(audit_pb2.AUDIT_OUTCOME_FAILURE, "VERIFICATION_FAILED", "COMPENSATED",
                f"{how} valid_until={before.valid_until}")]


def test_compensation_runs_even_when_audit_of_the_failed_check_is_lost(mesh: Mesh) -> None:
    # Audit down and not even the outbox can write: the compensation still runs.
    mesh.audit.outbox_broken = True
    err = mesh.refused("workPermit.release", permit_id="WP-10244", reason="all checks passed")
    assert error_info(err).metadata["compensated"] == "true"
    assert mesh.permit("WP-10244").status == "PENDING_RELEASE"
    assert [t for t, _, _ in mesh.audit.trail()] == [audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED]


def test_a_reads_decision_and_outcome_are_appended_together(mesh: Mesh) -> None:
    assert mesh.invoke("workPermit.get", permit_id="WP-10231").output["permit_id"] == "WP-10231"
    assert mesh.audit.how() == [(audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, "record_all"),
                                (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, "record_all")]
    invoked, outcome = mesh.audit.kept
    assert (invoked.fields["outcome"], outcome.fields["outcome"]) == (
        audit_pb2.AUDIT_OUTCOME_PENDING, audit_pb2.AUDIT_OUTCOME_SUCCESS)
    assert outcome.fields["output_digest"] and invoked.fields["policy_decision"] == outcome.fields["policy_decision"]


def test_a_read_that_times_out_keeps_its_decision_and_its_outcome(mesh: Mesh,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def too_slow(call: Any, *, deadline_s: float | None) -> Any:
        raise cap_errors.DeadlineExceeded("the backend did not answer in time")

    monkeypatch.setattr(mesh.invoker._rt.executor, "run", too_slow)
    err = mesh.refused("workPermit.get", permit_id="WP-10231")
    assert err.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert [(r.event_type, r.how, r.fields["outcome"]) for r in mesh.audit.kept] == [
        (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, "record_durably", audit_pb2.AUDIT_OUTCOME_PENDING),
        (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, "record_durably", audit_pb2.AUDIT_OUTCOME_TIMEOUT)]


def test_records_after_an_effect_go_through_the_outbox(mesh: Mesh) -> None:
    # Audit refuses everything after the decision record: the verification and
    # the outcome wait in the outbox, the release stands and is answered.
    mesh.audit.failing |= {audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION, audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME}
    assert mesh.invoke("workPermit.release", permit_id="WP-10231", reason="all checks passed").verified
    assert mesh.audit.how() == [(audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, "record"),
                                (audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION, "record_durably"),
                                (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, "record_durably")]


def test_no_decision_record_no_mutation(mesh: Mesh) -> None:
    mesh.audit.failing.add(audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED)
    err = mesh.refused("workPermit.release", permit_id="WP-10231", reason="all checks passed")
    assert (err.code, err.reason) == (grpc.StatusCode.UNAVAILABLE, "AUDIT_UNAVAILABLE")
    assert mesh.permit("WP-10231").status == "PENDING_RELEASE"
    # Nothing happened, so the key is free for a retry once audit is back.
    mesh.audit.failing.clear()
    assert mesh.invoke("workPermit.release", permit_id="WP-10231", reason="all checks passed").verified
