"""AppendRecords: many records in one durable write, all stamped by the service, all or nothing."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from agentmesh import errors, spiffe, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import OPERATOR
from agentmesh.pki import leaf_paths
from agentmesh.v1 import audit_service_pb2 as pb
from agentmesh.v1 import audit_service_pb2_grpc as pb_grpc

from .conftest import RoleProcess


@pytest.fixture(scope="module")
def audit(mesh_config: MeshConfig) -> Iterator[RoleProcess]:
    proc = RoleProcess(mesh_config, "audit", "audit_svc")
    try:
        yield proc
    finally:
        proc.stop()


def _stub(cfg: MeshConfig, address: str, identity: spiffe.SpiffeId) -> pb_grpc.AuditServiceStub:
    tls = transport.TlsFiles.of(leaf_paths(cfg.mesh_home.workloads, identity), cfg.mesh_home.trust_bundle)
    return pb_grpc.AuditServiceStub(transport.secure_channel(address, tls, spiffe.service("audit")))


def _records(n: int, execution_id: str) -> list[pb.AuditRecord]:
    return [pb.AuditRecord(event_type=pb.AUDIT_EVENT_TYPE_TASK_DELEGATED, outcome=pb.AUDIT_OUTCOME_PENDING,
                           execution_id=execution_id, recorded_by="spiffe://agentmesh.local/svc/someone-else",
                           reason_codes=[f"n={i}"]) for i in range(n)]


def test_batch_is_stamped_and_consecutive(mesh_config: MeshConfig, audit: RoleProcess) -> None:
    stub = _stub(mesh_config, audit.address, spiffe.service("capability"))
    results = stub.AppendRecords(pb.AppendRecordsRequest(records=_records(5, "exe-batch-1"))).results
    indexes = [r.index for r in results]
    assert indexes == list(range(indexes[0], indexes[0] + 5))
    operator = _stub(mesh_config, audit.address, OPERATOR)
    stored = [r for page in operator.QueryRecords(pb.QueryRecordsRequest(execution_id="exe-batch-1"))
              for r in page.records]
    assert [r.reason_codes[0] for r in stored] == [f"n={i}" for i in range(5)]
    assert {r.recorded_by for r in stored} == {str(spiffe.service("capability"))}


def test_one_bad_record_refuses_the_whole_batch(mesh_config: MeshConfig, audit: RoleProcess) -> None:
    stub = _stub(mesh_config, audit.address, spiffe.service("capability"))
    operator = _stub(mesh_config, audit.address, OPERATOR)
    before = operator.GetCheckpoint(pb.GetCheckpointRequest()).checkpoint.tree_size
    records = _records(3, "exe-batch-2")
    records[1].event_type = pb.AUDIT_EVENT_TYPE_UNSPECIFIED
    with pytest.raises(grpc.RpcError) as info:
        stub.AppendRecords(pb.AppendRecordsRequest(records=records))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    detail = errors.error_info(info.value)
    assert detail is not None and detail.metadata["field"].startswith("records[1]")
    with pytest.raises(grpc.RpcError) as info:
        stub.AppendRecords(pb.AppendRecordsRequest())
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # None of the batch was appended; the two refusals were, by audit itself.
    after = operator.GetCheckpoint(pb.GetCheckpointRequest()).checkpoint.tree_size
    assert after == before + 2
    since = pb.QueryRecordsRequest(page_token=str(before - 1) if before else "")
    refusals = [r for page in operator.QueryRecords(since) for r in page.records]
    assert [(r.event_type, r.reason_codes[0], r.recorded_by) for r in refusals] == [
        (pb.AUDIT_EVENT_TYPE_ACCESS_DENIED, "MISSING_FIELD", str(spiffe.service("audit")))] * 2


def test_agents_may_not_append_in_bulk_either(mesh_config: MeshConfig, audit: RoleProcess) -> None:
    stub = _stub(mesh_config, audit.address, spiffe.agent("training-agent"))
    with pytest.raises(grpc.RpcError) as info:
        stub.AppendRecords(pb.AppendRecordsRequest(records=_records(1, "exe-batch-3")))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
