"""The executor follows a definition's conditional edges: the true branch, the false branch, or neither."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import assertion, grants, spiffe
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.definitions import (
    DomainCatalog,
    default_catalog,
    default_domains_dir,
    load_definition,
    projection_config,
)
from supervisor_svc.executions import ExecutionStore
from supervisor_svc.orchestrator import Orchestrator
from supervisor_svc.projection import ProjectionConfig, Projector
from supervisor_svc.registry import AgentRegistry
from supervisor_svc.selection import AgentSelector

from .conftest import demo_tenants
from .test_orchestrator import Audit, Call, Policy


def _result(task: common_pb2.AgentTask, subjects: dict[str, str], code: str,
            extra: dict[str, Any] | None = None) -> common_pb2.AgentResult:
    r = common_pb2.AgentResult(task_id=task.task_id, agent_id=task.target_agent_id,
                               status=common_pb2.RESULT_STATUS_SUCCESS)
    values = set(subjects.values())
    r.result.update({"verdict": "FAIL" if "FAIL" in values else "PASS", "subjects": subjects, **(extra or {})})
    r.evidence.append(common_pb2.EvidenceReference(source="hr-registry", reference="employee/W-1",
                                                   authority=common_pb2.AUTHORITY_LEVEL_OFFICIAL_RECORD))
    for subject in subjects:
        r.statements.append(common_pb2.Statement(kind=common_pb2.STATEMENT_KIND_FACT, code=code, subject=subject,
                                                 evidence_indexes=[0]))
    return r


class Specialists:
    """Each agent answers as told; ``employee`` decides whether the worker is assignable (None: it fails)."""

    def __init__(self) -> None:
        self.assignable: bool | None = True
        self.requests: list[spec_pb2.RunTaskRequest] = []

    def start(self, agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float, endpoint: Any = None) -> Call:
        self.requests.append(request)
        task = request.task
        worker = "worker:W-1001"
        if agent_id == "employee-agent":
            if self.assignable is None:
                failed = common_pb2.AgentResult(task_id=task.task_id, agent_id=agent_id,
                                                status=common_pb2.RESULT_STATUS_FAILED,
                                                error_reason="HR_REGISTRY_TIMEOUT: employee.get timed out")
                failed.result.update({"verdict": "UNKNOWN", "subjects": {}})
                return Call(failed)
            if self.assignable:
                return Call(_result(task, {f"{worker}/employment": "PASS"}, "WORKER_ACTIVE", {
                    "assignable": True, "assignment": {
                        "permit_id": "WP-10232", "work_type": "ELECTRICAL", "valid_from": "2026-11-29",
                        "valid_until": "2026-12-10", "required_trainings": ["NR-10"],
                        "workers": [{"worker_id": "W-1001"}], "worker_id": "W-1001"}}))
            return Call(_result(task, {f"{worker}/employment": "FAIL"}, "WORKER_NOT_ACTIVE", {"assignable": False}))
        subject = {"training-agent": f"{worker}/NR-10", "medical-agent": f"{worker}/medical",
                   "work-permit-agent": "permit:WP-10232/status"}[agent_id]
        return Call(_result(task, {subject: "PASS"}, "CHECK_PASSED"))


def _orchestrator(tmp_path: Path, catalog: DomainCatalog, projector: Projector,
                  idp: Ed25519PrivateKey) -> tuple[Orchestrator, Specialists, Audit, AgentRegistry]:
    registry = AgentRegistry(tmp_path / "agents.db")
    tenants = demo_tenants()
    specialists, audit = Specialists(), Audit()
    orch = Orchestrator(
        identity=spiffe.service("supervisor"), registry=registry, selector=AgentSelector(registry, tenants),
        tenants=tenants, projector=projector, store=ExecutionStore(tmp_path / "supervisor.db"),
        signer=grants.GrantSigner(Ed25519PrivateKey.generate()), specialists=specialists, audit=audit,
        verify_assertion=functools.partial(assertion.verify, key=idp.public_key()), authorize=Policy(),
        domains=catalog)
    return orch, specialists, audit, registry


def _run(orch: Orchestrator, idp: Ed25519PrivateKey, text: str) -> pb.Execution:
    token = assertion.issue(idp, tenant_id="acme", user_id="alice", roles=["analyst"])
    execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, request_text=text, tenant_id="acme"),
                              "spiffe://agentmesh.local/client/test")
    return orch.run(execution_id)


def _statuses(ex: pb.Execution) -> dict[str, int]:
    return {n.target_agent_id: n.status for n in ex.graph.nodes}


REQUEST = "Can worker W-1001 be assigned to permit WP-10232?"
DONE, SKIPPED = common_pb2.TASK_STATUS_COMPLETED, common_pb2.TASK_STATUS_SKIPPED


@pytest.fixture()
def idp() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def test_the_shipped_assignment_takes_each_branch(tmp_path: Path, idp: Ed25519PrivateKey) -> None:
    orch, specialists, audit, registry = _orchestrator(tmp_path, default_catalog(),
                                                       Projector(projection_config(default_catalog())), idp)
    try:
        ex = _run(orch, idp, REQUEST)
        assert (ex.decision, ex.reason) == (common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE,
                                            "ALL_ANALYSES_PASS"), ex.summary
        assert set(_statuses(ex).values()) == {DONE}
        # The contract has no value for a domain's own intent: intent_kind names it.
        assert (ex.intent, ex.intent_kind, ex.intent_rule, ex.domain) == (
            pb.EXECUTION_INTENT_DOMAIN, "ASSIGN_WORKER", "ASSIGNMENT", "worker-assignment")
        medical = next(r.task for r in specialists.requests if r.task.target_agent_id == "medical-agent")
        assert dict(medical.input) == {"worker_id": "W-1001", "permit_id": "WP-10232"}

        specialists.assignable = False
        ex = _run(orch, idp, REQUEST)
        assert (ex.status, ex.decision, ex.reason) == (pb.EXECUTION_STATUS_SUCCEEDED,
                                                       common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED,
                                                       "WORKER_NOT_ASSIGNABLE")
        assert _statuses(ex) == {"employee-agent": DONE, "training-agent": SKIPPED, "medical-agent": SKIPPED}
        assert "WORKER_NOT_ACTIVE on worker:W-1001/employment" in ex.summary and not ex.missing
        mine = {n.task_id for n in ex.graph.nodes}
        delegated = {r.agent_id for r in audit.records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED
                     and r.task_id in mine}
        assert delegated == {"employee-agent"}

        specialists.assignable = None  # the records could not be read: neither branch, and it says so
        ex = _run(orch, idp, REQUEST)
        assert ex.decision == common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE
        assert _statuses(ex) == {"employee-agent": DONE, "training-agent": SKIPPED, "medical-agent": SKIPPED}
        assert any(m.text.startswith("training analysis (training-agent): TASK_SKIPPED") for m in ex.missing)
        assert any("HR_REGISTRY_TIMEOUT" in m.text for m in ex.missing)
    finally:
        orch.close()
        registry.close()


def test_a_false_branch_with_a_task_runs_it_and_only_it(tmp_path: Path, idp: Ed25519PrivateKey) -> None:
    data = yaml.safe_load((default_domains_dir() / "worker-assignment.yaml").read_text())
    plan = data["plans"]["assignment"]
    del plan["conditions"]["worker_assignable"]["if_false"]
    plan["tasks"].append({"id": "explain", "analysis": "work-permit",
                          "requires": {"domains": ["work-permit"], "capabilities": ["workPermit.get"]},
                          "objective": "Read permit {permit}.", "purpose": "assignment.explain",
                          "after": {"employee": "not worker_assignable"}})
    data["projections"]["work-permit-agent"] = {"assignment.explain": ["permit_id"]}
    path = tmp_path / "branches.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    platform = ProjectionConfig.load()
    catalog = DomainCatalog.of([load_definition(path, sensitive_fields=platform.sensitive_fields)])
    orch, specialists, _, registry = _orchestrator(tmp_path, catalog, Projector(projection_config(catalog, platform)),
                                                   idp)
    try:
        specialists.assignable = False
        ex = _run(orch, idp, REQUEST)
        assert _statuses(ex) == {"employee-agent": DONE, "training-agent": SKIPPED, "medical-agent": SKIPPED,
                                 "work-permit-agent": DONE}
        # The skipped true branch is off the path, not missing; the decision rests on what ran.
        assert not any("training" in m.text or "medical" in m.text for m in ex.missing)
        assert ex.decision == common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED, ex.summary

        specialists.assignable = True
        ex = _run(orch, idp, REQUEST)
        assert _statuses(ex) == {"employee-agent": DONE, "training-agent": DONE, "medical-agent": DONE,
                                 "work-permit-agent": SKIPPED}
        assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE, ex.summary
    finally:
        orch.close()
        registry.close()
