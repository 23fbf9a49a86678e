"""Delegation abuse: stretching what the supervisor delegated to one agent for one task.

The attacker holds agent certificates and the grants the supervisor really issued
in an analysis (read back from the log as an operator would), and tries to use
them as another agent, with a padded delegation chain, a chain from another
execution, a forged or expired grant, or a system actor's read-only delegation
for a change.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentmesh import grants
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

from .conftest import ANALYSIS, PLATFORM, TRAINING, WORK_PERMIT, Mesh, task_grants, unique

pytestmark = pytest.mark.integration


def _analysis(mesh: Mesh, permit: str = "WP-10232") -> tuple[sup_pb2.Execution, dict[str, common_pb2.SignedTaskGrant]]:
    ex = mesh.analyze(ANALYSIS.format(permit), mesh.token("alice", "analyst"))
    assert ex.status == sup_pb2.EXECUTION_STATUS_SUCCEEDED, ex.summary
    return ex, task_grants(mesh, ex)


def _principal(grant: common_pb2.SignedTaskGrant, *extra: common_pb2.SignedTaskGrant,
               chain: list[str] | None = None) -> common_pb2.AgentPrincipal:
    body = grants.decode(grant)
    agent = body.audience.rsplit("/", 1)[1]
    return common_pb2.AgentPrincipal(
        agent_id=agent, execution_id=body.execution_id,
        delegation_chain=chain or [f"user:{body.tenant_id}/{body.user_id}", "svc:supervisor", f"agent:{agent}"],
        grants=[*extra, grant])


def _no_effect(mesh: Mesh, execution_id: str, capability: str) -> None:
    assert not [r for r in mesh.records(execution_id=execution_id)
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED and r.capability_id == capability
                and r.outcome != audit_pb2.AUDIT_OUTCOME_DENIED]


def _presented_by(caller: object, grant: common_pb2.SignedTaskGrant) -> Callable[[audit_pb2.AuditRecord], bool]:
    """A refusal of an unverifiable grant names who presented it, or what it was (a digest), never its claims."""
    digest = hashlib.sha256(grant.grant).hexdigest()
    return lambda r: str(caller) in str(r) or digest in str(r)


def test_a_grant_issued_to_another_agent_is_refused(mesh: Mesh) -> None:
    ex, issued = _analysis(mesh)
    theirs = issued["work-permit-agent"]
    got = mesh.refused(lambda: mesh.invoke(TRAINING, theirs, "workPermit.get", permit_id="WP-10232"))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "GRANT_AUDIENCE_MISMATCH"), got
    mesh.find_record(execution_id=ex.execution_id, reason="GRANT_AUDIENCE_MISMATCH")


def test_an_extra_self_signed_grant_in_the_principal_is_refused(mesh: Mesh) -> None:
    ex, issued = _analysis(mesh)
    real = issued["work-permit-agent"]
    body = grants.decode(real)
    widened = mesh.grant(WORK_PERMIT, ["workPermit.get", "workPermit.release", "workPermit.updateValidity"],
                         ["tenant:acme"], user=body.user_id, roles=("admin",), execution_id=body.execution_id,
                         signer=grants.GrantSigner(Ed25519PrivateKey.generate()))
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, real, "workPermit.get", permit_id="WP-10232",
                                           principal=_principal(real, widened)))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.UNAUTHENTICATED, "PRINCIPAL_INVALID",
                                                 "principal"), got
    record = mesh.find_record(execution_id=ex.execution_id, reason="PRINCIPAL_INVALID")
    assert widened.signature not in record.SerializeToString(), "the unverified grant reached the log"


def test_a_chain_from_another_execution_is_refused(mesh: Mesh) -> None:
    ex, issued = _analysis(mesh)
    _, other = _analysis(mesh, "WP-10231")
    real, foreign = issued["work-permit-agent"], other["work-permit-agent"]
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, real, "workPermit.get", permit_id="WP-10232",
                                           principal=_principal(real, foreign)))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.UNAUTHENTICATED, "PRINCIPAL_INVALID",
                                                 "principal"), got
    mesh.find_record(execution_id=ex.execution_id, reason="PRINCIPAL_INVALID")


def test_a_delegation_chain_naming_another_user_is_refused(mesh: Mesh) -> None:
    ex, issued = _analysis(mesh)
    real = issued["work-permit-agent"]
    padded = _principal(real, chain=["user:acme/admin", "svc:supervisor", "agent:work-permit-agent"])
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, real, "workPermit.get", permit_id="WP-10232",
                                           principal=padded))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.UNAUTHENTICATED, "PRINCIPAL_INVALID",
                                                 "principal"), got
    record = mesh.find_record(execution_id=ex.execution_id, reason="PRINCIPAL_INVALID")
    assert "user:acme/admin" not in list(record.principal.delegation_chain)


def test_a_forged_grant_claiming_the_supervisors_key_is_refused(mesh: Mesh) -> None:
    forged = mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-10231"], roles=("admin",),
                        signer=grants.GrantSigner(Ed25519PrivateKey.generate()))
    since = mesh.marker()
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, forged, "workPermit.get", permit_id="WP-10231"))
    assert (got.code, got.reason) == (grpc.StatusCode.UNAUTHENTICATED, "GRANT_BAD_SIGNATURE"), got
    record = mesh.find_record(reason="GRANT_BAD_SIGNATURE", since=since, where=_presented_by(WORK_PERMIT, forged))
    assert grants.decode(forged).execution_id not in str(record), "the claims of a forged grant were believed"


def test_a_grant_signed_by_an_unknown_key_is_refused(mesh: Mesh) -> None:
    own = grants.GrantSigner(Ed25519PrivateKey.generate())
    forged = mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-10231"], signer=own)
    forged.key_id = own.key_id
    since = mesh.marker()
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, forged, "workPermit.get", permit_id="WP-10231"))
    assert (got.code, got.reason) == (grpc.StatusCode.UNAUTHENTICATED, "GRANT_UNKNOWN_KEY"), got
    mesh.find_record(reason="GRANT_UNKNOWN_KEY", since=since, where=_presented_by(WORK_PERMIT, forged))


def test_an_expired_grant_is_refused(mesh: Mesh) -> None:
    old = mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-10231"],
                     issued=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=30))
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, old, "workPermit.get", permit_id="WP-10231"))
    assert (got.code, got.reason) == (grpc.StatusCode.UNAUTHENTICATED, "GRANT_EXPIRED"), got
    mesh.find_record(execution_id=grants.decode(old).execution_id, reason="GRANT_EXPIRED")


def test_a_confirmed_release_grant_cannot_release_another_permit(mesh: Mesh) -> None:
    args = {"permit_id": "WP-10232", "reason": "attack"}
    grant = mesh.grant(WORK_PERMIT, ["workPermit.release", "workPermit.get"], ["permit:WP-10231"],
                       roles=("permit-manager",), confirmed_action_digest=grants.action_digest(
                           "workPermit.release", {"permit_id": "WP-10231", "reason": "confirmed"}),
                       confirmation_id=unique("conf"), human_approval_id=unique("appr"), human_approver_id="bob")
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, grant, "workPermit.release", idempotency_key=unique("k"),
                                           **args))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.PERMISSION_DENIED, "GRANT_RESOURCE_NOT_LISTED",
                                                 "permit_id"), got
    mesh.find_record(execution_id=grants.decode(grant).execution_id, reason="GRANT_RESOURCE_NOT_LISTED")
    _no_effect(mesh, grants.decode(grant).execution_id, "workPermit.release")


def test_a_system_actors_read_only_delegation_cannot_change_anything(mesh: Mesh) -> None:
    """TrainingExpirationScanner may read; its agents' grants never carry a change."""
    event = mesh.supervisor(PLATFORM).HandleEvent(sup_pb2.HandleEventRequest(
        event_id=unique("evt"), tenant_id="acme", training_expired=sup_pb2.TrainingExpired(
            worker_id="W-1003", training_code="NR-10", expired_on="2026-08-15")), timeout=60).execution
    assert event.actor_type == common_pb2.ACTOR_TYPE_SYSTEM
    issued = task_grants(mesh, event)
    scanner = issued["work-permit-agent"]
    assert grants.decode(scanner).actor_type == common_pb2.ACTOR_TYPE_SYSTEM
    args = {"permit_id": "WP-10232", "reason": "the event said so"}
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, scanner, "workPermit.release", idempotency_key=unique("k"),
                                           **args))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "GRANT_CAPABILITY_NOT_LISTED"), got
    mesh.find_record(execution_id=event.execution_id, reason="GRANT_CAPABILITY_NOT_LISTED")
    # Even a grant that lists the change (the supervisor never signs one) is denied by the policy.
    listed = mesh.grant(WORK_PERMIT, ["workPermit.release"], ["permit:WP-10232"], user="TrainingExpirationScanner",
                        roles=(), actor_type=common_pb2.ACTOR_TYPE_SYSTEM,
                        confirmed_action_digest=grants.action_digest("workPermit.release", args),
                        confirmation_id=unique("conf"))
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, listed, "workPermit.release", idempotency_key=unique("k"),
                                           **args))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED"), got
    mesh.find_record(execution_id=grants.decode(listed).execution_id, reason="POLICY_DENIED")
    _no_effect(mesh, grants.decode(listed).execution_id, "workPermit.release")
