"""What one answer of a batch carries: an error as its google.rpc.Status and back, and the caller span of one call."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import status_pb2
from opentelemetry import context, trace

from agentmesh import errors, telemetry

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


@pytest.mark.parametrize("error", [
    errors.PermissionDenied("no", reason="GRANT_RESOURCE_NOT_LISTED", field="scope"),
    errors.Unavailable("down", reason="POLICY_UNAVAILABLE"),
    errors.DeadlineExceeded("late", reason="EXTERNAL_TIMEOUT", metadata={"after_ms": "900"}),
    errors.NotFound("not found", reason="RESOURCE_NOT_FOUND"),
])
def test_an_error_travels_as_its_status_and_comes_back_the_same(error: errors.MeshError) -> None:
    back = errors.from_status(status_pb2.Status.FromString(error.to_status().SerializeToString()))
    assert type(back) is type(error)
    assert (back.code, back.reason, back.metadata, back.message) == (error.code, error.reason, error.metadata,
                                                                     error.message)


def test_a_status_with_an_unknown_code_or_no_error_info_is_still_an_error() -> None:
    odd = errors.from_status(status_pb2.Status(code=99, message="what"))
    assert odd.code == grpc.StatusCode.INTERNAL and odd.reason == "INTERNAL" and odd.message == "what"
    plain = errors.from_status(status_pb2.Status(code=grpc.StatusCode.UNAVAILABLE.value[0]))
    assert isinstance(plain, errors.Unavailable) and plain.message == "UNAVAILABLE"


def _in_trace(trace_id: str = TRACE) -> context.Context:
    parent = trace.SpanContext(trace_id=int(trace_id, 16), span_id=int("1" * 16, 16), is_remote=True,
                               trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))


def test_a_call_named_by_its_traceparent_goes_under_that_span_of_the_same_trace() -> None:
    with telemetry.attached(_in_trace()):
        ctx = telemetry.under_traceparent(f"00-{TRACE}-{SPAN}-01")
        assert ctx is not None
        assert telemetry.traceparent_of(ctx) == f"00-{TRACE}-{SPAN}-01"


@pytest.mark.parametrize("value", ["", "garbage", f"00-{TRACE}-{'0' * 16}-01", f"01-{TRACE}-{SPAN}-01",
                                   f"00-{'a' * 32}-{SPAN}-01", f"00-{TRACE.upper()}-{SPAN}-01"])
def test_anything_else_is_ignored(value: str) -> None:
    with telemetry.attached(_in_trace()):
        assert telemetry.under_traceparent(value) is None


def test_without_a_current_trace_nothing_is_taken_from_a_traceparent() -> None:
    with telemetry.attached(context.Context()):
        assert telemetry.under_traceparent(f"00-{TRACE}-{SPAN}-01") is None
        assert telemetry.traceparent_of() == ""
