"""A real OTLP/gRPC trace receiver running in the test process."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


def _value(value: Any) -> Any:
    """An OTLP attribute value as plain Python (string, int, float or bool)."""
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


class OtlpReceiver(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    """Collects exported spans as plain dicts."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    def Export(self, request: Any, context: Any) -> Any:
        with self._lock:
            for rs in request.resource_spans:
                service = next((a.value.string_value for a in rs.resource.attributes
                                if a.key == "service.name"), "")
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        self.spans.append({
                            "service": service,
                            "name": span.name,
                            "kind": span.kind,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_id": span.parent_span_id.hex(),
                            "attributes": {a.key: a.value.string_value for a in span.attributes},
                            "events": [{"name": e.name, "attributes": {a.key: _value(a.value) for a in e.attributes}}
                                       for e in span.events],
                        })
        return trace_service_pb2.ExportTraceServiceResponse()

    def __enter__(self) -> OtlpReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)

    def wait_for(self, predicate: Any, timeout_s: float = 15.0) -> list[dict[str, Any]]:
        """Waits until the collected spans satisfy ``predicate``; returns them."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                spans = list(self.spans)
            if predicate(spans):
                return spans
            time.sleep(0.1)
        with self._lock:
            return list(self.spans)
