"""Knowledge retrieval over real processes: the whole mesh as ``agentmesh up`` starts it, exporting its traces to
a real OTLP receiver.

The compliance agent cites the clause each checklist item applies, read from the knowledge scope compliance.nr
through the governed capability knowledge.search; each task records the knowledge version it read; an agent
asking for knowledge outside its registered knowledgeScopes is refused by the policy engine and the refusal is
in the audit log; the trace holds a Knowledge span under the compliance agent's AgentTask.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from agentmesh import assertion, errors, grants, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import OPERATOR, PLATFORM_CLI
from agentmesh.signing import load_private_key
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import capability_service_pb2_grpc as cap_grpc
from agentmesh.v1 import common_pb2
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2
from agentmesh.v1 import supervisor_service_pb2_grpc as sup_grpc
from capability_svc.knowledge_store import KnowledgeStore, default_knowledge_dir

from .conftest import (
    MESH_ON_POSTGRESQL,
    PG_URL,
    agentmesh_cli,
    client_tls,
    fresh_database,
    launched_mesh,
    peer_address,
    write_config,
)
from .otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.integration

NR_DIR = default_knowledge_dir() / "compliance.nr"
STORE_VERSION = KnowledgeStore.load(NR_DIR).version
KNOWLEDGE_VERSION = f"compliance.nr@{STORE_VERSION}"


class TracedMesh:
    def __init__(self, cfg: MeshConfig, receiver: OtlpReceiver) -> None:
        self.cfg = cfg
        self.receiver = receiver

    def analyze(self, text: str) -> sup_pb2.Execution:
        token = assertion.issue(load_private_key(self.cfg.mesh_home.idp_key), tenant_id="acme", user_id="alice",
                                roles=["analyst"])
        channel = transport.secure_channel(peer_address(self.cfg, "supervisor"), client_tls(self.cfg, PLATFORM_CLI),
                                           spiffe.service("supervisor"), default_timeout_s=60)
        with channel:
            return sup_grpc.SupervisorServiceStub(channel).Analyze(  # type: ignore[no-any-return]
                sup_pb2.AnalyzeRequest(user_assertion=token, request_text=text, tenant_id="acme"), timeout=60
            ).execution

    def records(self, execution_id: str, until: Any = None, timeout_s: float = 15.0) -> list[audit_pb2.AuditRecord]:
        """The execution's audit records (polled until ``until(records)`` holds: some arrive through outboxes)."""
        deadline = time.monotonic() + timeout_s
        channel = transport.secure_channel(peer_address(self.cfg, "audit"), client_tls(self.cfg, OPERATOR),
                                           spiffe.service("audit"))
        with channel:
            while True:
                found = [r for page in audit_grpc.AuditServiceStub(channel).QueryRecords(
                    audit_pb2.QueryRecordsRequest(execution_id=execution_id)) for r in page.records]
                if until is None or until(found) or time.monotonic() > deadline:
                    return found
                time.sleep(0.2)

    def search_as(self, agent: str, resources: list[str], scope: str) -> tuple[str, grpc.RpcError]:
        """``knowledge.search`` with the agent's own certificate and a grant signed with the supervisor's key that
        lists the capability and names ``resources``: (execution id, the refusal)."""
        signer = grants.GrantSigner(load_private_key(self.cfg.mesh_home.grant_signer_key))
        execution_id = f"exe-{uuid.uuid4().hex[:10]}"
        grant = signer.issue(issuer=str(spiffe.service("supervisor")), audience=str(spiffe.agent(agent)),
                             execution_id=execution_id, task_id=f"task-{uuid.uuid4().hex[:6]}", tenant_id="acme",
                             user_id="alice", assertion_digest="0" * 64, roles=["analyst"],
                             capabilities=["knowledge.search"], resources=resources)
        arguments = struct_pb2.Struct()
        arguments.update({"scope": scope, "query": "NR-10 10.5.1"})
        request = cap_pb2.InvokeCapabilityRequest(grant=grant, capability_id="knowledge.search", input=arguments,
                                                  trace=common_pb2.TraceContext(execution_id=execution_id))
        channel = transport.secure_channel(peer_address(self.cfg, "capability"),
                                           client_tls(self.cfg, spiffe.agent(agent)), spiffe.service("capability"))
        with channel, pytest.raises(grpc.RpcError) as info:
            cap_grpc.CapabilityServiceStub(channel).InvokeCapability(request, timeout=10)
        return execution_id, info.value


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TracedMesh]:
    home = tmp_path_factory.mktemp("knowledge-mesh")
    if MESH_ON_POSTGRESQL:
        assert PG_URL, "AGENTMESH_TEST_MESH_DB=postgresql needs AGENTMESH_TEST_DATABASE_URL"
        write_config(home, database_url=fresh_database())
    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
               "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_BSP_SCHEDULE_DELAY": "100",
               "OTEL_METRIC_EXPORT_INTERVAL": "600000"}
        with launched_mesh(home, env=env) as cfg:
            yield TracedMesh(cfg, receiver)


@pytest.fixture(scope="module")
def analysed(traced: TracedMesh) -> sup_pb2.Execution:
    return traced.analyze("Analyze permit WP-10233 and tell me if it can be released")


def _result(ex: sup_pb2.Execution, agent: str) -> common_pb2.AgentResult:
    return next(r for r in ex.results if r.agent_id == agent)


def test_the_compliance_agent_cites_the_clause_each_item_applies(analysed: sup_pb2.Execution) -> None:
    # WP-10233: the checklist fails W-1005's NR-35 refresher while the LMS says it is valid - the conflict stands
    # for a human to decide: the citation is evidence of what is required, never of what was done.
    assert analysed.decision == common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW, analysed.summary
    compliance = _result(analysed, "compliance-agent")
    assert compliance.status == common_pb2.RESULT_STATUS_SUCCESS
    applied = {s.subject: s for s in compliance.statements if s.code == "CLAUSE_APPLIED"}
    assert set(applied) == {"checklist:CL-10233/I-1", "worker:W-1005/NR-35", "checklist:CL-10233/I-3"}
    assert all(s.kind == common_pb2.STATEMENT_KIND_INFERENCE for s in applied.values())
    (unmet,) = [s for s in compliance.statements if s.code == "REQUIREMENT_NOT_MET"]
    assert unmet.text == "Checklist CL-10233 item I-2's requirement (NR-35 35.3.3) is not met"
    (clause,) = [compliance.evidence[i] for i in unmet.evidence_indexes if compliance.evidence[i].source == "knowledge"]
    assert clause.reference == f"compliance.nr@{STORE_VERSION}#NR-35/35.3.3"
    assert clause.capability == "knowledge.search@1.0.0"
    assert clause.authority == common_pb2.AUTHORITY_LEVEL_UNVERIFIED_DOCUMENT
    fields = clause.data.fields
    assert fields["document_version"].string_value == (
        "sha256:" + hashlib.sha256((NR_DIR / "NR-35.md").read_bytes()).hexdigest())
    assert fields["knowledge_version"].string_value == STORE_VERSION
    assert "every two years" in fields["text"].string_value
    conflict = next(c for c in analysed.conflicts if c.subject == "worker:W-1005/NR-35")
    assert conflict.review_id and not conflict.resolution


def test_each_task_records_the_knowledge_version_it_read(traced: TracedMesh, analysed: sup_pb2.Execution) -> None:
    versions = {r.agent_id: r.versions.knowledge_version for r in analysed.results}
    assert versions == {"work-permit-agent": "", "training-agent": "", "risk-agent": "",
                        "compliance-agent": KNOWLEDGE_VERSION}
    compliance_task = _result(analysed, "compliance-agent").task_id

    def complete(records: list[audit_pb2.AuditRecord]) -> bool:
        return any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED and r.task_id == compliance_task
                   for r in records)

    records = traced.records(analysed.execution_id, until=complete)
    (finished,) = [r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_FINISHED
                   and r.task_id == compliance_task]
    assert finished.versions.knowledge_version == KNOWLEDGE_VERSION
    # The capability service's own records of each read say which version it read.
    reads = [r for r in records if r.capability_id == "knowledge.search"]
    assert {(r.event_type, r.outcome) for r in reads} == {
        (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED, audit_pb2.AUDIT_OUTCOME_PENDING),
        (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, audit_pb2.AUDIT_OUTCOME_SUCCESS)}
    assert len(reads) == 2 * 3  # one search per distinct clause the checklist cites
    assert {r.versions.knowledge_version for r in reads} == {KNOWLEDGE_VERSION}
    assert {r.resource for r in reads} == {"knowledge:compliance.nr"}
    assert {r.recorded_by for r in reads} == {str(spiffe.service("capability"))}
    # The three searches went together (InvokeCapabilities): their six records are one append, at consecutive
    # indexes, each search's decision before its outcome.
    indexes = sorted(r.index for r in reads)
    assert indexes == list(range(indexes[0], indexes[0] + 6))
    by_index = sorted(reads, key=lambda r: r.index)
    assert [r.event_type for r in by_index] == [audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED,
                                                audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME] * 3


def _below(span_id: str, by_id: dict[str, dict[str, Any]]) -> set[tuple[str, str]]:
    """(service, name) of every span of the trace under ``span_id``."""
    out: set[tuple[str, str]] = set()
    for s in by_id.values():
        chain: dict[str, Any] | None = s
        while chain is not None:
            if chain["parent_id"] == span_id:
                out.add((s["service"], s["name"]))
                break
            chain = by_id.get(chain["parent_id"])
    return out


def test_the_trace_has_knowledge_spans_under_the_agent_task(traced: TracedMesh, analysed: sup_pb2.Execution) -> None:
    trace_id = analysed.trace.trace_id
    assert trace_id
    governed = {("capability", "Policy"), ("capability", "Execution")}

    def knowledge_spans(spans: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        by_id = {s["span_id"]: s for s in spans if s["trace_id"] == trace_id}
        return [s for s in by_id.values() if s["name"] == "Knowledge"], by_id

    def ancestry(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
        out = []
        parent = by_id.get(span["parent_id"])
        while parent is not None:
            out.append((parent["service"], parent["name"]))
            parent = by_id.get(parent["parent_id"])
        return out

    def complete(spans: list[dict[str, Any]]) -> bool:
        # Every span asserted on below is exported: the governed reads under each Knowledge span and the
        # supervisor's AgentTask above it (it ends after the agent answers, so it may come in a later batch).
        found, by_id = knowledge_spans(spans)
        return len(found) >= 3 and all(governed <= _below(s["span_id"], by_id) and
                                       ("supervisor", "AgentTask compliance-agent") in ancestry(s, by_id)
                                       for s in found)

    found, by_id = knowledge_spans(traced.receiver.wait_for(complete, timeout_s=30))
    assert len(found) == 3  # one per distinct clause the checklist cites
    for span in found:
        assert span["service"] == "compliance-agent"
        assert span["attributes"]["agentmesh.knowledge.scope"] == "compliance.nr"
        assert span["attributes"]["agentmesh.knowledge.version"] == KNOWLEDGE_VERSION
        assert span["attributes"]["agentmesh.knowledge.outcome"] == "OK"
        ancestors = ancestry(span, by_id)
        # Knowledge sits directly under the agent's AgentTask, which is under the supervisor's AgentTask.
        assert ancestors[0] == ("compliance-agent", "AgentTask")
        assert ("supervisor", "AgentTask compliance-agent") in ancestors
        # The governed read below it: the capability service's Policy and Execution spans.
        assert governed <= _below(span["span_id"], by_id)
    executions = [s for s in by_id.values() if s["name"] == "Execution"
                  and s["attributes"].get("agentmesh.capability") == "knowledge.search@1.0.0"]
    assert [s["attributes"]["agentmesh.knowledge_version"] for s in executions] == [KNOWLEDGE_VERSION] * 3


def test_the_cli_report_shows_the_citation_and_the_knowledge_version(traced: TracedMesh) -> None:
    result = agentmesh_cli(traced.cfg.home, "analyze", "Analyze permit WP-10231 and tell me if it can be released",
                           "--tenant", "acme", "--user", "alice")
    assert result.returncode == 0, result.stderr
    assert "RECOMMENDED_FOR_RELEASE" in result.stdout
    assert f"knowledge      {KNOWLEDGE_VERSION}" in result.stdout
    assert "CLAUSE_APPLIED" in result.stdout and "applies NR-10 10.5.1" in result.stdout
    assert f"knowledge compliance.nr@{STORE_VERSION}#NR-10/10.5.1 (UNVERIFIED_DOCUMENT" in result.stdout


def _policy_refusal(traced: TracedMesh, execution_id: str) -> audit_pb2.AuditRecord:
    def refused(records: list[audit_pb2.AuditRecord]) -> bool:
        return any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION for r in records)

    (record,) = [r for r in traced.records(execution_id, until=refused)
                 if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION]
    return record


def test_an_agent_without_the_scope_is_refused_by_the_policy_and_the_refusal_is_audited(traced: TracedMesh) -> None:
    # The training agent registers neither knowledge.search nor compliance.nr. Even holding a grant the supervisor
    # would never issue it (signed with the supervisor's key, naming both), the policy engine refuses.
    execution_id, err = traced.search_as("training-agent", ["knowledge:compliance.nr"], "compliance.nr")
    info = errors.error_info(err)
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and info is not None and info.reason == "POLICY_DENIED"
    record = _policy_refusal(traced, execution_id)
    assert record.outcome == audit_pb2.AUDIT_OUTCOME_DENIED
    assert record.agent_id == "training-agent" and record.resource == "knowledge:compliance.nr"
    assert list(record.reason_codes) == ["POLICY_DENIED", "agent.capability_not_registered",
                                         "knowledge.scope_not_registered"]
    assert record.policy_decision.effect == common_pb2.POLICY_EFFECT_DENY
    assert record.recorded_by == str(spiffe.service("capability"))


def test_a_scope_outside_the_agent_s_knowledge_scopes_is_refused_even_when_a_grant_names_it(
        traced: TracedMesh) -> None:
    # The compliance agent holds knowledge.search, but only compliance.nr: training.nr is not its scope.
    execution_id, err = traced.search_as("compliance-agent", ["knowledge:training.nr"], "training.nr")
    info = errors.error_info(err)
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and info is not None and info.reason == "POLICY_DENIED"
    record = _policy_refusal(traced, execution_id)
    assert list(record.reason_codes) == ["POLICY_DENIED", "knowledge.scope_not_registered"]
    assert record.resource == "knowledge:training.nr" and record.agent_id == "compliance-agent"
    # A scope the grant does not name is refused before the policy is even asked, and recorded as well.
    execution_id, err = traced.search_as("compliance-agent", ["knowledge:compliance.nr"], "training.nr")
    info = errors.error_info(err)
    assert info is not None and info.reason == "GRANT_RESOURCE_NOT_LISTED"

    def denied(records: list[audit_pb2.AuditRecord]) -> bool:
        return any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED for r in records)

    (access,) = [r for r in traced.records(execution_id, until=denied)
                 if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED]
    assert list(access.reason_codes) == ["GRANT_RESOURCE_NOT_LISTED"] and access.resource == "knowledge:training.nr"


def test_reads_sent_together_are_each_governed_as_alone(traced: TracedMesh) -> None:
    """InvokeCapabilities over mTLS: a granted search answered, a scope the grant does not name refused in its own
    slot and audited; a mutation in a batch is refused and never runs; 17 calls are refused whole."""
    signer = grants.GrantSigner(load_private_key(traced.cfg.mesh_home.grant_signer_key))
    execution_id = f"exe-{uuid.uuid4().hex[:10]}"
    grant = signer.issue(issuer=str(spiffe.service("supervisor")), audience=str(spiffe.agent("compliance-agent")),
                         execution_id=execution_id, task_id="task-batch", tenant_id="acme", user_id="alice",
                         assertion_digest="0" * 64, roles=["analyst"],
                         capabilities=["knowledge.search", "workPermit.release"],
                         resources=["knowledge:compliance.nr", "permit:WP-10231"])

    def call(capability: str, **arguments: Any) -> cap_pb2.InvokeCapabilityRequest:
        struct = struct_pb2.Struct()
        struct.update(arguments)
        return cap_pb2.InvokeCapabilityRequest(grant=grant, capability_id=capability, input=struct,
                                               idempotency_key="k-batch" if capability.endswith("release") else "",
                                               trace=common_pb2.TraceContext(execution_id=execution_id))

    calls = [call("knowledge.search", scope="compliance.nr", query="NR-10 10.5.1"),
             call("knowledge.search", scope="training.nr", query="NR-10"),
             call("workPermit.release", permit_id="WP-10231", reason="all checks passed")]
    channel = transport.secure_channel(peer_address(traced.cfg, "capability"),
                                       client_tls(traced.cfg, spiffe.agent("compliance-agent")),
                                       spiffe.service("capability"))
    with channel:
        stub = cap_grpc.CapabilityServiceStub(channel)
        answer = stub.InvokeCapabilities(cap_pb2.InvokeCapabilitiesRequest(calls=calls), timeout=10)
        with pytest.raises(grpc.RpcError) as too_many:
            stub.InvokeCapabilities(cap_pb2.InvokeCapabilitiesRequest(calls=[calls[0]] * 17), timeout=10)
    found, outside, mutation = answer.results
    assert found.WhichOneof("outcome") == "response"
    assert found.response.knowledge_version == KNOWLEDGE_VERSION and found.response.output["hits"]
    assert (outside.error.code, errors.from_status(outside.error).reason) == (
        grpc.StatusCode.PERMISSION_DENIED.value[0], "GRANT_RESOURCE_NOT_LISTED")
    assert errors.from_status(mutation.error).reason == "MUTATION_IN_BATCH"
    info = errors.error_info(too_many.value)
    assert too_many.value.code() == grpc.StatusCode.INVALID_ARGUMENT and info is not None
    assert (info.reason, info.metadata["field"]) == ("FIELD_TOO_LONG", "calls")

    def settled(records: list[audit_pb2.AuditRecord]) -> bool:
        return sum(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED for r in records) >= 2

    records = traced.records(execution_id, until=settled)
    assert sorted(r.reason_codes[0] for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED) == [
        "GRANT_RESOURCE_NOT_LISTED", "MUTATION_IN_BATCH"]
    assert [(r.event_type, r.capability_id) for r in records if r.outcome == audit_pb2.AUDIT_OUTCOME_SUCCESS] == [
        (audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, "knowledge.search")]
    assert not any(r.capability_id == "workPermit.release" and r.event_type != audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED
                   for r in records)
