"""SpecialistService over real mTLS: what RunTask sends to the capability service, and every refusal.

In-process servers on loopback port 0 with the session's certificates and the
shipped caller table: the training agent's SpecialistService, and a stand-in
CapabilityService that records each InvokeCapability and answers from the
real capability runtime (demo world) — grant, policy and audit are not its
concern here. The supervisor is a client with the supervisor's certificate.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format, struct_pb2

from agentmesh import errors, grants, spiffe, transport
from agentmesh.access import AccessTable
from agentmesh.config import MeshConfig
from agentmesh.pki import leaf_paths
from agentmesh.result_contract import check_result
from agentmesh.service import address_file
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import capability_service_pb2_grpc as cap_grpc
from agentmesh.v1 import common_pb2 as c
from agentmesh.v1 import specialist_service_pb2 as pb
from agentmesh.v1 import specialist_service_pb2_grpc as pb_grpc
from capability_svc import errors as cap_errors
from capability_svc.governance import evidence_of, mesh_error
from capability_svc.invocation import InvocationContext
from specialist_svc.__main__ import main
from specialist_svc.agent import SpecialistAgent
from specialist_svc.rules import plain
from specialist_svc.servicer import SpecialistServicer

AGENT = "training-agent"
AGENT_ID = spiffe.agent(AGENT)
SUPERVISOR = spiffe.service("supervisor")
CAPABILITY = spiffe.service("capability")
SIGNER = grants.GrantSigner(Ed25519PrivateKey.generate())


def tls(cfg: MeshConfig, identity: spiffe.SpiffeId) -> transport.TlsFiles:
    return transport.TlsFiles.of(leaf_paths(cfg.mesh_home.workloads, identity), cfg.mesh_home.trust_bundle)


@dataclass
class StandInCapability(cap_grpc.CapabilityServiceServicer):  # type: ignore[misc]
    """Records every call; answers from the real runtime, or denies / hangs for chosen resources."""

    world: Any
    seen: list[tuple[cap_pb2.InvokeCapabilityRequest, str, float | None]] = field(default_factory=list)
    behaviour: dict[str, str] = field(default_factory=dict)
    batches: list[int] = field(default_factory=list)
    """The number of calls of each InvokeCapabilities."""

    def InvokeCapability(self, request: Any, context: Any) -> Any:
        self.seen.append((request, transport.caller_id(context), context.time_remaining()))
        grant = grants.decode(request.grant)
        args = plain(json_format.MessageToDict(request.input))
        what = self.behaviour.get(str(args.get("worker_id") or args.get("permit_id")))
        if what == "deny":
            raise errors.PermissionDenied("policy denied training.getStatus: NO_ROLE", reason="POLICY_DENIED")
        if what == "hang":
            # As the capability service does: the backend is given up on a little before the caller's deadline.
            remaining = context.time_remaining()
            give_up = time.monotonic() + remaining - min(0.25, remaining * 0.1)
            while context.is_active() and time.monotonic() < give_up:
                time.sleep(0.01)
            raise errors.DeadlineExceeded("the LMS did not answer in time", reason="EXTERNAL_TIMEOUT")
        ctx = InvocationContext(grant.tenant_id, grant.user_id, spiffe.parse(grant.audience).name, grant.execution_id)
        try:
            done = self.world.executor.execute(ctx, request.capability_id, args, deadline_s=5.0)
        except cap_errors.CapabilityError as err:
            raise mesh_error(err) from err
        output = struct_pb2.Struct()
        output.update(done.output)
        return cap_pb2.InvokeCapabilityResponse(
            capability_id=done.manifest.id, capability_version=str(done.manifest.version), output=output,
            evidence=evidence_of(done.output, done.manifest.key),
            decision=c.PolicyDecision(effect=c.POLICY_EFFECT_ALLOW, policy_version="policy-test"))

    def InvokeCapabilities(self, request: Any, context: Any) -> Any:
        self.batches.append(len(request.calls))
        def one(call: cap_pb2.InvokeCapabilityRequest) -> cap_pb2.InvokeCapabilityResult:
            try:
                return cap_pb2.InvokeCapabilityResult(response=self.InvokeCapability(call, context))
            except errors.MeshError as err:
                return cap_pb2.InvokeCapabilityResult(error=err.to_status())

        with ThreadPoolExecutor() as pool:  # side by side, as the capability service runs a batch
            return cap_pb2.InvokeCapabilitiesResponse(results=list(pool.map(one, request.calls)))


@dataclass
class Mesh:
    capability: StandInCapability
    specialist: str
    cfg: MeshConfig

    def stub(self, identity: spiffe.SpiffeId = SUPERVISOR) -> pb_grpc.SpecialistServiceStub:
        return pb_grpc.SpecialistServiceStub(
            transport.secure_channel(self.specialist, tls(self.cfg, identity), AGENT_ID, default_timeout_s=10))


@pytest.fixture()
def mesh(mesh_config: MeshConfig, world: Any) -> Iterator[Mesh]:
    access = AccessTable.load()
    capability = StandInCapability(world)
    cap_server = transport.create_server(access)
    cap_grpc.add_CapabilityServiceServicer_to_server(capability, cap_server)
    cap_port = transport.bind(cap_server, "127.0.0.1", 0, tls(mesh_config, CAPABILITY))
    cap_server.start()
    channel = transport.secure_channel(f"127.0.0.1:{cap_port}", tls(mesh_config, AGENT_ID), CAPABILITY)
    servicer = SpecialistServicer(SpecialistAgent.load(AGENT), cap_grpc.CapabilityServiceStub(channel),
                                  fixed_delay_s=0.01)
    spec_server = transport.create_server(access)
    pb_grpc.add_SpecialistServiceServicer_to_server(servicer, spec_server)
    spec_port = transport.bind(spec_server, "127.0.0.1", 0, tls(mesh_config, AGENT_ID))
    spec_server.start()
    try:
        yield Mesh(capability, f"127.0.0.1:{spec_port}", mesh_config)
    finally:
        spec_server.stop(grace=None)
        channel.close()
        cap_server.stop(grace=None)


def request(permit_input: Any, permit_id: str = "WP-10232", *, audience: str = str(AGENT_ID),
            target: str = AGENT) -> pb.RunTaskRequest:
    task = c.AgentTask(task_id="task-7", execution_id="exe-1", target_agent_id=target, tenant_id="acme",
                       user_id="alice", correlation_id="corr-1", source_agent_id="supervisor")
    task.input.update(permit_input(permit_id, AGENT))
    grant = SIGNER.issue(issuer=str(SUPERVISOR), audience=audience, execution_id="exe-1", task_id="task-7",
                         tenant_id="acme", user_id="alice", assertion_digest="digest",
                         capabilities=["training.getStatus"])
    principal = c.AgentPrincipal(agent_id=AGENT, execution_id="exe-1", parent_agent_id="supervisor",
                                 delegation_chain=["user:acme/alice", "svc:supervisor"])
    trace = c.TraceContext(trace_id="0af7651916cd43dd8448eb211c80319c", correlation_id="corr-1",
                           execution_id="exe-1")
    return pb.RunTaskRequest(task=task, grant=grant, principal=principal, trace=trace)


def reason(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    detail = errors.error_info(info.value)
    return info.value.code(), detail.reason if detail else ""


def test_run_task_calls_capabilities_with_the_grant_principal_and_trace(mesh, permit_input) -> None:
    req = request(permit_input)
    result = mesh.stub().RunTask(req, timeout=8).result
    parsed = check_result(result)
    assert parsed.verdict.value == "FAIL"
    assert {k: v.value for k, v in parsed.subjects.items()} == {"worker:W-1003/NR-10": "FAIL",
                                                               "worker:W-1002/NR-10": "PASS"}
    assert (result.task_id, result.agent_id) == ("task-7", AGENT)
    assert result.versions.agent_version == "1.0.0" and result.versions.policy_version == "policy-test"
    assert result.HasField("completed_at")

    assert len(mesh.capability.seen) == 2
    assert mesh.capability.batches == [2]  # the two workers' lookups in one round trip
    for sent, caller, remaining in mesh.capability.seen:
        assert caller == str(AGENT_ID)  # from the agent's own certificate
        assert sent.capability_id == "training.getStatus"
        assert sent.grant == req.grant
        assert list(sent.principal.delegation_chain) == ["user:acme/alice", "svc:supervisor", "agent:training-agent"]
        assert list(sent.principal.grants) == [req.grant]
        assert (sent.principal.agent_id, sent.principal.agent_version) == (AGENT, "1.0.0")
        assert sent.trace == req.trace
        assert remaining is not None and remaining < 8  # the caller's deadline, passed on


def test_describe_agent(mesh) -> None:
    agent = mesh.stub().DescribeAgent(pb.DescribeAgentRequest(), timeout=5).agent
    assert (agent.agent_id, agent.version, agent.spiffe_id) == (AGENT, "1.0.0", str(AGENT_ID))
    assert list(agent.capabilities) == ["training.getStatus"]
    assert agent.status == c.LIFECYCLE_STATUS_ACTIVE


def test_a_task_for_another_agent_is_refused(mesh, permit_input) -> None:
    req = request(permit_input, target="risk-agent")
    assert reason(lambda: mesh.stub().RunTask(req, timeout=5)) == (grpc.StatusCode.INVALID_ARGUMENT,
                                                                   "TASK_AGENT_MISMATCH")
    assert mesh.capability.seen == []


def test_a_grant_for_another_identity_is_refused(mesh, permit_input) -> None:
    req = request(permit_input, audience=str(spiffe.agent("risk-agent")))
    assert reason(lambda: mesh.stub().RunTask(req, timeout=5)) == (grpc.StatusCode.PERMISSION_DENIED,
                                                                   "GRANT_AUDIENCE_MISMATCH")
    assert mesh.capability.seen == []


def test_a_task_without_a_grant_is_refused(mesh, permit_input) -> None:
    req = request(permit_input)
    req.ClearField("grant")
    assert reason(lambda: mesh.stub().RunTask(req, timeout=5)) == (grpc.StatusCode.INVALID_ARGUMENT,
                                                                   "GRANT_MISSING")


def test_input_outside_the_projection_is_refused(mesh, permit_input) -> None:
    req = request(permit_input)
    req.task.input["workers"][0]["medical_notes"] = "Partial hearing loss"
    assert reason(lambda: mesh.stub().RunTask(req, timeout=5)) == (grpc.StatusCode.INVALID_ARGUMENT,
                                                                   "TASK_INPUT_INVALID")
    assert mesh.capability.seen == []


def test_only_the_supervisor_may_call(mesh, permit_input) -> None:
    for identity in (spiffe.client("operator"), spiffe.agent("risk-agent")):
        assert reason(lambda i=identity: mesh.stub(i).RunTask(request(permit_input), timeout=5)) == (
            grpc.StatusCode.PERMISSION_DENIED, "CALLER_NOT_ALLOWED")


def test_a_denied_capability_call_fails_the_result_not_the_rpc(mesh, permit_input) -> None:
    mesh.capability.behaviour["W-1003"] = "deny"
    result = mesh.stub().RunTask(request(permit_input), timeout=8).result
    assert result.status == c.RESULT_STATUS_FAILED
    assert result.error_reason.startswith("NOT_AUTHORISED: training.getStatus POLICY_DENIED")


def test_a_capability_that_outlives_the_deadline_is_an_uncertainty(mesh, permit_input) -> None:
    mesh.capability.behaviour["W-1001"] = "hang"
    result = mesh.stub().RunTask(request(permit_input, "WP-10231"), timeout=1.0).result
    parsed = check_result(result)
    assert result.status == c.RESULT_STATUS_PARTIAL
    assert {k: v.value for k, v in parsed.subjects.items()} == {
        "worker:W-1001/NR-10": "UNKNOWN", "worker:W-1001/NR-35": "UNKNOWN",
        "worker:W-1002/NR-10": "PASS", "worker:W-1002/NR-35": "PASS"}
    assert {s.code for s in result.statements if s.subject.startswith("worker:W-1001/")} == {"LMS_TIMEOUT"}


# --- the process ----------------------------------------------------------------------------------

def test_unknown_agent_stops_with_one_line(capsys, tmp_path) -> None:
    assert main(["--agent", "nobody", "--home", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown agent 'nobody'" in err[0] and "training-agent" in err[0]


def test_a_bad_fixed_delay_stops_with_one_line(capsys, tmp_path) -> None:
    assert main(["--agent", AGENT, "--home", str(tmp_path), "--fixed-delay-ms", "-5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fixed-delay-ms" in err[0]


def test_a_bad_instance_name_stops_with_one_line(capsys, tmp_path) -> None:
    assert main(["--agent", AGENT, "--home", str(tmp_path), "--instance", "Canary Two"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--instance" in err[0] and "'Canary Two'" in err[0]


def test_a_second_process_of_an_agent_takes_its_own_name_and_keeps_its_identity() -> None:
    import argparse

    from specialist_svc.__main__ import spec

    named = spec(argparse.Namespace(agent=AGENT, instance="training-agent-canary", fixed_delay_ms=None))
    assert (named.name, str(named.identity)) == ("training-agent-canary", "spiffe://agentmesh.local/agent/" + AGENT)
    plain = spec(argparse.Namespace(agent=AGENT, instance=None, fixed_delay_ms=None))
    assert plain.name == AGENT


@pytest.mark.integration
def test_the_process_serves_describe_agent_over_mtls(mesh_config) -> None:
    addr = address_file(mesh_config, AGENT)
    addr.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "specialist_svc", "--agent", AGENT, "--home",
                             str(mesh_config.home), "--port", "0", "--fixed-delay-ms", "5"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ))
    try:
        for _ in range(600):
            if addr.exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        import json

        address = json.loads(addr.read_text())["address"]
        stub = pb_grpc.SpecialistServiceStub(transport.secure_channel(address, tls(mesh_config, SUPERVISOR), AGENT_ID))
        assert stub.DescribeAgent(pb.DescribeAgentRequest(), timeout=10).agent.agent_id == AGENT
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
