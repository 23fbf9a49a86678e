"""A channel reaches a restarted peer again within about a second (``transport.RECONNECT_OPTIONS``).

gRPC's own reconnect backoff grows to two minutes; a process of the mesh that
restarts (on the same port) must be reached again at once, by every channel
that was talking to it.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import grpc
import pytest

from agentmesh import errors, transport
from agentmesh.access import AccessTable
from agentmesh.config import MeshConfig
from agentmesh.pki import CertificateAuthority, CertPaths
from agentmesh.policy_client import RECONNECT_WAIT_S, PolicyClient
from agentmesh.v1 import policy_service_pb2 as policy_pb2

from .test_refusal_audit import CAPABILITY, POLICY, UNARY, _files, _start, behave

AUTHORIZE = "agentmesh.v1.PolicyService"


def _start_policy(mesh_config: MeshConfig, paths: CertPaths, ca: Path, port: int) -> grpc.Server:
    """A server answering PolicyService.Authorize as :func:`behave` does (``fine``: explanation "ok")."""
    access = AccessTable.parse({"rules": [{"methods": [f"/{AUTHORIZE}/*"], "callers": [str(CAPABILITY)]}]})
    srv = transport.create_server(access, on_denied=lambda call: None, max_workers=4)
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(AUTHORIZE, {
        "Authorize": grpc.unary_unary_rpc_method_handler(
            behave, request_deserializer=policy_pb2.AuthorizeRequest.FromString,
            response_serializer=policy_pb2.AuthorizeResponse.SerializeToString)}),))
    transport.bind(srv, "127.0.0.1", port, transport.TlsFiles.of(paths, ca))
    srv.start()
    return srv


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_channel_reaches_a_restarted_server_within_about_a_second(mesh_config: MeshConfig, tmp_path: Path) -> None:
    """The server is away long enough for gRPC's default backoff to wait over 3 s before its next attempt."""
    ca = CertificateAuthority.load(mesh_config.mesh_home.ca, mesh_config.mesh_home.trust_bundle)
    paths = ca.issue(POLICY, CertPaths(tmp_path / "policy.pem", tmp_path / "policy.key"))
    port = _free_port()
    srv, _ = _start(mesh_config, paths, ca.bundle_path, port, lambda call: None)
    channel = transport.secure_channel(f"127.0.0.1:{port}", _files(mesh_config, CAPABILITY), POLICY)
    call = channel.unary_unary(UNARY, request_serializer=policy_pb2.AuthorizeRequest.SerializeToString,
                               response_deserializer=policy_pb2.AuthorizeResponse.FromString)

    def answered() -> bool:
        try:
            return call(policy_pb2.AuthorizeRequest(capability_id="fine"), timeout=2).explanation == "ok"
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.UNAVAILABLE, err
            return False

    try:
        assert answered()
        srv.stop(grace=None).wait()
        away = time.monotonic() + 6.0
        while time.monotonic() < away:  # calls keep the channel trying (and its backoff growing)
            assert not answered()
            time.sleep(0.1)
        try:
            srv, _ = _start(mesh_config, paths, ca.bundle_path, port, lambda call: None)
        except transport.PortInUse:
            pytest.skip(f"port {port} was taken meanwhile")
        back = time.monotonic()
        while not answered():
            assert time.monotonic() - back < 2.5, "the restarted server was not reached again in time"
            time.sleep(0.05)
    finally:
        channel.close()
        srv.stop(grace=None)


def test_a_decision_asked_while_the_policy_engine_restarts_waits_for_it(mesh_config: MeshConfig,
                                                                         tmp_path: Path) -> None:
    """The first call fails UNAVAILABLE (nothing listens); the client asks again once the engine is back."""
    ca = CertificateAuthority.load(mesh_config.mesh_home.ca, mesh_config.mesh_home.trust_bundle)
    paths = ca.issue(POLICY, CertPaths(tmp_path / "policy.pem", tmp_path / "policy.key"))
    port = _free_port()
    channel = transport.secure_channel(f"127.0.0.1:{port}", _files(mesh_config, CAPABILITY), POLICY)
    client = PolicyClient(channel, timeout_s=5)
    started: list[grpc.Server] = []
    later = threading.Timer(0.4, lambda: started.append(_start_policy(mesh_config, paths, ca.bundle_path, port)))
    try:
        later.start()
        assert client(policy_pb2.AuthorizeRequest(capability_id="fine")).explanation == "ok"
        assert started, "the answer came before the engine was started"
    finally:
        later.join()
        channel.close()
        for srv in started:
            srv.stop(grace=None)


def test_a_decision_asked_of_an_engine_that_stays_down_is_unavailable(mesh_config: MeshConfig) -> None:
    channel = transport.secure_channel(f"127.0.0.1:{_free_port()}", _files(mesh_config, CAPABILITY), POLICY)
    t0 = time.monotonic()
    try:
        with pytest.raises(errors.Unavailable):
            PolicyClient(channel, timeout_s=5)(policy_pb2.AuthorizeRequest(capability_id="fine"))
    finally:
        channel.close()
    assert time.monotonic() - t0 < RECONNECT_WAIT_S + 2.0
