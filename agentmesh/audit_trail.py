"""An execution's audit records as a tree — the execution, each agent's task and the capability calls it made,
each step a line — and each record as plain data: what ``agentmesh audit trail`` prints and the web console
shows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agentmesh import spiffe
from agentmesh.execution_text import enum_name as _name
from agentmesh.v1 import audit_service_pb2 as audit_pb2
from agentmesh.v1 import common_pb2


def _full(enum: Any, value: int) -> str:
    """The contract's full enum name (``--json``), or the number when the enum does not know it."""
    return _name(enum, value, "")


def recorded_at_text(rec: audit_pb2.AuditRecord) -> str:
    """When audit recorded it: ISO 8601 UTC to the millisecond."""
    micros = rec.recorded_at.ToMicroseconds()
    when = dt.datetime.fromtimestamp(micros / 1e6, dt.UTC).isoformat(timespec="milliseconds")
    return when.replace("+00:00", "Z")


def record_dict(rec: audit_pb2.AuditRecord) -> dict[str, Any]:
    """One record for ``--json``: enums by their full names, as the contracts spell them."""
    d = rec.policy_decision
    return {
        "index": rec.index,
        "record_id": rec.record_id,
        "recorded_at": recorded_at_text(rec),
        "recorded_by": rec.recorded_by,
        "event_type": _full(audit_pb2.AuditEventType, rec.event_type),
        "outcome": _full(audit_pb2.AuditOutcome, rec.outcome),
        "reason_codes": list(rec.reason_codes),
        "tenant_id": rec.tenant_id,
        "user_id": rec.user_id,
        "task_id": rec.task_id,
        "agent_id": rec.agent_id,
        "delegation_chain": list(rec.principal.delegation_chain),
        "grants": len(rec.principal.grants),
        "capability_id": rec.capability_id,
        "capability_version": rec.capability_version,
        "resource": rec.resource,
        "policy_decision": None if not rec.HasField("policy_decision") else {
            "effect": _full(common_pb2.PolicyEffect, d.effect),
            "reason_codes": list(d.reason_codes), "policy_version": d.policy_version,
            "decision_id": d.decision_id},
        "analysis_decision": _full(common_pb2.AnalysisDecision, rec.analysis_decision),
        "input_digest": rec.input_digest,
        "output_digest": rec.output_digest,
    }


@dataclass
class TrailNode:
    """One level of the trail tree; ``items`` are event lines and child nodes in the order first seen."""

    label: str
    items: list[str | TrailNode] = field(default_factory=list)
    children: dict[tuple[str, ...], TrailNode] = field(default_factory=dict)
    records: list[audit_pb2.AuditRecord] = field(default_factory=list)
    is_capability: bool = False

    def child(self, key: tuple[str, ...], label: str) -> TrailNode:
        node = self.children.get(key)
        if node is None:
            node = self.children[key] = TrailNode(label)
            self.items.append(node)
        return node

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label,
                "items": [i if isinstance(i, str) else i.to_dict() for i in self._rendered_items()]}

    def _rendered_items(self) -> list[str | TrailNode]:
        return _capability_lines(self.records) if self.is_capability else self.items

    def render(self, prefix: str = "", out: list[str] | None = None) -> list[str]:
        lines = out if out is not None else []
        items = self._rendered_items()
        for n, item in enumerate(items):
            last = n == len(items) - 1
            branch, more = ("└── ", "    ") if last else ("├── ", "│   ")
            if isinstance(item, str):
                lines.append(prefix + branch + item)
            else:
                lines.append(prefix + branch + item.label)
                item.render(prefix + more, lines)
        return lines


def _reasons(codes: Iterable[str]) -> str:
    codes = list(codes)
    return f"  [{', '.join(codes)}]" if codes else ""


def _event_line(rec: audit_pb2.AuditRecord) -> str:
    parts = [f"#{rec.index}", _name(audit_pb2.AuditEventType, rec.event_type, "AUDIT_EVENT_TYPE_")]
    if rec.outcome:
        parts.append(_name(audit_pb2.AuditOutcome, rec.outcome, "AUDIT_OUTCOME_"))
    if rec.analysis_decision:
        parts.append("decision " + _name(common_pb2.AnalysisDecision, rec.analysis_decision, "ANALYSIS_DECISION_"))
    if rec.confidence:
        parts.append(f"confidence {rec.confidence:.2f}")
    when = recorded_at_text(rec)[11:-1]
    return " ".join(parts) + _reasons(rec.reason_codes) + f"  ({when}, by {_short(rec.recorded_by)})"


def _short(spiffe_id: str) -> str:
    """``spiffe://agentmesh.local/svc/capability`` → ``svc:capability``."""
    try:
        ident = spiffe.parse(spiffe_id)
    except spiffe.InvalidSpiffeId:
        return spiffe_id or "?"
    return f"{ident.kind}:{ident.name}"


def _capability_lines(records: list[audit_pb2.AuditRecord]) -> list[str | TrailNode]:
    """policy decision(s) → verification → outcome of one capability call, from whichever of its records exist."""
    lines: list[str | TrailNode] = []
    seen: list[common_pb2.PolicyDecision] = []
    for r in records:
        d = r.policy_decision
        if d.effect and d not in seen:
            # Each distinct decision in order, e.g. HUMAN_APPROVAL_REQUIRED, then CONFIRMATION_REQUIRED.
            seen.append(d)
            effect = _name(common_pb2.PolicyEffect, d.effect, "POLICY_EFFECT_")
            lines.append(f"policy: {effect}{_reasons(d.reason_codes)}"
                         f"  policy {_abbrev(d.policy_version) or '(version not recorded)'}  (#{r.index})")
    if not seen:
        if any(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_ACCESS_DENIED for r in records):
            lines.append("policy: not reached (refused before the policy engine was asked)")
        else:
            lines.append("policy: no decision recorded")
    for r in records:
        if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_VERIFICATION:
            lines.append(f"verification: {_name(audit_pb2.AuditOutcome, r.outcome, 'AUDIT_OUTCOME_')}"
                         f"{_reasons(r.reason_codes)}  (#{r.index}, {recorded_at_text(r)[11:-1]})")
    outcomes = [r for r in records if r.event_type == audit_pb2.AUDIT_EVENT_TYPE_CAPABILITY_OUTCOME]
    refused = [r for r in records if r.outcome == audit_pb2.AUDIT_OUTCOME_DENIED]
    if outcomes or refused:
        last = (outcomes or refused)[-1]
        digest = f"  output {_abbrev(last.output_digest)}" if last.output_digest else ""
        lines.append(f"outcome: {_name(audit_pb2.AuditOutcome, last.outcome, 'AUDIT_OUTCOME_')}"
                     f"{_reasons(last.reason_codes)}{digest}  (#{last.index}, {recorded_at_text(last)[11:-1]})")
    elif all(r.event_type == audit_pb2.AUDIT_EVENT_TYPE_POLICY_DECISION for r in records):
        lines.append("outcome: none here (the policy engine was asked before the action was run)")
    else:
        newest = records[-1]
        lines.append(f"outcome: not recorded (last record #{newest.index} "
                     f"{_name(audit_pb2.AuditEventType, newest.event_type, 'AUDIT_EVENT_TYPE_')} "
                     f"{_name(audit_pb2.AuditOutcome, newest.outcome, 'AUDIT_OUTCOME_')})")
    return lines


def _abbrev(digest: str, keep: int = 12) -> str:
    """``sha256:f114545c87d7336a…`` → ``sha256:f114545c87d7…`` (``--json`` has them whole)."""
    algo, sep, hexdigits = digest.rpartition(":")
    return f"{algo}{sep}{hexdigits[:keep]}…" if len(hexdigits) > keep + 4 else digest


def _pick(chain: list[str], kind: str) -> str:
    return next((c for c in chain if c.startswith(kind + ":")), "")


def build_trail(execution_id: str, records: Iterable[audit_pb2.AuditRecord]) -> TrailNode:
    """Arranges an execution's records as user → supervisor → agent → capability → decision → outcome."""
    supervisor_id = str(spiffe.service("supervisor"))
    root = TrailNode(f"execution {execution_id}")
    agents: dict[str, TrailNode] = {}
    for rec in sorted(records, key=lambda r: r.index):
        chain = list(rec.principal.delegation_chain)
        user = _pick(chain, "user") or (f"user:{rec.tenant_id}/{rec.user_id}" if rec.user_id else "")
        supervisor = _pick(chain, "svc") or ("svc:supervisor" if rec.recorded_by == supervisor_id else "")
        agent = _pick(chain, "agent") or (f"agent:{rec.agent_id}" if rec.agent_id else "")
        if not (user or supervisor or agent or rec.capability_id):
            # E.g. a call refused at a service's door: no principal, only the execution id.
            root.items.append(_event_line(rec))
            continue
        node = root.child(("user", user), user or "user: (not recorded)")
        node = node.child(("svc", supervisor), supervisor or "supervisor: (not recorded)")
        if not agent and not rec.capability_id:
            node.items.append(_event_line(rec))
            continue
        agent_label = agent or "agent: (not recorded)"
        if rec.task_id:
            agent_node = node.child(("agent", agent, rec.task_id), f"{agent_label}  task {rec.task_id}")
            agents.setdefault(agent, agent_node)
        else:
            agent_node = agents.get(agent) or node.child(("agent", agent, ""), agent_label)
            agents.setdefault(agent, agent_node)
        if not rec.capability_id:
            agent_node.items.append(_event_line(rec))
            continue
        label = f"capability:{rec.capability_id}"
        if rec.capability_version:
            label += f" v{rec.capability_version}"
        if rec.resource:
            label += f" on {rec.resource}"
        cap = agent_node.child(("cap", rec.capability_id, rec.resource, rec.input_digest), label)
        cap.is_capability = True
        cap.records.append(rec)
    return root
