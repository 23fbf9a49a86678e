"""No record lost while audit is down, over real processes.

A kill switch applies even when audit cannot take its record (a safety stop
must not wait); the record waits in the policy process's outbox and reaches
the log once audit is back. A refusal at a specialist is recorded too, under
the agent's own identity.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import grpc
import pytest

from agentmesh import errors, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import OPERATOR, PLATFORM_CLI
from agentmesh.pki import leaf_paths
from agentmesh.service import address_file
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc
from agentmesh.v1 import specialist_service_pb2 as specialist_pb2
from agentmesh.v1 import specialist_service_pb2_grpc as specialist_grpc

from .conftest import RoleProcess, client_tls, peer_address

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AuditOnPort:
    """The audit process on a fixed port, so it can be stopped and started again where its peers look."""

    def __init__(self, cfg: MeshConfig, port: int) -> None:
        self.cfg, self.port, self.address = cfg, port, f"127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        addr = address_file(self.cfg, "audit")
        addr.unlink(missing_ok=True)
        log = self.cfg.mesh_home.logs / "audit-outbox-test.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "audit_svc", "--home", str(self.cfg.home), "--port", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "OTEL_SERVICE_NAME": "audit"})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, log.read_text()[-2000:]
            if addr.exists():
                try:
                    json.loads(addr.read_text())
                    return
                except ValueError:
                    pass
            time.sleep(0.05)
        raise AssertionError(f"audit did not start: {log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _channel(cfg: MeshConfig, address: str, identity: spiffe.SpiffeId, server: spiffe.SpiffeId) -> grpc.Channel:
    tls = transport.TlsFiles.of(leaf_paths(cfg.mesh_home.workloads, identity), cfg.mesh_home.trust_bundle)
    return transport.secure_channel(address, tls, server)


def _find(cfg: MeshConfig, address: str, match: Callable[[audit_pb2.AuditRecord], bool],
          timeout_s: float, **query: str) -> audit_pb2.AuditRecord:
    """Polls QueryRecords as the operator until a record matches."""
    with _channel(cfg, address, OPERATOR, spiffe.service("audit")) as channel:
        stub = audit_grpc.AuditServiceStub(channel)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                for page in stub.QueryRecords(audit_pb2.QueryRecordsRequest(page_size=1000, **query), timeout=5):
                    for rec in page.records:
                        if match(rec):
                            return rec
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.UNAVAILABLE:  # type: ignore[attr-defined]
                    raise
            assert time.monotonic() < deadline, f"no matching audit record within {timeout_s}s"
            time.sleep(0.1)


@pytest.fixture()
def audit(mesh_config: MeshConfig) -> Iterator[AuditOnPort]:
    proc = AuditOnPort(mesh_config, _free_port())
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_a_kill_switch_set_while_audit_is_down_reaches_the_log_when_it_is_back(
        mesh_config: MeshConfig, audit: AuditOnPort) -> None:
    policy = RoleProcess(mesh_config, "policy", "policy_svc", peers={"audit": audit.address}, demo_tenants=True)
    try:
        with _channel(mesh_config, policy.address, OPERATOR, spiffe.service("policy")) as op_channel, \
                _channel(mesh_config, policy.address, spiffe.service("capability"),
                         spiffe.service("policy")) as cap_channel:
            operator = policy_grpc.PolicyServiceStub(op_channel)
            capability = policy_grpc.PolicyServiceStub(cap_channel)
            audit.stop()
            marker = f"outbox-{uuid.uuid4().hex[:12]}"
            started = time.monotonic()
            operator.SetKillSwitch(policy_pb2.SetKillSwitchRequest(
                scope=policy_pb2.KILL_SWITCH_SCOPE_CAPABILITY, target="training.getStatus", enabled=True,
                reason=marker), timeout=10)
            assert time.monotonic() - started < 5.0  # the safety stop did not wait for audit
            # In force at once, with audit down.
            decision = capability.Authorize(policy_pb2.AuthorizeRequest(
                user=common_pb2.UserContext(tenant_id="acme", user_id="alice", roles=["analyst"]),
                actor_type=common_pb2.ACTOR_TYPE_USER,
                agent=common_pb2.AgentPrincipal(agent_id="training-agent", delegation_chain=[
                    "user:acme/alice", "svc:supervisor", "agent:training-agent"]),
                delegation_depth=2, capability_id="training.getStatus", capability_version="1.0.0",
                resource=policy_pb2.ResourceRef(type="Worker", id="W-1001", tenant_id="acme"),
                context=policy_pb2.OperationContext(
                    risk_profile=common_pb2.RiskProfile(max_risk=common_pb2.RISK_LEVEL_LOW)),
                operation=policy_pb2.OPERATION_KIND_INVOKE), timeout=10).decision
            assert decision.effect == common_pb2.POLICY_EFFECT_DENY
            assert "kill_switch.capability" in decision.reason_codes

            # Audit stays down long enough that a gRPC channel's own reconnect backoff
            # would have grown past the outbox's 2 s cap; the policy process keeps retrying.
            time.sleep(6.0)
            audit.start()
            back = time.monotonic()
            rec = _find(mesh_config, audit.address, lambda r: f"reason={marker}" in r.reason_codes,
                        timeout_s=10.0, capability_id="training.getStatus")
            arrived = time.monotonic() - back
            assert rec.event_type == audit_pb2.AUDIT_EVENT_TYPE_KILL_SWITCH_CHANGED
            assert rec.recorded_by == str(spiffe.service("policy"))
            assert f"changed_by={OPERATOR}" in rec.reason_codes
            assert any(c.startswith("queued_at=") for c in rec.reason_codes)
            assert arrived < 4.0, f"took {arrived:.1f}s"
            # Put the switch back (audit is up: recorded at once).
            operator.SetKillSwitch(policy_pb2.SetKillSwitchRequest(
                scope=policy_pb2.KILL_SWITCH_SCOPE_CAPABILITY, target="training.getStatus", enabled=False,
                reason="outbox test done"), timeout=10)
    finally:
        policy.stop()


def test_a_refusal_at_a_specialist_is_recorded_under_the_agent(mesh_config: MeshConfig,
                                                              audit: AuditOnPort) -> None:
    agent = RoleProcess(mesh_config, "training-agent", "specialist_svc", extra=("--agent", "training-agent"),
                        peers={"audit": audit.address, "capability": "127.0.0.1:1"})
    try:
        marker = f"task-{uuid.uuid4().hex[:12]}"
        with _channel(mesh_config, agent.address, PLATFORM_CLI, spiffe.agent("training-agent")) as channel:
            stub = specialist_grpc.SpecialistServiceStub(channel)
            with pytest.raises(grpc.RpcError) as info:
                stub.RunTask(specialist_pb2.RunTaskRequest(task=common_pb2.AgentTask(
                    task_id=marker, target_agent_id="training-agent")), timeout=10)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
        assert errors.error_info(info.value) is not None
        rec = _find(mesh_config, audit.address,
                    lambda r: (r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED
                               and f"caller={PLATFORM_CLI}" in r.reason_codes
                               and "method=/agentmesh.v1.SpecialistService/RunTask" in r.reason_codes),
                    timeout_s=10.0)
        assert rec.recorded_by == str(spiffe.agent("training-agent"))
        assert rec.outcome == audit_pb2.AUDIT_OUTCOME_DENIED

        # A task the agent itself refuses (from the supervisor, but for another agent) is recorded too.
        with _channel(mesh_config, agent.address, spiffe.service("supervisor"),
                      spiffe.agent("training-agent")) as channel, pytest.raises(grpc.RpcError) as info:
            specialist_grpc.SpecialistServiceStub(channel).RunTask(specialist_pb2.RunTaskRequest(
                task=common_pb2.AgentTask(task_id=marker, target_agent_id="risk-agent", tenant_id="acme",
                                          execution_id=f"exe-{marker}")), timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
        rec = _find(mesh_config, audit.address, lambda r: r.task_id == marker, timeout_s=10.0,
                    execution_id=f"exe-{marker}")
        assert rec.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED
        assert rec.outcome == audit_pb2.AUDIT_OUTCOME_DENIED
        assert rec.reason_codes[0] == "TASK_AGENT_MISMATCH"
        assert f"caller={spiffe.service('supervisor')}" in rec.reason_codes
        assert (rec.recorded_by, rec.agent_id, rec.tenant_id) == (
            str(spiffe.agent("training-agent")), "training-agent", "acme")
    finally:
        agent.stop()


def test_agents_may_record_only_refusals(mesh_config: MeshConfig, audit: AuditOnPort) -> None:
    with _channel(mesh_config, audit.address, spiffe.agent("training-agent"), spiffe.service("audit")) as channel:
        stub = audit_grpc.AuditServiceStub(channel)
        ok = stub.AppendRecord(audit_pb2.AppendRecordRequest(record=audit_pb2.AuditRecord(
            event_type=audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
            reason_codes=["CALLER_NOT_ALLOWED"])), timeout=10)
        assert ok.record_id
        for request in (
            audit_pb2.AppendRecordRequest(record=audit_pb2.AuditRecord(
                event_type=audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME, outcome=audit_pb2.AUDIT_OUTCOME_SUCCESS)),
        ):
            with pytest.raises(grpc.RpcError) as info:
                stub.AppendRecord(request, timeout=10)
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
            detail = errors.error_info(info.value)
            assert detail is not None and detail.reason == "AGENT_EVENT_TYPE_NOT_ALLOWED"
            assert detail.metadata["field"] == "record.event_type"
        with pytest.raises(grpc.RpcError) as info:
            stub.AppendRecords(audit_pb2.AppendRecordsRequest(records=[
                audit_pb2.AuditRecord(event_type=audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED),
                audit_pb2.AuditRecord(event_type=audit_pb2.AUDIT_EVENT_TYPE_KILL_SWITCH_CHANGED)]), timeout=10)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
        detail = errors.error_info(info.value)
        assert detail is not None and detail.metadata["field"] == "records[1].event_type"


def test_in_a_launched_mesh_every_specialist_records_its_refusals(mesh: MeshConfig) -> None:
    # `agentmesh up` gives each specialist the audit address: a refusal at any of them is in the log.
    audit_address = peer_address(mesh, "audit")
    for agent_id in mesh.agents:
        channel = transport.secure_channel(peer_address(mesh, agent_id), client_tls(mesh, PLATFORM_CLI),
                                           spiffe.agent(agent_id))
        with channel, pytest.raises(grpc.RpcError) as info:
            specialist_grpc.SpecialistServiceStub(channel).DescribeAgent(specialist_pb2.DescribeAgentRequest(),
                                                                         timeout=10)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
        rec = _find(mesh, audit_address,
                    lambda r, agent_id=agent_id: (
                        r.recorded_by == str(spiffe.agent(agent_id)) and f"caller={PLATFORM_CLI}" in r.reason_codes
                        and "method=/agentmesh.v1.SpecialistService/DescribeAgent" in r.reason_codes),
                    timeout_s=10.0)
        assert rec.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED
        assert rec.outcome == audit_pb2.AUDIT_OUTCOME_DENIED
