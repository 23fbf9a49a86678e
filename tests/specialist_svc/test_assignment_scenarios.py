"""The worker-assignment domain's demo scenarios in-process: its three agents over the real capability runtime,
projected and aggregated exactly as its definition says (supervisor_svc/domains/worker-assignment.yaml)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentmesh.result_contract import context_of
from agentmesh.v1 import common_pb2
from supervisor_svc.aggregation import Decision, TaskOutcome, TaskState, aggregate
from supervisor_svc.definitions import default_catalog
from supervisor_svc.projection import Projector

from .conftest import DEMO_WORLD, load_agent, task_for

DOMAIN = default_catalog().domain("worker-assignment")
PLAN = DOMAIN.plans["assignment"]
AGENTS = {"employee": "employee-agent", "training": "training-agent", "medical": "medical-agent"}


def _run(agent_id: str, data: dict[str, Any], client: Any, tenant_id: str, locale: str = "") -> common_pb2.AgentResult:
    task = task_for(agent_id, data, locale=locale)
    task.tenant_id = tenant_id
    return load_agent(agent_id).run(task, client)


def assess(worker: str, permit: str, local: Any, projector: Projector, tenant_id: str = "acme",
           locale: str = "") -> Any:
    results = []
    first = PLAN.task("employee")
    employee = _run("employee-agent", {k: v.render({"worker": worker, "permit": permit})
                                       for k, v in (first.input or {}).items()},
                    local("employee-agent", tenant_id), tenant_id, locale)
    results.append(employee)
    outcomes = [TaskOutcome("employee", TaskState.COMPLETED, "task-1", "employee-agent", employee,
                            contract=first.contract, template_task="employee")]
    context = context_of([(employee, first.contract, "assignment")])
    received: dict[str, dict[str, Any]] = {}
    if PLAN.conditions["worker_assignable"].evaluate(employee, first.contract):
        for t in PLAN.tasks[1:]:
            projected, _ = projector.project(context, AGENTS[t.task_id], t.purpose)
            received[t.task_id] = projected
            result = _run(AGENTS[t.task_id], projected, local(AGENTS[t.task_id], tenant_id), tenant_id, locale)
            results.append(result)
            outcomes.append(TaskOutcome(t.analysis, TaskState.COMPLETED, "task-1", AGENTS[t.task_id], result,
                                        contract=t.contract, template_task=t.task_id))
    else:
        outcomes += [TaskOutcome(t.analysis, TaskState.SKIPPED, "", AGENTS[t.task_id], off_path=True)
                     for t in PLAN.tasks[1:]]
    assessment = aggregate(outcomes, expected=PLAN.expected, policy=DOMAIN.evidence, decisions=DOMAIN.outcomes,
                           conditions=tuple(PLAN.conditions.values()), subjects={"worker": worker, "permit": permit},
                           language="pt" if locale.startswith("pt") else "en")
    if locale:
        return assessment, received, results
    return assessment, received


@pytest.mark.parametrize(("tenant", "worker", "permit", "decision", "reason", "why"), [
    ("acme", "W-1001", "WP-10232", Decision.RECOMMENDED_FOR_RELEASE, "ALL_ANALYSES_PASS", ""),
    ("acme", "W-1003", "WP-10231", Decision.NOT_RECOMMENDED, "DEFINITIVE_FAIL",
     "training-agent: TRAINING_EXPIRED on worker:W-1003/NR-10"),
    ("acme", "W-1031", "WP-10231", Decision.NOT_RECOMMENDED, "DEFINITIVE_FAIL",
     "medical-agent: MEDICALLY_UNFIT on worker:W-1031/medical"),
    ("acme", "W-1030", "WP-10231", Decision.NOT_RECOMMENDED, "WORKER_NOT_ASSIGNABLE",
     "WORKER_NOT_ACTIVE on worker:W-1030/employment"),
    ("acme", "W-2001", "WP-10231", Decision.NOT_RECOMMENDED, "WORKER_NOT_ASSIGNABLE",
     "WORKER_NOT_IN_TENANT on worker:W-2001/tenant"),
    ("acme", "W-1001", "WP-20001", Decision.NOT_RECOMMENDED, "WORKER_NOT_ASSIGNABLE",
     "PERMIT_NOT_FOUND on permit:WP-20001/tenant"),
    ("globex", "W-2003", "WP-20001", Decision.NOT_RECOMMENDED, "WORKER_NOT_ASSIGNABLE",
     "WORKER_NOT_ACTIVE on worker:W-2003/employment"),
    ("globex", "W-1001", "WP-20001", Decision.RECOMMENDED_FOR_RELEASE, "ALL_ANALYSES_PASS", ""),
])
def test_assignment_scenario(tenant: str, worker: str, permit: str, decision: Decision, reason: str, why: str,
                             local: Any, projector: Projector) -> None:
    assessment, received = assess(worker, permit, local, projector, tenant)
    assert (assessment.decision, assessment.reason) == (decision, reason), assessment.summary
    if reason == "WORKER_NOT_ASSIGNABLE":
        assert not received and assessment.missing == ()  # skipped, and the answer says why
        assert why in assessment.summary and "cannot be assigned" in assessment.summary
    elif why:
        assert assessment.blocking == (why,)
    else:
        assert assessment.summary.startswith(f"Worker {worker} can be assigned to permit {permit}.")


def test_the_medical_agent_gets_the_worker_and_the_permit_only(local: Any, projector: Projector) -> None:
    _, received = assess("W-1003", "WP-10231", local, projector)
    assert received["medical"] == {"worker_id": "W-1003", "permit_id": "WP-10231"}
    assert received["training"] == {"permit_id": "WP-10231", "valid_from": "2026-11-28", "valid_until": "2026-12-12",
                                    "required_trainings": ["NR-10", "NR-35"], "workers": [{"worker_id": "W-1003"}]}


def test_no_diagnosis_or_clinical_note_reaches_any_agent_or_the_answer(local: Any, projector: Projector) -> None:
    import yaml

    world = yaml.safe_load(DEMO_WORLD.read_text())
    workers = [w for t in world["tenants"] for w in t["workers"]]
    secrets = [v for w in workers for k, v in (w.get("medical") or {}).items() if k in ("diagnosis", "clinical_notes")
               and v]
    notes = [w["medical_notes"] for w in workers if w.get("medical_notes")]
    assert len(secrets) >= 4 and notes, "the demo world has medical data to hide"
    for worker, permit in (("W-1003", "WP-10231"), ("W-1031", "WP-10231"), ("W-1001", "WP-10232")):
        clients = {a: local(a) for a in ("employee-agent", "training-agent", "medical-agent")}
        assessment, received = assess(worker, permit, lambda a, t="acme", c=clients: c[a], projector)
        answers: dict[str, str] = {}
        for agent_id, client in clients.items():
            answers[agent_id] = json.dumps([client.world.executor.execute(client.ctx, capability, arguments).output
                                            for capability, arguments in client.calls])
        everything = json.dumps([received, assessment.summary]) + "".join(answers.values())
        # No agent ever receives a diagnosis or clinical notes: no capability returns them.
        assert not [s for s in secrets if s in everything]
        assert "diagnosis" not in everything and "clinical_notes" not in everything
        # The medical and training agents (and the answer) get no medical notes either; the employee agent reads
        # the permit (workPermit.get carries its workers' notes, like for every agent holding it) and passes
        # none of it on.
        passed_on = json.dumps([received, assessment.summary]) + answers["medical-agent"] + answers["training-agent"]
        assert not [n for n in notes if n in passed_on] and "medical_notes" not in passed_on


@pytest.mark.parametrize(("worker", "permit"), [("W-1001", "WP-10232"), ("W-1003", "WP-10231"), ("W-1031", "WP-10231"),
                                                ("W-1030", "WP-10231"), ("W-2001", "WP-10231")])
def test_a_portuguese_request_gets_every_statement_in_portuguese(worker: str, permit: str, local: Any,
                                                                 projector: Projector) -> None:
    from specialist_svc import phrases

    _, _, english = assess(worker, permit, local, projector, locale="en")
    before = phrases.untranslated()
    assessment, _, portuguese = assess(worker, permit, local, projector, locale="pt-BR")
    assert phrases.untranslated() == before, "templates the Portuguese catalog lacks"
    assert assessment.summary.startswith(f"O trabalhador {worker}")
    for en, pt in zip(english, portuguese, strict=True):
        assert [(s.kind, s.code, s.subject) for s in pt.statements] == [(s.kind, s.code, s.subject)
                                                                         for s in en.statements]
        assert pt.result == en.result
        for s_en, s_pt in zip(en.statements, pt.statements, strict=True):
            assert s_pt.text != s_en.text, s_en.text
