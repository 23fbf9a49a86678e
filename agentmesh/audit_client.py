"""Recording to the audit service from any role.

Services never build ``AppendRecordRequest`` by hand: they call
:meth:`AuditRecorder.record`, which fills the trace, correlation and execution
ids from the current context. The recording identity is not sent at all —
the audit service stamps it from the caller's mTLS certificate.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import grpc

from agentmesh import errors, telemetry, transport
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import audit_service_pb2_grpc as audit_grpc

log = logging.getLogger(__name__)


class AuditRecorder:
    """Appends records to the audit service over an mTLS channel.

    :meth:`record` returns once the record is durable. :meth:`record_later`
    sends it without waiting, pipelined with other records (the audit
    service commits them together); :meth:`wait` waits until the ones sent
    are durable. Use ``record`` where the record must exist before something
    else happens (a mutation, a reply about a refusal), ``record_later`` for
    the narrative of work in progress, and ``wait`` on those before answering.
    """

    def __init__(self, channel: grpc.Channel, *, timeout_s: float = 5.0) -> None:
        self._stub = audit_grpc.AuditServiceStub(channel)
        self._timeout = timeout_s

    def build(self, event_type: int, **fields: Any) -> audit_pb2.AuditRecord:
        """The record, with trace / execution / correlation ids from the current context."""
        rec = audit_pb2.AuditRecord(event_type=event_type, **fields)  # type: ignore[arg-type]
        ids = telemetry.current_ids()
        rec.trace_id = rec.trace_id or ids.get("trace_id", "")
        rec.execution_id = rec.execution_id or ids.get(telemetry.EXECUTION_ID, "")
        rec.correlation_id = rec.correlation_id or ids.get(telemetry.CORRELATION_ID, "")
        return rec

    def record(self, event_type: int, **fields: Any) -> audit_pb2.AppendRecordResponse:
        """Appends one record and returns once it is durable; raises a MeshError on failure."""
        try:
            resp: audit_pb2.AppendRecordResponse = self._stub.AppendRecord(
                audit_pb2.AppendRecordRequest(record=self.build(event_type, **fields)), timeout=self._timeout)
        except grpc.RpcError as err:
            raise errors.from_rpc_error(err) from err
        return resp

    def record_later(self, event_type: int, **fields: Any) -> grpc.Future:
        """Sends one record without waiting for it; pass the returned future to :meth:`wait`."""
        return self._stub.AppendRecord.future(
            audit_pb2.AppendRecordRequest(record=self.build(event_type, **fields)), timeout=self._timeout)

    @staticmethod
    def wait(sent: Iterable[grpc.Future]) -> bool:
        """Waits until records sent with :meth:`record_later` are durable; False (logged) if any failed."""
        ok = True
        for future in sent:
            try:
                future.result()
            except grpc.RpcError as err:
                log.error("audit record not written: %s", errors.from_rpc_error(err))
                ok = False
        return ok

    def denial_hook(self) -> transport.DenialHook:
        """A hook that records every call the interceptor refused."""

        def hook(call: transport.DeniedCall) -> None:
            self.record(
                audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED,
                outcome=audit_pb2.AUDIT_OUTCOME_DENIED,
                reason_codes=[call.reason, f"caller={call.caller or 'none'}", f"method={call.method}"],
            )

        return hook
