"""PolicyService over mTLS in its own process: kill switches persist, callers are checked,
bad requests name the field, and `agentmesh policy check` explains decisions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from agentmesh import errors, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import OPERATOR
from agentmesh.pki import leaf_paths
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as pb
from agentmesh.v1 import policy_service_pb2_grpc as pb_grpc

from .conftest import RoleProcess, agentmesh_cli


def _stub(cfg: MeshConfig, address: str, identity: spiffe.SpiffeId) -> pb_grpc.PolicyServiceStub:
    tls = transport.TlsFiles.of(leaf_paths(cfg.mesh_home.workloads, identity), cfg.mesh_home.trust_bundle)
    return pb_grpc.PolicyServiceStub(transport.secure_channel(address, tls, spiffe.service("policy")))


def _request(**overrides: object) -> pb.AuthorizeRequest:
    req = pb.AuthorizeRequest(
        user=common_pb2.UserContext(tenant_id="acme", user_id="alice", roles=["analyst"]),
        actor_type=common_pb2.ACTOR_TYPE_USER,
        agent=common_pb2.AgentPrincipal(agent_id="training-agent",
                                        delegation_chain=["user:acme/alice", "svc:supervisor", "agent:training-agent"]),
        delegation_depth=2,
        capability_id="training.getStatus",
        capability_version="1.0.0",
        resource=pb.ResourceRef(type="Worker", id="W-1001", tenant_id="acme"),
        context=pb.OperationContext(risk_profile=common_pb2.RiskProfile(max_risk=common_pb2.RISK_LEVEL_LOW)),
        operation=pb.OPERATION_KIND_INVOKE,
    )
    for field in overrides:
        req.ClearField(field)
    return req


@pytest.fixture()
def policy_proc(mesh_config: MeshConfig) -> Iterator[RoleProcess]:
    audit = RoleProcess(mesh_config, "audit", "audit_svc")
    proc = None
    try:
        proc = RoleProcess(mesh_config, "policy", "policy_svc", peers={"audit": audit.address}, demo_tenants=True)
        proc.audit = audit  # type: ignore[attr-defined]
        yield proc
    finally:
        if proc is not None:
            proc.stop()
        audit.stop()


def _effect(resp: pb.AuthorizeResponse) -> str:
    return str(common_pb2.PolicyEffect.Name(resp.decision.effect))


def test_kill_switch_survives_restart(mesh_config: MeshConfig, policy_proc: RoleProcess) -> None:
    operator = _stub(mesh_config, policy_proc.address, OPERATOR)
    capability = _stub(mesh_config, policy_proc.address, spiffe.service("capability"))
    assert _effect(capability.Authorize(_request())) == "POLICY_EFFECT_ALLOW"
    operator.SetKillSwitch(pb.SetKillSwitchRequest(scope=pb.KILL_SWITCH_SCOPE_CAPABILITY, target="training.getStatus",
                                                   enabled=True, reason="LMS incident"))
    denied = capability.Authorize(_request())
    assert _effect(denied) == "POLICY_EFFECT_DENY"
    assert "kill_switch.capability" in denied.decision.reason_codes

    policy_proc.stop()
    restarted = RoleProcess(mesh_config, "policy", "policy_svc",
                            peers={"audit": policy_proc.audit.address})  # type: ignore[attr-defined]
    try:
        capability = _stub(mesh_config, restarted.address, spiffe.service("capability"))
        operator = _stub(mesh_config, restarted.address, OPERATOR)
        still = capability.Authorize(_request())
        assert _effect(still) == "POLICY_EFFECT_DENY" and "kill_switch.capability" in still.decision.reason_codes
        switches = operator.ListKillSwitches(pb.ListKillSwitchesRequest()).kill_switches
        assert [(s.target, s.changed_by, s.reason) for s in switches] == [
            ("training.getStatus", str(OPERATOR), "LMS incident")]
        # A switch on one capability leaves its neighbours alone.
        other = _request()
        other.capability_id = "workPermit.get"
        other.agent.agent_id = "work-permit-agent"
        assert _effect(capability.Authorize(other)) == "POLICY_EFFECT_ALLOW"
        operator.SetKillSwitch(pb.SetKillSwitchRequest(scope=pb.KILL_SWITCH_SCOPE_CAPABILITY,
                                                       target="training.getStatus", enabled=False, reason="fixed"))
        assert _effect(capability.Authorize(_request())) == "POLICY_EFFECT_ALLOW"
    finally:
        restarted.stop()


@pytest.mark.parametrize("identity", [spiffe.service("capability"), spiffe.service("supervisor"),
                                      spiffe.agent("training-agent"), spiffe.client("platform-cli")])
def test_only_operators_set_kill_switches(mesh_config: MeshConfig, policy_proc: RoleProcess,
                                          identity: spiffe.SpiffeId) -> None:
    stub = _stub(mesh_config, policy_proc.address, identity)
    with pytest.raises(grpc.RpcError) as info:
        stub.SetKillSwitch(pb.SetKillSwitchRequest(scope=pb.KILL_SWITCH_SCOPE_PLATFORM, enabled=True, reason="x"))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    operator = _stub(mesh_config, policy_proc.address, OPERATOR)
    assert not operator.ListKillSwitches(pb.ListKillSwitchesRequest()).kill_switches


@pytest.mark.parametrize("cleared, field", [
    ("user", "user"), ("capability_id", "capability_id"), ("resource", "resource"), ("agent", "agent"),
])
def test_request_missing_a_field_is_invalid_argument(mesh_config: MeshConfig, policy_proc: RoleProcess,
                                                     cleared: str, field: str) -> None:
    stub = _stub(mesh_config, policy_proc.address, spiffe.service("capability"))
    with pytest.raises(grpc.RpcError) as info:
        stub.Authorize(_request(**{cleared: None}))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    detail = errors.error_info(info.value)
    assert detail is not None and detail.metadata["field"].startswith(field)


def test_missing_tenant_names_the_nested_field(mesh_config: MeshConfig, policy_proc: RoleProcess) -> None:
    req = _request()
    req.user.tenant_id = ""
    stub = _stub(mesh_config, policy_proc.address, spiffe.service("capability"))
    with pytest.raises(grpc.RpcError) as info:
        stub.Authorize(req)
    detail = errors.error_info(info.value)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert detail is not None and detail.metadata["field"] == "user.tenant_id"


def test_policy_check_cli_explains_a_cross_tenant_denial(mesh: MeshConfig) -> None:
    result = agentmesh_cli(mesh.home, "policy", "check", "--tenant", "acme", "--user", "alice", "--role", "analyst",
                           "--agent", "training-agent", "--capability", "training.getStatus",
                           "--resource-tenant", "globex", "--json")
    assert result.returncode == 3, result.stderr  # DENY
    decision = json.loads(result.stdout)
    assert decision["effect"] == "POLICY_EFFECT_DENY"  # --json: the contract's full enum name
    assert "tenant.isolation" in decision["reason_codes"]
    assert decision["policy_version"].startswith("sha256:")
    human = agentmesh_cli(mesh.home, "policy", "check", "--tenant", "acme", "--user", "alice", "--role", "analyst",
                          "--agent", "training-agent", "--capability", "training.getStatus")
    assert human.returncode == 0 and "decision: ALLOW" in human.stdout
    release = agentmesh_cli(mesh.home, "policy", "check", "--tenant", "acme", "--user", "alice", "--role",
                            "permit-manager", "--agent", "work-permit-agent", "--capability", "workPermit.release",
                            "--mutates", "--risk", "high")
    assert release.returncode == 4 and "decision: HUMAN_APPROVAL_REQUIRED" in release.stdout, release.stdout
    assert "POLICY_EFFECT_" not in release.stdout
    assert "exit status:" in agentmesh_cli(mesh.home, "policy", "check", "--help").stdout


def _on_execution(operation: int, *, tenant: str = "acme", user_id: str = "carol",
                  roles: tuple[str, ...] = ("viewer",), requester: str = "alice",
                  execution_tenant: str = "acme") -> pb.AuthorizeRequest:
    """A read or cancel of an execution as the supervisor asks for it (no capability)."""
    return pb.AuthorizeRequest(
        user=common_pb2.UserContext(tenant_id=tenant, user_id=user_id, roles=list(roles)),
        actor_type=common_pb2.ACTOR_TYPE_USER,
        agent=common_pb2.AgentPrincipal(agent_id="supervisor",
                                        delegation_chain=[f"user:{tenant}/{user_id}", "svc:supervisor"]),
        delegation_depth=1,
        resource=pb.ResourceRef(type="Execution", id="ex-1", tenant_id=execution_tenant),
        context=pb.OperationContext(subject_requester_id=requester),
        operation=operation,  # type: ignore[arg-type]
    )


READ, CANCEL = pb.OPERATION_KIND_READ_EXECUTION, pb.OPERATION_KIND_CANCEL_EXECUTION


def test_executions_are_private(mesh_config: MeshConfig, policy_proc: RoleProcess) -> None:
    supervisor = _stub(mesh_config, policy_proc.address, spiffe.service("supervisor"))
    cases = [
        ("requester reads", _on_execution(READ, user_id="alice"), "POLICY_EFFECT_ALLOW", ["execution.read_own"]),
        ("requester cancels", _on_execution(CANCEL, user_id="alice"), "POLICY_EFFECT_ALLOW",
         ["execution.cancel_own"]),
        ("viewer reads another's", _on_execution(READ), "POLICY_EFFECT_DENY",
         ["execution.not_requester_or_reader"]),
        ("viewer cancels another's", _on_execution(CANCEL), "POLICY_EFFECT_DENY",
         ["execution.not_requester_or_canceller"]),
        ("reviewer reads another's", _on_execution(READ, roles=("reviewer",)), "POLICY_EFFECT_ALLOW",
         ["execution.read_privileged"]),
        ("operator reads another's", _on_execution(READ, roles=("operator",)), "POLICY_EFFECT_ALLOW",
         ["execution.read_privileged"]),
        ("reviewer cancels another's", _on_execution(CANCEL, roles=("reviewer",)), "POLICY_EFFECT_DENY",
         ["execution.not_requester_or_canceller"]),
        ("admin cancels another's", _on_execution(CANCEL, roles=("admin",)), "POLICY_EFFECT_ALLOW",
         ["execution.cancel_privileged"]),
        ("globex admin reads acme's", _on_execution(READ, tenant="globex", roles=("admin",)), "POLICY_EFFECT_DENY",
         ["tenant.isolation"]),
        ("globex admin cancels acme's", _on_execution(CANCEL, tenant="globex", roles=("admin",)),
         "POLICY_EFFECT_DENY", ["tenant.isolation"]),
    ]
    for name, request, effect, reasons in cases:
        decision = supervisor.Authorize(request).decision
        assert (common_pb2.PolicyEffect.Name(decision.effect), list(decision.reason_codes)) == (effect, reasons), name

    scanner = _on_execution(READ, requester="TrainingExpirationScanner")
    scanner.actor_type = common_pb2.ACTOR_TYPE_SYSTEM
    scanner.system_actor = "TrainingExpirationScanner"
    scanner.user.user_id = ""
    denied = supervisor.Authorize(scanner).decision
    assert list(denied.reason_codes) == ["execution.system_actor"]


@pytest.mark.parametrize("change, field", [
    (lambda r: r.context.ClearField("subject_requester_id"), "context.subject_requester_id"),
    (lambda r: setattr(r, "capability_id", "workPermit.get"), "capability_id"),
    (lambda r: setattr(r.resource, "type", "WorkPermit"), "resource.type"),
], ids=["no-subject-requester", "capability-given", "not-an-execution"])
def test_bad_execution_request_is_invalid_argument(mesh_config: MeshConfig, policy_proc: RoleProcess,
                                                   change: Any, field: str) -> None:
    request = _on_execution(READ, user_id="alice")
    change(request)
    stub = _stub(mesh_config, policy_proc.address, spiffe.service("supervisor"))
    with pytest.raises(grpc.RpcError) as info:
        stub.Authorize(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    detail = errors.error_info(info.value)
    assert detail is not None and detail.metadata["field"] == field


def test_kill_switch_stops_invocations_not_reading_or_cancelling_and_policy_info_lists_the_rules(
        mesh_config: MeshConfig,
                                                                           policy_proc: RoleProcess) -> None:
    operator = _stub(mesh_config, policy_proc.address, OPERATOR)
    supervisor = _stub(mesh_config, policy_proc.address, spiffe.service("supervisor"))
    ids = set(operator.GetPolicyInfo(pb.GetPolicyInfoRequest()).policy_ids)
    assert {"execution.read_own", "execution.read_privileged", "execution.cancel_own", "execution.cancel_privileged",
            "execution.not_requester_or_reader", "execution.not_requester_or_canceller",
            "execution.system_actor"} <= ids
    operator.SetKillSwitch(pb.SetKillSwitchRequest(scope=pb.KILL_SWITCH_SCOPE_TENANT, target="acme", enabled=True,
                                                   reason="incident"))
    try:
        stopped = supervisor.Authorize(_request()).decision
        assert "kill_switch.tenant" in stopped.reason_codes
        assert stopped.effect == common_pb2.POLICY_EFFECT_DENY
        # A safety stop never keeps anyone from looking at work or stopping it.
        for operation in (READ, CANCEL):
            still = supervisor.Authorize(_on_execution(operation, user_id="alice")).decision
            assert still.effect == common_pb2.POLICY_EFFECT_ALLOW, (operation, list(still.reason_codes))
    finally:
        operator.SetKillSwitch(pb.SetKillSwitchRequest(scope=pb.KILL_SWITCH_SCOPE_TENANT, target="acme",
                                                       enabled=False, reason="incident over"))
