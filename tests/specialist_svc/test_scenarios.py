"""The demo world's scenarios end to end in-process: four agents' results through the supervisor's aggregation.

Each agent gets the input the supervisor projects from the work-permit
agent's permit record, runs against the real capability runtime, and the
results are aggregated exactly as the supervisor does.
"""

from __future__ import annotations

import pytest

from supervisor_svc.aggregation import Decision, TaskOutcome, TaskState, aggregate
from supervisor_svc.contract import context_of
from supervisor_svc.definitions import default_catalog

DOMAIN = default_catalog().domain("work-permit")
PLAN = DOMAIN.plans["analysis"]
AGENTS = {"work-permit-agent": "work-permit", "training-agent": "training", "risk-agent": "risk",
          "compliance-agent": "compliance"}


@pytest.mark.parametrize(("permit_id", "decision"), [
    ("WP-10231", Decision.RECOMMENDED_FOR_RELEASE),
    ("WP-10232", Decision.NOT_RECOMMENDED),
    ("WP-10233", Decision.REQUIRES_REVIEW),
    ("WP-10234", Decision.INSUFFICIENT_EVIDENCE),
    ("WP-10235", Decision.RECOMMENDED_FOR_RELEASE),
    ("WP-10236", Decision.NOT_RECOMMENDED),
    ("WP-10237", Decision.INSUFFICIENT_EVIDENCE),
    ("WP-10238", Decision.INSUFFICIENT_EVIDENCE),
    ("WP-10239", Decision.NOT_RECOMMENDED),
    ("WP-10240", Decision.NOT_RECOMMENDED),
    ("WP-10242", Decision.NOT_RECOMMENDED),
    ("WP-10243", Decision.NOT_RECOMMENDED),
    ("WP-20001", Decision.INSUFFICIENT_EVIDENCE),
])
def test_demo_scenario(permit_id, decision, local, run_agent, projector) -> None:
    first = run_agent("work-permit-agent", {"permit_id": permit_id}, local("work-permit-agent"))
    contract = PLAN.task("permit").contract
    outcomes = [TaskOutcome("work-permit", TaskState.COMPLETED, "task-1", "work-permit-agent", first,
                            contract=contract, template_task="permit")]
    context = context_of([(first, contract, "permit")])
    if context:
        for agent_id, purpose in (("training-agent", "training.verify"), ("risk-agent", "risk.assess"),
                                  ("compliance-agent", "compliance.check")):
            projected, _ = projector.project(context, agent_id, purpose)
            result = run_agent(agent_id, projected, local(agent_id))
            outcomes.append(TaskOutcome(AGENTS[agent_id], TaskState.COMPLETED, "task-1", agent_id, result))
    assessment = aggregate(outcomes, expected=list(AGENTS.values()), policy=DOMAIN.evidence,
                           decisions=DOMAIN.outcomes, conditions=tuple(PLAN.conditions.values()),
                           subjects={"permit": permit_id})
    assert assessment.decision is decision, assessment.summary
    if permit_id == "WP-20001":
        assert assessment.reason == "PERMIT_NOT_FOUND" and len(outcomes) == 1
    if permit_id == "WP-10232":
        assert assessment.blocking == ("training-agent: TRAINING_EXPIRED on worker:W-1003/NR-10",)
    if permit_id == "WP-10233":
        (conflict,) = assessment.conflicts
        assert (conflict.subject, conflict.agent_a, conflict.agent_b) == (
            "worker:W-1005/NR-35", "training-agent", "compliance-agent")
        assert conflict.evidence_a[0].source == "lms" and conflict.evidence_b[0].source == "compliance-registry"
        assert conflict.resolution == ""
    if permit_id == "WP-10234":
        assert any("LMS_TIMEOUT on worker:W-1006/NR-10" in str(m) for m in assessment.missing)
