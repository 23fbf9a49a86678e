"""Bad input at the edge, over the real processes: INVALID_ARGUMENT naming the field, never INTERNAL.

The `mesh` fixture is the whole mesh as `agentmesh up` starts it. Each bad call
must be refused by the interceptor before any servicer code runs: nothing
changes (no kill switch, no status, no execution) and the only new audit
records are the refusals themselves, which never carry the refused value.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from agentmesh import errors, spiffe, telemetry, transport
from agentmesh.config import MeshConfig
from agentmesh.identities import OPERATOR, PLATFORM_CLI
from agentmesh.launcher import read_state
from agentmesh.v1 import (
    agent_registry_service_pb2,
    audit_service_pb2,
    capability_service_pb2,
    common_pb2,
    decision_center_service_pb2,
    policy_service_pb2,
    specialist_service_pb2,
    supervisor_service_pb2,
    tenant_service_pb2,
)
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc
from agentmesh.v1 import capability_service_pb2 as cap_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2
from agentmesh.v1 import supervisor_service_pb2 as sup_pb2

from .conftest import client_tls, peer_address
from .test_analysis_e2e import token

SUPERVISOR = spiffe.service("supervisor")
CAPABILITY = spiffe.service("capability")
TRAINING_AGENT = spiffe.agent("training-agent")

# Which process serves which services.
SERVICES: dict[str, list[Any]] = {
    "supervisor": [supervisor_service_pb2.DESCRIPTOR.services_by_name["SupervisorService"],
                   decision_center_service_pb2.DESCRIPTOR.services_by_name["DecisionCenterService"],
                   agent_registry_service_pb2.DESCRIPTOR.services_by_name["AgentRegistryService"]],
    "policy": [policy_service_pb2.DESCRIPTOR.services_by_name["PolicyService"],
               tenant_service_pb2.DESCRIPTOR.services_by_name["TenantService"]],
    "capability": [capability_service_pb2.DESCRIPTOR.services_by_name["CapabilityService"]],
    "audit": [audit_service_pb2.DESCRIPTOR.services_by_name["AuditService"]],
    "training-agent": [specialist_service_pb2.DESCRIPTOR.services_by_name["SpecialistService"]],
}

# A caller the caller table admits, per method (the default: per service).
CALLERS: dict[str, spiffe.SpiffeId] = {
    "agentmesh.v1.SupervisorService": PLATFORM_CLI,
    "agentmesh.v1.DecisionCenterService": PLATFORM_CLI,
    "agentmesh.v1.AgentRegistryService": PLATFORM_CLI,
    "agentmesh.v1.AgentRegistryService.SetAgentStatus": OPERATOR,
    "agentmesh.v1.AgentRegistryService.RegisterAgentVersion": OPERATOR,
    "agentmesh.v1.AgentRegistryService.TransitionAgentVersion": OPERATOR,
    "agentmesh.v1.AgentRegistryService.EvaluateAgentVersion": OPERATOR,
    "agentmesh.v1.PolicyService": OPERATOR,
    "agentmesh.v1.TenantService": OPERATOR,
    "agentmesh.v1.CapabilityService.InvokeCapability": SUPERVISOR,
    "agentmesh.v1.CapabilityService.InvokeCapabilities": SUPERVISOR,
    "agentmesh.v1.CapabilityService.ListCapabilities": PLATFORM_CLI,
    "agentmesh.v1.CapabilityService.SetCapabilityStatus": OPERATOR,
    "agentmesh.v1.CapabilityService.RevokeExecution": SUPERVISOR,
    "agentmesh.v1.AuditService": OPERATOR,
    "agentmesh.v1.AuditService.AppendRecord": CAPABILITY,
    "agentmesh.v1.AuditService.AppendRecords": CAPABILITY,
    "agentmesh.v1.SpecialistService": SUPERVISOR,
}

METHODS = [(process, method) for process, services in SERVICES.items()
           for service in services for method in service.methods]

# Field 1, length-delimited, 5 bytes announced, 1 sent: no message type decodes it.
TRUNCATED = b"\x0a\x05\xff"


def _caller(method: Any) -> spiffe.SpiffeId:
    return CALLERS.get(method.full_name) or CALLERS[method.containing_service.full_name]


def _server_id(cfg: MeshConfig, process: str) -> spiffe.SpiffeId:
    return next(spiffe.parse(p.spiffe_id) for p in read_state(cfg) if p.name == process)


def _channel(cfg: MeshConfig, process: str, identity: spiffe.SpiffeId) -> grpc.Channel:
    return transport.secure_channel(peer_address(cfg, process), client_tls(cfg, identity), _server_id(cfg, process),
                                    default_timeout_s=30)


def _raw_call(channel: grpc.Channel, method: Any, data: bytes, **kw: Any) -> object:
    """Sends ``data`` as the request of ``method`` as is (identity serializers), returns the answer bytes."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    if method.server_streaming:
        return list(channel.unary_stream(path)(data, **kw))
    return channel.unary_unary(path)(data, **kw)


def _refused(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() != grpc.StatusCode.INTERNAL, info.value.details()
    return info.value


def _invalid(call: Callable[[], object], reason: str, field: str | None = None) -> errors.MeshError:
    err = errors.from_rpc_error(_refused(call))
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT, (err.reason, err.message)
    assert err.reason == reason, (err.reason, err.message)
    assert err.field == field, err.metadata
    return err


def _audit(cfg: MeshConfig) -> audit_grpc.AuditServiceStub:
    return audit_grpc.AuditServiceStub(_channel(cfg, "audit", OPERATOR))


def _size(cfg: MeshConfig) -> int:
    return int(_audit(cfg).GetCheckpoint(audit_pb2.GetCheckpointRequest()).checkpoint.tree_size)


def _records_since(cfg: MeshConfig, size: int) -> list[audit_pb2.AuditRecord]:
    """Every record appended at index ``size`` or later."""
    request = audit_pb2.QueryRecordsRequest(page_token=str(size - 1)) if size else audit_pb2.QueryRecordsRequest()
    return [r for page in _audit(cfg).QueryRecords(request) for r in page.records]


@pytest.fixture()
def new_records(mesh: MeshConfig) -> Iterator[Callable[[], list[audit_pb2.AuditRecord]]]:
    """The audit records appended since the test started."""
    size = _size(mesh)
    yield lambda: _records_since(mesh, size)


def _mine() -> dict[str, str]:
    """Fresh valid mesh ids to send in baggage, to tell this test's refusals from any other record."""
    return {"execution_id": f"exe-edge-{uuid.uuid4().hex[:8]}", "correlation_id": f"corr-{uuid.uuid4().hex[:8]}"}


def _only_refusals(records: list[audit_pb2.AuditRecord], reason: str, ids: dict[str, str], count: int = 1,
                   forbidden: tuple[str, ...] = ()) -> None:
    """Nothing but refusals was recorded; ``count`` of them are this test's (found by one of ``ids``)
    with ``reason``; no record carries a forbidden value."""
    assert [r for r in records if r.event_type != audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED] == []
    key, value = next(iter(ids.items()))
    mine = [r for r in records if getattr(r, key) == value]
    assert [(r.outcome, r.reason_codes[0]) for r in mine] == [(audit_pb2.AUDIT_OUTCOME_DENIED, reason)] * count, mine
    for record in records:
        encoded = record.SerializeToString()
        assert b"\x00" not in b"".join(s.encode() for s in record.reason_codes)
        for bad in forbidden:
            assert bad.encode() not in encoded


# --------------------------------------------------------------- undecodable bytes


@pytest.mark.parametrize(("process", "method"), METHODS, ids=[f"{p}:{m.name}" for p, m in METHODS])
def test_undecodable_bytes_are_invalid_argument_on_every_rpc(mesh: MeshConfig, process: str, method: Any) -> None:
    with _channel(mesh, process, _caller(method)) as channel:
        err = errors.from_rpc_error(_refused(lambda: _raw_call(channel, method, TRUNCATED)))
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT, (err.reason, err.message)
    if process == "audit" and err.reason == "MALFORMED_REQUEST":
        # The audit servicer still decodes leniently itself (same status, its own older reason).
        return
    assert err.reason == "REQUEST_UNDECODABLE", (err.reason, err.message)
    assert err.metadata.get("type") == method.input_type.full_name


def test_invalid_utf8_in_a_string_field_is_undecodable(mesh: MeshConfig, new_records: Any) -> None:
    # AnalyzeRequest field 1 (user_assertion) holding bytes that are not UTF-8.
    analyze = SERVICES["supervisor"][0].methods_by_name["Analyze"]
    ids = _mine()
    with _channel(mesh, "supervisor", PLATFORM_CLI) as channel, telemetry.mesh_ids(**ids):
        _invalid(lambda: _raw_call(channel, analyze, b"\x0a\x03\xff\xfe\xfd"), "REQUEST_UNDECODABLE")
    _only_refusals(new_records(), "REQUEST_UNDECODABLE", ids)


def test_the_caller_table_comes_before_decoding(mesh: MeshConfig) -> None:
    set_switch = SERVICES["policy"][0].methods_by_name["SetKillSwitch"]
    with _channel(mesh, "policy", TRAINING_AGENT) as channel:
        err = errors.from_rpc_error(_refused(lambda: _raw_call(channel, set_switch, TRUNCATED)))
    assert (err.code, err.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CALLER_NOT_ALLOWED")


def test_health_checks_go_through_the_same_mechanism(mesh: MeshConfig) -> None:
    with _channel(mesh, "policy", OPERATOR) as channel:
        err = errors.from_rpc_error(_refused(lambda: channel.unary_unary("/grpc.health.v1.Health/Check")(TRUNCATED)))
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_UNDECODABLE")


def test_a_client_streaming_rpc_is_checked_message_by_message(mesh: MeshConfig) -> None:
    # Server reflection is the one stream of requests a mesh server takes.
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with _channel(mesh, "policy", OPERATOR) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
        assert "agentmesh.v1.PolicyService" in {s.name for s in answers[0].list_services_response.service}
        bad = iter([reflection_pb2.ServerReflectionRequest(list_services=""),
                     reflection_pb2.ServerReflectionRequest(file_containing_symbol="agentmesh\x00")])
        _invalid(lambda: list(stub.ServerReflectionInfo(bad)), "FIELD_INVALID_CHARACTERS", "file_containing_symbol")


@pytest.mark.parametrize("process", ["supervisor", "policy", "audit", "training-agent"])
def test_reflection_v1_and_v1alpha_describe_the_same_services(mesh: MeshConfig, process: str) -> None:
    from google.protobuf import descriptor_pb2
    from grpc_reflection.v1alpha import reflection_pb2

    ident = OPERATOR if process in ("policy", "audit") else PLATFORM_CLI
    names: dict[str, set[str]] = {}
    with _channel(mesh, process, ident) as channel:
        for version in ("v1", "v1alpha"):
            info = channel.stream_stream(
                f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
            listed, described = list(info(iter([
                reflection_pb2.ServerReflectionRequest(list_services=""),
                reflection_pb2.ServerReflectionRequest(file_containing_symbol=transport.REFLECTION_V1)])))
            names[version] = {s.name for s in listed.list_services_response.service}
            file = descriptor_pb2.FileDescriptorProto.FromString(
                described.file_descriptor_response.file_descriptor_proto[0])
            assert (file.name, file.package) == (transport.REFLECTION_V1_FILE, "grpc.reflection.v1")
            assert [m.input_type for m in file.service[0].method] == [".grpc.reflection.v1.ServerReflectionRequest"]
    assert names["v1"] == names["v1alpha"]
    assert {"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection",
            "grpc.health.v1.Health"} <= names["v1"]
    assert any(n.startswith("agentmesh.v1.") for n in names["v1"])


# --------------------------------------------------------------- unknown enum numbers


def _policy(cfg: MeshConfig) -> grpc.Channel:
    return _channel(cfg, "policy", OPERATOR)


def _authorize(**fields: Any) -> policy_pb2.AuthorizeRequest:
    req = policy_pb2.AuthorizeRequest(
        user=common_pb2.UserContext(tenant_id="acme", user_id="alice", roles=["analyst"]),
        actor_type=common_pb2.ACTOR_TYPE_USER,
        agent=common_pb2.AgentPrincipal(agent_id="training-agent",
                                        delegation_chain=["user:acme/alice", "svc:supervisor", "agent:training-agent"]),
        delegation_depth=2, capability_id="training.getStatus", capability_version="1.0.0",
        resource=policy_pb2.ResourceRef(type="Worker", id="W-1001", tenant_id="acme"),
        context=policy_pb2.OperationContext(risk_profile=common_pb2.RiskProfile(max_risk=common_pb2.RISK_LEVEL_LOW)),
        operation=policy_pb2.OPERATION_KIND_INVOKE)
    for name, value in fields.items():
        if isinstance(value, int):
            setattr(req, name, value)
        else:
            getattr(req, name).CopyFrom(value)
    return req


def _unary(channel: grpc.Channel, path: str) -> Callable[..., bytes]:
    return channel.unary_unary(path)  # type: ignore[no-any-return]


def test_unknown_enum_numbers_on_authorize(mesh: MeshConfig, new_records: Any) -> None:
    ids = _mine()
    with _policy(mesh) as channel, telemetry.mesh_ids(**ids):
        authorize = _unary(channel, "/agentmesh.v1.PolicyService/Authorize")
        assert policy_pb2.AuthorizeResponse.FromString(authorize(_authorize().SerializeToString()))
        for bad, field in [(_authorize(operation=99), "operation"), (_authorize(actor_type=5), "actor_type")]:
            err = _invalid(lambda bad=bad: authorize(bad.SerializeToString()), "ENUM_VALUE_UNKNOWN", field)
            assert err.metadata["enum"].startswith("agentmesh.v1.")
        nested = _authorize()
        nested.context.risk_profile.max_risk = 77  # type: ignore[assignment]
        _invalid(lambda: authorize(nested.SerializeToString()), "ENUM_VALUE_UNKNOWN", "context.risk_profile.max_risk")
    _only_refusals(new_records(), "ENUM_VALUE_UNKNOWN", ids, count=3)


def test_an_unknown_kill_switch_scope_sets_nothing(mesh: MeshConfig, new_records: Any) -> None:
    stub = policy_pb2  # for brevity below
    ids = _mine()
    with _policy(mesh) as channel, telemetry.mesh_ids(**ids):
        listed = _unary(channel, "/agentmesh.v1.PolicyService/ListKillSwitches")
        before = stub.ListKillSwitchesResponse.FromString(listed(b""))
        set_switch = _unary(channel, "/agentmesh.v1.PolicyService/SetKillSwitch")
        # scope = 99 (field 1, varint), target = "acme", enabled = true, reason = "drill", as raw bytes.
        raw = b"\x08\x63" + b"\x12\x04acme" + b"\x18\x01" + b"\x22\x05drill"
        assert stub.SetKillSwitchRequest.FromString(raw).scope == 99
        _invalid(lambda: set_switch(raw), "ENUM_VALUE_UNKNOWN", "scope")
        after = stub.ListKillSwitchesResponse.FromString(listed(b""))
    assert after == before
    _only_refusals(new_records(), "ENUM_VALUE_UNKNOWN", ids)


def test_an_unknown_capability_status_changes_nothing(mesh: MeshConfig, new_records: Any) -> None:
    ids = _mine()
    with _channel(mesh, "capability", OPERATOR) as channel, telemetry.mesh_ids(**ids):
        list_caps = _unary(channel, "/agentmesh.v1.CapabilityService/ListCapabilities")
        before = cap_pb2.ListCapabilitiesResponse.FromString(list_caps(b""))
        request = cap_pb2.SetCapabilityStatusRequest(capability_id="training.getStatus", reason="drill")
        request.status = 42  # type: ignore[assignment]
        _invalid(lambda: _unary(channel, "/agentmesh.v1.CapabilityService/SetCapabilityStatus")(
            request.SerializeToString()), "ENUM_VALUE_UNKNOWN", "status")
        after = cap_pb2.ListCapabilitiesResponse.FromString(list_caps(b""))
    assert after == before
    _only_refusals(new_records(), "ENUM_VALUE_UNKNOWN", ids)


def test_unknown_enum_numbers_at_the_supervisor(mesh: MeshConfig) -> None:
    with _channel(mesh, "supervisor", OPERATOR) as channel:
        agent_status = agent_registry_service_pb2.SetAgentStatusRequest(agent_id="training-agent", reason="drill")
        agent_status.status = 99  # type: ignore[assignment]
        _invalid(lambda: _unary(channel, "/agentmesh.v1.AgentRegistryService/SetAgentStatus")(
            agent_status.SerializeToString()), "ENUM_VALUE_UNKNOWN", "status")
    with _channel(mesh, "supervisor", PLATFORM_CLI) as channel:
        reviews = decision_center_service_pb2.ListReviewsRequest(user_assertion=token(mesh))
        reviews.status = 99  # type: ignore[assignment]
        _invalid(lambda: _unary(channel, "/agentmesh.v1.DecisionCenterService/ListReviews")(
            reviews.SerializeToString()), "ENUM_VALUE_UNKNOWN", "status")


# --------------------------------------------------------------- caller-supplied ids


def _supervisor(cfg: MeshConfig) -> grpc.Channel:
    return _channel(cfg, "supervisor", PLATFORM_CLI)


def _analyze(cfg: MeshConfig, **fields: Any) -> sup_pb2.AnalyzeRequest:
    return sup_pb2.AnalyzeRequest(user_assertion=token(cfg), tenant_id="acme",
                                  request_text="Analyze permit WP-10231 and tell me if it can be released", **fields)


def _event(**fields: Any) -> sup_pb2.HandleEventRequest:
    values: dict[str, Any] = {"event_id": f"evt-{uuid.uuid4()}", "tenant_id": "acme",
                              "training_expired": sup_pb2.TrainingExpired(worker_id="W-1003", training_code="NR-10",
                                                                          expired_on="2026-08-15")}
    values.update(fields)
    return sup_pb2.HandleEventRequest(**values)


LONG = "c" * 600
NUL = "corr-\x00-injected"


@pytest.mark.parametrize(("value", "reason"), [(LONG, "FIELD_TOO_LONG"), (NUL, "FIELD_INVALID_CHARACTERS")],
                         ids=["600-chars", "nul"])
def test_a_bad_correlation_id_in_the_request_starts_nothing(mesh: MeshConfig, new_records: Any, value: str,
                                                            reason: str) -> None:
    ids = _mine()
    with _supervisor(mesh) as channel, telemetry.mesh_ids(**ids):
        analyze = _unary(channel, "/agentmesh.v1.SupervisorService/Analyze")
        err = _invalid(lambda: analyze(_analyze(mesh, correlation_id=value).SerializeToString()), reason,
                       "correlation_id")
        if reason == "FIELD_TOO_LONG":
            assert err.metadata["max"] == "128"
        handle = _unary(channel, "/agentmesh.v1.SupervisorService/HandleEvent")
        _invalid(lambda: handle(_event(correlation_id=value).SerializeToString()), reason, "correlation_id")
    with _policy(mesh) as channel, telemetry.mesh_ids(**ids):
        authorize = _unary(channel, "/agentmesh.v1.PolicyService/Authorize")
        bad = _authorize(trace=common_pb2.TraceContext(correlation_id=value))
        _invalid(lambda: authorize(bad.SerializeToString()), reason, "trace.correlation_id")
    # No execution started, nothing recorded but the three refusals, none with the value.
    _only_refusals(new_records(), reason, ids, count=3, forbidden=(value, "\x00"))


@pytest.mark.parametrize(("baggage", "reason", "field"), [
    ({"correlation_id": LONG}, "FIELD_TOO_LONG", "baggage.agentmesh.correlation_id"),
    ({"correlation_id": NUL}, "FIELD_INVALID_CHARACTERS", "baggage.agentmesh.correlation_id"),
    ({"execution_id": LONG}, "FIELD_TOO_LONG", "baggage.agentmesh.execution_id"),
    ({"execution_id": "exe 1"}, "FIELD_INVALID_CHARACTERS", "baggage.agentmesh.execution_id"),
], ids=["correlation-600", "correlation-nul", "execution-600", "execution-space"])
def test_a_bad_id_in_baggage_is_refused_and_the_refusal_audited_without_it(
        mesh: MeshConfig, new_records: Any, baggage: dict[str, str], reason: str, field: str) -> None:
    valid = _mine()
    ids = {**valid, **baggage}
    bad_value = next(iter(baggage.values()))
    with telemetry.mesh_ids(**ids):
        with _supervisor(mesh) as channel:
            analyze = _unary(channel, "/agentmesh.v1.SupervisorService/Analyze")
            _invalid(lambda: analyze(_analyze(mesh).SerializeToString()), reason, field)
        with _policy(mesh) as channel:
            _invalid(lambda: _unary(channel, "/agentmesh.v1.PolicyService/GetPolicyInfo")(b""), reason, field)
        with _channel(mesh, "capability", PLATFORM_CLI) as channel:
            _invalid(lambda: _unary(channel, "/agentmesh.v1.CapabilityService/ListCapabilities")(b""), reason, field)
    # The refusals keep the id that was valid, so they can be found by it; the bad one is not in them.
    kept = "correlation_id" if "execution_id" in baggage else "execution_id"
    records = new_records()
    _only_refusals(records, reason, {kept: valid[kept]}, count=3, forbidden=(bad_value, "\x00"))
    assert {getattr(r, next(iter(baggage))) for r in records if getattr(r, kept) == valid[kept]} == {""}


@pytest.mark.parametrize(("traceparent", "reason"), [
    ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", "FIELD_INVALID_CHARACTERS"),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + "0" * 200, "FIELD_TOO_LONG"),
], ids=["upper-case", "too-long"])
def test_a_bad_traceparent_is_refused(mesh: MeshConfig, traceparent: str, reason: str) -> None:
    with _policy(mesh) as channel:
        _invalid(lambda: _unary(channel, "/agentmesh.v1.PolicyService/GetPolicyInfo")(
            b"", metadata=[("traceparent", traceparent)]), reason, "traceparent")
        good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        assert _unary(channel, "/agentmesh.v1.PolicyService/GetPolicyInfo")(b"", metadata=[("traceparent", good)])


def test_a_one_megabyte_event_id_is_refused_and_starts_nothing(mesh: MeshConfig, new_records: Any) -> None:
    event_id = "e" * (1 << 20)
    ids = _mine()
    with _supervisor(mesh) as channel, telemetry.mesh_ids(**ids):
        handle = _unary(channel, "/agentmesh.v1.SupervisorService/HandleEvent")
        err = _invalid(lambda: handle(_event(event_id=event_id).SerializeToString()), "FIELD_TOO_LONG", "event_id")
    assert err.metadata["max"] == "128" and len(err.message) < 200
    records = new_records()
    _only_refusals(records, "FIELD_TOO_LONG", ids, forbidden=("e" * 200,))
    assert all(r.ByteSize() < 4096 for r in records)


def test_valid_requests_still_pass(mesh: MeshConfig) -> None:
    with _supervisor(mesh) as channel:
        get = _unary(channel, "/agentmesh.v1.SupervisorService/GetExecution")
        err = errors.from_rpc_error(_refused(lambda: get(sup_pb2.GetExecutionRequest(
            user_assertion=token(mesh), execution_id="exe-0000000000000000").SerializeToString())))
        assert err.code == grpc.StatusCode.NOT_FOUND
