"""Every refusal a servicer answers reaches the denial hook once, unless the service recorded it itself.

A real mTLS server runs in-process with the mesh interceptor and a fake
servicer whose behaviour each request picks (``capability_id`` of an
``AuthorizeRequest``): raise a MeshError of each kind, marked recorded or not,
end the call with ``context.abort`` / ``abort_with_status`` / ``errors.abort``,
fail mid-stream. The hook collects what it is handed; the caller must hear
exactly what it heard before (status, reason, metadata).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_status import rpc_status

from agentmesh import errors, spiffe, transport
from agentmesh.access import AccessTable
from agentmesh.audit_client import AuditRecorder
from agentmesh.config import MeshConfig
from agentmesh.pki import CertificateAuthority, CertPaths, leaf_paths
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import policy_service_pb2 as policy_pb2

POLICY = spiffe.service("policy")
CAPABILITY = spiffe.service("capability")
SERVICE = "test.Refusals"
UNARY = f"/{SERVICE}/Unary"
STREAM = f"/{SERVICE}/Stream"
CHAT = f"/{SERVICE}/Chat"

ACCESS = AccessTable.parse({"rules": [{"methods": [f"/{SERVICE}/*"], "callers": [str(CAPABILITY)]}]})

# Every MeshError class, and whether its status is a refusal.
KINDS: list[tuple[type[errors.MeshError], bool]] = [
    (errors.InvalidArgument, True), (errors.Unauthenticated, True), (errors.PermissionDenied, True),
    (errors.NotFound, True), (errors.AlreadyExists, True), (errors.FailedPrecondition, True),
    (errors.Aborted, True), (errors.ResourceExhausted, True),
    (errors.DeadlineExceeded, False), (errors.Unavailable, False), (errors.Unimplemented, False),
    (errors.Internal, False),
]


def _mesh_error(name: str) -> errors.MeshError:
    cls = next(c for c, _ in KINDS if c.__name__ == name)
    return cls(f"{name} for a test", reason=f"TEST_{name.upper()}", field="resource.id")


def behave(request: policy_pb2.AuthorizeRequest, context: grpc.ServicerContext) -> policy_pb2.AuthorizeResponse:
    """What the fake servicer does, picked by ``capability_id`` (``<how>:<arg>``)."""
    how, _, arg = request.capability_id.partition(":")
    if how == "raise":
        raise _mesh_error(arg)
    if how == "raise-recorded":
        raise errors.recorded(_mesh_error(arg))
    if how == "abort":
        context.abort(grpc.StatusCode[arg], "refused by context.abort")
    if how == "abort-with-status":
        status = errors.FailedPrecondition("closed", reason="TEST_CLOSED", field="review_id").to_status()
        context.abort_with_status(rpc_status.to_status(status))
    if how == "errors-abort":
        errors.abort(context, _mesh_error(arg))
    if how == "errors-abort-recorded":
        errors.abort(context, errors.recorded(_mesh_error(arg)))
    if how == "crash":
        raise RuntimeError("a bug")
    return policy_pb2.AuthorizeResponse(explanation="ok")


def stream(request: policy_pb2.AuthorizeRequest,
           context: grpc.ServicerContext) -> Iterator[policy_pb2.AuthorizeResponse]:
    yield policy_pb2.AuthorizeResponse(explanation="first")
    yield behave(request, context)


def chat(requests: Iterator[policy_pb2.AuthorizeRequest],
         context: grpc.ServicerContext) -> Iterator[policy_pb2.AuthorizeResponse]:
    for request in requests:
        yield behave(request, context)


def handlers() -> grpc.GenericRpcHandler:
    de = policy_pb2.AuthorizeRequest.FromString
    ser = policy_pb2.AuthorizeResponse.SerializeToString
    return grpc.method_handlers_generic_handler(SERVICE, {
        "Unary": grpc.unary_unary_rpc_method_handler(behave, request_deserializer=de, response_serializer=ser),
        "Stream": grpc.unary_stream_rpc_method_handler(stream, request_deserializer=de, response_serializer=ser),
        "Chat": grpc.stream_stream_rpc_method_handler(chat, request_deserializer=de, response_serializer=ser),
    })


@dataclass
class Server:
    address: str
    denied: list[transport.DeniedCall]
    channel: grpc.Channel
    hook_fails: list[bool]

    def unary(self, how: str) -> policy_pb2.AuthorizeResponse:
        call = self.channel.unary_unary(UNARY, request_serializer=policy_pb2.AuthorizeRequest.SerializeToString,
                                        response_deserializer=policy_pb2.AuthorizeResponse.FromString)
        return call(policy_pb2.AuthorizeRequest(capability_id=how), timeout=10)  # type: ignore[no-any-return]

    def stream(self, how: str) -> list[policy_pb2.AuthorizeResponse]:
        call = self.channel.unary_stream(STREAM, request_serializer=policy_pb2.AuthorizeRequest.SerializeToString,
                                         response_deserializer=policy_pb2.AuthorizeResponse.FromString)
        return list(call(policy_pb2.AuthorizeRequest(capability_id=how), timeout=10))

    def chat(self, *requests: policy_pb2.AuthorizeRequest) -> list[policy_pb2.AuthorizeResponse]:
        call = self.channel.stream_stream(CHAT, request_serializer=policy_pb2.AuthorizeRequest.SerializeToString,
                                          response_deserializer=policy_pb2.AuthorizeResponse.FromString)
        return list(call(iter(requests), timeout=10))


def _files(mesh_config: MeshConfig, identity: spiffe.SpiffeId) -> transport.TlsFiles:
    return transport.TlsFiles.of(leaf_paths(mesh_config.mesh_home.workloads, identity),
                                 mesh_config.mesh_home.trust_bundle)


def _start(mesh_config: MeshConfig, paths: CertPaths, ca: Path, port: int,
           hook: transport.DenialHook) -> tuple[grpc.Server, int]:
    srv = transport.create_server(ACCESS, on_denied=hook, max_workers=8)
    srv.add_generic_rpc_handlers((handlers(),))
    bound = transport.bind(srv, "127.0.0.1", port, transport.TlsFiles.of(paths, ca))
    srv.start()
    return srv, bound


@pytest.fixture()
def server(mesh_config: MeshConfig, tmp_path: Path) -> Iterator[Server]:
    ca = CertificateAuthority.load(mesh_config.mesh_home.ca, mesh_config.mesh_home.trust_bundle)
    paths = ca.issue(POLICY, CertPaths(tmp_path / "policy.pem", tmp_path / "policy.key"))
    denied: list[transport.DeniedCall] = []
    hook_fails: list[bool] = []

    def hook(call: transport.DeniedCall) -> None:
        denied.append(call)
        if hook_fails:
            raise errors.Unavailable("audit is down and so is the outbox", reason="AUDIT_UNAVAILABLE")

    srv, port = _start(mesh_config, paths, ca.bundle_path, 0, hook)
    channel = transport.secure_channel(f"127.0.0.1:{port}", _files(mesh_config, CAPABILITY), POLICY)
    try:
        yield Server(f"127.0.0.1:{port}", denied, channel, hook_fails)
    finally:
        channel.close()
        srv.stop(grace=None)


def _refused(call: Callable[[], Any]) -> errors.MeshError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return errors.from_rpc_error(info.value)


def _seen(server: Server) -> list[tuple[str, str, grpc.StatusCode, str, str]]:
    return [(d.method, d.caller, d.code, d.reason, d.field) for d in server.denied]


@pytest.mark.parametrize(("kind", "refusal"), KINDS, ids=[k.__name__ for k, _ in KINDS])
def test_a_servicer_refusal_reaches_the_hook_once_and_nothing_else_does(
        server: Server, kind: type[errors.MeshError], refusal: bool) -> None:
    got = _refused(lambda: server.unary(f"raise:{kind.__name__}"))
    # The caller hears what it always heard.
    assert (got.code, got.reason, got.metadata) == (kind.code, f"TEST_{kind.__name__.upper()}",
                                                    {"field": "resource.id"})
    expected = [(UNARY, str(CAPABILITY), kind.code, f"TEST_{kind.__name__.upper()}", "resource.id")]
    assert _seen(server) == (expected if refusal else [])


@pytest.mark.parametrize(("kind", "refusal"), KINDS, ids=[k.__name__ for k, _ in KINDS])
def test_a_refusal_the_service_recorded_is_not_handed_over_again(
        server: Server, kind: type[errors.MeshError], refusal: bool) -> None:
    got = _refused(lambda: server.unary(f"raise-recorded:{kind.__name__}"))
    assert (got.code, got.reason) == (kind.code, f"TEST_{kind.__name__.upper()}")
    assert server.denied == []


def test_the_rule_is_exactly_the_documented_statuses() -> None:
    refusals = {c.code for c, refusal in KINDS if refusal}
    assert refusals | {grpc.StatusCode.OUT_OF_RANGE} == errors.REFUSALS
    assert not errors.REFUSALS & {grpc.StatusCode.OK, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN,
                                  grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE,
                                  grpc.StatusCode.INTERNAL, grpc.StatusCode.UNIMPLEMENTED,
                                  grpc.StatusCode.DATA_LOSS}


@pytest.mark.parametrize("code", ["OUT_OF_RANGE", "PERMISSION_DENIED", "NOT_FOUND"])
def test_context_abort_with_a_refusal_code_reaches_the_hook_named_by_its_code(server: Server, code: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        server.unary(f"abort:{code}")
    assert info.value.code() == grpc.StatusCode[code]
    assert info.value.details() == "refused by context.abort"
    assert _seen(server) == [(UNARY, str(CAPABILITY), grpc.StatusCode[code], code, "")]


@pytest.mark.parametrize("code", ["UNAVAILABLE", "CANCELLED", "INTERNAL", "DEADLINE_EXCEEDED"])
def test_context_abort_with_a_failure_code_is_no_refusal(server: Server, code: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        server.unary(f"abort:{code}")
    assert info.value.code() == grpc.StatusCode[code]
    assert server.denied == []


def test_abort_with_status_hands_over_the_error_info_reason_and_field(server: Server) -> None:
    got = _refused(lambda: server.unary("abort-with-status"))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.FAILED_PRECONDITION, "TEST_CLOSED", "review_id")
    assert _seen(server) == [(UNARY, str(CAPABILITY), grpc.StatusCode.FAILED_PRECONDITION, "TEST_CLOSED",
                              "review_id")]


def test_errors_abort_by_a_servicer_is_covered_and_a_recorded_one_is_not_repeated(server: Server) -> None:
    got = _refused(lambda: server.unary("errors-abort:PermissionDenied"))
    assert (got.code, got.reason, got.field) == (grpc.StatusCode.PERMISSION_DENIED, "TEST_PERMISSIONDENIED",
                                                 "resource.id")
    assert _seen(server) == [(UNARY, str(CAPABILITY), grpc.StatusCode.PERMISSION_DENIED, "TEST_PERMISSIONDENIED",
                              "resource.id")]
    server.denied.clear()
    got = _refused(lambda: server.unary("errors-abort-recorded:PermissionDenied"))
    assert got.reason == "TEST_PERMISSIONDENIED"
    assert server.denied == []
    got = _refused(lambda: server.unary("errors-abort:Unavailable"))
    assert got.code == grpc.StatusCode.UNAVAILABLE and server.denied == []


def test_a_refusal_in_the_middle_of_a_response_stream_is_handed_over_once(server: Server) -> None:
    with pytest.raises(grpc.RpcError) as info:
        list(server.stream("raise:NotFound"))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert _seen(server) == [(STREAM, str(CAPABILITY), grpc.StatusCode.NOT_FOUND, "TEST_NOTFOUND", "resource.id")]
    server.denied.clear()
    with pytest.raises(grpc.RpcError):
        list(server.stream("raise-recorded:NotFound"))
    with pytest.raises(grpc.RpcError):
        list(server.stream("abort:ABORTED"))
    assert _seen(server) == [(STREAM, str(CAPABILITY), grpc.StatusCode.ABORTED, "ABORTED", "")]


def test_a_bad_message_in_a_request_stream_is_the_interceptors_refusal_recorded_once(server: Server) -> None:
    bad = policy_pb2.AuthorizeRequest(capability_id="fine", operation=99)  # an enum number nobody defined
    with pytest.raises(grpc.RpcError) as info:
        server.chat(policy_pb2.AuthorizeRequest(capability_id="fine"), bad)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _seen(server) == [(CHAT, str(CAPABILITY), grpc.StatusCode.INVALID_ARGUMENT, "ENUM_VALUE_UNKNOWN",
                              "operation")]
    server.denied.clear()
    with pytest.raises(grpc.RpcError):
        server.chat(policy_pb2.AuthorizeRequest(capability_id="fine"),
                    policy_pb2.AuthorizeRequest(capability_id="raise:ResourceExhausted"))
    assert [d.reason for d in server.denied] == ["TEST_RESOURCEEXHAUSTED"]


def test_answers_and_crashes_hand_nothing_over(server: Server) -> None:
    assert server.unary("fine").explanation == "ok"
    assert [r.explanation for r in server.stream("fine")] == ["first", "ok"]
    got = _refused(lambda: server.unary("crash"))
    assert (got.code, got.message) == (grpc.StatusCode.INTERNAL, "internal error")
    assert server.denied == []


def test_the_refusal_stands_when_the_hook_fails(server: Server) -> None:
    server.hook_fails.append(True)
    got = _refused(lambda: server.unary("raise:PermissionDenied"))
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "TEST_PERMISSIONDENIED")
    assert len(server.denied) == 1


def test_the_hook_records_names_and_codes_only() -> None:
    recorder = AuditRecorder(grpc.insecure_channel("127.0.0.1:9"))
    kept: list[dict[str, Any]] = []
    recorder.record_durably = lambda event_type, **fields: kept.append({"event_type": event_type, **fields})  # type: ignore[method-assign]
    hook = recorder.denial_hook()
    hook(transport.DeniedCall("/agentmesh.v1.SupervisorService/Analyze", str(CAPABILITY),
                              grpc.StatusCode.INVALID_ARGUMENT, "UNKNOWN_INTENT", "request_text"))
    hook(transport.DeniedCall("/agentmesh.v1.SupervisorService/Analyze", "", grpc.StatusCode.NOT_FOUND, "",
                              "input.<script>alert(1)</script>", ("agentmesh.correlation_id",)))
    hook(transport.DeniedCall("/agentmesh.v1.PolicyService/Authorize", str(CAPABILITY),
                              grpc.StatusCode.PERMISSION_DENIED, "SEE alice's secret\x00", "x" * 300))
    assert [(k["event_type"], k["outcome"]) for k in kept] == [
        (audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED, audit_pb2.AUDIT_OUTCOME_DENIED)] * 3
    assert [k["reason_codes"] for k in kept] == [
        ["UNKNOWN_INTENT", "field=request_text", f"caller={CAPABILITY}",
         "method=/agentmesh.v1.SupervisorService/Analyze"],
        ["NOT_FOUND", "field=invalid", "caller=none", "method=/agentmesh.v1.SupervisorService/Analyze",
         "invalid_id=agentmesh.correlation_id"],
        ["invalid", "field=invalid", f"caller={CAPABILITY}", "method=/agentmesh.v1.PolicyService/Authorize"],
    ]
