"""Audit integrity: nothing a caller sends can poison the tamper-evident log or make
``agentmesh audit verify`` fail, and only operators read it.

Poisoning through a capability call (a self-signed extra grant, a tampered copy
of a real one) is refused and leaves only what was verified; a record appended
directly is stamped with its real author and cannot carry an unverifiable chain;
``audit verify`` passes after every attack and, last of all, at the end of the
session.
"""

from __future__ import annotations

import json

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import grants
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

from .conftest import (
    ANALYSIS,
    OPERATOR,
    PLATFORM,
    TRAINING,
    WORK_PERMIT,
    Mesh,
    agentmesh_cli,
    refusal_of,
    task_grants,
    unique,
)

pytestmark = pytest.mark.integration


def _verify(mesh: Mesh) -> dict[str, object]:
    result = agentmesh_cli(mesh.home, "audit", "verify", "--json")
    assert result.returncode == 0, f"audit verify failed ({result.returncode}): {result.stdout[-2000:]}" \
                                   f"{result.stderr[-2000:]}"
    report: dict[str, object] = json.loads(result.stdout)
    assert report.get("ok") is True, report
    return report


def _real_grant(mesh: Mesh) -> tuple[sup_pb2.Execution, common_pb2.SignedTaskGrant]:
    ex = mesh.analyze(ANALYSIS.format("WP-10232"), mesh.token("alice", "analyst"))
    return ex, task_grants(mesh, ex)["work-permit-agent"]


def _principal(*chain: common_pb2.SignedTaskGrant) -> common_pb2.AgentPrincipal:
    last = grants.decode(chain[-1])
    return common_pb2.AgentPrincipal(agent_id="work-permit-agent", execution_id=last.execution_id,
                                     grants=list(chain))


def test_poisoning_with_a_self_signed_extra_grant_is_refused_and_verify_still_passes(mesh: Mesh) -> None:
    ex, real = _real_grant(mesh)
    body = grants.decode(real)
    extra = mesh.grant(WORK_PERMIT, ["workPermit.release"], ["tenant:acme"], user=body.user_id,
                       execution_id=body.execution_id, signer=grants.GrantSigner(Ed25519PrivateKey.generate()))
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, real, "workPermit.get", permit_id="WP-10232",
                                           principal=_principal(extra, real)))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.UNAUTHENTICATED, "PRINCIPAL_INVALID",
                                                 "principal"), got
    record = mesh.find_record(execution_id=ex.execution_id, reason="PRINCIPAL_INVALID")
    assert extra.signature not in record.SerializeToString() and extra.grant not in record.SerializeToString()
    _verify(mesh)


def test_a_tampered_copy_of_a_real_grant_in_the_principal_is_refused(mesh: Mesh) -> None:
    ex, real = _real_grant(mesh)
    tampered = common_pb2.SignedTaskGrant()
    tampered.CopyFrom(real)
    tampered.signature = bytes([real.signature[0] ^ 0xFF]) + real.signature[1:]
    mesh.grant_signatures.add(tampered.signature)
    mesh.forged_signatures.add(tampered.signature)
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, real, "workPermit.get", permit_id="WP-10232",
                                           principal=_principal(tampered, real)))
    assert (got.code, got.reason) == (grpc.StatusCode.UNAUTHENTICATED, "PRINCIPAL_INVALID"), got
    record = mesh.find_record(execution_id=ex.execution_id, reason="PRINCIPAL_INVALID")
    assert tampered.signature not in record.SerializeToString()
    _verify(mesh)


def _forged_record(mesh: Mesh, execution_id: str) -> audit_pb2.AuditRecord:
    forged_grant = mesh.grant(WORK_PERMIT, ["workPermit.release"], ["permit:WP-10231"], execution_id=execution_id,
                              signer=grants.GrantSigner(Ed25519PrivateKey.generate()))
    return audit_pb2.AuditRecord(
        event_type=audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS,
        recorded_by="spiffe://agentmesh.local/svc/capability", tenant_id="acme", user_id="alice",
        execution_id=execution_id, capability_id="workPermit.release", resource="permit:WP-10231",
        reason_codes=["VERIFIED"], principal=common_pb2.AgentPrincipal(
            agent_id="work-permit-agent", delegation_chain=["user:acme/alice", "svc:supervisor"],
            grants=[forged_grant]))


@pytest.mark.parametrize("who", [OPERATOR, PLATFORM], ids=["operator", "platform"])
def test_clients_cannot_append_to_the_log(mesh: Mesh, who: object) -> None:
    since, execution_id = mesh.marker(), unique("exe-forged")
    got = mesh.refused(lambda: mesh.audit(who).AppendRecord(audit_pb2.AppendRecordRequest(  # type: ignore[arg-type]
        record=_forged_record(mesh, execution_id)), timeout=10))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CALLER_NOT_ALLOWED"), got
    mesh.find_record(reason="CALLER_NOT_ALLOWED", since=since, caller=str(who), contains=["AppendRecord"])
    assert not mesh.records(execution_id=execution_id)


def test_an_agent_appending_a_forged_outcome_cannot_pass_it_off_or_poison_verify(mesh: Mesh) -> None:
    """Agents may record their own refusals; what they append is theirs, and no unverifiable chain is kept."""
    execution_id = unique("exe-forged")
    try:
        mesh.audit(TRAINING).AppendRecord(audit_pb2.AppendRecordRequest(
            record=_forged_record(mesh, execution_id)), timeout=10)
    except grpc.RpcError as err:
        got = refusal_of(err)
        mesh.refusals.append(got)
        assert got.code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT,
                            grpc.StatusCode.UNAUTHENTICATED), got
    for r in mesh.records(execution_id=execution_id):
        assert r.recorded_by == str(TRAINING), "a record claims another author than its caller"
        assert not r.principal.grants, "an unverified grant reached the log"
    _verify(mesh)


@pytest.mark.parametrize("who", [PLATFORM, TRAINING], ids=["platform", "agent"])
def test_only_operators_read_the_log(mesh: Mesh, who: object) -> None:
    since = mesh.marker()
    got = mesh.refused(lambda: mesh.audit(who).QueryRecords(  # type: ignore[arg-type]
        audit_pb2.QueryRecordsRequest(tenant_id="acme"), timeout=10))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CALLER_NOT_ALLOWED"), got
    mesh.find_record(reason="CALLER_NOT_ALLOWED", since=since, caller=str(who), contains=["QueryRecords"])


@pytest.mark.security_last(2)
def test_audit_verify_passes_at_the_end_of_the_session(mesh: Mesh) -> None:
    """After every attack of the suite, the whole log still verifies (exit code 0)."""
    seen = len(mesh.records())
    report = _verify(mesh)
    assert int(report["tree_size"]) >= seen > 0  # type: ignore[call-overload]
