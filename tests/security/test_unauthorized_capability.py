"""Unauthorized capability use: calling what the grant, the agent's registration, the user's role,
the confirmation or a kill switch does not allow, or calling the capability service at all
without being an agent.

The attacker holds an agent's certificate and grants signed as the supervisor
signs them (the supervisor never lists more than the task needs; these list
exactly what each case is about).
"""

from __future__ import annotations

import grpc
import pytest

from agentmesh import grants
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2

from .conftest import OPERATOR, PLATFORM, RISK, TRAINING, WORK_PERMIT, Mesh, unique

pytestmark = pytest.mark.integration


def _execution(grant: common_pb2.SignedTaskGrant) -> str:
    return grants.decode(grant).execution_id


def test_a_capability_the_grant_does_not_list_is_refused(mesh: Mesh) -> None:
    """The training agent's grant lists training.getStatus; worker.get would hand it medical notes."""
    grant = mesh.grant(TRAINING, ["training.getStatus"], ["worker:W-1001"])
    got = mesh.refused(lambda: mesh.invoke(TRAINING, grant, "worker.get", worker_id="W-1001"))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.PERMISSION_DENIED, "GRANT_CAPABILITY_NOT_LISTED",
                                                 "capability_id"), got
    mesh.find_record(execution_id=_execution(grant), reason="GRANT_CAPABILITY_NOT_LISTED")
    assert not [r for r in mesh.records(execution_id=_execution(grant))
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED]


def test_a_capability_the_users_role_does_not_permit_is_denied_by_the_policy(mesh: Mesh) -> None:
    """A viewer's grant naming risk.evaluate (analyst and up): the agent never exceeds the user."""
    viewer = unique("victor")
    grant = mesh.grant(RISK, ["risk.evaluate"], ["permit:WP-10231"], user=viewer, roles=("viewer",))
    got = mesh.refused(lambda: mesh.invoke(RISK, grant, "risk.evaluate", permit_id="WP-10231"))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED"), got
    record = mesh.find_record(execution_id=_execution(grant), reason="POLICY_DENIED", user_id=viewer)
    assert record.policy_decision.effect == common_pb2.POLICY_EFFECT_DENY and record.policy_decision.reason_codes


def test_a_capability_the_agent_never_registered_is_denied_even_for_an_admin(mesh: Mesh) -> None:
    """The risk agent may only read; a grant naming workPermit.release does not make it a releaser."""
    args = {"permit_id": "WP-10231", "reason": "attack"}
    grant = mesh.grant(RISK, ["workPermit.release"], ["permit:WP-10231"], user=unique("ada"), roles=("admin",),
                       confirmed_action_digest=grants.action_digest("workPermit.release", args),
                       confirmation_id=unique("conf"), human_approval_id=unique("appr"), human_approver_id="bob")
    got = mesh.refused(lambda: mesh.invoke(RISK, grant, "workPermit.release", idempotency_key=unique("k"), **args))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED"), got
    record = mesh.find_record(execution_id=_execution(grant), reason="POLICY_DENIED")
    assert record.policy_decision.effect == common_pb2.POLICY_EFFECT_DENY
    assert not [r for r in mesh.records(execution_id=_execution(grant))
                if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_INVOKED]


def test_a_mutation_without_the_users_confirmation_is_refused(mesh: Mesh) -> None:
    args = {"permit_id": "WP-10243", "valid_until": "2027-01-31", "reason": "attack"}
    unconfirmed = mesh.grant(WORK_PERMIT, ["workPermit.updateValidity"], ["permit:WP-10243"], roles=("permit-manager",))
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, unconfirmed, "workPermit.updateValidity",
                                           idempotency_key=unique("k"), **args))
    assert (got.code, got.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "CONFIRMATION_REQUIRED"), got
    mesh.find_record(execution_id=_execution(unconfirmed), reason="CONFIRMATION_REQUIRED")
    # A confirmation of another action (another date) does not count either.
    other = grants.action_digest("workPermit.updateValidity", {**args, "valid_until": "2027-02-28"})
    elsewhere = mesh.grant(WORK_PERMIT, ["workPermit.updateValidity"], ["permit:WP-10243"], roles=("permit-manager",),
                           confirmed_action_digest=other, confirmation_id=unique("conf"))
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, elsewhere, "workPermit.updateValidity",
                                           idempotency_key=unique("k"), **args))
    assert (got.code, got.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "CONFIRMATION_REQUIRED"), got
    mesh.find_record(execution_id=_execution(elsewhere), reason="CONFIRMATION_REQUIRED")


def test_an_unregistered_capability_is_refused_and_audited(mesh: Mesh) -> None:
    grant = mesh.grant(WORK_PERMIT, ["admin.dropEverything"], ["tenant:acme"])
    got = mesh.refused(lambda: mesh.invoke(WORK_PERMIT, grant, "admin.dropEverything"))
    assert (got.code, got.reason) == (grpc.StatusCode.NOT_FOUND, "CAPABILITY_NOT_FOUND"), got
    mesh.find_record(execution_id=_execution(grant), reason=got.reason)


@pytest.mark.parametrize("who", [PLATFORM, OPERATOR], ids=["platform", "operator"])
def test_only_agents_and_the_supervisor_call_capabilities(mesh: Mesh, who: object) -> None:
    since = mesh.marker()
    grant = mesh.grant(WORK_PERMIT, ["workPermit.get"], ["permit:WP-10231"])
    got = mesh.refused(lambda: mesh.invoke(who, grant, "workPermit.get", permit_id="WP-10231"))  # type: ignore[arg-type]
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CALLER_NOT_ALLOWED"), got
    mesh.find_record(reason="CALLER_NOT_ALLOWED", since=since, caller=str(who), contains=["InvokeCapability"])


def test_an_agent_cannot_ask_the_policy_engine_or_change_it(mesh: Mesh) -> None:
    since = mesh.marker()
    got = mesh.refused(lambda: mesh.policy(TRAINING).Authorize(policy_pb2.AuthorizeRequest(), timeout=10))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CALLER_NOT_ALLOWED"), got
    mesh.find_record(reason="CALLER_NOT_ALLOWED", since=since, caller=str(TRAINING), contains=["Authorize"])
    got = mesh.refused(lambda: mesh.policy(TRAINING).SetKillSwitch(policy_pb2.SetKillSwitchRequest(
        scope=policy_pb2.KILL_SWITCH_SCOPE_PLATFORM, enabled=False, reason="attack"), timeout=10))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CALLER_NOT_ALLOWED"), got
    mesh.find_record(reason="CALLER_NOT_ALLOWED", since=since, caller=str(TRAINING), contains=["SetKillSwitch"])


def test_a_killed_capability_is_refused_until_the_switch_is_off(mesh: Mesh) -> None:
    policy = mesh.policy(OPERATOR)

    def switch(enabled: bool) -> None:
        policy.SetKillSwitch(policy_pb2.SetKillSwitchRequest(
            scope=policy_pb2.KILL_SWITCH_SCOPE_CAPABILITY, target="risk.evaluate", enabled=enabled,
            reason="security evaluation"), timeout=10)

    switch(True)
    try:
        grant = mesh.grant(RISK, ["risk.evaluate"], ["permit:WP-10231"])
        got = mesh.refused(lambda: mesh.invoke(RISK, grant, "risk.evaluate", permit_id="WP-10231"))
        assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED"), got
        record = mesh.find_record(execution_id=_execution(grant), reason="POLICY_DENIED")
        assert any("kill_switch" in c for c in record.policy_decision.reason_codes), record.policy_decision
    finally:
        switch(False)
    ok = mesh.invoke(RISK, mesh.grant(RISK, ["risk.evaluate"], ["permit:WP-10231"]), "risk.evaluate",
                     permit_id="WP-10231")
    assert ok.decision.effect == common_pb2.POLICY_EFFECT_ALLOW
