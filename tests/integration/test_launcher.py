"""`agentmesh up / status / down` over real processes, and start-up failures."""

from __future__ import annotations

import json
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from agentmesh import errors, launcher, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import OPERATOR, PLATFORM_CLI, workloads
from agentmesh.pki import CertificateAuthority, CertPaths
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2
from agentmesh.v1 import supervisor_service_pb2_grpc as sup_grpc

from ..conftest import Forge
from .conftest import agentmesh_cli, client_tls, lms_admin_headers, peer_address

EXPECTED = {"audit", "policy", "capability", "model", "supervisor", "work-permit-agent", "training-agent",
            "risk-agent", "compliance-agent", "employee-agent", "medical-agent"}


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
    """Also: no workload needs the CA directory. It is moved away before `up`, and every role serves."""
    home = tmp_path / "home"
    assert agentmesh_cli(home, "certs", "init").returncode == 0
    shutil.move(home / "ca", tmp_path / "ca-offline")
    up = agentmesh_cli(home, "up", "--detach", "--ports-auto", "--json")
    assert up.returncode == 0, up.stderr
    from agentmesh import config

    cfg = config.load(home=str(home), environ={})
    status = agentmesh_cli(home, "status", "--json")
    assert status.returncode == 0, status.stdout
    assert not any((home / "ca").iterdir())
    pids = [p.pid for p in launcher.read_state(cfg)]
    assert len(pids) >= 8
    loop = launcher.read_supervisor(cfg)
    assert loop is not None and loop.mode == "detached" and launcher.pid_alive(loop.pid)
    down = agentmesh_cli(home, "down")
    assert down.returncode == 0, down.stderr
    assert not any(launcher.pid_alive(pid) for pid in [*pids, loop.pid])  # the supervising loop too
    assert agentmesh_cli(home, "status").returncode == 1
    assert not (home / "run" / "mesh.json").exists()


def test_a_role_failing_at_first_start_fails_up_with_its_own_fresh_lines(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    (home / "logs" / "audit.log").write_text("a line of an earlier run\n")
    (home / "data").mkdir()
    (home / "data" / "audit.db").mkdir()  # the log cannot be opened
    up = agentmesh_cli(home, "up", "--detach", "--ports-auto")
    assert up.returncode == 1
    assert "audit exited with code 2" in up.stderr and "audit.db" in up.stderr, up.stderr
    assert "earlier run" not in up.stderr
    assert agentmesh_cli(home, "status").returncode == 1
    from agentmesh import config

    cfg = config.load(home=str(home), environ={})
    assert launcher.read_state(cfg) == [] and launcher.read_supervisor(cfg) is None


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
    assert len(lines) == 1 and "workloads/svc-policy/cert.pem" in lines[0]


def test_port_in_use_exits_naming_the_port(mesh: MeshConfig) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = _run_role(mesh.home, "--port", str(port))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(port) in lines[0]


# --- keys and identities --------------------------------------------------------

def test_each_workload_holds_only_its_own_files(mesh: MeshConfig) -> None:
    home = mesh.mesh_home
    assert {p.name for p in home.ca.iterdir()} == {"ca.key", "idp.key"}
    assert not any(b"PRIVATE KEY" in p.read_bytes() for p in home.trust.iterdir())
    own = {"svc-supervisor": {"grant-signer.key"},
           "svc-audit": {"audit-checkpoint-ed25519.pem", "audit-checkpoint-ed25519.pub.pem"}}
    for w in workloads(mesh):
        folder = home.workload_dir(w.identity)
        assert {p.name for p in folder.iterdir()} == {"cert.pem", "key.pem"} | own.get(folder.name, set())
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    token = home.lms_admin_token
    assert {p.name for p in token.parent.iterdir()} == {"admin-token"}
    assert stat.S_IMODE(token.stat().st_mode) == 0o600


def test_sandbox_lms_admin_needs_the_token(mesh: MeshConfig) -> None:
    url = next(p.address for p in launcher.read_state(mesh) if p.name == "lms")
    with httpx.Client(base_url=url, timeout=5) as http:
        assert http.get("/admin/faults").status_code == 401
        assert http.post("/admin/faults", json={"mode": "5xx", "worker_id": "W-NOBODY"}).status_code == 401
        assert http.delete("/admin/faults", headers={"Authorization": "Bearer guess"}).status_code == 401
        assert http.get("/admin/faults", headers=lms_admin_headers(mesh)).json()["admin"] == []
    # The token never appears in a command line.
    lms_pid = next(p.pid for p in launcher.read_state(mesh) if p.name == "lms")
    cmdline = Path(f"/proc/{lms_pid}/cmdline").read_bytes().decode()
    assert launcher.lms_admin_token(mesh) not in cmdline


def _operator_calls(channel: grpc.Channel) -> list[Any]:
    policy = policy_grpc.PolicyServiceStub(channel)
    return [
        lambda: policy.ListKillSwitches(policy_pb2.ListKillSwitchesRequest()),
        lambda: policy.SetKillSwitch(policy_pb2.SetKillSwitchRequest(
            scope="KILL_SWITCH_SCOPE_CAPABILITY", target="no.such-capability", enabled=False, reason="probe")),
    ]


def test_an_operator_lookalike_is_refused_operator_rpcs(mesh: MeshConfig, tmp_path: Path) -> None:
    """A certificate freshly minted with the mesh CA for client/operator-evil is no operator."""
    home = mesh.mesh_home
    evil = spiffe.client("operator-evil")
    ca = CertificateAuthority.load(home.ca, home.trust_bundle)
    paths = ca.issue(evil, CertPaths(tmp_path / "evil.pem", tmp_path / "evil.key"))
    tls = transport.TlsFiles.of(paths, home.trust_bundle)
    with transport.secure_channel(peer_address(mesh, "policy"), tls, spiffe.service("policy")) as channel:
        for call in _operator_calls(channel):
            with pytest.raises(grpc.RpcError) as info:
                call()
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
            detail = errors.error_info(info.value)
            assert detail is not None and detail.reason == "CALLER_NOT_ALLOWED"
    with transport.secure_channel(peer_address(mesh, "audit"), tls, spiffe.service("audit")) as channel, \
            pytest.raises(grpc.RpcError) as info:
        list(audit_grpc.AuditServiceStub(channel).QueryRecords(audit_pb2.QueryRecordsRequest(execution_id="x")))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # The real operator is one.
    with transport.secure_channel(peer_address(mesh, "policy"), client_tls(mesh, OPERATOR),
                                  spiffe.service("policy")) as channel:
        policy_grpc.PolicyServiceStub(channel).ListKillSwitches(policy_pb2.ListKillSwitchesRequest())


def test_an_operator_certificate_from_a_sub_ca_is_refused(mesh: MeshConfig, tmp_path: Path, forge: Forge) -> None:
    home = mesh.mesh_home
    ca = CertificateAuthority.load(home.ca, home.trust_bundle)
    paths = forge.leaf_via_sub_ca(ca, OPERATOR, CertPaths(tmp_path / "op.pem", tmp_path / "op.key"))
    tls = transport.TlsFiles.of(paths, home.trust_bundle)
    with transport.secure_channel(peer_address(mesh, "policy"), tls, spiffe.service("policy")) as channel:
        for call in _operator_calls(channel):
            with pytest.raises(grpc.RpcError) as info:
                call()
            assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAUTHENTICATED)
