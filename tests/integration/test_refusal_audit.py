"""Every refusal a servicer answers leaves exactly one audit record, over the real processes.

The `mesh` fixture is the whole mesh as `agentmesh up` starts it. Each test
sends fresh, valid mesh ids in ``baggage`` to find its own records, reads the
log as the operator and expects one ACCESS_DENIED / DENIED record whose
reason codes start with the ErrorInfo reason and name the field — refusals a
servicer does not record itself are recorded by the interceptor's denial
hook; those it records itself (capability, decision center) are not recorded
a second time. No record carries what the caller sent.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import text_format

from agentmesh import errors, spiffe, telemetry, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import OPERATOR, PLATFORM_CLI
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import capability_service_pb2_grpc as cap_grpc
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import decision_center_service_pb2_grpc as dc_grpc
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import policy_service_pb2_grpc as policy_grpc
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2
from agentmesh.v1 import supervisor_service_pb2_grpc as sup_grpc

from .conftest import client_tls, peer_address
from .test_analysis_e2e import token

CAPABILITY = spiffe.service("capability")
TRAINING = spiffe.agent("training-agent")
DENIED = (audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, audit_pb2.AUDIT_OUTCOME_DENIED)


def _channel(cfg: MeshConfig, role: str, identity: spiffe.SpiffeId) -> grpc.Channel:
    return transport.secure_channel(peer_address(cfg, role), client_tls(cfg, identity), spiffe.service(role),
                                    default_timeout_s=60)


@pytest.fixture()
def mine() -> Iterator[str]:
    """A fresh execution id sent in baggage for the test's calls (with a correlation id), to find its records."""
    execution_id = f"exe-refusal-{uuid.uuid4().hex[:8]}"
    with telemetry.mesh_ids(execution_id=execution_id, correlation_id=f"corr-{uuid.uuid4().hex[:8]}"):
        yield execution_id


def _records(cfg: MeshConfig, execution_id: str) -> list[audit_pb2.AuditRecord]:
    with _channel(cfg, "audit", OPERATOR) as channel:
        return [r for page in audit_grpc.AuditServiceStub(channel).QueryRecords(
            audit_pb2.QueryRecordsRequest(execution_id=execution_id), timeout=30) for r in page.records]


def _the_record(cfg: MeshConfig, execution_id: str, *, settle_s: float = 1.0) -> audit_pb2.AuditRecord:
    """The one record filed under ``execution_id`` (waits for it, then a little longer for a second one)."""
    deadline = time.monotonic() + 6
    found = _records(cfg, execution_id)
    while not found and time.monotonic() < deadline:
        time.sleep(0.1)
        found = _records(cfg, execution_id)
    time.sleep(settle_s)
    found = _records(cfg, execution_id)
    assert len(found) == 1, [text_format.MessageToString(r, as_one_line=True) for r in found]
    return found[0]


def _refused(call: Callable[[], Any]) -> errors.MeshError:
    with pytest.raises(grpc.RpcError) as info:
        result = call()
        if isinstance(result, Iterator):
            list(result)
    return errors.from_rpc_error(info.value)


def _check(record: audit_pb2.AuditRecord, *, reason: str, field: str | None, caller: spiffe.SpiffeId,
           method: str, recorded_by: spiffe.SpiffeId, never: tuple[str, ...] = ()) -> None:
    assert (record.event_type, record.outcome) == DENIED
    codes = list(record.reason_codes)
    assert codes[0] == reason, codes
    if field is not None:
        assert f"field={field}" in codes, codes
    assert f"caller={caller}" in codes and f"method={method}" in codes, codes
    assert record.recorded_by == str(recorded_by)
    text = text_format.MessageToString(record, as_utf8=True)
    for value in never:
        assert value not in text, f"the record carries {value!r}"


def test_an_analyze_of_an_unknown_intent_leaves_one_record(mesh: MeshConfig, mine: str) -> None:
    text = "What is the weather like in Lisbon today? zq-marker-7731"
    stub = sup_grpc.SupervisorServiceStub(_channel(mesh, "supervisor", PLATFORM_CLI))
    got = _refused(lambda: stub.Analyze(sup_pb2.AnalyzeRequest(user_assertion=token(mesh), request_text=text,
                                                                tenant_id="acme")))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.INVALID_ARGUMENT, "UNKNOWN_INTENT", "request_text")
    _check(_the_record(mesh, mine), reason="UNKNOWN_INTENT", field="request_text", caller=PLATFORM_CLI,
           method="/agentmesh.v1.SupervisorService/Analyze", recorded_by=spiffe.service("supervisor"),
           never=("zq-marker-7731", "Lisbon"))


def test_a_get_execution_without_its_id_leaves_one_record(mesh: MeshConfig, mine: str) -> None:
    stub = sup_grpc.SupervisorServiceStub(_channel(mesh, "supervisor", PLATFORM_CLI))
    got = _refused(lambda: stub.GetExecution(sup_pb2.GetExecutionRequest(user_assertion=token(mesh))))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.INVALID_ARGUMENT, "MISSING_FIELD", "execution_id")
    _check(_the_record(mesh, mine), reason="MISSING_FIELD", field="execution_id", caller=PLATFORM_CLI,
           method="/agentmesh.v1.SupervisorService/GetExecution", recorded_by=spiffe.service("supervisor"))


def test_an_authorize_request_without_its_user_leaves_one_record(mesh: MeshConfig, mine: str) -> None:
    stub = policy_grpc.PolicyServiceStub(_channel(mesh, "policy", CAPABILITY))
    request = policy_pb2.AuthorizeRequest(
        actor_type=common_pb2.ACTOR_TYPE_USER,
        agent=common_pb2.AgentPrincipal(agent_id="training-agent", delegation_chain=["svc:supervisor"]),
        delegation_depth=1, capability_id="training.getStatus", capability_version="1.0.0",
        resource=policy_pb2.ResourceRef(type="Worker", id="W-7731", tenant_id="acme"),
        operation=policy_pb2.OPERATION_KIND_INVOKE)
    got = _refused(lambda: stub.Authorize(request))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.INVALID_ARGUMENT, "MISSING_FIELD", "user")
    _check(_the_record(mesh, mine), reason="MISSING_FIELD", field="user", caller=CAPABILITY,
           method="/agentmesh.v1.PolicyService/Authorize", recorded_by=spiffe.service("policy"),
           never=("W-7731",))


def test_a_capability_status_change_refused_leaves_one_record(mesh: MeshConfig, mine: str) -> None:
    stub = cap_grpc.CapabilityServiceStub(_channel(mesh, "capability", OPERATOR))
    got = _refused(lambda: stub.SetCapabilityStatus(cap_pb2.SetCapabilityStatusRequest(
        capability_id="training.getStatus", status=common_pb2.LIFECYCLE_STATUS_DISABLED, reason="   ")))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.INVALID_ARGUMENT, "MISSING_FIELD", "reason")
    _check(_the_record(mesh, mine), reason="MISSING_FIELD", field="reason", caller=OPERATOR,
           method="/agentmesh.v1.CapabilityService/SetCapabilityStatus", recorded_by=CAPABILITY)


def test_a_capability_refusal_the_capability_service_records_is_recorded_once(mesh: MeshConfig, mine: str) -> None:
    stub = cap_grpc.CapabilityServiceStub(_channel(mesh, "capability", TRAINING))
    got = _refused(lambda: stub.InvokeCapability(cap_pb2.InvokeCapabilityRequest(capability_id="training.getStatus")))
    assert (got.code, got.reason) == (grpc.StatusCode.UNAUTHENTICATED, "GRANT_MISSING")
    record = _the_record(mesh, mine)
    # The capability service's own record (it names the capability), not the hook's.
    assert (record.event_type, record.outcome) == DENIED
    assert record.reason_codes[0] == "GRANT_MISSING" and record.capability_id == "training.getStatus"
    assert record.recorded_by == str(CAPABILITY)


def test_a_review_refusal_the_decision_center_records_is_recorded_once(mesh: MeshConfig, mine: str) -> None:
    stub = dc_grpc.DecisionCenterServiceStub(_channel(mesh, "supervisor", PLATFORM_CLI))
    review_id = f"rev-{uuid.uuid4().hex[:12]}"
    got = _refused(lambda: stub.GetReview(dc_pb2.GetReviewRequest(
        user_assertion=token(mesh, user="bob", roles=("reviewer",)), review_id=review_id)))
    assert (got.code, got.reason) == (grpc.StatusCode.NOT_FOUND, "REVIEW_NOT_FOUND")
    record = _the_record(mesh, mine)
    assert record.reason_codes[0] == "REVIEW_NOT_FOUND" and record.resource == f"review:{review_id}"


def test_an_audit_query_refused_is_recorded_by_audit_itself_once(mesh: MeshConfig, mine: str) -> None:
    stub = audit_grpc.AuditServiceStub(_channel(mesh, "audit", OPERATOR))
    got = _refused(lambda: stub.QueryRecords(audit_pb2.QueryRecordsRequest(page_token="999999999999")))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PAGE_TOKEN", "page_token")
    _check(_the_record(mesh, mine), reason="INVALID_PAGE_TOKEN", field="page_token", caller=OPERATOR,
           method="/agentmesh.v1.AuditService/QueryRecords", recorded_by=spiffe.service("audit"),
           never=("999999999999",))
