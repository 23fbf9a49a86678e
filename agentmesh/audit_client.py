"""Recording to the audit service from any role.

Services never build ``AppendRecordRequest`` by hand: they call
:meth:`AuditRecorder.record`, which fills the trace, correlation and execution
ids from the current context. The recording identity is not sent at all —
the audit service stamps it from the caller's mTLS certificate.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from agentmesh import errors, telemetry, transport
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc

log = logging.getLogger(__name__)


class AuditRecorder:
    """Appends records to the audit service over an mTLS channel."""

    def __init__(self, channel: grpc.Channel, *, timeout_s: float = 5.0) -> None:
        self._stub = audit_grpc.AuditServiceStub(channel)
        self._timeout = timeout_s

    def record(self, event_type: int, **fields: Any) -> audit_pb2.AppendRecordResponse:
        """Appends one record and returns once it is durable; raises a MeshError on failure."""
        rec = audit_pb2.AuditRecord(event_type=event_type, **fields)  # type: ignore[arg-type]
        ids = telemetry.current_ids()
        rec.trace_id = rec.trace_id or ids.get("trace_id", "")
        rec.execution_id = rec.execution_id or ids.get(telemetry.EXECUTION_ID, "")
        rec.correlation_id = rec.correlation_id or ids.get(telemetry.CORRELATION_ID, "")
        try:
            resp: audit_pb2.AppendRecordResponse = self._stub.AppendRecord(
                audit_pb2.AppendRecordRequest(record=rec), timeout=self._timeout)
        except grpc.RpcError as err:
            raise errors.from_rpc_error(err) from err
        return resp

    def denial_hook(self) -> transport.DenialHook:
        """A hook that records every call the interceptor refused."""

        def hook(call: transport.DeniedCall) -> None:
            outcome = (audit_pb2.AUDIT_OUTCOME_DENIED)
            self.record(
                audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED,
                outcome=outcome,
                reason_codes=[call.reason, f"caller={call.caller or 'none'}", f"method={call.method}"],
            )

        return hook
