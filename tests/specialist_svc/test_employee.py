"""Employee agent: an active worker of the permit's tenant is assignable; anything else says why; no health data."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from agentmesh import errors
from agentmesh.v1 import common_pb2 as c

AGENT = "employee-agent"
PROV = {"authority": "OFFICIAL_RECORD", "fetched_at": "2026-11-30T09:00:00.000Z"}


def employee(worker_id: str = "W-1", status: str = "ACTIVE") -> dict[str, Any]:
    return {"worker_id": worker_id, "name": "Ana", "job_title": "Electrician", "company": "ACME",
            "employment_status": status, "provenance": {**PROV, "source": "hr-registry",
                                                        "reference": f"employee/{worker_id}"}}


def permit(permit_id: str = "WP-1", workers: tuple[str, ...] = ("W-7",)) -> dict[str, Any]:
    return {"permit_id": permit_id, "title": "Job", "description": "", "site": "Plant", "work_type": "ELECTRICAL",
            "status": "PENDING_RELEASE", "valid_from": "2026-11-28", "valid_until": "2026-12-12",
            "requested_by": "alice", "released_at": None, "released_by": None, "required_trainings": ["NR-10"],
            "workers": [{"worker_id": w, "name": "X", "job_title": "J", "company": "C", "permit_role": "EXECUTOR",
                         "medical_notes": "Secret note"} for w in workers],
            "provenance": {**PROV, "source": "permit-registry", "reference": f"permit/{permit_id}"}}


def data(result: c.AgentResult) -> dict[str, Any]:
    out: dict[str, Any] = json_format.MessageToDict(result.result)
    return out


def test_an_active_worker_of_the_tenant_is_assignable(fake, run_agent, checked) -> None:
    fake.answer("employee.get", "W-1", employee())
    fake.answer("workPermit.get", "WP-1", permit())
    result = run_agent(AGENT, {"worker_id": "W-1", "permit_id": "WP-1"}, fake)
    parsed = checked(result, AGENT)
    assert {k: v.value for k, v in parsed.subjects.items()} == {"worker:W-1/employment": "PASS",
                                                                "worker:W-1/tenant": "PASS"}
    assert result.status == c.RESULT_STATUS_SUCCESS
    out = data(result)
    assert out["assignable"] is True
    assert out["assignment"] == {"permit_id": "WP-1", "work_type": "ELECTRICAL", "valid_from": "2026-11-28",
                                 "valid_until": "2026-12-12", "required_trainings": ["NR-10"],
                                 "workers": [{"worker_id": "W-1"}], "worker_id": "W-1"}
    # The permit's other workers and their medical notes go nowhere.
    assert "Secret" not in str(result) and "W-7" not in str(result)


@pytest.mark.parametrize("status", ["INACTIVE", "ON_LEAVE", "TERMINATED"])
def test_a_worker_not_active_is_not_assignable_and_says_so(status, fake, run_agent, checked) -> None:
    fake.answer("employee.get", "W-1", employee(status=status))
    fake.answer("workPermit.get", "WP-1", permit())
    result = run_agent(AGENT, {"worker_id": "W-1", "permit_id": "WP-1"}, fake)
    checked(result, AGENT)
    out = data(result)
    assert out["assignable"] is False and "assignment" not in out
    fact = next(s for s in result.statements if s.code == "WORKER_NOT_ACTIVE")
    assert fact.subject == "worker:W-1/employment" and status in fact.text and fact.evidence_indexes


def test_a_worker_or_permit_of_another_tenant_is_not_assignable(fake, run_agent) -> None:
    gone = errors.NotFound("'W-1' not found", reason="RESOURCE_NOT_FOUND")
    fake.answer("employee.get", "W-1", gone)
    fake.answer("workPermit.get", "WP-1", permit())
    result = run_agent(AGENT, {"worker_id": "W-1", "permit_id": "WP-1"}, fake)
    assert data(result)["assignable"] is False
    assert [s.code for s in result.statements if s.kind == c.STATEMENT_KIND_FACT] == ["WORKER_NOT_IN_TENANT"]
    fake.answer("employee.get", "W-1", employee())
    fake.answer("workPermit.get", "WP-1", errors.NotFound("'WP-1' not found", reason="RESOURCE_NOT_FOUND"))
    result = run_agent(AGENT, {"worker_id": "W-1", "permit_id": "WP-1"}, fake)
    assert data(result)["assignable"] is False
    assert "PERMIT_NOT_FOUND" in [s.code for s in result.statements]


def test_a_worker_already_on_the_permit_is_reported(fake, run_agent) -> None:
    fake.answer("employee.get", "W-1", employee())
    fake.answer("workPermit.get", "WP-1", permit(workers=("W-1",)))
    result = run_agent(AGENT, {"worker_id": "W-1", "permit_id": "WP-1"}, fake)
    assert data(result)["assignable"] is True
    assert "ALREADY_ASSIGNED" in [s.code for s in result.statements if s.kind == c.STATEMENT_KIND_INFERENCE]


@pytest.mark.parametrize("err", [errors.DeadlineExceeded("late", reason="DEADLINE_EXCEEDED"),
                                 errors.Unavailable("down", reason="BACKEND_UNAVAILABLE"),
                                 errors.PermissionDenied("no", reason="POLICY_DENIED")])
def test_records_that_could_not_be_read_establish_nothing(err, fake, run_agent) -> None:
    fake.answer("employee.get", "W-1", err)
    fake.answer("workPermit.get", "WP-1", permit())
    result = run_agent(AGENT, {"worker_id": "W-1", "permit_id": "WP-1"}, fake)
    assert result.status == c.RESULT_STATUS_FAILED and result.error_reason
    assert "assignable" not in data(result)  # neither branch of the plan's condition runs


def test_the_real_runtime(local, run_agent, checked) -> None:
    result = run_agent(AGENT, {"worker_id": "W-1030", "permit_id": "WP-10231"}, local(AGENT))
    checked(result, AGENT)
    assert data(result)["assignable"] is False
    assert {e.source for e in result.evidence} == {"hr-registry", "permit-registry"}
