"""The risk agent's fallback (PRD §47): the risk agent's rules alone, under its own name, without a model."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from agentmesh.v1 import common_pb2 as c

from .conftest import load_agent


def test_it_judges_exactly_as_the_risk_agent_does(permit_input: Any, local: Any, run_agent: Any, checked: Any) -> None:
    for permit in ("WP-10231", "WP-10243", "WP-10232"):
        rules = run_agent("risk-rules-agent", permit_input(permit, "risk-rules-agent"), local("risk-rules-agent"))
        risk = run_agent("risk-agent", permit_input(permit, "risk-agent"), local("risk-agent"))
        checked(rules, "risk-rules-agent")
        assert rules.agent_id == "risk-rules-agent"
        assert (rules.status, rules.confidence) == (risk.status, risk.confidence)
        for name in ("verdict", "subjects", "risk_level"):
            assert json_format.MessageToDict(rules.result).get(name) == json_format.MessageToDict(risk.result).get(name)
        assert [(s.kind, s.code, s.subject) for s in rules.statements] == [
            (s.kind, s.code, s.subject) for s in risk.statements if s.kind != c.STATEMENT_KIND_INFERENCE]


def test_it_reads_no_free_text_and_asks_no_model(permit_input: Any, local: Any, run_agent: Any) -> None:
    assert "description" not in permit_input("WP-10232", "risk-rules-agent")
    assert not load_agent("risk-rules-agent").rules.models
    result = run_agent("risk-rules-agent", permit_input("WP-10232", "risk-rules-agent"), local("risk-rules-agent"))
    assert json_format.MessageToDict(result.result)["model_reading"] == {"status": "NOT_ASKED"}
