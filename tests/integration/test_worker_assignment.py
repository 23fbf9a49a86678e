"""The second domain, worker assignment, over real processes on the same mesh as the first.

"Can worker W-1003 be assigned to permit WP-10231?": the employee agent first
(an active worker of the permit's tenant?), then in parallel the training agent
— the same process that serves the work-permit domain — and the medical agent,
which receives only the worker id, the permit id and the eligibility status it
reads. The domain is a definition file (supervisor_svc/domains/worker-assignment.yaml);
no supervisor code knows it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentmesh import launcher
from agentmesh.config import MeshConfig
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb

from .test_analysis_e2e import analyze, audit_records, decision, token

pytestmark = pytest.mark.integration

EN = "Can worker {w} be assigned to permit {p}?"
PT = "O trabalhador {w} pode ser alocado na permissão {p}?"
DEMO_WORLD = Path(__file__).resolve().parents[2] / "agentmesh" / "data" / "demo_world.yaml"


def tasks(ex: pb.Execution) -> dict[str, common_pb2.AgentTask]:
    return {n.target_agent_id: n for n in ex.graph.nodes}


def agents_that_ran(ex: pb.Execution) -> set[str]:
    return {r.agent_id for r in ex.results}


def test_an_active_trained_fit_worker_can_be_assigned(mesh: MeshConfig) -> None:
    ex = analyze(mesh, EN.format(w="W-1001", p="WP-10232"))
    assert (ex.status, decision(ex), ex.reason) == (pb.EXECUTION_STATUS_SUCCEEDED, "RECOMMENDED_FOR_RELEASE",
                                                    "ALL_ANALYSES_PASS"), ex.summary
    assert (ex.intent, ex.intent_kind, ex.intent_rule, ex.domain) == (
        pb.EXECUTION_INTENT_DOMAIN, "ASSIGN_WORKER", "ASSIGNMENT", "worker-assignment")
    assert ex.summary.startswith("Worker W-1001 can be assigned to permit WP-10232.")
    by_agent = tasks(ex)
    assert list(by_agent) == ["employee-agent", "training-agent", "medical-agent"]
    assert agents_that_ran(ex) == set(by_agent)
    employee = by_agent["employee-agent"]
    # Sequential, then parallel: both later tasks hang on the employee task's condition.
    assert {(e.from_task_id, e.to_task_id, e.condition) for e in ex.graph.edges} == {
        (employee.task_id, by_agent[a].task_id, "worker_assignable") for a in ("training-agent", "medical-agent")}
    for later in ("training-agent", "medical-agent"):
        assert by_agent[later].started_at.ToDatetime() >= employee.finished_at.ToDatetime()
    training = next(r for r in ex.results if r.agent_id == "training-agent")
    assert _struct(training.result)["subjects"] == {"worker:W-1001/NR-10": "PASS"}
    # The training agent got the candidate only, not the permit's other workers.
    assert [w["worker_id"] for w in _struct(by_agent["training-agent"].input)["workers"]] == ["W-1001"]


def test_a_worker_whose_training_expired_should_not_be_assigned(mesh: MeshConfig) -> None:
    ex = analyze(mesh, EN.format(w="W-1003", p="WP-10231"))
    assert (decision(ex), ex.reason) == ("NOT_RECOMMENDED", "DEFINITIVE_FAIL"), ex.summary
    assert ex.summary.startswith("Worker W-1003 should not be assigned to permit WP-10231.")
    assert "TRAINING_EXPIRED on worker:W-1003/NR-10" in ex.summary
    assert agents_that_ran(ex) == {"employee-agent", "training-agent", "medical-agent"}
    medical = next(r for r in ex.results if r.agent_id == "medical-agent")
    assert [s.code for s in medical.statements if s.kind == common_pb2.STATEMENT_KIND_FACT] == ["MEDICALLY_FIT"]


def test_the_portuguese_request(mesh: MeshConfig) -> None:
    ex = analyze(mesh, PT.format(w="W-1003", p="WP-10231"))
    assert (decision(ex), ex.reason) == ("NOT_RECOMMENDED", "DEFINITIVE_FAIL"), ex.summary
    assert ex.summary.startswith("O trabalhador W-1003 não deve ser alocado na permissão WP-10231.")
    inactive = analyze(mesh, PT.format(w="W-1030", p="WP-10231"))
    assert inactive.summary.startswith("O trabalhador W-1030 não pode ser alocado na permissão WP-10231:")
    assert "WORKER_NOT_ACTIVE" in inactive.summary


@pytest.mark.parametrize(("worker", "code"), [("W-1030", "WORKER_NOT_ACTIVE on worker:W-1030/employment"),
                                              ("W-2001", "WORKER_NOT_IN_TENANT on worker:W-2001/tenant")])
def test_an_inactive_or_other_tenants_worker_skips_the_other_tasks_and_says_why(
        mesh: MeshConfig, worker: str, code: str) -> None:
    ex = analyze(mesh, EN.format(w=worker, p="WP-10231"))
    assert (ex.status, decision(ex), ex.reason) == (pb.EXECUTION_STATUS_SUCCEEDED, "NOT_RECOMMENDED",
                                                    "WORKER_NOT_ASSIGNABLE"), ex.summary
    assert ex.summary.startswith(f"Worker {worker} cannot be assigned to permit WP-10231:")
    assert code in ex.summary and not ex.missing
    by_agent = tasks(ex)
    assert by_agent["employee-agent"].status == common_pb2.TASK_STATUS_COMPLETED
    for skipped in ("training-agent", "medical-agent"):
        assert by_agent[skipped].status == common_pb2.TASK_STATUS_SKIPPED
    assert agents_that_ran(ex) == {"employee-agent"}
    # Skipped means never delegated: no grant, no record of a task for them.
    delegated = {r.agent_id for r in audit_records(mesh, execution_id=ex.execution_id)
                 if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED}
    assert delegated == {"employee-agent"}


def test_another_tenants_worker_looks_like_one_that_does_not_exist(mesh: MeshConfig) -> None:
    theirs = analyze(mesh, EN.format(w="W-2001", p="WP-10231"))
    nobody = analyze(mesh, EN.format(w="W-9999", p="WP-10231"))
    assert theirs.summary.replace("W-2001", "W-?") == nobody.summary.replace("W-9999", "W-?")


def test_both_tenants_have_assignments(mesh: MeshConfig) -> None:
    grace = token(mesh, tenant="globex", user="grace")
    on_leave = analyze(mesh, EN.format(w="W-2003", p="WP-20001"), assertion=grace, tenant_id="globex")
    assert (decision(on_leave), on_leave.reason) == ("NOT_RECOMMENDED", "WORKER_NOT_ASSIGNABLE")
    assert "WORKER_NOT_ACTIVE on worker:W-2003/employment" in on_leave.summary
    fit = analyze(mesh, EN.format(w="W-1001", p="WP-20001"), assertion=grace, tenant_id="globex")
    assert decision(fit) == "RECOMMENDED_FOR_RELEASE", fit.summary
    # acme's W-1001 is another person, and WP-20001 is not acme's.
    acme = analyze(mesh, EN.format(w="W-1001", p="WP-20001"))
    assert (decision(acme), acme.reason) == ("NOT_RECOMMENDED", "WORKER_NOT_ASSIGNABLE")
    assert "PERMIT_NOT_FOUND on permit:WP-20001/tenant" in acme.summary


def test_choosing_the_medical_agent_grants_it_nothing_the_user_cannot(mesh: MeshConfig) -> None:
    # A viewer may read HR records but not medical eligibility: the medical task is refused by the policy
    # engine on the viewer's authority, and the answer says what is missing instead of guessing.
    ex = analyze(mesh, EN.format(w="W-1001", p="WP-10232"), assertion=token(mesh, user="vera", roles=("viewer",)))
    assert (decision(ex), ex.status) == ("INSUFFICIENT_EVIDENCE", pb.EXECUTION_STATUS_PARTIAL), ex.summary
    assert any(m.text.startswith("medical analysis (medical-agent): RESULT_FAILED — NOT_AUTHORISED")
               for m in ex.missing)
    denied = [r for r in audit_records(mesh, execution_id=ex.execution_id)
              if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION and r.agent_id == "medical-agent"]
    assert denied and all(r.outcome == audit_pb2.AUDIT_OUTCOME_DENIED for r in denied)


def test_the_training_agent_process_serves_both_domains(mesh: MeshConfig) -> None:
    permit = analyze(mesh, "Analyze permit WP-10231 and tell me if it can be released")
    assignment = analyze(mesh, EN.format(w="W-1001", p="WP-10232"))
    rows = [p for p in launcher.read_state(mesh) if p.name == "training-agent"]
    assert len(rows) == 1  # one process
    for ex in (permit, assignment):
        assert "training-agent" in agents_that_ran(ex)
        invoked = [r for r in audit_records(mesh, execution_id=ex.execution_id)
                   if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED and r.agent_id == "training-agent"]
        assert invoked and {r.capability_id for r in invoked} == {"training.getStatus"}
    assert {n.projection.purpose for ex in (permit, assignment) for n in ex.graph.nodes
            if n.target_agent_id == "training-agent"} == {"training.verify", "assignment.training"}


# --- what the medical agent process received (PRD §23) ------------------------------------------------


def _struct(message: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    out: dict[str, Any] = json_format.MessageToDict(message)
    return out


def _sensitive_texts() -> list[str]:
    world = yaml.safe_load(DEMO_WORLD.read_text())
    out: list[str] = []
    for tenant in world["tenants"]:
        for w in tenant["workers"]:
            out += [v for k, v in (w.get("medical") or {}).items() if k in ("diagnosis", "clinical_notes") and v]
            if w.get("medical_notes"):
                out.append(w["medical_notes"])
    return out


def _received(cfg: MeshConfig, task_id: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """From the medical agent's own log: the input of a task and every capability answer after it."""
    lines = (cfg.mesh_home.logs / "medical-agent.log").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if f"task {task_id} received input: " in line)
    task_input = json.loads(lines[start].split(" received input: ", 1)[1])
    answers: list[tuple[str, dict[str, Any]]] = []
    for line in lines[start + 1:]:
        if " received input: " in line:
            break
        m = re.search(r"capability (\S+) answered: (\{.*\})$", line)
        if m:
            answers.append((m.group(1), json.loads(m.group(2))))
    return task_input, answers


@pytest.mark.parametrize("worker", ["W-1003", "W-1031"])  # hearing loss; epilepsy under investigation
def test_the_medical_agent_receives_only_the_worker_the_permit_and_the_eligibility_status(
        mesh: MeshConfig, worker: str) -> None:
    secrets = _sensitive_texts()
    assert len(secrets) >= 6, "the demo world has diagnoses, clinical notes and medical notes to keep away"
    ex = analyze(mesh, EN.format(w=worker, p="WP-10231"))
    node = tasks(ex)["medical-agent"]
    assert node.status == common_pb2.TASK_STATUS_COMPLETED
    task_input, answers = _received(mesh, node.task_id)
    # What arrived at the process, as it logged it: the worker id and the permit id, nothing else ...
    assert task_input == {"worker_id": worker, "permit_id": "WP-10231"}
    # ... and, from its one capability call, the eligibility status (with the work type and exam validity
    # it is for, and where it came from) — no diagnosis, no clinical notes.
    assert [name for name, _ in answers] == ["medical.getEligibility"]
    answer = answers[0][1]
    assert set(answer) == {"worker_id", "permit_id", "work_type", "status", "valid_until", "provenance"}
    assert (answer["worker_id"], answer["permit_id"]) == (worker, "WP-10231")
    assert answer["status"] == ("UNFIT" if worker == "W-1031" else "FIT")
    log = (mesh.mesh_home.logs / "medical-agent.log").read_text()
    assert not [s for s in secrets if s in log]
    assert not {"diagnosis", "clinical_notes", "medical_notes"} & set(re.findall(r'"(\w+)":', log))
    # The supervisor's record agrees: the projection it sent, its digest in the grant, nothing redacted let in.
    assert _struct(node.input) == task_input
    assert sorted(node.projection.allowed_fields) == ["permit_id", "worker_id"]
    delegated = [r for r in audit_records(mesh, execution_id=ex.execution_id)
                 if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED and r.agent_id == "medical-agent"]
    assert [r.input_digest for r in delegated] == [node.projection.digest]
    medical = next(r for r in ex.results if r.agent_id == "medical-agent")
    assert not [s for s in secrets if s in json.dumps(_struct(medical))]
    assert not [s for s in secrets if s in json.dumps(_struct(ex))]
