"""Durable execution over real processes: a supervisor killed (kill -9) mid-analysis or mid-release
resumes on restart under the same execution id, a cancelled execution's grants are refused by the
capability service, and a retried Analyze is the same execution. Specialists take DELAY_MS per task
(`specialist_delay_ms`), so there is time to kill something in the middle."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import struct_pb2

from agentmesh import config, errors, grants, launcher, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.launcher import demo_world
from agentmesh.service import address_file
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import capability_service_pb2_grpc as cap_grpc
from agentmesh.v1 import common_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from capability_svc.idempotency import IdempotencyStore
from capability_svc.internal_runtime import InternalStore
from capability_svc.world import load_world

from .conftest import agentmesh_cli, client_tls, peer_address
from .test_analysis_e2e import audit_records, supervisor, token

DELAY_MS = 1000
ANALYSIS = "Analyze permit WP-10231 and tell me if it can be released"


@pytest.fixture(scope="module")
def slow_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshConfig]:
    home = tmp_path_factory.mktemp("durable-mesh")
    (home / "config.yaml").write_text(f"specialist_delay_ms: {DELAY_MS}\n")
    result = agentmesh_cli(home, "up", "--detach", "--ports-auto", "--json")
    cfg = config.load(home=str(home), environ={})
    try:
        assert result.returncode == 0, result.stderr
        yield cfg
    finally:
        for proc in _started:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        launcher.down(cfg)


@pytest.fixture
def world(slow_mesh: MeshConfig) -> Iterator[MeshConfig]:
    """The demo world before and after the test."""
    store = InternalStore(slow_mesh.mesh_home.data / "internal.db")
    load_world(demo_world(), store)
    yield slow_mesh
    load_world(demo_world(), store)


_started: list[subprocess.Popen[bytes]] = []


def _pid(cfg: MeshConfig, name: str) -> int:
    path = address_file(cfg, name)
    try:
        return int(json.loads(path.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return next(p.pid for p in launcher.read_state(cfg) if p.name == name)


@contextmanager
def restart_supervisor(cfg: MeshConfig, *, keep: bool = True) -> Iterator[str]:
    """kill -9 the supervisor, then it starts again on its port (by the launcher's supervising loop, if it
    has one, else here); yields its address. ``keep``: it goes on running after the block (stopped with the
    module's mesh), else it is stopped when the block ends."""
    address = peer_address(cfg, "supervisor")
    port = address.rsplit(":", 1)[1]
    old = _pid(cfg, "supervisor")
    os.kill(old, signal.SIGKILL)
    supervising = getattr(launcher, "read_supervisor", None)
    if supervising is not None and supervising(cfg) is not None:
        # `up` supervises its processes: it restarts the supervisor on its port by itself.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            path = address_file(cfg, "supervisor")
            try:
                if int(json.loads(path.read_text())["pid"]) != old:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.1)
        yield address
        return
    time.sleep(0.3)
    peers = {p.name: p.address for p in launcher.read_state(cfg) if p.kind == "grpc" and p.name != "supervisor"}
    cmd = [sys.executable, "-m", "supervisor_svc", "--home", str(cfg.home), "--port", port]
    for name, addr in peers.items():
        cmd += ["--peer", f"{name}={addr}"]
    log = cfg.mesh_home.logs / "supervisor-restarted.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    if keep:
        _started.append(proc)
    try:
        yield address
    finally:
        if not keep:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_terminal(stub: Any, user: str, execution_id: str, timeout_s: float = 60) -> pb.Execution:
    """GetExecution until the execution (and its action) no longer runs; retried while the supervisor starts."""
    deadline = time.monotonic() + timeout_s
    last: pb.Execution | None = None
    while time.monotonic() < deadline:
        try:
            last = stub.GetExecution(pb.GetExecutionRequest(user_assertion=user, execution_id=execution_id),
                                     timeout=5).execution
        except grpc.RpcError as err:
            if err.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
        if last is not None and last.status != pb.EXECUTION_STATUS_RUNNING:
            return last
        time.sleep(0.2)
    raise AssertionError(f"execution {execution_id} did not end: {last}")


def delegations(cfg: MeshConfig, execution_id: str) -> dict[str, int]:
    """TASK_DELEGATED records per task id: how often each task was handed to an agent."""
    out: dict[str, int] = {}
    for r in audit_records(cfg, execution_id=execution_id):
        if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED:
            out[r.task_id] = out.get(r.task_id, 0) + 1
    return out


def test_a_killed_supervisor_resumes_from_the_last_completed_task(slow_mesh: MeshConfig) -> None:
    stub = supervisor(slow_mesh)
    user = token(slow_mesh)
    started = stub.Analyze(pb.AnalyzeRequest(user_assertion=user, tenant_id="acme", detach=True,
                                             request_text=ANALYSIS), timeout=30)
    execution_id = started.execution.execution_id
    first = ""
    parallel = {"training-agent", "risk-agent", "compliance-agent"}
    started_agents: set[str] = set()
    for event in stub.WatchExecution(pb.WatchExecutionRequest(user_assertion=user, execution_id=execution_id),
                                     timeout=30):
        if event.event == pb.EXECUTION_EVENT_TASK_FINISHED and event.agent_id == "work-permit-agent":
            first = event.task_id
        if event.event == pb.EXECUTION_EVENT_TASK_STARTED:
            started_agents.add(event.agent_id)
            # Each parallel task is on the record as delegated (TASK_STARTED follows its durable TASK_DELEGATED)
            # before the kill, so each is handed out again after it, exactly once more.
            if parallel <= started_agents:
                break
    assert first, "the first stage completed before the crash"
    with restart_supervisor(slow_mesh):
        ex = wait_terminal(supervisor(slow_mesh), user, execution_id)
    assert ex.execution_id == execution_id
    assert (ex.status, ex.decision) == (pb.EXECUTION_STATUS_SUCCEEDED,
                                        common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE), ex.summary
    assert {r.agent_id for r in ex.results} == {"work-permit-agent", "training-agent", "risk-agent",
                                                "compliance-agent"}
    counts = delegations(slow_mesh, execution_id)
    # The completed task was not handed out again; the ones cut off were, once more.
    assert counts.pop(first) == 1, counts
    assert sorted(counts.values()) == [2, 2, 2], counts
    records = audit_records(slow_mesh, execution_id=execution_id)
    assert any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED and "RESUMED" in r.reason_codes
               for r in records)
    assert any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_STATUS_CHANGED and "GRANTS_REVOKED" in r.reason_codes
               for r in records)


def test_a_supervisor_killed_after_the_confirmation_ends_with_the_permit_released(world: MeshConfig) -> None:
    from .test_release_e2e import approved_for_confirmation, permit_status

    mine = approved_for_confirmation(world)
    assert permit_status(world, "WP-10231") == "PENDING_RELEASE"
    user = token(world, roles=("permit-manager",))
    call = supervisor(world).ConfirmAction.future(pb.ConfirmActionRequest(
        user_assertion=user, execution_id=mine.execution_id, confirmation_token=mine.action.confirmation_token,
        capability_id=mine.action.capability_id, resource_id=mine.action.resource_id), timeout=60)
    time.sleep(0.4)  # the confirmation is recorded and the release task is with the (slow) agent
    with restart_supervisor(world):
        ex = wait_terminal(supervisor(world), user, mine.execution_id)
    with pytest.raises(grpc.RpcError):
        call.result()
    assert permit_status(world, "WP-10231") == "RELEASED"
    assert (ex.status, ex.action.state, ex.action.verified) == (
        pb.EXECUTION_STATUS_SUCCEEDED, pb.ACTION_STATE_SUCCEEDED, True), ex.action.reason
    store = IdempotencyStore(world.mesh_home.data / "idempotency.db", owner="test:0:reader")
    try:
        assert store.in_flight() == [], "no key is left in flight"
    finally:
        store.close()
    records = audit_records(world, execution_id=mine.execution_id)
    assert any("RELEASE_RESUMED" in r.reason_codes for r in records)
    assert any("CONFIRMATION_GIVEN" in r.reason_codes for r in records)


def _signer(cfg: MeshConfig) -> grants.GrantSigner:
    key = serialization.load_pem_private_key(cfg.mesh_home.grant_signer_key.read_bytes(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    return grants.GrantSigner(key)


def test_a_cancelled_execution_s_grants_are_refused(slow_mesh: MeshConfig) -> None:
    stub = supervisor(slow_mesh)
    user = token(slow_mesh)
    started = stub.Analyze(pb.AnalyzeRequest(user_assertion=user, tenant_id="acme", detach=True,
                                             request_text=ANALYSIS), timeout=30)
    execution_id = started.execution.execution_id
    ex = stub.CancelExecution(pb.CancelExecutionRequest(user_assertion=user, execution_id=execution_id,
                                                        reason="changed my mind"), timeout=60).execution
    assert ex.status == pb.EXECUTION_STATUS_CANCELLED
    # The grant the work-permit agent got for this execution, as it got it (the log keeps its body).
    signer = _signer(slow_mesh)
    (delegated,) = [r for r in audit_records(slow_mesh, execution_id=execution_id)
                    if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_TASK_DELEGATED]
    logged = next(g for g in delegated.principal.grants
                  if grants.decode(g).audience == str(spiffe.agent("work-permit-agent")))
    grant = common_pb2.SignedTaskGrant(grant=logged.grant, key_id=logged.key_id,
                                       signature=signer.key.sign(logged.grant),
                                       record_signature=logged.record_signature)
    args = struct_pb2.Struct()
    args.update({"permit_id": "WP-10231"})
    channel = transport.secure_channel(peer_address(slow_mesh, "capability"),
                                       client_tls(slow_mesh, spiffe.agent("work-permit-agent")),
                                       spiffe.service("capability"))
    with channel, pytest.raises(grpc.RpcError) as info:
        cap_grpc.CapabilityServiceStub(channel).InvokeCapability(cap_pb2.InvokeCapabilityRequest(
            grant=grant, capability_id="workPermit.get", input=args), timeout=30)
    got = errors.from_rpc_error(info.value)
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "GRANT_REVOKED"), got
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        refused = [r for r in audit_records(slow_mesh, execution_id=execution_id)
                   if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED and r.reason_codes
                   and r.reason_codes[0] == "GRANT_REVOKED"]
        if refused:
            break
        time.sleep(0.2)
    assert refused and refused[0].outcome == audit_pb2.AUDIT_OUTCOME_DENIED


def test_a_retried_analyze_with_the_same_client_request_id_is_the_same_execution(slow_mesh: MeshConfig) -> None:
    stub = supervisor(slow_mesh)
    user = token(slow_mesh)
    request = pb.AnalyzeRequest(user_assertion=user, tenant_id="acme", request_text=ANALYSIS,
                                client_request_id=f"req-{time.monotonic_ns()}")
    # The first call is cut off (the client gives up) but knew the execution id at once.
    first = stub.Analyze.future(request, timeout=60)
    ids: list[str] = []
    thread = threading.Thread(target=lambda: ids.extend(v for k, v in first.initial_metadata()
                                                        if k == "agentmesh-execution-id"))
    thread.start()
    thread.join(timeout=10)
    assert ids and ids[0].startswith("exe-")
    first.cancel()
    again = stub.Analyze(request, timeout=60).execution
    assert again.execution_id == ids[0] and again.client_request_id == request.client_request_id
    assert again.status == pb.EXECUTION_STATUS_SUCCEEDED, again.summary
    assert len(delegations(slow_mesh, ids[0])) == 4, "one execution, four tasks"
