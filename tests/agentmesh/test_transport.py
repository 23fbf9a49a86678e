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
from cryptography.hazmat.primitives import hashes

from agentmesh import errors, pki, spiffe, transport
from agentmesh.access import AccessTable
from agentmesh.config import MeshConfig
from agentmesh.pki import CertificateAuthority, CertPaths, leaf_paths
from agentmesh.unimplemented import unimplemented_servicer
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc

from ..conftest import Forge

POLICY = spiffe.service("policy")
CAPABILITY = spiffe.service("capability")
AGENT = spiffe.agent("training-agent")
INFO = "/agentmesh.v1.PolicyService/GetPolicyInfo"


class SlowPolicy(unimplemented_servicer(policy_grpc.PolicyServiceServicer)):  # type: ignore[misc]
    """GetPolicyInfo answers (noting the caller's certificate); ListKillSwitches hangs, to exercise deadlines."""

    client_certs: list[bytes] = []

    def GetPolicyInfo(self, request: Any, context: Any) -> Any:
        SlowPolicy.client_certs.append((context.auth_context() or {}).get("x509_pem_cert", [b""])[0])
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
    ca = CertificateAuthority.load(mesh_config.mesh_home.ca, mesh_config.mesh_home.trust_bundle)
    # A private copy of the server's certificate, so rotation tests don't touch the session's.
    paths = ca.issue(POLICY, CertPaths(tmp_path / "policy.pem", tmp_path / "policy.key"))
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
    files = transport.TlsFiles.of(paths or leaf_paths(mesh_config.mesh_home.workloads, identity),
                                  mesh_config.mesh_home.trust_bundle)
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
    paths = rogue.issue(CAPABILITY, CertPaths(tmp_path / "rogue.pem", tmp_path / "rogue.key"))
    stub = _client(mesh_config, CAPABILITY, server.address, paths=paths)
    assert _code(lambda: stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest())) == (
        grpc.StatusCode.UNAVAILABLE)


def test_certificate_with_two_uri_sans_is_unauthenticated(
    server: RunningServer, mesh_config: MeshConfig, tmp_path: Path
) -> None:
    paths = server.ca.issue_unchecked(
        CAPABILITY, CertPaths(tmp_path / "two.pem", tmp_path / "two.key"),
        extra_uri_sans=("spiffe://agentmesh.local/svc/supervisor",))
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
    paths = server.ca.issue_unchecked(CAPABILITY, CertPaths(tmp_path / "old.pem", tmp_path / "old.key"),
                                      not_before=start, validity=dt.timedelta(hours=1))
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
    client = leaf_paths(mesh_config.mesh_home.workloads, CAPABILITY)
    ctx = ssl.create_default_context(cafile=str(mesh_config.mesh_home.trust_bundle))
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
    server.ca.issue(POLICY, server.paths)
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
                "spiffe://agentmesh.local/svc/policy/extra", "spiffe://agentmesh.local/client/operator\n"]:
        with pytest.raises(spiffe.InvalidSpiffeId):
            spiffe.parse(bad)
    assert spiffe.matches(str(AGENT), "spiffe://agentmesh.local/agent/*")
    assert not spiffe.matches(str(AGENT), "spiffe://agentmesh.local/svc/*")




# --- path length: a leaf issued through an intermediate is never a mesh identity ---

def test_mesh_ca_issues_leaves_only(server: RunningServer) -> None:
    constraints = server.ca.cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert (constraints.ca, constraints.path_length) == (True, 0)
    leaf = x509.load_pem_x509_certificate(server.paths.cert.read_bytes())
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False


@pytest.mark.parametrize("same_name", [False, True], ids=["sub-ca", "self-issued-sub-ca"])
def test_leaf_from_a_sub_ca_is_refused(
    server: RunningServer, mesh_config: MeshConfig, tmp_path: Path, same_name: bool, forge: Forge
) -> None:
    paths = forge.leaf_via_sub_ca(server.ca, CAPABILITY, CertPaths(tmp_path / "via-sub.pem", tmp_path / "via-sub.key"),
                                  same_name=same_name)
    stub = _client(mesh_config, CAPABILITY, server.address, paths=paths)
    with pytest.raises(grpc.RpcError) as info:
        stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest())
    # Either the handshake fails or the interceptor finds no mesh identity on the connection.
    assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAUTHENTICATED)
    if info.value.code() == grpc.StatusCode.UNAUTHENTICATED:
        assert [(d.code, d.caller) for d in server.denied] == [(grpc.StatusCode.UNAUTHENTICATED, "")]


def _auth_context(leaf: bytes, chain: bytes = b"") -> dict[str, list[bytes]]:
    return {"x509_pem_cert": [leaf], **({"x509_pem_cert_chain": [chain]} if chain else {})}


def test_peer_chain_problem_finds_intermediates(server: RunningServer, tmp_path: Path, forge: Forge) -> None:
    leaf = server.paths.cert.read_bytes()
    root = server.ca.bundle_path.read_bytes()
    assert pki.peer_chain_problem(_auth_context(leaf)) is None
    assert pki.peer_chain_problem(_auth_context(leaf, root)) is None  # a copy of the root may accompany it
    for same_name in (False, True):
        via = forge.leaf_via_sub_ca(server.ca, CAPABILITY, CertPaths(tmp_path / f"v{same_name}.pem",
                                                                     tmp_path / f"v{same_name}.key"),
                                    same_name=same_name)
        leaf_pem, sub_pem = forge.split_chain(via.cert.read_bytes())
        problem = pki.peer_chain_problem(_auth_context(leaf_pem, sub_pem))
        assert problem is not None and "intermediate" in problem
        # A CA certificate presented as the peer's own is refused too.
        assert "CA certificate" in (pki.peer_chain_problem(_auth_context(sub_pem)) or "")
    assert pki.peer_chain_problem({}) is not None


def test_peer_chain_check_over_a_real_server(
    server: RunningServer, mesh_config: MeshConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forge: Forge
) -> None:
    """The check the transport needs, applied over a real server: the sub-CA leaf is UNAUTHENTICATED,
    the mesh's own leaves still answer."""
    original = transport.peer_identity

    def checked(context: grpc.ServicerContext) -> str | None:
        if pki.peer_chain_problem(context.auth_context() or {}) is not None:
            return None
        return original(context)

    monkeypatch.setattr(transport, "peer_identity", checked)
    paths = forge.leaf_via_sub_ca(server.ca, CAPABILITY, CertPaths(tmp_path / "s.pem", tmp_path / "s.key"))
    stub = _client(mesh_config, CAPABILITY, server.address, paths=paths)
    with pytest.raises(grpc.RpcError) as info:
        stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest())
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _client(mesh_config, CAPABILITY, server.address).GetPolicyInfo(
        policy_pb2.GetPolicyInfoRequest()).policy_version == "v-test"


@pytest.mark.parametrize("validity", [dt.timedelta(0), dt.timedelta(hours=-1), pki.MAX_LEAF_VALIDITY * 2])
def test_ca_refuses_to_issue_an_invalid_leaf(server: RunningServer, tmp_path: Path, validity: dt.timedelta) -> None:
    paths = CertPaths(tmp_path / "x.pem", tmp_path / "x.key")
    with pytest.raises(pki.PkiError, match="validity"):
        server.ca.issue(CAPABILITY, paths, validity=validity)
    assert not paths.cert.exists() and not paths.key.exists()


def test_ca_refuses_to_issue_when_itself_expired_or_outlived(server: RunningServer, tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)

    def ca_valid(start: dt.datetime, end: dt.datetime) -> CertificateAuthority:
        cert = (x509.CertificateBuilder().subject_name(server.ca.cert.subject).issuer_name(server.ca.cert.subject)
                .public_key(server.ca.key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .sign(server.ca.key, hashes.SHA256()))
        return CertificateAuthority(server.ca.key_path, server.ca.bundle_path, cert, server.ca.key)

    paths = CertPaths(tmp_path / "x.pem", tmp_path / "x.key")
    with pytest.raises(pki.PkiError, match="not valid now"):
        ca_valid(now - dt.timedelta(days=2), now - dt.timedelta(days=1)).issue(CAPABILITY, paths)
    with pytest.raises(pki.PkiError, match="not valid now"):
        ca_valid(now + dt.timedelta(days=1), now + dt.timedelta(days=2)).issue(CAPABILITY, paths)
    with pytest.raises(pki.PkiError, match="outlive"):
        ca_valid(now - dt.timedelta(days=1), now + dt.timedelta(hours=1)).issue(CAPABILITY, paths)
    assert not paths.cert.exists()


# --- rotation: servers and clients follow their certificate files ---

def _serial(pem: bytes) -> int:
    return x509.load_pem_x509_certificate(pem).serial_number


def _expired(ca: CertificateAuthority, identity: spiffe.SpiffeId, paths: CertPaths) -> CertPaths:
    return ca.issue_unchecked(identity, paths, not_before=dt.datetime.now(dt.UTC) - dt.timedelta(days=2),
                              validity=dt.timedelta(hours=1))


def test_an_issued_leaf_is_valid_now_even_when_short(server: RunningServer, tmp_path: Path) -> None:
    """Leaves are backdated a tenth of their validity (at most 5 min): a 20 s leaf is not born expired."""
    now = dt.datetime.now(dt.UTC)
    for validity in (dt.timedelta(seconds=20), dt.timedelta(hours=24)):
        paths = server.ca.issue(CAPABILITY, CertPaths(tmp_path / "s.pem", tmp_path / "s.key"), validity=validity)
        v = pki.validity_of(paths.cert.read_bytes())
        assert v.problem() is None
        assert v.not_after >= now + validity - dt.timedelta(seconds=1)
        assert now - v.not_before <= min(pki.MAX_BACKDATE, validity / 10) + dt.timedelta(seconds=2)
        assert v.not_before < v.renew_at < v.warn_at < v.not_after
        pki.check_leaf(paths, paths.cert.read_bytes(), paths.key.read_bytes())


def test_check_leaf_names_the_file_and_its_validity(server: RunningServer, tmp_path: Path) -> None:
    paths = _expired(server.ca, CAPABILITY, CertPaths(tmp_path / "old.pem", tmp_path / "old.key"))
    with pytest.raises(pki.LeafNotValidNow, match=r"old\.pem: the certificate expired at .* \(valid .* to .*\)"):
        pki.check_leaf(paths, paths.cert.read_bytes(), paths.key.read_bytes())
    later = server.ca.issue_unchecked(CAPABILITY, CertPaths(tmp_path / "later.pem", tmp_path / "later.key"),
                                      not_before=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    with pytest.raises(pki.LeafNotValidNow, match="not valid before"):
        pki.check_leaf(later, later.cert.read_bytes(), later.key.read_bytes())
    valid = server.ca.issue(CAPABILITY, CertPaths(tmp_path / "v.pem", tmp_path / "v.key"))
    with pytest.raises(pki.KeyMismatch):
        pki.check_leaf(valid, valid.cert.read_bytes(), paths.key.read_bytes())


def test_a_server_refuses_to_start_with_an_expired_leaf(server: RunningServer, tmp_path: Path) -> None:
    paths = _expired(server.ca, POLICY, CertPaths(tmp_path / "p.pem", tmp_path / "p.key"))
    with pytest.raises(pki.LeafNotValidNow, match="p.pem: the certificate expired"):
        transport.server_credentials(transport.TlsFiles.of(paths, server.ca.bundle_path))


def test_a_server_keeps_serving_its_valid_leaf_when_the_file_turns_expired(
    server: RunningServer, mesh_config: MeshConfig, caplog: pytest.LogCaptureFixture
) -> None:
    served = _served_serial(server.address, mesh_config)
    time.sleep(0.01)
    _expired(server.ca, POLICY, server.paths)
    with caplog.at_level("ERROR", logger="agentmesh.transport"):
        assert _served_serial(server.address, mesh_config) == served
        assert _served_serial(server.address, mesh_config) == served
    refusals = [r for r in caplog.records if "REFUSING to serve" in r.getMessage()]
    assert len(refusals) == 1 and "expired at" in refusals[0].getMessage()  # loudly, once per file version
    stub = _client(mesh_config, CAPABILITY, server.address)
    assert stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest()).policy_version == "v-test"
    # A valid one written next is served from the next handshake on.
    time.sleep(0.01)
    server.ca.issue(POLICY, server.paths)
    assert _served_serial(server.address, mesh_config) == _serial(server.paths.cert.read_bytes())


def _reloading_client(mesh_config: MeshConfig, address: str, paths: CertPaths,
                      monkeypatch: pytest.MonkeyPatch, every_s: float = 0.2,
                      ) -> tuple[transport.ReloadingChannel, policy_grpc.PolicyServiceStub]:
    monkeypatch.setattr(transport, "RELOAD_CHECK_S", every_s)
    files = transport.TlsFiles.of(paths, mesh_config.mesh_home.trust_bundle)
    channel = transport.secure_channel(address, files, POLICY)
    assert isinstance(channel, transport.ReloadingChannel)
    return channel, policy_grpc.PolicyServiceStub(channel)


def test_a_channel_takes_up_a_renewed_client_leaf_without_being_rebuilt(
    server: RunningServer, mesh_config: MeshConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = server.ca.issue(CAPABILITY, CertPaths(tmp_path / "c.pem", tmp_path / "c.key"))
    channel, stub = _reloading_client(mesh_config, server.address, paths, monkeypatch)
    SlowPolicy.client_certs.clear()
    stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest())
    first = _serial(paths.cert.read_bytes())
    assert [_serial(c) for c in SlowPolicy.client_certs] == [first]
    server.ca.issue(CAPABILITY, paths)  # renewed: new key, new serial
    renewed = _serial(paths.cert.read_bytes())
    time.sleep(0.25)
    # The same stub (made once, like every service's) now calls over a fresh connection with the new leaf.
    stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest())
    assert channel.reloads == 1
    assert _serial(SlowPolicy.client_certs[-1]) == renewed
    # An expired leaf written over it is not used: the current one stays.
    _expired(server.ca, CAPABILITY, paths)
    time.sleep(0.25)
    stub.GetPolicyInfo(policy_pb2.GetPolicyInfoRequest())
    assert channel.reloads == 1 and _serial(SlowPolicy.client_certs[-1]) == renewed
    channel.close()


class _FakeCall:
    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def add_done_callback(self, fn: Any) -> None:
        self.callbacks.append(fn)

    def finish(self) -> None:
        for fn in self.callbacks:
            fn(self)


class _FakeChannel:
    def __init__(self) -> None:
        self.closed = False
        self.callables = 0
        self.calls: list[_FakeCall] = []

    def unary_unary(self, *args: Any, **kw: Any) -> Any:
        self.callables += 1
        return lambda request, **_: ("answer", request)

    def unary_stream(self, *args: Any, **kw: Any) -> Any:
        self.callables += 1

        def start(request: Any, **_: Any) -> _FakeCall:
            call = _FakeCall()
            self.calls.append(call)
            return call
        return start

    def close(self) -> None:
        self.closed = True


def test_the_reloading_channel_costs_a_clock_read_when_nothing_changed(
    server: RunningServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = server.ca.issue(CAPABILITY, CertPaths(tmp_path / "c.pem", tmp_path / "c.key"))
    files = transport.TlsFiles.of(paths, server.ca.bundle_path)
    built: list[_FakeChannel] = []

    def build(cert: bytes, key: bytes, ca: bytes) -> Any:
        built.append(_FakeChannel())
        return built[-1]

    stamps = []
    real_stamp = transport.TlsFiles.stamp
    monkeypatch.setattr(transport.TlsFiles, "stamp", lambda self: stamps.append(1) or real_stamp(self))
    channel = transport.ReloadingChannel(files, build, check_every_s=3600)
    call = channel.unary_unary("/x.Y/Z")
    stamps.clear()
    for i in range(20_000):
        assert call(i) == ("answer", i)
    # What it costs is measured by the benchmarks; here: no stat, no rebuild, one callable.
    assert stamps == [] and len(built) == 1 and built[0].callables == 1


def test_the_old_channel_closes_once_its_calls_finish(
    server: RunningServer, tmp_path: Path
) -> None:
    paths = server.ca.issue(CAPABILITY, CertPaths(tmp_path / "c.pem", tmp_path / "c.key"))
    built: list[_FakeChannel] = []

    def build(cert: bytes, key: bytes, ca: bytes) -> Any:
        built.append(_FakeChannel())
        return built[-1]

    channel = transport.ReloadingChannel(transport.TlsFiles.of(paths, server.ca.bundle_path), build,
                                         check_every_s=0.05)
    stream = channel.unary_stream("/x.Y/Watch")
    stream("a")  # a long-lived stream on the first channel
    server.ca.issue(CAPABILITY, paths)
    time.sleep(0.1)
    stream("b")
    assert len(built) == 2 and channel.reloads == 1
    assert [len(c.calls) for c in built] == [1, 1]  # the new call went to the new channel
    assert not built[0].closed  # its stream still runs
    built[0].calls[0].finish()
    deadline = time.monotonic() + 2
    while not built[0].closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert built[0].closed and not built[1].closed
    channel.close()
    assert built[1].closed
