"""Work-permit agent: the permit record for the plan, its status and window, and "not found" without hints."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest
from google.protobuf import json_format

from agentmesh import errors
from agentmesh.v1 import common_pb2 as c

from .conftest import load_agent, task_for

AGENT = "work-permit-agent"


def subjects(parsed: Any) -> dict[str, str]:
    return {k: v.value for k, v in parsed.subjects.items()}


def test_found_permit_is_returned_without_medical_notes_or_provenance(local, run_agent, checked) -> None:
    result = run_agent(AGENT, {"permit_id": "WP-10231"}, local(AGENT))
    parsed = checked(result, AGENT)
    assert result.status == c.RESULT_STATUS_SUCCESS
    assert parsed.values.get("permit_found") is True and parsed.verdict.value == "PASS"
    assert subjects(parsed) == {"permit:WP-10231/status": "PASS", "permit:WP-10231/validity": "PASS",
                                "permit:WP-10231/workers": "PASS"}
    permit = parsed.values.get("permit")
    assert permit is not None
    assert permit["permit_id"] == "WP-10231" and permit["required_trainings"] == ["NR-10", "NR-35"]
    assert [w["worker_id"] for w in permit["workers"]] == ["W-1001", "W-1002"]
    assert "provenance" not in permit
    assert all("medical_notes" not in w for w in permit["workers"])
    assert "diabetes" not in str(result)  # W-1001's notes reach no field of the result
    (ev,) = result.evidence
    assert (ev.source, ev.reference, ev.authority, ev.capability) == (
        "permit-registry", "permit/WP-10231", c.AUTHORITY_LEVEL_OFFICIAL_RECORD, "workPermit.get@1.1.0")


def test_another_tenants_permit_is_simply_not_found(local, run_agent, checked) -> None:
    result = run_agent(AGENT, {"permit_id": "WP-20001"}, local(AGENT, "acme"))
    parsed = checked(result, AGENT)
    assert result.status == c.RESULT_STATUS_SUCCESS
    assert parsed.values.get("permit_found") is False and parsed.verdict.value == "UNKNOWN" and parsed.subjects == {}
    assert not result.evidence
    text = str(result).lower()
    assert "globex" not in text and "tank" not in text and "tenant" not in text
    # Exactly what a permit that exists nowhere gives.
    nowhere = run_agent(AGENT, {"permit_id": "WP-99999"}, local(AGENT, "acme"))
    assert [s.text.replace("WP-99999", "X") for s in nowhere.statements] == [
        s.text.replace("WP-20001", "X") for s in result.statements]
    assert json_format.MessageToDict(nowhere.result) == json_format.MessageToDict(result.result)


def test_the_owner_tenant_finds_it(local, run_agent, checked) -> None:
    result = run_agent(AGENT, {"permit_id": "WP-20001"}, local(AGENT, "globex"))
    assert checked(result, AGENT).values.get("permit_found") is True


@pytest.mark.parametrize(("permit_id", "code"), [("WP-10242", "PERMIT_ALREADY_RELEASED"),
                                                 ("WP-10243", "PERMIT_NOT_RELEASABLE")])
def test_a_permit_not_pending_release_fails(permit_id, code, local, run_agent, checked) -> None:
    result = run_agent(AGENT, {"permit_id": permit_id}, local(AGENT))
    parsed = checked(result, AGENT)
    assert parsed.values.get("permit_found") is True
    assert subjects(parsed)[f"permit:{permit_id}/status"] == "FAIL"
    assert [s.code for s in result.statements if s.subject == f"permit:{permit_id}/status"] == [code]


@pytest.mark.parametrize(("error", "code"), [
    (errors.DeadlineExceeded("timed out", reason="DEADLINE_EXCEEDED"), "PERMIT_REGISTRY_TIMEOUT"),
    (errors.Unavailable("no policy decision", reason="POLICY_UNAVAILABLE"), "GOVERNANCE_UNAVAILABLE"),
    (errors.PermissionDenied("policy denied", reason="POLICY_DENIED"), "NOT_AUTHORISED"),
])
def test_an_unreadable_permit_fails_the_analysis_without_claiming_anything(error, code, fake, run_agent) -> None:
    fake.answer("workPermit.get", "WP-1", error)
    result = run_agent(AGENT, {"permit_id": "WP-1"}, fake)
    assert result.status == c.RESULT_STATUS_FAILED
    assert result.error_reason.startswith(f"{code}: workPermit.get")
    assert "permit_found" not in json_format.MessageToDict(result.result)
    assert [s.code for s in result.statements] == [code]


def test_a_window_that_ends_before_it_starts_fails(fake, run_agent, checked) -> None:
    fake.answer("workPermit.get", "WP-1", {
        "permit_id": "WP-1", "title": "t", "description": "", "site": "s", "work_type": "ELECTRICAL",
        "status": "PENDING_RELEASE", "valid_from": "2026-12-10", "valid_until": "2026-12-01", "requested_by": "a",
        "released_at": None, "released_by": None, "required_trainings": [], "workers": [],
        "provenance": {"source": "permit-registry", "authority": "OFFICIAL_RECORD",
                       "fetched_at": "2026-11-30T09:00:00.000Z", "reference": "permit/WP-1"}})
    parsed = checked(run_agent(AGENT, {"permit_id": "WP-1"}, fake), AGENT)
    assert subjects(parsed) == {"permit:WP-1/status": "PASS", "permit:WP-1/validity": "FAIL",
                                "permit:WP-1/workers": "FAIL"}


def test_a_malformed_permit_id_is_refused(fake, run_agent) -> None:
    with pytest.raises(errors.InvalidArgument) as info:
        run_agent(AGENT, {"permit_id": "../WP-1"}, fake)
    assert info.value.reason == "TASK_INPUT_INVALID"
    assert fake.calls == []


# --- the mesh's date ----------------------------------------------------------------------------------------

def _permit(valid_from: str, valid_until: str, **extra: Any) -> dict[str, Any]:
    return {"permit_id": "WP-1", "title": "t", "description": "", "site": "s", "work_type": "ELECTRICAL",
            "status": "PENDING_RELEASE", "valid_from": valid_from, "valid_until": valid_until, "requested_by": "a",
            "released_at": None, "released_by": None, "required_trainings": ["NR-10"],
            "workers": [{"worker_id": "W-1", "name": "n", "job_title": "j", "company": "c", "permit_role": "EXECUTOR",
                         "medical_notes": None}], **extra,
            "provenance": {"source": "permit-registry", "authority": "OFFICIAL_RECORD",
                           "fetched_at": "2026-11-30T09:00:00.000Z", "reference": "permit/WP-1"}}


@pytest.mark.parametrize(("today", "verdict", "code"), [
    (dt.date(2026, 12, 10), "PASS", "PERMIT_WINDOW_VALID"),   # its last day: still valid
    (dt.date(2026, 12, 11), "FAIL", "PERMIT_WINDOW_ENDED"),   # the day after: ended
    (dt.date(2026, 11, 1), "PASS", "PERMIT_WINDOW_VALID"),    # not started yet: not this rule's concern
])
def test_a_window_that_has_ended_by_the_meshs_date_fails(today, verdict, code, fake, checked) -> None:
    fake.answer("workPermit.get", "WP-1", _permit("2026-12-01", "2026-12-10"))
    agent = dataclasses.replace(load_agent(AGENT), today=lambda: today)
    result = agent.run(task_for(AGENT, {"permit_id": "WP-1"}), fake)
    parsed = checked(result, AGENT)
    assert subjects(parsed)["permit:WP-1/validity"] == verdict
    (fact,) = [s for s in result.statements if s.subject == "permit:WP-1/validity"]
    assert fact.code == code
    # The evidence says which date it was judged on.
    assert result.evidence[fact.evidence_indexes[0]].data["judged_on"] == today.isoformat()


def test_the_demo_permit_whose_window_ended_is_not_recommended(local, run_agent, checked) -> None:
    parsed = checked(run_agent(AGENT, {"permit_id": "WP-10248"}, local(AGENT)), AGENT)
    assert subjects(parsed)["permit:WP-10248/validity"] == "FAIL" and parsed.verdict.value == "FAIL"


# --- workers added after planning: a handoff to the training agent -------------------------------------------

def _training_result(subjects: dict[str, str], code: str) -> c.AgentResult:
    result = c.AgentResult(agent_id="training-agent", status=c.RESULT_STATUS_SUCCESS)
    verdict = "FAIL" if "FAIL" in subjects.values() else "PASS"
    result.result.update({"verdict": verdict, "subjects": subjects})
    result.evidence.append(c.EvidenceReference(source="lms", reference="lms/W-9#TR-9",
                                               authority=c.AUTHORITY_LEVEL_VERIFIED_INTEGRATION,
                                               capability="training.getStatus@2.2.0"))
    for subject in subjects:
        result.statements.append(c.Statement(kind=c.STATEMENT_KIND_FACT, code=code, subject=subject,
                                             evidence_indexes=[0]))
    return result


def test_added_workers_are_handed_to_the_training_agent_and_the_answer_finishes_the_task(fake, checked) -> None:
    fake.answer("workPermit.get", "WP-1", _permit(
        "2026-11-30", "2026-12-10", added_workers=[{"worker_id": "W-9", "permit_role": "EXECUTOR",
                                                   "added_on": "2026-11-29"}]))
    agent, task = load_agent(AGENT), task_for(AGENT, {"permit_id": "WP-1"})
    first = agent.run(task, fake)
    assert first.status == c.RESULT_STATUS_WAITING and not first.statements
    (ask,) = first.requested_actions
    assert (ask.action, ask.action_id, ask.target_agent_id) == ("handoff", "added-workers", "training-agent")
    assert json_format.MessageToDict(ask.parameters) == {
        "purpose": "training.verify", "required_capabilities": ["training.getStatus"],
        "input": {"permit_id": "WP-1", "valid_from": "2026-11-30", "valid_until": "2026-12-10",
                  "required_trainings": ["NR-10"], "workers": [{"worker_id": "W-9"}]}}
    subject = "permit:WP-1/added_worker:W-9"
    for training, verdict, code in (
            (_training_result({"worker:W-9/NR-10": "PASS"}, "TRAINING_VALID"), "PASS", "ADDED_WORKER_QUALIFIED"),
            (_training_result({"worker:W-9/NR-10": "FAIL"}, "TRAINING_MISSING"), "FAIL",
             "ADDED_WORKER_NOT_QUALIFIED")):
        done = c.HandoffOutcome(action_id="added-workers", task_id="t-2", target_agent_id="training-agent",
                                state=c.HANDOFF_STATE_COMPLETED, result=training)
        result = agent.run(task, fake, [done], again=True)
        parsed = checked(result, AGENT)
        assert subjects(parsed)[subject] == verdict
        (fact,) = [s for s in result.statements if s.subject == subject]
        assert fact.code == code
        # The training agent's LMS evidence, as it cited it.
        assert result.evidence[fact.evidence_indexes[0]].source == "lms"
    # A refused handoff: nothing is assumed about the added worker.
    refusal = c.HandoffOutcome(action_id="added-workers", target_agent_id="training-agent",
                               state=c.HANDOFF_STATE_REFUSED, reason="MAX_HANDOFFS_EXCEEDED: limit 0")
    result = agent.run(task, fake, [refusal], again=True)
    parsed = checked(result, AGENT)
    assert subjects(parsed)[subject] == "UNKNOWN"
    (doubt,) = [s for s in result.statements if s.subject == subject]
    assert doubt.code == "ADDED_WORKER_UNVERIFIED" and "HANDOFF_REFUSED: MAX_HANDOFFS_EXCEEDED" in doubt.text
