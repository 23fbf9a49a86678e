"""The mTLS transport refuses every wrong caller with the exact status.

A real gRPC server is started in-process on port 0 with certificates made for
this test session; clients connect over loopback.
"""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509

from agentmesh import errors, spiffe, transport
from agentmesh.access import AccessTable
from agentmesh.config import MeshConfig
from agentmesh.pki import CertificateAuthority, CertPaths, leaf_paths
from agentmesh.unimplemented import unimplemented_servicer
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc

POLICY = spiffe.service("policy")
CAPABILITY = spiffe.service("capability")
AGENT = spiffe.agent("training-agent")
INFO = "/agentmesh.v1.PolicyService/GetPolicyInfo"


class SlowPolicy(unimplemented_servicer(policy_grpc.PolicyServiceServicer)):  # type: ignore[misc]
    """GetPolicyInfo answers; ListKillSwitches hangs, to exercise deadlines."""

    def GetPolicyInfo(self, request: Any, context: Any) -> Any:
        return policy_pb2.GetPolicyInfoResponse(policy_version="v-test")

    def ListKillSwitches(self, request: Any, context: Any) -> Any:
        time.sleep(3)
        return policy_pb2.ListKillSwitchesResponse()


@dataclass
class RunningServer:
    address: str
    denied: list[transport.DeniedCall]
    paths: CertPaths
    ca: CertificateAuthority


ACCESS = AccessTable.parse(
    {
        "rules": [
            {"methods": ["/grpc.health.v1.Health/*"], "callers": ["spiffe://agentmesh.local/*/*"]},
            {"methods": [INFO, "/agentmesh.v1.PolicyService/ListKillSwitches",
                         "/agentmesh.v1.PolicyService/Authorize"],
             "callers": [str(CAPABILITY)]},
        ]
    }
)


@pytest.fixture()
def server(mesh_config: MeshConfig, tmp_path: Path) -> Iterator[RunningServer]:
    ca = CertificateAuthority.load(mesh_config.mesh_home.certs)
    # A private copy of the server's certificate, so rotation tests don't touch the session's.
    paths = ca.issue(POLICY, paths=CertPaths(tmp_path / "policy.pem", tmp_path / "policy.key"))
    denied: list[transport.DeniedCall] = []
    srv = transport.create_server(ACCESS, on_denied=denied.append)
    policy_grpc.add_PolicyServiceServicer_to_server(SlowPolicy(), srv)
    transport.add_health_and_reflection(srv, ["agentmesh.v1.PolicyService"])
    port = transport.bind(srv, "127.0.0.1", 0, transport.TlsFiles.of(paths, ca.bundle_path))
    srv.start()
    try:
        yield RunningServer(f"127.0.0.1:{port}", denied, paths, ca)
    finally:
        srv.stop(grace=None)


def _client(mesh_config: MeshConfig, identity: spiffe.SpiffeId, address: str,
            timeout_s: float = 5.0, paths: CertPaths | None = None) -> policy_grpc.PolicyServiceStub:
    files = transport.TlsFiles.of(paths or leaf_paths(mesh_config.mesh_home.certs, identity),
                                  mesh_config.mesh_home.certs / "ca.pem")
    return policy_grpc.PolicyServiceStub(
        transport.secure_channel(address, files, POLICY, default_timeout_s=timeout_s))


def _code(call: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code()  # type: ignore[no-any-return]


def test_allowed_identity_gets_an_answer(server: RunningServer, mesh_config: MeshConfig) -> None:
    stub = _client(mesh_config, CAPABILITY, server.address)
    assert stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest()).policy_version == "v-test"
    assert server.denied == []


def test_plaintext_client_is_refused(server: RunningServer) -> None:
    stub = policy_grpc.PolicyServiceStub(grpc.insecure_channel(server.address))
    assert _code(lambda: stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest(), timeout=5)) == (
        grpc.StatusCode.UNAVAILABLE)


def test_tls_client_without_certificate_is_refused(server: RunningServer, mesh_config: MeshConfig) -> None:
    creds = grpc.ssl_channel_credentials(root_certificates=server.ca.bundle_path.read_bytes())
    channel = grpc.secure_channel(server.address, creds,
                                  options=[("grpc.ssl_target_name_override", POLICY.dns_name)])
    stub = policy_grpc.PolicyServiceStub(channel)
    assert _code(lambda: stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest(), timeout=5)) == (
        grpc.StatusCode.UNAVAILABLE)


def test_certificate_from_another_ca_is_refused(
    server: RunningServer, mesh_config: MeshConfig, tmp_path: Path
) -> None:
    rogue = CertificateAuthority.init(tmp_path / "rogue")
    paths = rogue.issue(CAPABILITY)
    stub = _client(mesh_config, CAPABILITY, server.address, paths=paths)
    assert _code(lambda: stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest())) == (
        grpc.StatusCode.UNAVAILABLE)


def test_certificate_with_two_uri_sans_is_unauthenticated(
    server: RunningServer, mesh_config: MeshConfig, tmp_path: Path
) -> None:
    paths = server.ca.issue(
        CAPABILITY, extra_uri_sans=("spiffe://agentmesh.local/svc/supervisor",),
        paths=CertPaths(tmp_path / "two.pem", tmp_path / "two.key"))
    stub = _client(mesh_config, CAPABILITY, server.address, paths=paths)
    with pytest.raises(grpc.RpcError) as info:
        stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest())
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    detail = errors.error_info(info.value)
    assert detail is not None and detail.reason == "NO_PEER_IDENTITY"
    assert [d.code for d in server.denied] == [grpc.StatusCode.UNAUTHENTICATED]


def test_expired_certificate_is_refused(
    server: RunningServer, mesh_config: MeshConfig, tmp_path: Path
) -> None:
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=2)
    paths = server.ca.issue(CAPABILITY, not_before=start, validity=dt.timedelta(hours=1),
                            paths=CertPaths(tmp_path / "old.pem", tmp_path / "old.key"))
    stub = _client(mesh_config, CAPABILITY, server.address, paths=paths)
    assert _code(lambda: stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest())) == (
        grpc.StatusCode.UNAVAILABLE)


def test_identity_not_in_caller_table_is_permission_denied(
    server: RunningServer, mesh_config: MeshConfig
) -> None:
    stub = _client(mesh_config, AGENT, server.address)
    with pytest.raises(grpc.RpcError) as info:
        stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest())
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    detail = errors.error_info(info.value)
    assert detail is not None
    assert (detail.reason, detail.domain) == ("CALLER_NOT_ALLOWED", errors.DOMAIN)
    assert detail.metadata["caller"] == str(AGENT)
    assert [(d.method, d.caller) for d in server.denied] == [(INFO, str(AGENT))]


def test_method_not_in_table_is_denied_even_to_known_callers(
    server: RunningServer, mesh_config: MeshConfig
) -> None:
    stub = _client(mesh_config, CAPABILITY, server.address)
    assert _code(lambda: stub.SetKillSwitch(policy_pb2.SetKillSwitchRequest())) == (
        grpc.StatusCode.PERMISSION_DENIED)


def test_unimplemented_rpc_answers_unimplemented(server: RunningServer, mesh_config: MeshConfig) -> None:
    stub = _client(mesh_config, CAPABILITY, server.address)
    with pytest.raises(grpc.RpcError) as info:
        stub.Authorize(policy_pb2.AuthorizeRequest())
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    detail = errors.error_info(info.value)
    assert detail is not None and detail.reason == "NOT_IMPLEMENTED"


def test_every_outgoing_call_gets_a_deadline(server: RunningServer, mesh_config: MeshConfig) -> None:
    stub = _client(mesh_config, CAPABILITY, server.address, timeout_s=0.3)
    assert _code(lambda: stub.ListKillSwitches(policy_pb2.ListKillSwitchesRequest())) == (
        grpc.StatusCode.DEADLINE_EXCEEDED)


def test_client_maps_status_back_to_typed_error(server: RunningServer, mesh_config: MeshConfig) -> None:
    stub = _client(mesh_config, AGENT, server.address)
    with pytest.raises(grpc.RpcError) as info:
        stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest())
    err = errors.from_rpc_error(info.value)
    assert isinstance(err, errors.PermissionDenied) and err.reason == "CALLER_NOT_ALLOWED"


def _served_serial(address: str, mesh_config: MeshConfig) -> int:
    host, port = address.rsplit(":", 1)
    client = leaf_paths(mesh_config.mesh_home.certs, CAPABILITY)
    ctx = ssl.create_default_context(cafile=str(mesh_config.mesh_home.certs / "ca.pem"))
    ctx.load_cert_chain(str(client.cert), str(client.key))
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection((host, int(port)), timeout=5) as sock, ctx.wrap_socket(
        sock, server_hostname=POLICY.dns_name
    ) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_reissued_certificate_is_served_without_restart(
    server: RunningServer, mesh_config: MeshConfig
) -> None:
    before = _served_serial(server.address, mesh_config)
    assert before == x509.load_pem_x509_certificate(server.paths.cert.read_bytes()).serial_number
    time.sleep(0.01)  # a distinct mtime on coarse filesystems
    server.ca.issue(POLICY, paths=server.paths)
    after = _served_serial(server.address, mesh_config)
    assert after != before
    assert after == x509.load_pem_x509_certificate(server.paths.cert.read_bytes()).serial_number
    # And gRPC clients still get answers over new connections.
    stub = _client(mesh_config, CAPABILITY, server.address)
    assert stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest()).policy_version == "v-test"


def test_spiffe_ids_parse_strictly() -> None:
    assert spiffe.parse("spiffe://agentmesh.local/agent/training-agent") == AGENT
    for bad in ["spiffe://other.domain/svc/policy", "spiffe://agentmesh.local/svc",
                "spiffe://agentmesh.local/user/x", "https://agentmesh.local/svc/policy",
                "spiffe://agentmesh.local/svc/policy/extra"]:
        with pytest.raises(spiffe.InvalidSpiffeId):
            spiffe.parse(bad)
    assert spiffe.matches(str(AGENT), "spiffe://agentmesh.local/agent/*")
    assert not spiffe.matches(str(AGENT), "spiffe://agentmesh.local/svc/*")


