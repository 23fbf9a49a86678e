"""Medical agent: the eligibility status decides; it gets the worker and the permit, and reads nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from agentmesh import errors
from agentmesh.v1 import common_pb2 as c

AGENT = "medical-agent"


def eligibility(status: str, valid_until: str | None = "2027-03-10") -> dict[str, Any]:
    return {"worker_id": "W-1", "permit_id": "WP-1", "work_type": "ELECTRICAL", "status": status,
            "valid_until": valid_until,
            "provenance": {"source": "occupational-health", "authority": "OFFICIAL_RECORD",
                           "fetched_at": "2026-11-30T09:00:00.000Z", "reference": "exam/W-1"}}


@pytest.mark.parametrize(("status", "verdict", "code"), [
    ("FIT", "PASS", "MEDICALLY_FIT"),
    ("UNFIT", "FAIL", "MEDICALLY_UNFIT"),
    ("EXAM_EXPIRED", "FAIL", "MEDICAL_EXAM_EXPIRED"),
    ("NOT_EVALUATED", "FAIL", "MEDICAL_EXAM_MISSING"),
])
def test_the_status_decides(status, verdict, code, fake, run_agent, checked) -> None:
    fake.answer("medical.getEligibility", "W-1", eligibility(status, None if status == "NOT_EVALUATED" else
                                                             "2027-03-10"))
    result = run_agent(AGENT, {"worker_id": "W-1", "permit_id": "WP-1"}, fake)
    parsed = checked(result, AGENT)
    assert {k: v.value for k, v in parsed.subjects.items()} == {"worker:W-1/medical": verdict}
    facts = [s for s in result.statements if s.kind == c.STATEMENT_KIND_FACT]
    assert [f.code for f in facts] == [code] and facts[0].evidence_indexes == [0]
    assert fake.calls == [("medical.getEligibility", {"worker_id": "W-1", "permit_id": "WP-1"})]


@pytest.mark.parametrize("extra", [{"work_type": "ELECTRICAL"}, {"diagnosis": "x"}, {"workers": []}])
def test_anything_beyond_the_worker_and_the_permit_is_refused(extra, run_agent, fake) -> None:
    with pytest.raises(errors.InvalidArgument) as err:
        run_agent(AGENT, {"worker_id": "W-1", "permit_id": "WP-1", **extra}, fake)
    assert err.value.reason == "TASK_INPUT_INVALID" and not fake.calls


def test_an_unanswered_call_is_uncertain_never_fit(fake, run_agent, checked) -> None:
    fake.answer("medical.getEligibility", "W-1", errors.DeadlineExceeded("late", reason="DEADLINE_EXCEEDED"))
    result = run_agent(AGENT, {"worker_id": "W-1", "permit_id": "WP-1"}, fake)
    assert {k: v.value for k, v in checked(result, AGENT).subjects.items()} == {"worker:W-1/medical": "UNKNOWN"}
    assert result.status == c.RESULT_STATUS_PARTIAL
    assert [s.code for s in result.statements] == ["OCCUPATIONAL_HEALTH_TIMEOUT"]
    fake.answer("medical.getEligibility", "W-1", errors.NotFound("'W-1' not found", reason="RESOURCE_NOT_FOUND"))
    result = run_agent(AGENT, {"worker_id": "W-1", "permit_id": "WP-1"}, fake)
    assert [s.code for s in result.statements] == ["MEDICAL_RECORD_NOT_FOUND"]


def test_the_real_runtime_never_shows_the_diagnosis(local, run_agent, checked) -> None:
    client = local(AGENT)
    result = run_agent(AGENT, {"worker_id": "W-1031", "permit_id": "WP-10231"}, client)
    assert {k: v.value for k, v in checked(result, AGENT).subjects.items()} == {"worker:W-1031/medical": "FAIL"}
    assert "Epilepsy" not in str(result) and "neurology" not in str(result).lower()
