"""``telemetry.tracer()``: no spans where nothing exports, real ones where something does.

Each case runs in a process of its own: a process installs one tracer provider, once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROGRAM = """
import json, sys
from opentelemetry import trace
from agentmesh import telemetry

if sys.argv[1] == "own-provider":
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
else:
    telemetry.setup_tracing("test")
parent = trace.SpanContext(trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736, span_id=0x00F067AA0BA902B7,
                           is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
seen = {}
with telemetry.attached(trace.set_span_in_context(trace.NonRecordingSpan(parent))):
    with telemetry.tracer().start_as_current_span("AgentTask") as span:
        span.set_attribute("agentmesh.task_state", "COMPLETED")
        seen["recording"] = span.is_recording()
        seen["traceparent"] = telemetry.traceparent_of()
        seen["trace_id"] = telemetry.current_ids().get("trace_id")
    started = telemetry.tracer("x").start_span("Policy")
    seen["started_recording"] = started.is_recording()
    started.end()
print(json.dumps(seen))
sys.stdout.flush()
import os
os._exit(0)  # no exporter's flush at exit: the endpoint below listens nowhere
"""

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _run(case: str, **env: str) -> dict[str, object]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    run = subprocess.run([sys.executable, "-c", PROGRAM, case], env={**environ, **env}, capture_output=True,
                         text=True, timeout=60, check=True)
    return json.loads(run.stdout)  # type: ignore[no-any-return]


def test_without_an_exporter_a_span_is_the_callers_and_the_trace_goes_on() -> None:
    seen = _run("mesh")
    assert seen == {"recording": False, "traceparent": CALLER, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                    "started_recording": False}


def test_with_an_exporter_every_span_is_recorded_under_the_callers() -> None:
    seen = _run("mesh", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_BSP_SCHEDULE_DELAY="600000")
    assert seen["recording"] is True and seen["started_recording"] is True
    assert seen["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    traceparent = str(seen["traceparent"])
    assert traceparent.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-") and traceparent != CALLER


def test_a_provider_installed_by_another_gets_its_spans() -> None:
    seen = _run("own-provider")
    assert seen["recording"] is True and seen["started_recording"] is True
    assert seen["traceparent"] != CALLER
