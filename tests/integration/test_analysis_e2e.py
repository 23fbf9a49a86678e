"""The first use case end to end over real processes (issue: supervisor and specialists).

The `mesh` fixture is the whole mesh as `agentmesh up` starts it (sandbox LMS,
audit, policy, capability, four specialists, supervisor) on free ports.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from agentmesh import assertion, errors, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import OPERATOR, PLATFORM_CLI
from agentmesh.signing import load_private_key
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
from agentmesh.v1 import common_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from agentmesh.v1 import supervisor_service_pb2_grpc as pb_grpc

from .conftest import agentmesh_cli, client_tls, peer_address


def token(cfg: MeshConfig, tenant: str = "acme", user: str = "alice", roles: tuple[str, ...] = ("analyst",)) -> str:
    return assertion.issue(load_private_key(cfg.mesh_home.idp_key), tenant_id=tenant, user_id=user,
                           roles=list(roles))


def supervisor(cfg: MeshConfig) -> pb_grpc.SupervisorServiceStub:
    channel = transport.secure_channel(peer_address(cfg, "supervisor"), client_tls(cfg, PLATFORM_CLI),
                                       spiffe.service("supervisor"), default_timeout_s=60)
    return pb_grpc.SupervisorServiceStub(channel)


def analyze(cfg: MeshConfig, text: str, **kw: Any) -> pb.Execution:
    req = pb.AnalyzeRequest(user_assertion=kw.pop("assertion", None) or token(cfg), request_text=text,
                            tenant_id=kw.pop("tenant_id", "acme"), **kw)
    return supervisor(cfg).Analyze(req, timeout=60).execution


def audit_records(cfg: MeshConfig, **filters: str) -> list[audit_pb2.AuditRecord]:
    channel = transport.secure_channel(peer_address(cfg, "audit"), client_tls(cfg, OPERATOR), spiffe.service("audit"))
    with channel:
        return [r for page in audit_grpc.AuditServiceStub(channel).QueryRecords(
            audit_pb2.QueryRecordsRequest(**filters)) for r in page.records]


def result_of(ex: pb.Execution, agent: str) -> common_pb2.AgentResult:
    return next(r for r in ex.results if r.agent_id == agent)


def decision(ex: pb.Execution) -> str:
    return str(common_pb2.AnalysisDecision.Name(ex.decision)).removeprefix("ANALYSIS_DECISION_")


def test_all_valid_permit_is_recommended_for_release(mesh: MeshConfig) -> None:
    ex = analyze(mesh, "Analyze permit WP-10231 and tell me if it can be released")
    assert decision(ex) == "RECOMMENDED_FOR_RELEASE", ex.summary
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED
    assert {r.agent_id for r in ex.results} == {"work-permit-agent", "training-agent", "risk-agent",
                                                "compliance-agent"}
    assert {s.agent_id for s in ex.selection_scores} >= {"training-agent", "risk-agent", "compliance-agent"}
    assert all(n.status == common_pb2.TASK_STATUS_COMPLETED for n in ex.graph.nodes)


def test_every_result_records_the_versions_that_produced_it(mesh: MeshConfig) -> None:
    """PRD §58: agent, capability, policy, knowledge, runtime (and model, when one answered) per task."""
    ex = analyze(mesh, "Analyze permit WP-10231 and tell me if it can be released")
    assert len(ex.results) == 4
    for r in ex.results:
        v = r.versions
        assert v.agent_version == "1.0.0" and v.runtime_version.startswith("agentmesh-specialist/"), r.agent_id
        assert v.capability_version and all("@" in c for c in v.capability_version.split(",")), r.agent_id
        assert v.policy_version, r.agent_id
    compliance = result_of(ex, "compliance-agent")
    assert "knowledge.search@" in compliance.versions.capability_version and compliance.versions.knowledge_version
    # The records of the capability calls carry the same policy version as the results.
    calls = [x for x in audit_records(mesh, execution_id=ex.execution_id)
             if x.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME]
    assert {c.versions.policy_version for c in calls} == {r.versions.policy_version for r in ex.results}


def test_portuguese_request_is_understood(mesh: MeshConfig) -> None:
    ex = analyze(mesh, "Analise a permissão WP-10231 e me diga se ela pode ser liberada")
    assert decision(ex) == "RECOMMENDED_FOR_RELEASE"


def test_expired_training_is_not_recommended_with_the_fact_and_lms_evidence(mesh: MeshConfig) -> None:
    ex = analyze(mesh, "Analyze permit WP-10232 and tell me if it can be released")
    assert decision(ex) == "NOT_RECOMMENDED", ex.summary
    training = result_of(ex, "training-agent")
    facts = [s for s in training.statements if s.kind == common_pb2.STATEMENT_KIND_FACT
             and s.subject == "worker:W-1003/NR-10"]
    assert facts and any("2026-08-15" in s.text for s in facts)
    evidence = [training.evidence[i] for s in facts for i in s.evidence_indexes]
    assert evidence and all(e.source == "lms" and e.authority == common_pb2.AUTHORITY_LEVEL_VERIFIED_INTEGRATION
                            for e in evidence)


def test_conflict_goes_to_review_with_both_sides_evidence(mesh: MeshConfig) -> None:
    ex = analyze(mesh, "Analyze permit WP-10233 and tell me if it can be released")
    assert decision(ex) == "REQUIRES_REVIEW", ex.summary
    assert ex.conflicts
    conflict = ex.conflicts[0]
    assert conflict.evidence_a and conflict.evidence_b and conflict.review_id
    assert {conflict.agent_a, conflict.agent_b} == {"training-agent", "compliance-agent"}


def test_lms_timeout_is_insufficient_evidence_never_an_invented_status(mesh: MeshConfig) -> None:
    ex = analyze(mesh, "Analyze permit WP-10234 and tell me if it can be released")
    assert decision(ex) == "INSUFFICIENT_EVIDENCE", ex.summary
    training = result_of(ex, "training-agent")
    codes = {s.code for s in training.statements if s.kind == common_pb2.STATEMENT_KIND_UNCERTAINTY}
    assert any("TIMEOUT" in c for c in codes), codes
    subjects = json_format.MessageToDict(training.result).get("subjects", {})
    for worker in ("W-1006", "W-1007"):
        judged = {k: v for k, v in subjects.items() if k.startswith(f"worker:{worker}/")}
        assert judged and set(judged.values()) == {"UNKNOWN"}, judged
    assert any("training" in m.text for m in ex.missing) or "TIMEOUT" in ex.summary.upper()


def test_other_tenants_permit_is_invisible(mesh: MeshConfig) -> None:
    ex = analyze(mesh, "Analyze permit WP-20001 and tell me if it can be released")
    assert decision(ex) == "INSUFFICIENT_EVIDENCE"
    assert ex.reason == "PERMIT_NOT_FOUND"
    missing = analyze(mesh, "Analyze permit WP-99999 and tell me if it can be released")
    assert (missing.decision, missing.reason) == (ex.decision, ex.reason)
    text = json.dumps(json_format.MessageToDict(ex)).lower()
    assert "globex" not in text
    # No globex record, title or worker leaked into the answer.
    assert "compressor" not in text and all(len(r.evidence) == 0 or r.agent_id == "work-permit-agent"
                                            for r in ex.results)


def test_request_naming_another_tenant_is_refused_and_audited(mesh: MeshConfig) -> None:
    with pytest.raises(grpc.RpcError) as info:
        analyze(mesh, "Analyze permit WP-20001 for tenant globex and tell me if it can be released")
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as info:
        analyze(mesh, "Analyze permit WP-10231 and tell me if it can be released", tenant_id="globex")
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    detail = errors.error_info(info.value)
    assert detail is not None and detail.reason == "TENANT_MISMATCH" and detail.metadata["field"] == "tenant_id"
    denied = [r for r in audit_records(mesh, tenant_id="acme")
              if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED and "TENANT_MISMATCH" in r.reason_codes]
    assert len(denied) >= 2 and all(r.recorded_by == str(spiffe.service("supervisor")) for r in denied)


def test_status_question_is_one_task(mesh: MeshConfig) -> None:
    ex = analyze(mesh, "What is the status of WP-10231?")
    assert len(ex.graph.nodes) == 1 and ex.graph.nodes[0].target_agent_id == "work-permit-agent"
    assert "PENDING_RELEASE" in ex.summary


def test_unknown_intent_says_so(mesh: MeshConfig) -> None:
    with pytest.raises(grpc.RpcError) as info:
        analyze(mesh, "make me a sandwich")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    detail = errors.error_info(info.value)
    assert detail is not None and detail.metadata["field"] == "request_text"


def test_bad_assertion_is_unauthenticated(mesh: MeshConfig) -> None:
    with pytest.raises(grpc.RpcError) as info:
        analyze(mesh, "Analyze permit WP-10231", assertion="not-a-jwt")
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_training_agent_never_receives_fields_outside_its_projection(mesh: MeshConfig) -> None:
    ex = analyze(mesh, "Analyze permit WP-10231 and tell me if it can be released")
    node = next(n for n in ex.graph.nodes if n.target_agent_id == "training-agent")
    received = json_format.MessageToDict(node.input)
    assert set(received) <= {"permit_id", "valid_from", "valid_until", "required_trainings", "workers"}
    assert all(set(w) <= {"worker_id"} for w in received["workers"])
    assert "medical" not in json.dumps(received).lower()
    assert node.projection.digest and "workers[].medical_notes" not in node.projection.allowed_fields


def test_other_tenant_cannot_read_an_execution(mesh: MeshConfig) -> None:
    ex = analyze(mesh, "Analyze permit WP-10231 and tell me if it can be released")
    with pytest.raises(grpc.RpcError) as info:
        supervisor(mesh).GetExecution(pb.GetExecutionRequest(user_assertion=token(mesh, "globex", "bob"),
                                                             execution_id=ex.execution_id))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    same = supervisor(mesh).GetExecution(pb.GetExecutionRequest(user_assertion=token(mesh),
                                                                execution_id=ex.execution_id)).execution
    assert same.decision == ex.decision


def test_budget_limits_end_as_the_tenant_says_with_a_clear_reason(mesh: MeshConfig) -> None:
    # acme sends MAX_COST_EXCEEDED to human review (its on_exceeded), every other limit stops.
    ex = analyze(mesh, "Analyze permit WP-10231 and tell me if it can be released",
                 budget=common_pb2.AgentBudget(max_cost=0.01))
    assert ex.status == pb.EXECUTION_STATUS_AWAITING_REVIEW
    assert ex.decision == common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW
    assert ex.reason.startswith("MAX_COST_EXCEEDED") and "budget.max_cost" in ex.reason
    assert not ex.results
    stopped = analyze(mesh, "Analyze permit WP-10231 and tell me if it can be released",
                      budget=common_pb2.AgentBudget(max_execution_time_ms=1))
    assert stopped.status == pb.EXECUTION_STATUS_STOPPED
    assert stopped.reason.startswith("MAX_EXECUTION_TIME_EXCEEDED")


def test_audit_trail_shows_the_whole_chain(mesh: MeshConfig) -> None:
    ex = analyze(mesh, "Analyze permit WP-10232 and tell me if it can be released")
    result = agentmesh_cli(mesh.home, "audit", "trail", ex.execution_id)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for needle in ("alice", "supervisor", "training-agent", "training.getStatus", "ALLOW", "SUCCESS"):
        assert needle in out, (needle, out)
    # Every process recorded under the same trace and correlation ids (PRD §54).
    records = audit_records(mesh, execution_id=ex.execution_id)
    # The model service too: the risk agent has a model read the permit's description.
    assert {r.recorded_by for r in records} == {str(spiffe.service(s)) for s in ("supervisor", "capability", "model")}
    assert {r.trace_id for r in records} == {ex.trace.trace_id} and ex.trace.trace_id
    assert {r.correlation_id for r in records} == {ex.trace.correlation_id}


def test_cli_analyze_prints_the_report(mesh: MeshConfig) -> None:
    result = agentmesh_cli(mesh.home, "analyze", "Analyze permit WP-10232 and tell me if it can be released",
                           "--tenant", "acme", "--user", "alice")
    assert result.returncode == 0, result.stderr
    assert "NOT_RECOMMENDED" in result.stdout and "TRAINING_EXPIRED" in result.stdout
    assert "task finished" in result.stderr  # progress while the specialists worked
    as_json = agentmesh_cli(mesh.home, "analyze", "status of WP-10231", "--tenant", "acme", "--user", "alice",
                            "--json")
    assert json.loads(as_json.stdout)["execution_id"].startswith("exe-")




def _registry(cfg: MeshConfig, identity: spiffe.SpiffeId = OPERATOR) -> Any:
    from agentmesh.v1 import agent_registry_service_pb2_grpc as reg_grpc

    channel = transport.secure_channel(peer_address(cfg, "supervisor"), client_tls(cfg, identity),
                                       spiffe.service("supervisor"))
    return reg_grpc.AgentRegistryServiceStub(channel)


def test_disabled_agent_takes_no_new_task(mesh: MeshConfig) -> None:
    from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2

    with pytest.raises(grpc.RpcError) as info:
        _registry(mesh, PLATFORM_CLI).SetAgentStatus(reg_pb2.SetAgentStatusRequest(
            agent_id="risk-agent", status=common_pb2.LIFECYCLE_STATUS_DISABLED, reason="x"))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    operator = _registry(mesh)
    operator.SetAgentStatus(reg_pb2.SetAgentStatusRequest(
        agent_id="risk-agent", status=common_pb2.LIFECYCLE_STATUS_DISABLED, reason="bad release"))
    try:
        ex = analyze(mesh, "Analyze permit WP-10231 and tell me if it can be released")
        assert ex.status == pb.EXECUTION_STATUS_PARTIAL
        assert decision(ex) == "INSUFFICIENT_EVIDENCE"
        assert any(m.text.startswith("risk") and m.analysis == "risk" for m in ex.missing), list(ex.missing)
        assert "risk-agent" not in {n.target_agent_id for n in ex.graph.nodes}
    finally:
        operator.SetAgentStatus(reg_pb2.SetAgentStatusRequest(
            agent_id="risk-agent", status=common_pb2.LIFECYCLE_STATUS_ACTIVE, reason="fixed"))
    assert decision(analyze(mesh, "Analyze permit WP-10231 and tell me if it can be released")) == (
        "RECOMMENDED_FOR_RELEASE")


def test_discovery_explains_its_scores(mesh: MeshConfig) -> None:
    from agentmesh.v1 import agent_registry_service_pb2 as reg_pb2

    found = _registry(mesh, PLATFORM_CLI).DiscoverAgents(reg_pb2.DiscoverAgentsRequest(
        tenant_id="acme", domains=["training"], required_capabilities=["training.getStatus"]))
    assert [c.agent_id for c in found.candidates] == ["training-agent"]
    assert found.scores[0].final_score > 0 and found.scores[0].capability_score == 1.0


def test_data_load_refuses_a_malformed_world_and_loads_nothing(mesh: MeshConfig, tmp_path: Any) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: agentmesh-world/v1\ntenants:\n  - id: acme\n    permits: 12\n")
    result = agentmesh_cli(mesh.home, "data", "load", str(bad))
    assert result.returncode == 1
    assert "bad.yaml" in result.stderr and "nothing was loaded" in result.stderr
    # Everything is as before.
    assert decision(analyze(mesh, "Analyze permit WP-10231 and tell me if it can be released")) == (
        "RECOMMENDED_FOR_RELEASE")
