"""`agentmesh up / status / down` over real processes, and start-up failures."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from agentmesh import errors, launcher, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import OPERATOR, PLATFORM_CLI
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2
from agentmesh.v1 import supervisor_service_pb2_grpc as sup_grpc

from .conftest import agentmesh_cli, client_tls, peer_address

EXPECTED = {"audit", "policy", "capability", "supervisor", "work-permit-agent", "training-agent",
            "risk-agent", "compliance-agent"}


def test_up_starts_every_role_serving_over_mtls(mesh: MeshConfig) -> None:
    result = agentmesh_cli(mesh.home, "status", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    grpc_rows = [r for r in rows if r["kind"] == "grpc"]
    assert {r["name"] for r in grpc_rows} == EXPECTED
    assert all(r["health"] == "SERVING" and r["alive"] for r in grpc_rows)
    assert len({r["pid"] for r in rows}) == len(rows)
    for r in grpc_rows:
        spiffe.parse(r["spiffe_id"])


def test_supervisor_needs_a_user_assertion(mesh: MeshConfig) -> None:
    channel = transport.secure_channel(peer_address(mesh, "supervisor"), client_tls(mesh, PLATFORM_CLI),
                                       spiffe.service("supervisor"))
    with channel, pytest.raises(grpc.RpcError) as info:
        sup_grpc.SupervisorServiceStub(channel).CancelExecution(sup_pb2.CancelExecutionRequest())
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    detail = errors.error_info(info.value)
    assert detail is not None and detail.metadata["field"] == "user_assertion"


def test_operator_is_not_a_specialist_caller(mesh: MeshConfig) -> None:
    from agentmesh.v1 import specialist_service_pb2 as spec_pb2
    from agentmesh.v1 import specialist_service_pb2_grpc as spec_grpc

    channel = transport.secure_channel(peer_address(mesh, "training-agent"), client_tls(mesh, OPERATOR),
                                       spiffe.agent("training-agent"))
    with channel, pytest.raises(grpc.RpcError) as info:
        spec_grpc.SpecialistServiceStub(channel).DescribeAgent(spec_pb2.DescribeAgentRequest())
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    detail = errors.error_info(info.value)
    assert detail is not None and detail.reason == "CALLER_NOT_ALLOWED"


def test_down_leaves_no_process_behind(tmp_path: Path) -> None:
    home = tmp_path / "home"
    up = agentmesh_cli(home, "up", "--detach", "--ports-auto", "--json")
    assert up.returncode == 0, up.stderr
    from agentmesh import config

    cfg = config.load(home=str(home), environ={})
    pids = [p.pid for p in launcher.read_state(cfg)]
    assert len(pids) >= 8
    down = agentmesh_cli(home, "down")
    assert down.returncode == 0, down.stderr
    assert not any(launcher.pid_alive(pid) for pid in pids)
    assert agentmesh_cli(home, "status").returncode == 1


def _run_role(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "policy_svc", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=60)


def test_bad_config_exits_naming_the_field(mesh: MeshConfig, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("call_timeout_s: -3\n")
    result = _run_role(mesh.home, "--config", str(bad), "--port", "0")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "call_timeout_s" in lines[0]


def test_unknown_config_field_is_refused(mesh: MeshConfig, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("colour: blue\n")
    result = _run_role(mesh.home, "--config", str(bad), "--port", "0")
    assert result.returncode == 2 and "colour" in result.stderr


def test_missing_certificate_exits_naming_the_file(tmp_path: Path) -> None:
    result = _run_role(tmp_path / "empty-home", "--port", "0")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "svc-policy.pem" in lines[0]


def test_port_in_use_exits_naming_the_port(mesh: MeshConfig) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = _run_role(mesh.home, "--port", str(port))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(port) in lines[0]
