"""Event-triggered work (PRD §44, §28): a SYSTEM actor reads, recommends, and changes nothing.

Which events exist and what each does is data: ``events`` of a domain
definition (:class:`~supervisor_svc.definitions.EventDef`). An event arrives
as a ``HandleEventRequest`` (the RPC, or e.g. ``agentmesh events
training-expired``) whose ``event`` field names its kind (``training_expired``);
the definition says its fields (each required; ``date`` ones ISO dates), the
system actor on whose authority it runs, and its steps: one task each, on a
named agent, with the capabilities the step needs, ending the execution on
the step's verdict (``then``: PASS / FAIL / UNKNOWN, FAILED when there is no
usable result) or going on to the next. The last step may ``recommend``:
each item of a list in its result becomes a recommended resource, and all of
them one RECOMMENDATION review in the Decision Center — a human decides.

The work-permit domain's ``training_expired``, for example:

1. the training agent checks the records: is the training really expired?
   The event alone is not evidence;
2. if it is, the work-permit agent finds the permits that need that training
   and have the worker assigned (RELEASED → suspend, PENDING_RELEASE → hold);
3. affected permits go to the Decision Center as one RECOMMENDATION review.
   Nothing is suspended by the system.

The same event id (per tenant) starts one execution only. The event is
accepted only once its EXECUTION_STARTED record is durable in the audit log:
otherwise UNAVAILABLE ``AUDIT_UNAVAILABLE``, nothing starts, and the same event
may be sent again.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from google.protobuf import json_format

from agentmesh import errors, telemetry
from agentmesh.structs import struct_dict
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.definitions import (
    DomainCatalog,
    EventDef,
    EventEnd,
    EventStep,
    default_catalog,
    execution_intent,
)
from supervisor_svc.dispatch import Actor, Dispatched, TaskDispatcher, now_ts
from supervisor_svc.errors import TenantNotConfigured
from supervisor_svc.executions import ExecutionStore
from supervisor_svc.tenants import TenantSource


def _verdict(result: common_pb2.AgentResult | None) -> str:
    if result is None or "verdict" not in result.result.fields:
        return "UNKNOWN"
    return result.result.fields["verdict"].string_value


class EventHandler:
    """Runs event-triggered executions (see the module docstring)."""

    def __init__(self, *, store: ExecutionStore, dispatcher: TaskDispatcher, tenants: TenantSource,
                 domains: DomainCatalog | None = None) -> None:
        self._store = store
        self._dispatch = dispatcher
        self._tenants = tenants
        self._domains = domains or default_catalog()

    def _fields(self, req: pb.HandleEventRequest) -> tuple[EventDef, dict[str, str]]:
        kind = req.WhichOneof("event")
        definition = self._domains.event(kind) if kind else None
        if kind is None or definition is None:
            known = ", ".join(sorted(e for d in self._domains.domains for e in d.events)) or "none"
            raise errors.InvalidArgument(f"the event is required ({known})", reason="MISSING_FIELD",
                                         field=kind or "event")
        message = getattr(req, kind)
        data = json_format.MessageToDict(message, preserving_proto_field_name=True)
        values: dict[str, str] = {}
        for name, field_kind in definition.fields.items():
            value = data.get(name)
            if not isinstance(value, str) or not value.strip():
                raise errors.InvalidArgument(f"{kind}.{name} is required", reason="MISSING_FIELD",
                                             field=f"{kind}.{name}")
            if field_kind == "date":
                try:
                    dt.date.fromisoformat(value)
                except ValueError as err:
                    raise errors.InvalidArgument(f"{kind}.{name} must be an ISO date (YYYY-MM-DD)",
                                                 reason="INVALID_DATE", field=f"{kind}.{name}") from err
            values[name] = value
        return definition, values

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
        definition, values = self._fields(req)
        for name, template in definition.values.items():
            values[name] = template.render(values)

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
        event_name = "".join(part.capitalize() for part in definition.kind.split("_"))
        with telemetry.mesh_ids(execution_id=execution_id, correlation_id=correlation_id):
            ids = telemetry.current_ids()
            ex = pb.Execution(
                execution_id=execution_id, status=pb.EXECUTION_STATUS_RUNNING,
                request_text=definition.request_text.render(values),
                intent=execution_intent(definition.kind.upper()), intent_kind=definition.kind.upper(),
                domain=definition.domain, tenant_id=req.tenant_id,
                actor_type=common_pb2.ACTOR_TYPE_SYSTEM, system_actor=definition.system_actor, started_at=now_ts(),
                trace=common_pb2.TraceContext(trace_id=ids.get("trace_id", ""), correlation_id=correlation_id,
                                              execution_id=execution_id))
            try:
                # The event is accepted once its record is durable; otherwise nothing starts.
                self._dispatch.govern(audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_STARTED,
                                      outcome=audit_pb2.AUDIT_OUTCOME_PENDING, execution_id=execution_id,
                                      tenant_id=req.tenant_id,
                                      reason_codes=[f"event={event_name}", f"event_id={req.event_id}",
                                                    f"actor=system:{definition.system_actor}", f"caller={caller}",
                                                    f"domain={definition.domain}"],
                                      resource=definition.resource.render(values))
            except errors.Unavailable:
                self._store.release_event(req.tenant_id, req.event_id, execution_id)
                raise
            self._store.save(ex)
            self._run(ex, definition, values)
            ex.finished_at.CopyFrom(now_ts())
            self._store.save(ex)
            self._dispatch.narrate(
                audit_pb2.AUDIT_EVENT_TYPE_EXECUTION_FINISHED,
                outcome=audit_pb2.AUDIT_OUTCOME_FAILURE if ex.status == pb.EXECUTION_STATUS_FAILED
                else audit_pb2.AUDIT_OUTCOME_SUCCESS,
                execution_id=execution_id, tenant_id=req.tenant_id, analysis_decision=ex.decision,
                reason_codes=[pb.ExecutionStatus.Name(ex.status), ex.reason, *ex.recommended_resources])
        return ex, False

    def _run(self, ex: pb.Execution, definition: EventDef, values: dict[str, str]) -> None:
        actor = Actor(tenant_id=ex.tenant_id, user_id=definition.system_actor, actor_type=common_pb2.ACTOR_TYPE_SYSTEM)
        for step in definition.steps:
            done = self._dispatch.run(
                ex, agent_id=step.agent, objective=step.objective.render(values),
                input={k: t.render(values) for k, t in step.input.items()},
                capabilities=list(step.capabilities), actor=actor)
            end = self._end_of(step, done)
            if end is not None:
                why = done.failure or (done.result.error_reason if done.result else "") or "unreadable"
                self._end(ex, end, {**values, "why": why})
                return
            if step.recommend is not None:
                self._recommend(ex, step, done, values)
                return
        ex.status = pb.EXECUTION_STATUS_SUCCEEDED

    @staticmethod
    def _end_of(step: EventStep, done: Dispatched) -> EventEnd | None:
        """How the step ends the execution, or None to go on."""
        result = done.result
        if result is None or result.status == common_pb2.RESULT_STATUS_FAILED:
            # No usable result: its own end, else what an UNKNOWN verdict does; never "next" silently.
            chosen = step.then.get("FAILED", step.then.get("UNKNOWN"))
            if chosen is None:
                return EventEnd("FAILED", _fixed(f"{step.step_id.upper()}_FAILED: {{why}}"),
                                _fixed(f"The {step.step_id} step gave no usable result ({{why}}); nothing is "
                                       "recommended."), "INSUFFICIENT_EVIDENCE")
            return chosen
        return step.then.get(_verdict(result))

    @staticmethod
    def _end(ex: pb.Execution, end: EventEnd, values: dict[str, Any]) -> None:
        ex.status = pb.EXECUTION_STATUS_SUCCEEDED if end.status == "SUCCEEDED" else pb.EXECUTION_STATUS_FAILED
        if end.decision != "UNSPECIFIED":
            ex.decision = getattr(common_pb2, f"ANALYSIS_DECISION_{end.decision}")
        ex.reason = end.reason.render(values)
        ex.summary = end.summary.render(values)

    def _recommend(self, ex: pb.Execution, step: EventStep, done: Dispatched, values: dict[str, str]) -> None:
        recommend = step.recommend
        assert recommend is not None and done.result is not None
        items = struct_dict(done.result.result).get(recommend.items, [])
        items = [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
        if not items:
            self._end(ex, recommend.none, values)
            return
        lines = [recommend.line.render(i) for i in items]
        ex.recommended_resources.extend(recommend.resource.render(i) for i in items)
        ex.decision = common_pb2.ANALYSIS_DECISION_REQUIRES_REVIEW
        ex.status = pb.EXECUTION_STATUS_AWAITING_REVIEW
        ex.reason = recommend.reason.render(values)
        ex.summary = recommend.summary.render({**values, "lines": "; ".join(lines)})
        review = dc_pb2.ReviewItem(
            execution_id=ex.execution_id, tenant_id=ex.tenant_id, kind=dc_pb2.REVIEW_KIND_RECOMMENDATION,
            status=dc_pb2.REVIEW_STATUS_OPEN, requester=ex.system_actor, summary=ex.summary,
            recommended_resources=list(ex.recommended_resources), analysis_decision=ex.decision,
            created_at=now_ts(), updated_at=now_ts())
        review_id = self._store.add_review(review)
        self._dispatch.narrate(audit_pb2.AUDIT_EVENT_TYPE_REVIEW_CREATED, outcome=audit_pb2.AUDIT_OUTCOME_PENDING,
                               execution_id=ex.execution_id, tenant_id=ex.tenant_id,
                               reason_codes=[review_id, "RECOMMENDATION", *ex.recommended_resources],
                               analysis_decision=ex.decision)


def _fixed(text: str) -> Any:
    from supervisor_svc.definitions import Template

    return Template(text)
