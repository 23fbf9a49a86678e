"""knowledge.search on the governed path, in process: the scope is the resource the grant names and the policy
decides on, and every record and answer names the knowledge version read."""

from __future__ import annotations

import grpc

from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2 as pb
from agentmesh.v1 import common_pb2

from .governed import INVOKED, Mesh, outcome

COMPLIANCE = "spiffe://agentmesh.local/agent/compliance-agent"
CHAIN = ["user:acme/alice", "svc:supervisor", "agent:compliance-agent"]


def _grant(mesh: Mesh, *resources: str) -> common_pb2.SignedTaskGrant:
    return mesh.grant(audience=COMPLIANCE, capabilities=["compliance.getChecklist", "knowledge.search"],
                      resources=list(resources), roles=["viewer"])


def _search(mesh: Mesh, grant: common_pb2.SignedTaskGrant, **arguments: object) -> pb.InvokeCapabilityRequest:
    args = {"scope": "compliance.nr", "query": "NR-10 10.5.1 de-energised", **arguments}
    return mesh.request("knowledge.search", grant=grant, **args)


def test_a_granted_scope_is_read_and_every_record_names_the_knowledge_version(mesh: Mesh) -> None:
    store = mesh.runtime.knowledge.library.get("compliance.nr")
    assert store is not None
    grant = _grant(mesh, "permit:WP-10231", "knowledge:compliance.nr")
    resp = mesh.call(_search(mesh, grant), caller=COMPLIANCE)
    assert resp.knowledge_version == f"compliance.nr@{store.version}"
    assert resp.output["hits"][0]["passage_id"] == "NR-10#10.5.1"
    (evidence,) = resp.evidence
    assert (evidence.source, evidence.reference, evidence.authority, evidence.capability) == (
        "knowledge", f"compliance.nr@{store.version}", common_pb2.AUTHORITY_LEVEL_UNVERIFIED_DOCUMENT,
        "knowledge.search@1.0.0")
    # The policy decides on the scope as the resource, in the caller's tenant.
    (asked,) = mesh.policy.requests
    assert (asked.capability_id, asked.resource.type, asked.resource.id, asked.resource.tenant_id) == (
        "knowledge.search", "KnowledgeScope", "compliance.nr", "acme")
    assert mesh.audit.trail() == [INVOKED, outcome(audit_pb2.AUDIT_OUTCOME_SUCCESS)]
    for _, fields in mesh.audit.records:
        assert fields["resource"] == "knowledge:compliance.nr"
        assert fields["versions"].knowledge_version == f"compliance.nr@{store.version}"
        assert list(fields["principal"].delegation_chain) == [*CHAIN, "capability:knowledge.search"]


def test_a_scope_the_grant_does_not_name_is_refused_before_the_policy_is_asked(mesh: Mesh) -> None:
    grant = _grant(mesh, "permit:WP-10231", "knowledge:compliance.nr")
    err = mesh.refusal(_search(mesh, grant, scope="training.nr"), caller=COMPLIANCE)
    assert (err.code, err.reason) == (grpc.StatusCode.PERMISSION_DENIED, "GRANT_RESOURCE_NOT_LISTED")
    assert not mesh.policy.requests
    ((event, fields),) = mesh.audit.records
    assert event == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED and fields["outcome"] == audit_pb2.AUDIT_OUTCOME_DENIED
    assert fields["resource"] == "knowledge:training.nr" and fields["reason_codes"] == ["GRANT_RESOURCE_NOT_LISTED"]
    # A grant naming no knowledge at all reads none.
    err = mesh.refusal(_search(mesh, _grant(mesh, "permit:WP-10231")), caller=COMPLIANCE)
    assert err.reason == "GRANT_RESOURCE_NOT_LISTED"


def test_a_policy_denial_of_the_scope_is_refused_and_recorded_with_the_decision(mesh: Mesh) -> None:
    mesh.policy.effect = common_pb2.POLICY_EFFECT_DENY
    grant = _grant(mesh, "knowledge:compliance.nr")
    err = mesh.refusal(_search(mesh, grant), caller=COMPLIANCE)
    assert (err.code, err.reason) == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED")
    ((event, fields),) = mesh.audit.records
    assert event == audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION and fields["resource"] == "knowledge:compliance.nr"


def test_an_unknown_scope_the_grant_names_is_not_found(mesh: Mesh) -> None:
    grant = _grant(mesh, "knowledge:risk.matrix")
    err = mesh.refusal(_search(mesh, grant, scope="risk.matrix"), caller=COMPLIANCE)
    assert (err.code, err.reason) == (grpc.StatusCode.NOT_FOUND, "KNOWLEDGE_SCOPE_NOT_FOUND")
    assert mesh.audit.trail()[-1] == outcome(audit_pb2.AUDIT_OUTCOME_FAILURE, "KNOWLEDGE_SCOPE_NOT_FOUND")


def test_bad_input_names_the_field_and_reads_nothing(mesh: Mesh) -> None:
    grant = _grant(mesh, "knowledge:compliance.nr")
    for bad, field in (({"limit": 0}, "limit"), ({"query": ""}, "query"), ({"expand": 3}, "expand"),
                       ({"scope": "Compliance NR"}, "scope")):
        err = mesh.refusal(_search(mesh, grant, **bad), caller=COMPLIANCE)
        assert (err.code, err.reason, err.field) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_INVALID", field)
    assert not mesh.policy.requests
