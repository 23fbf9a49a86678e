"""Work-permit agent: the permit record for the plan, its status and window, and "not found" without hints."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from agentmesh import errors
from agentmesh.v1 import common_pb2 as c

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
        "permit-registry", "permit/WP-10231", c.AUTHORITY_LEVEL_OFFICIAL_RECORD, "workPermit.get@1.0.0")


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
