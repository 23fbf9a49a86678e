"""The demo world's scenarios end to end in-process: four agents' results through the supervisor's aggregation.

Each agent gets the input the supervisor projects from the work-permit
agent's permit record, runs against the real capability runtime, and the
results are aggregated exactly as the supervisor does.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from agentmesh.result_contract import context_of
from agentmesh.v1 import common_pb2
from supervisor_svc.aggregation import Decision, TaskOutcome, TaskState, aggregate
from supervisor_svc.definitions import default_catalog

from .conftest import refused

DOMAIN = default_catalog().domain("work-permit")
PLAN = DOMAIN.plans["analysis"]
AGENTS = {"work-permit-agent": "work-permit", "training-agent": "training", "risk-agent": "risk",
          "compliance-agent": "compliance"}
DELEGATIONS = {"work-permit-agent": ("training-agent",)}
"""The shipped allowed_delegations (the training agent may hand off to no one)."""


def supervise(local: Any, run_agent: Any, projector: Any, agent_id: str, data: dict[str, Any],
              lineage: tuple[str, ...] = ()) -> common_pb2.AgentResult:
    """One task as the supervisor runs it: each handoff the agent asks for is refused if it loops or is not
    in the requester's delegations, otherwise run on its projected input (handoffs of its own included)."""
    chain = (*lineage, agent_id)

    def answer(action: common_pb2.RequestedAction) -> common_pb2.HandoffOutcome:
        target = action.target_agent_id
        if target in chain:
            return refused(action, f"HANDOFF_LOOP: {' -> '.join((*chain, target))}")
        if target not in DELEGATIONS.get(agent_id, ()):
            return refused(action)
        params = json_format.MessageToDict(action.parameters)
        projected, _ = projector.project(params.get("input", {}), target, params["purpose"])
        result = supervise(local, run_agent, projector, target, projected, chain)
        result.agent_id = target
        return common_pb2.HandoffOutcome(action_id=action.action_id, target_agent_id=target,
                                         state=common_pb2.HANDOFF_STATE_COMPLETED, result=result)

    result = run_agent(agent_id, data, local(agent_id), handoffs=answer)
    result.agent_id = agent_id
    return result


@pytest.mark.parametrize(("permit_id", "decision"), [
    ("WP-10231", Decision.RECOMMENDED_FOR_RELEASE),
    ("WP-10232", Decision.NOT_RECOMMENDED),
    ("WP-10233", Decision.REQUIRES_REVIEW),
    ("WP-10234", Decision.INSUFFICIENT_EVIDENCE),
    ("WP-10235", Decision.RECOMMENDED_FOR_RELEASE),
    ("WP-10236", Decision.NOT_RECOMMENDED),
    ("WP-10237", Decision.REQUIRES_REVIEW),
    ("WP-10238", Decision.INSUFFICIENT_EVIDENCE),
    ("WP-10239", Decision.NOT_RECOMMENDED),
    ("WP-10240", Decision.NOT_RECOMMENDED),
    ("WP-10242", Decision.NOT_RECOMMENDED),
    ("WP-10243", Decision.NOT_RECOMMENDED),
    ("WP-10245", Decision.RECOMMENDED_FOR_RELEASE),
    ("WP-10246", Decision.NOT_RECOMMENDED),
    ("WP-10247", Decision.INSUFFICIENT_EVIDENCE),
    ("WP-10248", Decision.NOT_RECOMMENDED),
    ("WP-10249", Decision.NOT_RECOMMENDED),
    ("WP-10250", Decision.REQUIRES_REVIEW),
    ("WP-20001", Decision.INSUFFICIENT_EVIDENCE),
])
def test_demo_scenario(permit_id, decision, local, run_agent, projector) -> None:
    first = supervise(local, run_agent, projector, "work-permit-agent", {"permit_id": permit_id})
    contract = PLAN.task("permit").contract
    outcomes = [TaskOutcome("work-permit", TaskState.COMPLETED, "task-1", "work-permit-agent", first,
                            contract=contract, template_task="permit")]
    context = context_of([(first, contract, "permit")])
    if context:
        for agent_id, purpose in (("training-agent", "training.verify"), ("risk-agent", "risk.assess"),
                                  ("compliance-agent", "compliance.check")):
            projected, _ = projector.project(context, agent_id, purpose)
            result = supervise(local, run_agent, projector, agent_id, projected)
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
    if permit_id == "WP-10237":
        # One issuer, one authority: a data conflict for a human, with both records — not a missing analysis.
        (conflict,) = assessment.conflicts
        assert (conflict.subject, conflict.agent_a, conflict.agent_b) == (
            "worker:W-1010/NR-10", "training-agent", "training-agent")
        assert [e.reference.rsplit("#", 1)[1] for e in (*conflict.evidence_a, *conflict.evidence_b)] == [
            "TR-1010-10a", "TR-1010-10b"]
        assert conflict.resolution == "" and assessment.missing == ()
    if permit_id == "WP-10249":
        # The Ministry of Labour's REVOKED outranks SENAI's COMPLETED: decided by issuer authority.
        (conflict,) = assessment.conflicts
        assert conflict.resolution.startswith("GOVERNMENT_SOURCE_PREVAILS: by issuer authority")
        assert assessment.blocking == ("training-agent: DATA_CONFLICT_RESOLVED on worker:W-1019/NR-35",)
        assert [e.data["issuer_id"] for e in conflict.evidence_b] == ["mte"]
    if permit_id == "WP-10250":
        (conflict,) = assessment.conflicts
        assert conflict.resolution == "" and assessment.review_required and assessment.missing == ()
        assert [e.data["issuer_id"] for e in conflict.evidence_a] == ["senai"]
        assert [e.data["issuer_id"] for e in conflict.evidence_b] == ["alves-training"]
    if permit_id == "WP-10245":
        codes = {s.subject: s.code for s in first.statements if s.kind == common_pb2.STATEMENT_KIND_FACT}
        assert codes["permit:WP-10245/added_worker:W-1016"] == "ADDED_WORKER_QUALIFIED"
    if permit_id == "WP-10246":
        assert assessment.blocking == (
            "work-permit-agent: ADDED_WORKER_NOT_QUALIFIED on permit:WP-10246/added_worker:W-1017",)
    if permit_id == "WP-10247":
        # The training agent, handed the added worker, asked the work-permit agent back: a loop, refused.
        assert any("ADDED_WORKER_UNVERIFIED on permit:WP-10247/added_worker:W-1018" in str(m)
                   for m in assessment.missing)
    if permit_id == "WP-10248":
        assert assessment.blocking == ("work-permit-agent: PERMIT_WINDOW_ENDED on permit:WP-10248/validity",)
