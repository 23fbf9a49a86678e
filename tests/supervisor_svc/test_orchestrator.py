"""The orchestrator on its own: real registry, selection, planner, projection, aggregation, store and
grant signer; specialists and audit are in-memory stand-ins (the gRPC path is covered by the
integration tests)."""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import assertion, errors, grants, spiffe
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import specialist_service_pb2 as spec_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.aggregation import EvidencePolicy
from supervisor_svc.executions import ExecutionStore
from supervisor_svc.orchestrator import Orchestrator
from supervisor_svc.projection import ProjectionConfig, Projector
from supervisor_svc.registry import AgentRegistry
from supervisor_svc.selection import AgentSelector
from supervisor_svc.tenants import TenantDirectory

from .test_flow import PERMIT, _fact_result

SUBJECTS = {"training-agent": "worker:W-1001/NR-10", "risk-agent": "permit:WP-10231/risk",
            "compliance-agent": "checklist:CL-1/I-1"}


class Call:
    def __init__(self, result: common_pb2.AgentResult | None, error: errors.MeshError | None = None) -> None:
        self._result, self._error = result, error

    def result(self) -> common_pb2.AgentResult:
        if self._error:
            raise self._error
        assert self._result is not None
        return self._result

    def cancel(self) -> None:
        pass


class Specialists:
    """Answers each task like a well-behaved specialist; records what it received."""

    def __init__(self) -> None:
        self.requests: list[spec_pb2.RunTaskRequest] = []
        self.handoffs: dict[str, list[common_pb2.RequestedAction]] = {}
        self.fail: dict[str, errors.MeshError] = {}
        self.delay_s = 0.0
        self.lock = threading.Lock()

    def start(self, agent_id: str, request: spec_pb2.RunTaskRequest, timeout_s: float) -> Call:
        with self.lock:
            self.requests.append(request)
        time.sleep(self.delay_s)
        if agent_id in self.fail:
            return Call(None, self.fail[agent_id])
        task = request.task
        if agent_id == "work-permit-agent":
            result = _fact_result(task, "permit:WP-10231/status", "PERMIT_PENDING_RELEASE",
                                  {"permit_found": True, "permit": PERMIT})
        else:
            result = _fact_result(task, SUBJECTS[agent_id], "CHECK_PASSED")
        result.requested_actions.extend(self.handoffs.get(agent_id, []))
        return Call(result)


class Audit:
    def __init__(self) -> None:
        self.records: list[audit_pb2.AuditRecord] = []

    def record(self, event_type: int, **fields: Any) -> audit_pb2.AppendRecordResponse:
        self.records.append(audit_pb2.AuditRecord(event_type=event_type, **fields))  # type: ignore[arg-type]
        return audit_pb2.AppendRecordResponse()

    def record_later(self, event_type: int, **fields: Any) -> None:
        self.record(event_type, **fields)

    def wait(self, sent: Any) -> bool:
        return True


@pytest.fixture()
def world(tmp_path: Path) -> Any:
    idp = Ed25519PrivateKey.generate()
    signer = grants.GrantSigner(Ed25519PrivateKey.generate())
    registry = AgentRegistry(tmp_path / "agents.db")
    tenants = TenantDirectory.load()
    specialists, audit = Specialists(), Audit()
    orch = Orchestrator(
        identity=spiffe.service("supervisor"), registry=registry, selector=AgentSelector(registry, tenants),
        tenants=tenants, projector=Projector(ProjectionConfig.load()), evidence=EvidencePolicy.load(),
        store=ExecutionStore(tmp_path / "supervisor.db"), signer=signer, specialists=specialists, audit=audit,
        verify_assertion=functools.partial(assertion.verify, key=idp.public_key()))
    token = assertion.issue(idp, tenant_id="acme", user_id="alice", roles=["analyst"])
    yield orch, specialists, audit, token, signer
    orch.close()
    registry.close()


def _analyze(orch: Orchestrator, token: str, text: str = "Analyze permit WP-10231 and tell me if it can be released",
             **kw: Any) -> pb.Execution:
    execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, request_text=text, tenant_id="acme", **kw),
                              "spiffe://agentmesh.local/client/test")
    return orch.run(execution_id)


def test_each_task_gets_a_signed_grant_for_its_agent_and_projection(world: Any) -> None:
    orch, specialists, _, token, signer = world
    ex = _analyze(orch, token)
    assert ex.decision == common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE
    trusted = {signer.key_id: signer.key.public_key()}
    for req in specialists.requests:
        grant = grants.verify(req.grant, trusted)
        assert grant.audience == f"spiffe://agentmesh.local/agent/{req.task.target_agent_id}"
        assert grant.projection_digest == req.task.projection.digest
        assert (grant.tenant_id, grant.user_id) == ("acme", "alice")
        assert "medical" not in str(req.task.input)


def test_allowed_handoff_runs_and_a_handoff_back_is_rejected(world: Any) -> None:
    orch, specialists, audit, token, _ = world
    specialists.handoffs["work-permit-agent"] = [common_pb2.RequestedAction(
        action="handoff", target_agent_id="training-agent", reason="check trainings")]
    specialists.handoffs["training-agent"] = [common_pb2.RequestedAction(
        action="handoff", target_agent_id="work-permit-agent", reason="back again")]
    ex = _analyze(orch, token)
    handoff_nodes = [n for n in ex.graph.nodes if n.parent_task_id]
    # A -> B admitted and run once, at depth 2; B -> A refused (training-agent may delegate to no one).
    assert [(n.source_agent_id, n.target_agent_id, n.depth) for n in handoff_nodes] == [
        ("work-permit-agent", "training-agent", 2)]
    assert any("training-agent -> work-permit-agent" in m and "HANDOFF_NOT_ALLOWED" in m for m in ex.missing)
    assert any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED and "HANDOFF_NOT_ALLOWED" in r.reason_codes
               for r in audit.records)


def test_failed_specialist_is_partial_naming_it(world: Any) -> None:
    orch, specialists, _, token, _ = world
    specialists.fail["risk-agent"] = errors.Unavailable("connection refused", reason="UNAVAILABLE")
    ex = _analyze(orch, token)
    assert ex.status == pb.EXECUTION_STATUS_PARTIAL
    assert ex.decision == common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE
    assert any(m.startswith("risk") for m in ex.missing)


def test_each_limit_stops_with_its_reason(world: Any) -> None:
    orch, specialists, _, token, _ = world
    ex = _analyze(orch, token, budget=common_pb2.AgentBudget(max_cost=0.01))
    assert (ex.status, ex.reason.split(":")[0]) == (pb.EXECUTION_STATUS_STOPPED, "MAX_COST_EXCEEDED")
    specialists.delay_s = 0.05
    ex = _analyze(orch, token, budget=common_pb2.AgentBudget(max_execution_time_ms=30))
    assert (ex.status, ex.reason.split(":")[0]) == (pb.EXECUTION_STATUS_STOPPED, "MAX_EXECUTION_TIME_EXCEEDED")
    assert ex.decision != common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE


def test_tenant_named_in_the_text_must_match_the_assertion(world: Any) -> None:
    orch, _, audit, token, _ = world
    with pytest.raises(errors.PermissionDenied):
        _analyze(orch, token, text="Analyze permit WP-10231 of tenant globex")
    assert audit.records[-1].event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED


def test_restart_ends_running_executions_truthfully(world: Any, tmp_path: Path) -> None:
    orch, _, _, token, _ = world
    execution_id = orch.start(pb.AnalyzeRequest(user_assertion=token, tenant_id="acme",
                                                request_text="Analyze permit WP-10231"), "x")
    # The process "dies" before running it; the next start over the same store ends it truthfully.
    assert orch.end_interrupted() == [execution_id]
    stored = orch._store.get(execution_id)
    assert stored is not None and stored.status == pb.EXECUTION_STATUS_FAILED
    assert stored.reason.startswith("SUPERVISOR_RESTARTED") and stored.missing
