"""Tracing for every process: OpenTelemetry spans, OTLP export, mesh ids in baggage.

The trace id travels in the W3C ``traceparent`` header and the correlation and
execution ids in W3C ``baggage``, both as gRPC metadata, injected and
extracted by the OpenTelemetry gRPC interceptors every server and channel use.
Spans are exported over OTLP/gRPC when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set,
so Jaeger (which ingests OTLP) shows one trace across all processes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Iterable, Iterator

from opentelemetry import baggage, context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

EXECUTION_ID = "agentmesh.execution_id"
CORRELATION_ID = "agentmesh.correlation_id"
CALLER_ID = "agentmesh.caller_spiffe_id"
MESH_KEYS = (EXECUTION_ID, CORRELATION_ID)
"""The baggage entries the mesh reads; a server validates them at the edge."""

_provider: TracerProvider | None = None
_records_nothing = False
"""The provider :func:`setup_tracing` installed exports nothing (no OTLP endpoint): see :func:`tracer`."""
_NO_SPANS = trace.NoOpTracer()


def setup_tracing(service_name: str) -> TracerProvider:
    """Installs the process-wide tracer provider once; exports only if an endpoint is set."""
    global _provider, _records_nothing
    if _provider is not None:
        return _provider
    exporting = bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    # Without an exporter nobody reads the spans: keep ids and propagation
    # (audit records carry the trace id) but skip recording, which costs a
    # few hundred microseconds per call on the hot path.
    # When exporting, record every span whatever the caller sampled: the mesh's
    # own traces must be complete even when a caller does not trace.
    sampler = sampling.ALWAYS_ON if exporting else sampling.ALWAYS_OFF
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}), sampler=sampler)
    if exporting:
        # Imported lazily: the exporters pull in a gRPC client nobody needs otherwise.
        from opentelemetry import metrics
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        # The agent metrics of PRD §52–53 (task latency, outcomes, handoffs,
        # conflicts, escalations) go out over the same OTLP endpoint.
        metrics.set_meter_provider(MeterProvider(
            resource=Resource.create({"service.name": service_name}),
            metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())]))
    trace.set_tracer_provider(provider)
    _provider = provider
    _records_nothing = not exporting
    return provider


def exporting() -> bool:
    """Whether spans leave this process (an OTLP endpoint is configured)."""
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def shutdown_tracing() -> None:
    """Flushes pending spans; called on graceful shutdown."""
    if _provider is not None:
        _provider.shutdown()


def tracer(name: str = "agentmesh") -> trace.Tracer:
    """A tracer from the installed provider (one per name: a proxy until the provider is set, then it).

    While the provider :func:`setup_tracing` installed exports nothing, a tracer that makes no spans: a span
    started is the one already current (OpenTelemetry's no-op tracer), so no span id is drawn and the calls made
    under it carry the ``traceparent`` their process received. Every record keeps its trace id, and a server
    that sees the same headers again reuses the context it made of them (:func:`incoming_context`). A provider
    installed by anyone else (a test's in-memory exporter, say) gets its spans as always.
    """
    if _records_nothing and trace.get_tracer_provider() is _provider:
        return _NO_SPANS
    return _named_tracer(name)


@functools.cache
def _named_tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)


@contextlib.contextmanager
def mesh_ids(*, execution_id: str | None = None, correlation_id: str | None = None) -> Iterator[None]:
    """Puts execution / correlation ids in baggage so outgoing calls carry them."""
    ctx = context.get_current()
    if execution_id:
        ctx = baggage.set_baggage(EXECUTION_ID, execution_id, ctx)
    if correlation_id:
        ctx = baggage.set_baggage(CORRELATION_ID, correlation_id, ctx)
    with attached(ctx):
        yield


def baggage_ids() -> dict[str, str]:
    """The mesh ids present in the current context's baggage, as received (unchecked)."""
    return {k: str(v) for k in MESH_KEYS if (v := baggage.get_baggage(k)) is not None}


@contextlib.contextmanager
def without_mesh_ids(keys: Iterable[str] = MESH_KEYS) -> Iterator[None]:
    """Runs the block with these mesh ids removed from baggage (the span stays current).

    Used to refuse a call whose baggage carries an invalid id: the refusal and
    its audit record must not carry that id (the valid ones stay, to find it by).
    """
    ctx = context.get_current()
    for key in keys:
        ctx = baggage.remove_baggage(key, ctx)
    with attached(ctx):
        yield


@contextlib.contextmanager
def attached(ctx: context.Context) -> Iterator[None]:
    """Runs the block in ``ctx`` (then the previous context is current again)."""
    token = context.attach(ctx)
    try:
        yield
    finally:
        context.detach(token)


_TRACEPARENT_RE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def traceparent_of(ctx: context.Context | None = None) -> str:
    """The W3C ``traceparent`` of the span current in ``ctx`` (default: now); "" without a valid span."""
    span_ctx = trace.get_current_span(ctx).get_span_context()
    if not span_ctx.is_valid:
        return ""
    return f"00-{span_ctx.trace_id:032x}-{span_ctx.span_id:016x}-{int(span_ctx.trace_flags):02x}"


def under_traceparent(value: str) -> context.Context | None:
    """The current context with the span ``value`` names as parent, if it names a span of the current trace.

    For one call of a batch that names its own caller span: tracing only, so anything else (empty,
    malformed, all zeros, another trace) is None and the call's spans stay under the current one.
    """
    match = _TRACEPARENT_RE.match(value)
    current = trace.get_current_span().get_span_context()
    if match is None or not current.is_valid:
        return None
    trace_id, span_id, flags = int(match.group(1), 16), int(match.group(2), 16), int(match.group(3), 16)
    if trace_id != current.trace_id or span_id == 0:
        return None
    parent = trace.SpanContext(trace_id=trace_id, span_id=span_id, is_remote=True,
                               trace_flags=trace.TraceFlags(flags & trace.TraceFlags.SAMPLED))
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))


def current_ids() -> dict[str, str]:
    """The mesh ids in the current context (from baggage), plus the trace id."""
    ids = baggage_ids()
    span_ctx = trace.get_current_span().get_span_context()
    if span_ctx.is_valid:
        ids["trace_id"] = format(span_ctx.trace_id, "032x")
    return ids


_IDS = RandomIdGenerator()
_INCOMING_MAX = 4096
_INCOMING_KEPT_CHARS = 2048
"""Headers longer than this together are not kept: the memory stays a few MB whatever callers send."""
_incoming: dict[tuple[str | None, ...], context.Context] = {}
_fields: tuple[object, tuple[str, ...]] = (None, ())


def _propagator_fields() -> tuple[str, ...]:
    """The headers the installed propagators read (``traceparent``, ``tracestate``, ``baggage``)."""
    global _fields
    textmap = propagate.get_global_textmap()
    if _fields[0] is not textmap:
        _fields = (textmap, tuple(sorted(textmap.fields)))
    return _fields[1]


def incoming_context(metadata: Iterable[tuple[str, str | bytes]]) -> context.Context:
    """The context a call arrived with (``traceparent``, ``baggage``), for a server that records no spans.

    What OpenTelemetry's server interceptor would make current, minus its server span:
    the caller's trace (a call without one starts a trace of its own, so every record
    still has a trace id) and the caller's baggage (the mesh ids). The context is a pure
    function of the propagators' headers, so one made for a caller's trace is kept (up to
    4,096, headers up to 2,048 characters) and reused by its later calls with the same
    headers; a new trace is never kept.
    """
    carrier = {key: value for key, value in metadata if isinstance(value, str)}
    key = tuple(carrier.get(name) for name in _propagator_fields())
    ctx = _incoming.get(key)
    if ctx is not None:
        return ctx
    ctx = propagate.extract(carrier)
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return trace.set_span_in_context(trace.NonRecordingSpan(trace.SpanContext(
            trace_id=_IDS.generate_trace_id(), span_id=_IDS.generate_span_id(), is_remote=False,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))), ctx)
    if sum(len(v) for v in key if v) <= _INCOMING_KEPT_CHARS:
        if len(_incoming) >= _INCOMING_MAX:
            _incoming.clear()
        _incoming[key] = ctx
    return ctx


def annotate_current_span(caller: str | None = None) -> None:
    """Copies the mesh ids and the caller identity onto the current server span."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    for key in MESH_KEYS:
        value = baggage.get_baggage(key)
        if value is not None:
            span.set_attribute(key, str(value))
    if caller:
        span.set_attribute(CALLER_ID, caller)
