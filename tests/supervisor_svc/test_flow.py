"""The domain objects used together the way the servicer will: intent → plan → projection → aggregation."""

from __future__ import annotations

from typing import Any

from agentmesh.result_contract import context_of
from agentmesh.v1 import common_pb2, supervisor_service_pb2
from supervisor_svc.aggregation import Decision, OutcomeStatus, TaskOutcome, TaskState, aggregate
from supervisor_svc.definitions import default_catalog, projection_config
from supervisor_svc.intent import check_tenant, parse_intent
from supervisor_svc.limits import ExecutionBudget
from supervisor_svc.planner import build_plan
from supervisor_svc.projection import Projector, context_digest, to_struct
from supervisor_svc.selection import AgentSelector
from supervisor_svc.tenants import TenantDirectory

USER = common_pb2.UserContext(tenant_id="acme", user_id="alice", session_id="s", conversation_id="c")
PERMIT: dict[str, Any] = {
    "permit_id": "WP-10231", "title": "Substation maintenance", "status": "PENDING_RELEASE",
    "valid_from": "2026-11-25", "valid_until": "2026-12-20", "required_trainings": ["NR-10"],
    "workers": [{"worker_id": "W-1001", "name": "Ana", "permit_role": "EXECUTOR",
                 "medical_notes": "Type 1 diabetes"}],
}


def _fact_result(task: common_pb2.AgentTask, subject: str, code: str, extra: dict[str, Any] | None = None
                 ) -> common_pb2.AgentResult:
    r = common_pb2.AgentResult(task_id=task.task_id, agent_id=task.target_agent_id,
                               status=common_pb2.RESULT_STATUS_SUCCESS)
    r.result.update({"verdict": "PASS", "subjects": {subject: "PASS"}, **(extra or {})})
    r.evidence.append(common_pb2.EvidenceReference(source="src", reference="r",
                                                   authority=common_pb2.AUTHORITY_LEVEL_OFFICIAL_RECORD))
    r.statements.append(common_pb2.Statement(kind=common_pb2.STATEMENT_KIND_FACT, code=code, subject=subject,
                                             evidence_indexes=[0]))
    return r


def test_analysis_flow(selector: AgentSelector, tenants: TenantDirectory) -> None:
    intent = parse_intent("Analise a permissão WP-10231 e me diga se ela pode ser liberada")
    check_tenant(intent, USER.tenant_id)
    budget = ExecutionBudget(tenants.get(USER.tenant_id).limit_policy)
    plan = build_plan(intent, execution_id="exe-1", user=USER, correlation_id="corr", selector=selector,
                      budget=budget)
    assert budget.usage.tasks == 4
    projector = Projector(projection_config(default_catalog()))
    stage_one, stage_two = plan.stages()

    (first_id,) = stage_one
    first = plan.task(first_id)
    wp_result = _fact_result(first, "permit:WP-10231/status", "PERMIT_PENDING_RELEASE",
                             {"permit_found": True, "permit": PERMIT})
    first_spec = plan.specs[first_id]
    assert first_spec.template is not None
    outcomes = [TaskOutcome(first_spec.analysis, TaskState.COMPLETED, first_id, first.target_agent_id,
                            wp_result, contract=first_spec.template.contract, template_task="permit")]
    full_context = context_of([(wp_result, first_spec.template.contract, "permit")])
    assert full_context == PERMIT

    for task_id in stage_two:
        assert all(plan.edge_holds(e, {first_id: wp_result}) for e in plan.incoming(task_id))
        task, spec = plan.task(task_id), plan.specs[task_id]
        projected, record = projector.project(full_context, task.target_agent_id, spec.purpose,
                                              source_context_id=first_id)
        task.input.CopyFrom(to_struct(projected))
        task.projection.CopyFrom(record)
        assert "medical_notes" not in str(task.input)
        assert context_digest(task.input) == record.digest  # what the grant carries is verifiable from the input
        subject = {"training": "worker:W-1001/NR-10", "risk": "permit:WP-10231/risk",
                   "compliance": "checklist:CL-1/I-1"}[str(spec.analysis)]
        outcomes.append(TaskOutcome(spec.analysis, TaskState.COMPLETED, task_id, task.target_agent_id,
                                    _fact_result(task, subject, "CHECK_PASSED")))

    assert intent.domain is not None and plan.template is not None
    assessment = aggregate(outcomes, expected=plan.expected, policy=intent.domain.evidence,
                           decisions=intent.domain.outcomes, conditions=tuple(plan.template.conditions.values()),
                           subjects=intent.subjects, language=intent.language)
    execution = supervisor_service_pb2.Execution(
        execution_id="exe-1", intent=supervisor_service_pb2.EXECUTION_INTENT_ANALYZE_PERMIT, intent_rule=intent.rule)
    execution.graph.CopyFrom(plan.graph)
    execution.selection_scores.extend(plan.selection_scores())
    assessment.apply_to(execution)
    assert assessment.decision is Decision.RECOMMENDED_FOR_RELEASE
    assert assessment.status is OutcomeStatus.SUCCEEDED
    assert execution.summary.startswith("Permissão WP-10231: liberação recomendada.")
    assert len(execution.selection_scores) == 4
