"""Event-triggered work (PRD §44, §28): a SYSTEM actor reads, recommends, and changes nothing.

``TrainingExpired`` (from the event fabric; here the ``HandleEvent`` RPC or
``agentmesh events training-expired``) starts an execution on the authority of
the system actor ``TrainingExpirationScanner``, whose policy delegation allows
reading only:

1. the training agent checks the records: is the training really expired?
   The event alone is not evidence;
2. if it is, the work-permit agent finds the permits that need that training
   and have the worker assigned (RELEASED → suspend, PENDING_RELEASE → hold);
3. affected permits go to the Decision Center as one RECOMMENDATION review: a
   human decides. Nothing is suspended by the system.

The same event id (per tenant) starts one execution only. The event is
accepted only once its EXECUTION_STARTED record is durable in the audit log:
otherwise UNAVAILABLE ``AUDIT_UNAVAILABLE``, nothing starts, and the same event
may be sent again.
"""

from __future__ import annotations

import datetime as dt
import uuid

from google.protobuf import json_format

from agentmesh import errors, telemetry
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.dispatch import Actor, TaskDispatcher, now_ts
from supervisor_svc.errors import TenantNotConfigured
from supervisor_svc.executions import ExecutionStore
from supervisor_svc.tenants import TenantSource

SYSTEM_ACTOR = "TrainingExpirationScanner"
TRAINING_AGENT = "training-agent"
WORK_PERMIT_AGENT = "work-permit-agent"


def _verdict(result: common_pb2.AgentResult | None) -> str:
    if result is None or "verdict" not in result.result.fields:
        return "UNKNOWN"
    return result.result.fields["verdict"].string_value


class EventHandler:
    """Runs event-triggered executions (see the module docstring)."""

    def __init__(self, *, store: ExecutionStore, dispatcher: TaskDispatcher, tenants: TenantSource) -> None:
        self._store = store
        self._dispatch = dispatcher
        self._tenants = tenants

    def handle(self, req: pb.HandleEventRequest, caller: str) -> tuple[pb.Execution, bool]:
        """Validates the event and runs its execution; returns it and whether the event was a duplicate."""
        if not req.event_id.strip():
            raise errors.InvalidArgument("event_id is required", reason="MISSING_FIELD", field="event_id")
        if not req.tenant_id:
            raise errors.InvalidArgument("tenant_id is required", reason="MISSING_FIELD", field="tenant_id")
        try:
            self._tenants.get(req.tenant_id)
        except TenantNotConfigured as err:
            raise errors.FailedPrecondition(err.message, reason=err.reason, field="tenant_id") from err
        if req.WhichOneof("event") != "training_expired":
            raise errors.InvalidArgument("the event is required (training_expired)", reason="MISSING_FIELD",
                                         field="training_expired")
        event = req.training_expired
        for name in ("worker_id", "training_code", "expired_on"):
            if not getattr(event, name).strip():
                raise errors.InvalidArgument(f"training_expired.{name} is required", reason="MISSING_FIELD",
                                             field=f"training_expired.{name}")
        try:
            dt.date.fromisoformat(event.expired_on)
        except ValueError as err:
            raise errors.InvalidArgument("training_expired.expired_on must be an ISO date (YYYY-MM-DD)",
                                         reason="INVALID_DATE", field="training_expired.expired_on") from err

        execution_id = f"exe-{uuid.uuid4().hex[:16]}"
        owner = self._store.claim_event(req.tenant_id, req.event_id, execution_id)
        if owner != execution_id:
            existing = self._store.get(owner)
            if existing is None:
                # Claimed by a call still starting it: never run the same event twice.
                raise errors.Aborted(f"event {req.event_id!r} is being handled by execution {owner}",
                                     reason="EVENT_IN_PROGRESS", field="event_id")
            return existing, True
        correlation_id = req.correlation_id or f"corr-{uuid.uuid4().hex[:12]}"
        with telemetry.mesh_ids(execution_id=execution_id, correlation_id=correlation_id):
            ids = telemetry.current_ids()
            ex = pb.Execution(
                execution_id=execution_id, status=pb.EXECUTION_STATUS_RUNNING,
                request_text=f"TrainingExpired {event.worker_id} {event.training_code} on {event.expired_on}",
                intent=pb.EXECUTION_INTENT_TRAINING_EXPIRED, tenant_id=req.tenant_id,
                actor_type=common_pb2.ACTOR_TYPE_SYSTEM,
                system_actor=SYSTEM_ACTOR, started_at=now_ts(),
                trace=common_pb2.TraceContext(trace_id=ids.get("trace_id", ""), correlation_id=correlation_id,
                                              execution_id=execution_id))
            try:
                # The event is accepted once its record is durable; otherwise nothing starts.
                self._dispatch.govern(audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED,
                                      outcome=audit_pb2.AUDIT_OUTCOME_PENDING, execution_id=execution_id,
                                      tenant_id=req.tenant_id,
                                      reason_codes=["event=TrainingExpired", f"event_id={req.event_id}",
                                                    f"actor=system:{SYSTEM_ACTOR}", f"caller={caller}"],
                                      resource=f"worker:{event.worker_id}")
            except errors.Unavailable:
                self._store.release_event(req.tenant_id, req.event_id, execution_id)
                raise
            self._store.save(ex)
            self._run(ex, event)
            ex.finished_at.CopyFrom(now_ts())
            self._store.save(ex)
            self._dispatch.narrate(
                audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED,
                outcome=audit_pb2.AUDIT_OUTCOME_FAILURE if ex.status == pb.EXECUTION_STATUS_FAILED
                else audit_pb2.AUDIT_OUTCOME_SUCCESS,
                execution_id=execution_id, tenant_id=req.tenant_id, analysis_decision=ex.decision,
                reason_codes=[pb.ExecutionStatus.Name(ex.status), ex.reason, *ex.recommended_resources])
        return ex, False

    def _run(self, ex: pb.Execution, event: pb.TrainingExpired) -> None:
        actor = Actor(tenant_id=ex.tenant_id, user_id=SYSTEM_ACTOR, actor_type=common_pb2.ACTOR_TYPE_SYSTEM)
        who = f"{event.worker_id}'s {event.training_code}"
        training = self._dispatch.run(
            ex, agent_id=TRAINING_AGENT, objective=f"Check whether {who} is expired on {event.expired_on}",
            input={"operation": "worker_training", "worker_id": event.worker_id,
                   "training_code": event.training_code, "on_date": event.expired_on},
            capabilities=["training.getStatus"], actor=actor)
        verdict = _verdict(training.result)
        if training.result is None or verdict == "UNKNOWN":
            ex.status = pb.EXECUTION_STATUS_FAILED
            ex.decision = common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE
            why = training.failure or (training.result.error_reason if training.result else "") or "unreadable"
            ex.reason = f"TRAINING_UNVERIFIED: {why}"
            ex.summary = f"Could not confirm from the records that {who} expired ({why}); nothing is recommended."
            return
        if verdict == "PASS":
            ex.status = pb.EXECUTION_STATUS_SUCCEEDED
            ex.reason = "TRAINING_STILL_VALID"
            ex.summary = (f"The event says {who} expired on {event.expired_on}, but the training records show it "
                          "valid on that date; nothing is recommended.")
            return
        permits = self._dispatch.run(
            ex, agent_id=WORK_PERMIT_AGENT,
            objective=f"Find the permits that need {event.training_code} and have {event.worker_id} assigned",
            input={"operation": "affected_by_training", "worker_id": event.worker_id,
                   "training_code": event.training_code},
            capabilities=["workPermit.search", "workPermit.get"], actor=actor)
        result = permits.result
        if result is None or result.status == common_pb2.RESULT_STATUS_FAILED:
            ex.status = pb.EXECUTION_STATUS_FAILED
            ex.decision = common_pb2.ANALYSIS_DECISION_INSUFFICIENT_EVIDENCE
            why = permits.failure or (result.error_reason if result else "")
            ex.reason = f"PERMITS_UNKNOWN: {why}"
            ex.summary = f"{who} is expired, but the affected permits could not be found ({why})."
            return
        affected = json_format.MessageToDict(result.result).get("affected_permits", [])
        if not affected:
            ex.status = pb.EXECUTION_STATUS_SUCCEEDED
            ex.reason = "NO_PERMIT_AFFECTED"
            ex.summary = f"{who} is expired; no open or released permit needs it."
            return
        lines = [f"{p.get('permit_id')} ({p.get('status')}): {p.get('recommendation')}" for p in affected]
        ex.recommended_resources.extend(f"permit:{p.get('permit_id')}" for p in affected)
        ex.decision = common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW
        ex.status = pb.EXECUTION_STATUS_AWAITING_REVIEW
        ex.reason = "HUMAN_DECISION_REQUIRED: the system actor reads and recommends; a human decides"
        ex.summary = (f"{who} expired on {event.expired_on}. Recommended (a human decides; nothing was changed): "
                      + "; ".join(lines))
        review = dc_pb2.ReviewItem(
            execution_id=ex.execution_id, tenant_id=ex.tenant_id, kind=dc_pb2.REVIEW_KIND_RECOMMENDATION,
            status=dc_pb2.REVIEW_STATUS_OPEN, requester=SYSTEM_ACTOR, summary=ex.summary,
            recommended_resources=list(ex.recommended_resources), analysis_decision=ex.decision,
            created_at=now_ts(), updated_at=now_ts())
        review_id = self._store.add_review(review)
        self._dispatch.narrate(audit_pb2.AUDIT_EVENT_TYPE_REVIEW_CREATED, outcome=audit_pb2.AUDIT_OUTCOME_PENDING,
                               execution_id=ex.execution_id, tenant_id=ex.tenant_id,
                               reason_codes=[review_id, "RECOMMENDATION", *ex.recommended_resources],
                               analysis_decision=ex.decision)
