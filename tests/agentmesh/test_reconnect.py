"""A channel reaches a restarted peer again within about a second (``transport.RECONNECT_OPTIONS``).

gRPC's own reconnect backoff grows to two minutes; a process of the mesh that
restarts (on the same port) must be reached again at once, by every channel
that was talking to it.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import grpc
import pytest

from agentmesh import transport
from agentmesh.config import MeshConfig
from agentmesh.pki import CertificateAuthority, CertPaths
from agentmesh.v1 import policy_service_pb2 as policy_pb2

from .test_refusal_audit import CAPABILITY, POLICY, UNARY, _files, _start


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
