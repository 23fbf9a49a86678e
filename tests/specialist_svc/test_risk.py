"""Risk agent: hazards under control pass; open controls or a CRITICAL hazard fail; no assessment is unknown."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from agentmesh import errors
from agentmesh.v1 import common_pb2 as c

AGENT = "risk-agent"


def subjects(parsed: Any) -> dict[str, str]:
    return {k: v.value for k, v in parsed.subjects.items()}


def hazard(risk_id: str, severity: int, likelihood: int, *, open_control: bool = False) -> dict[str, Any]:
    score = severity * likelihood
    level = "LOW" if score <= 4 else "MEDIUM" if score <= 9 else "HIGH" if score <= 16 else "CRITICAL"
    controls = [{"control": "Lockout/tagout", "in_place": True}, {"control": "Barrier", "in_place": not open_control}]
    return {"risk_id": risk_id, "hazard": "Electric shock", "severity": severity, "likelihood": likelihood,
            "score": score, "level": level, "controls": controls,
            "open_controls": ["Barrier"] if open_control else []}


def evaluation(*hazards: dict[str, Any]) -> dict[str, Any]:
    top = max((h["score"] for h in hazards), default=0)
    return {"permit_id": "WP-1", "assessed": bool(hazards),
            "risk_level": max((h["level"] for h in hazards), key=["LOW", "MEDIUM", "HIGH", "CRITICAL"].index)
            if hazards else None,
            "max_score": top, "hazards": list(hazards),
            "open_controls_count": sum(len(h["open_controls"]) for h in hazards),
            "provenance": {"source": "risk-register", "authority": "OFFICIAL_RECORD",
                           "fetched_at": "2026-11-30T09:00:00.000Z", "reference": "permit/WP-1"}}


def test_controlled_hazards_pass(permit_input, local, run_agent, checked) -> None:
    result = run_agent(AGENT, permit_input("WP-10231", AGENT), local(AGENT))
    parsed = checked(result, AGENT)
    assert result.status == c.RESULT_STATUS_SUCCESS
    assert subjects(parsed) == {"permit:WP-10231/risk": "PASS", "hazard:R-10231-1": "PASS",
                                "hazard:R-10231-2": "PASS"}
    assert json_format.MessageToDict(result.result)["risk_level"] == "MEDIUM"
    assert {e.source for e in result.evidence} == {"risk-register"}
    assert {e.authority for e in result.evidence} == {c.AUTHORITY_LEVEL_OFFICIAL_RECORD}


def test_no_assessment_is_not_low_risk(permit_input, local, run_agent, checked) -> None:
    result = run_agent(AGENT, permit_input("WP-10243", AGENT), local(AGENT))
    parsed = checked(result, AGENT)
    assert subjects(parsed) == {"permit:WP-10243/risk": "UNKNOWN"}
    assert result.status == c.RESULT_STATUS_UNCERTAIN
    assert json_format.MessageToDict(result.result)["risk_level"] is None
    assert [s.code for s in result.statements if s.kind == c.STATEMENT_KIND_UNCERTAINTY] == ["RISK_NOT_ASSESSED"]


@pytest.mark.parametrize(("h", "code"), [(hazard("R-1", 4, 2, open_control=True), "HAZARD_CONTROLS_OPEN"),
                                         (hazard("R-1", 5, 4), "HAZARD_CRITICAL")])
def test_an_uncontrolled_or_critical_hazard_fails(h, code, fake, run_agent, checked) -> None:
    fake.answer("risk.evaluate", "WP-1", evaluation(h, hazard("R-2", 2, 1)))
    result = run_agent(AGENT, {"permit_id": "WP-1"}, fake)
    parsed = checked(result, AGENT)
    assert subjects(parsed) == {"permit:WP-1/risk": "FAIL", "hazard:R-1": "FAIL", "hazard:R-2": "PASS"}
    assert [s.code for s in result.statements if s.subject == "hazard:R-1"] == [code]


def test_permit_not_found_is_unknown(fake, run_agent, checked) -> None:
    fake.answer("risk.evaluate", "WP-1", errors.NotFound("'WP-1' not found", reason="RESOURCE_NOT_FOUND"))
    parsed = checked(run_agent(AGENT, {"permit_id": "WP-1"}, fake), AGENT)
    assert subjects(parsed) == {"permit:WP-1/risk": "UNKNOWN"}


def test_a_timeout_is_uncertain(fake, run_agent, checked) -> None:
    fake.answer("risk.evaluate", "WP-1", errors.DeadlineExceeded("late", reason="DEADLINE_EXCEEDED"))
    result = run_agent(AGENT, {"permit_id": "WP-1"}, fake)
    assert subjects(checked(result, AGENT)) == {"permit:WP-1/risk": "UNKNOWN"}
    assert result.status == c.RESULT_STATUS_PARTIAL
    assert result.error_reason.startswith("RISK_REGISTER_TIMEOUT")
