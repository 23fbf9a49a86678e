"""What the pages show, as plain values: executions, reviews, evidence, task graphs.

Every value that comes from data is passed to the templates as text and escaped
there (autoescape); nothing here builds HTML. Fields that are strings today but
closed sets (``Execution.intent``, ``WatchExecutionResponse.event``, the kinds in
``missing``) may become enums: they are read through :func:`field_text` and
:func:`item_text`, which take either.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message

from agentmesh.v1 import common_pb2
from agentmesh.v1 import decision_center_service_pb2 as dc_pb2
from agentmesh.v1 import supervisor_service_pb2 as pb

TERMINAL = frozenset({pb.EXECUTION_STATUS_SUCCEEDED, pb.EXECUTION_STATUS_PARTIAL, pb.EXECUTION_STATUS_FAILED,
                      pb.EXECUTION_STATUS_CANCELLED, pb.EXECUTION_STATUS_STOPPED})


def _prefix(enum: EnumDescriptor) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", enum.name).upper() + "_"


def enum_text(enum: EnumDescriptor, value: int) -> str:
    """``EXECUTION_STATUS_AWAITING_REVIEW`` → ``AWAITING_REVIEW``; an unknown number as itself."""
    known = enum.values_by_number.get(value)
    return known.name.removeprefix(_prefix(enum)) if known is not None else str(value)


def field_text(message: Message, name: str) -> str:
    """A field as text, whether it is a string or an enum (then without the enum's prefix)."""
    fd: Any = message.DESCRIPTOR.fields_by_name[name]
    value = getattr(message, name)
    if fd.enum_type is not None:
        return enum_text(fd.enum_type, int(value))
    return str(value)


def item_text(item: Any) -> str:
    """One element of a repeated field that is a string today and may become a message (kind + text)."""
    if isinstance(item, Message):
        whole = getattr(item, "text", "") if "text" in item.DESCRIPTOR.fields_by_name else ""
        if whole:
            return str(whole)  # the item's own line for a reader
        fields: list[Any] = list(item.DESCRIPTOR.fields)
        parts = [field_text(item, fd.name) for fd in fields
                 if fd.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_ENUM)
                 and not fd.is_repeated]
        return ": ".join(p for p in parts if p and p != "UNSPECIFIED")
    return str(item)


def when(ts: Any) -> str:
    """A Timestamp as ``2026-05-01 12:00:03 UTC``, or ``""`` when unset."""
    if not ts.seconds and not ts.nanos:
        return ""
    return str(ts.ToDatetime(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))


def struct_text(struct: Any) -> str:
    """A Struct as compact, sorted JSON (shown as text)."""
    if not struct.fields:
        return ""
    return json.dumps(json_format.MessageToDict(struct), sort_keys=True, ensure_ascii=False)


def evidence(ev: common_pb2.EvidenceReference, index: int) -> dict[str, Any]:
    return {"index": index, "source": ev.source, "reference": ev.reference,
            "authority": enum_text(common_pb2.AuthorityLevel.DESCRIPTOR, ev.authority),
            "capability": ev.capability, "fetched_at": when(ev.fetched_at), "data": struct_text(ev.data)}


def result(r: common_pb2.AgentResult) -> dict[str, Any]:
    verdict = r.result.fields["verdict"].string_value if "verdict" in r.result.fields else ""
    return {
        "task_id": r.task_id, "agent_id": r.agent_id,
        "status": enum_text(common_pb2.ResultStatus.DESCRIPTOR, r.status), "verdict": verdict,
        "confidence": f"{r.confidence:.2f}", "error_reason": r.error_reason,
        "statements": [{"kind": enum_text(common_pb2.StatementKind.DESCRIPTOR, s.kind), "code": s.code,
                        "subject": s.subject, "text": s.text, "evidence": [f"#{i}" for i in s.evidence_indexes]}
                       for s in r.statements],
        "evidence": [evidence(ev, i) for i, ev in enumerate(r.evidence)],
        "requested_actions": [{"action": a.action, "target": a.target_agent_id, "reason": a.reason}
                              for a in r.requested_actions],
    }


def conflict(c: pb.Conflict) -> dict[str, Any]:
    return {"subject": c.subject, "agent_a": c.agent_a, "agent_b": c.agent_b,
            "evidence_a": [evidence(ev, i) for i, ev in enumerate(c.evidence_a)],
            "evidence_b": [evidence(ev, i) for i, ev in enumerate(c.evidence_b)],
            "rules": list(c.applicable_rules), "resolution": c.resolution, "review_id": c.review_id}


def task_graph(graph: common_pb2.AgentTaskGraph) -> dict[str, Any]:
    """The DAG as stages (each task after every task it depends on), each task with its state."""
    parents: dict[str, list[str]] = {n.task_id: [] for n in graph.nodes}
    for e in graph.edges:
        if e.to_task_id in parents:
            parents[e.to_task_id].append(e.from_task_id)
    for n in graph.nodes:
        if n.parent_task_id and n.parent_task_id in parents and n.parent_task_id not in parents[n.task_id]:
            parents[n.task_id].append(n.parent_task_id)  # a handoff hangs under the task that asked for it
    depth: dict[str, int] = {}

    def level(task_id: str, seen: frozenset[str] = frozenset()) -> int:
        if task_id not in depth:
            ups = [p for p in parents.get(task_id, []) if p in parents and p not in seen]
            depth[task_id] = 1 + max((level(p, seen | {task_id}) for p in ups), default=-1)
        return depth[task_id]

    stages: dict[int, list[dict[str, Any]]] = {}
    for n in graph.nodes:
        stages.setdefault(level(n.task_id), []).append({
            "task_id": n.task_id, "agent_id": n.target_agent_id, "objective": n.objective,
            "status": enum_text(common_pb2.TaskStatus.DESCRIPTOR, n.status), "depth": n.depth,
            "after": parents[n.task_id], "started_at": when(n.started_at), "finished_at": when(n.finished_at),
            "handoff_from": n.source_agent_id if n.parent_task_id else "",
        })
    conditions = [{"from": e.from_task_id, "to": e.to_task_id, "condition": e.condition}
                  for e in graph.edges if e.condition]
    return {"stages": [stages[k] for k in sorted(stages)], "conditions": conditions}


def action(a: pb.ProposedAction) -> dict[str, Any]:
    from agentmesh.execution_text import action_outcome

    d = a.policy_decision
    return {
        "capability_id": a.capability_id, "resource_id": a.resource_id, "arguments": struct_text(a.arguments),
        "state": enum_text(pb.ActionState.DESCRIPTOR, a.state), "outcome": action_outcome(a), "reason": a.reason,
        "awaiting_confirmation": a.state == pb.ACTION_STATE_AWAITING_CONFIRMATION,
        "confirmable": a.state == pb.ACTION_STATE_AWAITING_CONFIRMATION and bool(a.confirmation_token),
        "expires_at": when(a.confirmation_expires_at), "approved_by": a.approved_by,
        "approval_review_id": a.approval_review_id, "verified": a.verified, "compensated": a.compensated,
        "policy": {"effect": enum_text(common_pb2.PolicyEffect.DESCRIPTOR, d.effect), "reasons": list(d.reason_codes),
                   "version": d.policy_version, "decision_id": d.decision_id} if d.effect else None,
        "is_release": "release" in a.capability_id.lower(),
    }


def execution(ex: pb.Execution) -> dict[str, Any]:
    """An execution for the page: everything the report has, as text."""
    from agentmesh.execution_text import pending_reviews

    system = ex.actor_type == common_pb2.ACTOR_TYPE_SYSTEM
    return {
        "execution_id": ex.execution_id, "status": enum_text(pb.ExecutionStatus.DESCRIPTOR, ex.status),
        "running": ex.status == pb.EXECUTION_STATUS_RUNNING, "terminal": ex.status in TERMINAL,
        "decision": enum_text(common_pb2.AnalysisDecision.DESCRIPTOR, ex.decision),
        "request_text": ex.request_text, "tenant_id": ex.tenant_id,
        # A domain's intent by the name its definition gives it (``intent`` is DOMAIN for one the contract
        # has no value for), and the definition it follows.
        "intent": ex.intent_kind or field_text(ex, "intent"), "domain": ex.domain,
        "requester": f"system actor {ex.system_actor}" if system else ex.user_id, "user_id": ex.user_id,
        "system": system, "reason": ex.reason, "summary": ex.summary,
        "started_at": when(ex.started_at), "finished_at": when(ex.finished_at),
        "graph": task_graph(ex.graph), "results": [result(r) for r in ex.results],
        "conflicts": [conflict(c) for c in ex.conflicts], "missing": [item_text(m) for m in ex.missing],
        "scores": [{"agent_id": s.agent_id, "final": f"{s.final_score:.3f}", "domain": f"{s.domain_score:.2f}",
                    "capability": f"{s.capability_score:.2f}", "knowledge": f"{s.knowledge_score:.2f}",
                    "availability": f"{s.availability_score:.2f}", "cost": f"{s.cost_score:.2f}",
                    "history": f"{s.history_score:.2f}"} for s in ex.selection_scores],
        "recommended": list(ex.recommended_resources),
        "action": action(ex.action) if ex.HasField("action") else None,
        "pending_reviews": pending_reviews(ex),
        "trace_id": ex.trace.trace_id, "correlation_id": ex.trace.correlation_id,
    }


def execution_row(ex: pb.Execution) -> dict[str, Any]:
    """One line of the executions list."""
    return {"execution_id": ex.execution_id, "status": enum_text(pb.ExecutionStatus.DESCRIPTOR, ex.status),
            "decision": enum_text(common_pb2.AnalysisDecision.DESCRIPTOR, ex.decision),
            "requester": f"system: {ex.system_actor}" if ex.actor_type == common_pb2.ACTOR_TYPE_SYSTEM else ex.user_id,
            "request_text": ex.request_text, "started_at": when(ex.started_at),
            "action": enum_text(pb.ActionState.DESCRIPTOR, ex.action.state) if ex.HasField("action") else ""}


def review(r: dc_pb2.ReviewItem) -> dict[str, Any]:
    return {
        "review_id": r.review_id, "execution_id": r.execution_id,
        "kind": enum_text(dc_pb2.ReviewKind.DESCRIPTOR, r.kind), "status": enum_text(dc_pb2.ReviewStatus.DESCRIPTOR,
                                                                                       r.status),
        "open": r.status in (dc_pb2.REVIEW_STATUS_OPEN, dc_pb2.REVIEW_STATUS_INFORMATION_REQUESTED),
        "requester": r.requester, "assignee": r.assignee, "summary": r.summary,
        "conflict": conflict(r.conflict) if r.HasField("conflict") else None,
        "action": action(r.action) if r.HasField("action") else None,
        "recommended": list(r.recommended_resources),
        "analysis_decision": enum_text(common_pb2.AnalysisDecision.DESCRIPTOR, r.analysis_decision)
        if r.analysis_decision else "",
        "history": [{"decision": enum_text(dc_pb2.ReviewDecision.DESCRIPTOR, e.decision), "reviewer": e.reviewer,
                     "reason": e.reason, "assignee": e.assignee, "at": when(e.at),
                     "override": enum_text(common_pb2.AnalysisDecision.DESCRIPTOR, e.override_decision)
                     if e.override_decision else "", "policy_decision_id": e.policy_decision_id}
                    for e in r.history],
        "created_at": when(r.created_at), "updated_at": when(r.updated_at),
    }


def progress(event: pb.WatchExecutionResponse) -> dict[str, Any]:
    """One live-progress message (sent as JSON, shown with textContent)."""
    ex = event.execution
    return {"event": field_text(event, "event"), "task_id": event.task_id, "agent_id": event.agent_id,
            "task_status": enum_text(common_pb2.TaskStatus.DESCRIPTOR, event.task_status) if event.task_status else "",
            "status": enum_text(pb.ExecutionStatus.DESCRIPTOR, ex.status),
            "decision": enum_text(common_pb2.AnalysisDecision.DESCRIPTOR, ex.decision),
            "running": ex.status == pb.EXECUTION_STATUS_RUNNING,
            "tasks": [{"task_id": n.task_id, "agent_id": n.target_agent_id,
                       "status": enum_text(common_pb2.TaskStatus.DESCRIPTOR, n.status)} for n in ex.graph.nodes]}
