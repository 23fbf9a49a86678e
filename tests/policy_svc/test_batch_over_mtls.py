"""AuthorizeBatch over mTLS, as the capability service asks it (``PolicyClient.authorize_all``): the shipped caller
table, the real servicer and engine; each slot its own decision or error, and no slot an ALLOW undecided."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agentmesh import errors, spiffe, transport
from agentmesh.access import AccessTable
from agentmesh.config import MeshConfig
from agentmesh.pki import leaf_paths
from agentmesh.policy_client import PolicyClient
from agentmesh.v1 import common_pb2
from agentmesh.v1 import policy_service_pb2 as pb
from agentmesh.v1 import policy_service_pb2_grpc as pb_grpc
from policy_svc.engine import PolicyEngine
from policy_svc.kill_switches import KillSwitchStore
from policy_svc.servicer import PolicyServicer

from .test_servicer import _capabilities, _review

POLICY = spiffe.service("policy")


def _files(cfg: MeshConfig, identity: spiffe.SpiffeId) -> transport.TlsFiles:
    return transport.TlsFiles.of(leaf_paths(cfg.mesh_home.workloads, identity), cfg.mesh_home.trust_bundle)


@pytest.fixture()
def address(mesh_config: MeshConfig, engine: PolicyEngine, tmp_path: Path) -> Iterator[str]:
    with KillSwitchStore(tmp_path / "policy.db") as store:
        server = transport.create_server(AccessTable.load(), on_denied=lambda call: None, max_workers=4)
        pb_grpc.add_PolicyServiceServicer_to_server(PolicyServicer(engine, store, _capabilities, audit=None), server)
        port = transport.bind(server, "127.0.0.1", 0, _files(mesh_config, POLICY))
        server.start()
        try:
            yield f"127.0.0.1:{port}"
        finally:
            server.stop(grace=None)


def _client(cfg: MeshConfig, address: str, identity: spiffe.SpiffeId) -> tuple[PolicyClient, grpc.Channel]:
    channel = transport.secure_channel(address, _files(cfg, identity), POLICY)
    return PolicyClient(channel, timeout_s=5), channel


def test_the_capability_service_gets_each_decision_in_one_round_trip(mesh_config: MeshConfig, address: str) -> None:
    client, channel = _client(mesh_config, address, spiffe.service("capability"))
    broken = _review()
    broken.ClearField("user")
    try:
        alone = client(_review())
        answers = client.authorize_all([_review(), broken, _review()])
    finally:
        channel.close()
    first, refused, third = answers
    assert isinstance(first, pb.AuthorizeResponse) and isinstance(third, pb.AuthorizeResponse)
    for answer in (first, third):
        assert answer.decision.effect == alone.decision.effect == common_pb2.POLICY_EFFECT_ALLOW
        assert list(answer.decision.reason_codes) == list(alone.decision.reason_codes)
    assert first.decision.decision_id != third.decision.decision_id
    assert isinstance(refused, errors.InvalidArgument) and refused.reason == "MISSING_FIELD"


def test_only_the_callers_of_authorize_may_batch(mesh_config: MeshConfig, address: str) -> None:
    channel = transport.secure_channel(address, _files(mesh_config, spiffe.agent("risk-agent")), POLICY)
    try:
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.PolicyServiceStub(channel).AuthorizeBatch(
                pb.AuthorizeBatchRequest(requests=[_review(), _review()]), timeout=5)
    finally:
        channel.close()
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert errors.error_info(info.value).reason == "CALLER_NOT_ALLOWED"  # type: ignore[union-attr]


def test_an_engine_that_is_down_leaves_every_slot_without_a_decision(mesh_config: MeshConfig) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client, channel = _client(mesh_config, f"127.0.0.1:{port}", spiffe.service("capability"))
    try:
        answers = client.authorize_all([_review(), _review()])
    finally:
        channel.close()
    assert all(isinstance(a, errors.Unavailable) for a in answers)
