"""Parallelism, cancellation, a specialist dying and a supervisor restart, on a mesh whose
specialists each take 200 ms per task (`specialist_delay_ms`). Tests run in file order:
the last two kill processes of this module's mesh."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh import errors, launcher
from agentmesh.config import MeshConfig
from agentmesh.v1 import common_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb

from .conftest import launched_mesh
from .test_analysis_e2e import analyze, audit_records, supervisor, token

DELAY_MS = 200


@pytest.fixture(scope="module")
def slow_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshConfig]:
    home = tmp_path_factory.mktemp("slow-mesh")
    (home / "config.yaml").write_text(f"specialist_delay_ms: {DELAY_MS}\n")
    with launched_mesh(home) as cfg:
        yield cfg


def _s(ts: Timestamp) -> float:
    return ts.ToNanoseconds() / 1e9


def test_specialists_run_in_parallel(slow_mesh: MeshConfig) -> None:
    analyze(slow_mesh, "Analyze permit WP-10231 and tell me if it can be released")  # warm the channels
    ex = analyze(slow_mesh, "Analyze permit WP-10231 and tell me if it can be released")
    assert ex.status == pb.EXECUTION_STATUS_SUCCEEDED, ex.summary
    first = next(n for n in ex.graph.nodes if n.target_agent_id == "work-permit-agent")
    rest = [n for n in ex.graph.nodes if n is not first]
    assert len(rest) == 3
    # The three second-stage tasks were running at the same time.
    assert max(_s(n.started_at) for n in rest) < min(_s(n.finished_at) for n in rest)
    critical = (_s(first.finished_at) - _s(first.started_at)) + max(_s(n.finished_at) - _s(n.started_at)
                                                                      for n in rest)
    wall = _s(ex.finished_at) - _s(ex.started_at)
    assert critical >= 2 * DELAY_MS / 1000
    assert wall < 1.3 * critical, (wall, critical)


def test_cancellation_stops_running_tasks(slow_mesh: MeshConfig) -> None:
    stub = supervisor(slow_mesh)
    user = token(slow_mesh)
    started = stub.Analyze(pb.AnalyzeRequest(user_assertion=user, tenant_id="acme", detach=True,
                                             request_text="Analyze permit WP-10231 and tell me if it can be released"))
    ex = stub.CancelExecution(pb.CancelExecutionRequest(
        user_assertion=user, execution_id=started.execution.execution_id, reason="changed my mind")).execution
    assert ex.status == pb.EXECUTION_STATUS_CANCELLED
    states = {n.target_agent_id: n.status for n in ex.graph.nodes}
    assert common_pb2.TASK_STATUS_COMPLETED not in {states["training-agent"], states["risk-agent"],
                                                    states["compliance-agent"]}
    assert ex.decision != common_pb2.ANALYSIS_DECISION_RECOMMENDED_FOR_RELEASE


def test_only_the_requester_or_an_admin_cancels_a_running_analysis(slow_mesh: MeshConfig) -> None:
    stub = supervisor(slow_mesh)
    started = stub.Analyze(pb.AnalyzeRequest(user_assertion=token(slow_mesh), tenant_id="acme", detach=True,
                                             request_text="Analyze permit WP-10231 and tell me if it can be released"))
    execution_id = started.execution.execution_id
    # The viewer cannot even read it; the reviewer reads it but may not stop it.
    for user, roles in (("victor", ("viewer",)), ("bob", ("reviewer",))):
        with pytest.raises(grpc.RpcError) as info:
            stub.CancelExecution(pb.CancelExecutionRequest(
                user_assertion=token(slow_mesh, user=user, roles=roles), execution_id=execution_id,
                reason="not mine"), timeout=30)
        got = errors.from_rpc_error(info.value)
        assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED"), (user, got)
    ex = stub.CancelExecution(pb.CancelExecutionRequest(
        user_assertion=token(slow_mesh, user="ada", roles=("admin",)), execution_id=execution_id,
        reason="an admin stops it"), timeout=60).execution
    assert ex.status == pb.EXECUTION_STATUS_CANCELLED
    cancelled = [r for r in audit_records(slow_mesh, execution_id=execution_id)
                 if "CANCEL_REQUESTED" in r.reason_codes]
    assert [r.user_id for r in cancelled] == ["ada"]


def _pid(cfg: MeshConfig, name: str) -> int:
    return next(p.pid for p in launcher.read_state(cfg) if p.name == name)


def test_killed_risk_agent_gives_partial_naming_the_risk_analysis(slow_mesh: MeshConfig) -> None:
    stub = supervisor(slow_mesh)
    user = token(slow_mesh)
    started = stub.Analyze(pb.AnalyzeRequest(user_assertion=user, tenant_id="acme", detach=True,
                                             request_text="Analyze permit WP-10231 and tell me if it can be released"))
    execution_id = started.execution.execution_id
    final = None
    for event in stub.WatchExecution(pb.WatchExecutionRequest(user_assertion=user, execution_id=execution_id),
                                     timeout=60):
        if event.event == pb.EXECUTION_EVENT_TASK_STARTED and event.agent_id == "risk-agent":
            os.kill(_pid(slow_mesh, "risk-agent"), signal.SIGKILL)
        final = event.execution
    assert final is not None
    assert final.status == pb.EXECUTION_STATUS_PARTIAL, final.summary
    assert final.decision == common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE
    assert any(m.text.startswith("risk") for m in final.missing), list(final.missing)
    trail = [r for r in audit_records(slow_mesh, execution_id=execution_id)
             if r.agent_id == "risk-agent" and r.event_type != 0]
    assert any(r.outcome in (3, 2, 5) and "FAILED" in r.reason_codes for r in trail), trail


def test_supervisor_restart_resumes_the_inflight_execution(slow_mesh: MeshConfig) -> None:
    from .test_durable_execution import restart_supervisor, wait_terminal

    stub = supervisor(slow_mesh)
    user = token(slow_mesh)
    started = stub.Analyze(pb.AnalyzeRequest(user_assertion=user, tenant_id="acme", detach=True,
                                             request_text="Analyze permit WP-10232 and tell me if it can be released"))
    execution_id = started.execution.execution_id
    with restart_supervisor(slow_mesh, keep=False) as address:
        ex = wait_terminal(supervisor_at(slow_mesh, address), user, execution_id)
        assert ex.execution_id == execution_id
        assert not ex.reason.startswith("SUPERVISOR_RESTARTED"), ex.reason
        assert ex.decision == common_pb2.ANALYSIS_DECISION_NOT_RECOMMENDED, ex.summary


def supervisor_at(cfg: MeshConfig, address: str) -> Any:
    from agentmesh import spiffe, transport
    from agentmesh.identities import PLATFORM_CLI
    from agentmesh.v1 import supervisor_service_pb2_grpc as pb_grpc

    from .conftest import client_tls

    return pb_grpc.SupervisorServiceStub(transport.secure_channel(address, client_tls(cfg, PLATFORM_CLI),
                                                                  spiffe.service("supervisor")))
