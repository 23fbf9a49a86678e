"""A server that exports no spans still runs each call in the caller's trace and baggage.

Without an OTLP endpoint the mesh leaves OpenTelemetry's server interceptor out
(its server spans would be made for nobody); the mesh interceptor makes the
incoming ``traceparent`` and ``baggage`` current itself, for unary and streamed
calls, and a call that brought no trace gets one of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry import trace

from agentmesh import errors, telemetry, transport
from agentmesh.access import AccessTable
from agentmesh.config import MeshConfig
from agentmesh.pki import CertificateAuthority, CertPaths
from agentmesh.v1 import policy_service_pb2 as policy_pb2

from .test_refusal_audit import CAPABILITY, POLICY, _files

SERVICE = "test.Ids"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _ids(request: policy_pb2.AuthorizeRequest, context: grpc.ServicerContext) -> policy_pb2.AuthorizeResponse:
    return policy_pb2.AuthorizeResponse(explanation=json.dumps(telemetry.current_ids(), sort_keys=True))


def _ids_streamed(request: policy_pb2.AuthorizeRequest,
                  context: grpc.ServicerContext) -> Iterator[policy_pb2.AuthorizeResponse]:
    yield _ids(request, context)
    yield _ids(request, context)


class _OtherCall:
    """Another call's context, without a mesh identity."""

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}


def _caller(request: policy_pb2.AuthorizeRequest, context: grpc.ServicerContext) -> policy_pb2.AuthorizeResponse:
    try:
        transport.caller_id(_OtherCall())  # type: ignore[arg-type]
        other = "accepted"
    except errors.Unauthenticated:
        other = "refused"
    return policy_pb2.AuthorizeResponse(explanation=json.dumps({"caller": transport.caller_id(context),
                                                                "other call": other}))


def _callers_streamed(request: policy_pb2.AuthorizeRequest,
                      context: grpc.ServicerContext) -> Iterator[policy_pb2.AuthorizeResponse]:
    yield _caller(request, context)
    yield _caller(request, context)


@pytest.fixture()
def channel(mesh_config: MeshConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[grpc.Channel]:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    ca = CertificateAuthority.load(mesh_config.mesh_home.ca, mesh_config.mesh_home.trust_bundle)
    paths = ca.issue(POLICY, CertPaths(tmp_path / "policy.pem", tmp_path / "policy.key"))
    srv = transport.create_server(AccessTable.parse({"rules": [{"methods": [f"/{SERVICE}/*"],
                                                                "callers": [str(CAPABILITY)]}]}))
    de, ser = policy_pb2.AuthorizeRequest.FromString, policy_pb2.AuthorizeResponse.SerializeToString
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
        "Unary": grpc.unary_unary_rpc_method_handler(_ids, request_deserializer=de, response_serializer=ser),
        "Stream": grpc.unary_stream_rpc_method_handler(_ids_streamed, request_deserializer=de,
                                                       response_serializer=ser),
        "Caller": grpc.unary_unary_rpc_method_handler(_caller, request_deserializer=de, response_serializer=ser),
        "CallerStream": grpc.unary_stream_rpc_method_handler(_callers_streamed, request_deserializer=de,
                                                             response_serializer=ser)}),))
    port = transport.bind(srv, "127.0.0.1", 0, transport.TlsFiles.of(paths, ca.bundle_path))
    srv.start()
    ch = transport.secure_channel(f"127.0.0.1:{port}", _files(mesh_config, CAPABILITY), POLICY)
    try:
        yield ch
    finally:
        ch.close()
        srv.stop(None)


def _unary(channel: grpc.Channel) -> dict[str, str]:
    call = channel.unary_unary(f"/{SERVICE}/Unary", request_serializer=policy_pb2.AuthorizeRequest.SerializeToString,
                               response_deserializer=policy_pb2.AuthorizeResponse.FromString)
    return dict(json.loads(call(policy_pb2.AuthorizeRequest(), timeout=5).explanation))


def _in_trace() -> trace.Span:
    return trace.NonRecordingSpan(trace.SpanContext(int(TRACE, 16), 0x00F067AA0BA902B7, is_remote=True,
                                                    trace_flags=trace.TraceFlags(1)))


def test_a_unary_call_runs_in_the_callers_trace_and_baggage(channel: grpc.Channel) -> None:
    with trace.use_span(_in_trace()), telemetry.mesh_ids(execution_id="exe-1", correlation_id="corr-1"):
        ids = _unary(channel)
    assert ids == {"trace_id": TRACE, telemetry.EXECUTION_ID: "exe-1", telemetry.CORRELATION_ID: "corr-1"}


def test_a_streamed_call_has_them_at_every_step(channel: grpc.Channel) -> None:
    call = channel.unary_stream(f"/{SERVICE}/Stream",
                                request_serializer=policy_pb2.AuthorizeRequest.SerializeToString,
                                response_deserializer=policy_pb2.AuthorizeResponse.FromString)
    with trace.use_span(_in_trace()), telemetry.mesh_ids(execution_id="exe-2"):
        answers = [json.loads(r.explanation) for r in call(policy_pb2.AuthorizeRequest(), timeout=5)]
    assert answers == [{"trace_id": TRACE, telemetry.EXECUTION_ID: "exe-2"}] * 2


def test_a_call_without_a_trace_gets_one_of_its_own(channel: grpc.Channel) -> None:
    first, second = _unary(channel)["trace_id"], _unary(channel)["trace_id"]
    assert len(first) == 32 and int(first, 16) != 0 and first != second


def test_calls_in_one_trace_reuse_its_context_and_another_baggage_is_its_own(channel: grpc.Channel) -> None:
    with trace.use_span(_in_trace()):
        with telemetry.mesh_ids(execution_id="exe-3"):
            first, again = _unary(channel), _unary(channel)
        with telemetry.mesh_ids(execution_id="exe-4"):
            other = _unary(channel)
    assert first == again == {"trace_id": TRACE, telemetry.EXECUTION_ID: "exe-3"}
    assert other == {"trace_id": TRACE, telemetry.EXECUTION_ID: "exe-4"}


def test_the_incoming_context_is_a_function_of_the_trace_headers_only() -> None:
    headers = [("traceparent", f"00-{TRACE}-00f067aa0ba902b7-01"), ("baggage", "agentmesh.execution_id=exe-5")]
    first = telemetry.incoming_context([*headers, ("user-agent", "a")])
    assert telemetry.incoming_context([("user-agent", "b"), *headers]) is first  # remembered
    changed = telemetry.incoming_context([headers[0], ("baggage", "agentmesh.execution_id=exe-6")])
    assert changed is not first
    from opentelemetry import baggage
    assert baggage.get_baggage(telemetry.EXECUTION_ID, changed) == "exe-6"
    # Headers too long to keep are read again each time (the same ids, another context).
    long = [headers[0], ("baggage", "agentmesh.execution_id=exe-9,x=" + "y" * 3000)]
    assert telemetry.incoming_context(long) is not telemetry.incoming_context(long)
    assert baggage.get_baggage(telemetry.EXECUTION_ID, telemetry.incoming_context(long)) == "exe-9"
    # Without a trace each call starts its own, and none is remembered.
    a, b = telemetry.incoming_context([]), telemetry.incoming_context([])
    trace_ids = {trace.get_current_span(c).get_span_context().trace_id for c in (a, b)}
    assert len(trace_ids) == 2


def test_a_call_gets_the_default_deadline_and_the_current_trace_headers() -> None:
    defaults = transport.CallDefaults(7.0)
    request = object()
    assert defaults.apply((request,), {}) == ((request,), {"timeout": 7.0})  # no trace: no headers
    with trace.use_span(_in_trace()), telemetry.mesh_ids(execution_id="exe-7"):
        args, kwargs = defaults.apply((request, 2.5, (("x-a", "1"),)), {})
        again = defaults.apply((request,), {"timeout": None})[1]
    assert args == (request,) and kwargs["timeout"] == 2.5
    metadata = dict(kwargs["metadata"])
    assert metadata["x-a"] == "1" and metadata["traceparent"].split("-")[1] == TRACE
    assert metadata["baggage"] == "agentmesh.execution_id=exe-7"
    assert again["timeout"] == 7.0 and dict(again["metadata"]) == {k: v for k, v in metadata.items() if k != "x-a"}
    with trace.use_span(_in_trace()), telemetry.mesh_ids(execution_id="exe-8"):
        moved = dict(defaults.apply((request,), {})[1]["metadata"])
    assert moved["baggage"] == "agentmesh.execution_id=exe-8"  # a new context, new headers


def test_call_arguments_by_position_keep_their_meaning_and_misuse_is_refused() -> None:
    defaults = transport.CallDefaults(7.0)
    request, creds = object(), object()
    args, kwargs = defaults.apply((request, 3.0, None, creds, True), {})
    assert args == (request,)
    assert kwargs == {"timeout": 3.0, "metadata": None, "credentials": creds, "wait_for_ready": True}
    with pytest.raises(TypeError):
        defaults.apply((request, 1.0, None, None, None, None, "extra"), {})
    with pytest.raises(TypeError):
        defaults.apply((request, 1.0), {"timeout": 2.0})


def test_the_servicer_gets_the_caller_admitted_on_its_own_call_only(channel: grpc.Channel) -> None:
    unary = channel.unary_unary(f"/{SERVICE}/Caller", request_serializer=policy_pb2.AuthorizeRequest.SerializeToString,
                                response_deserializer=policy_pb2.AuthorizeResponse.FromString)
    streamed = channel.unary_stream(f"/{SERVICE}/CallerStream",
                                    request_serializer=policy_pb2.AuthorizeRequest.SerializeToString,
                                    response_deserializer=policy_pb2.AuthorizeResponse.FromString)
    expected = {"caller": str(CAPABILITY), "other call": "refused"}
    for _ in range(2):
        assert json.loads(unary(policy_pb2.AuthorizeRequest(), timeout=5).explanation) == expected
    assert [json.loads(r.explanation) for r in streamed(policy_pb2.AuthorizeRequest(), timeout=5)] == [expected] * 2
